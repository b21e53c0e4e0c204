/**
 * The fenced write every fault worker makes (this suite's and the fault schedule's): one row appended to
 * fault_history, numbered by a sequence inside the transaction, and a read-modify-write of the target's counter. In
 * `lease.fenced()` the lease row is locked meanwhile, so per target the numbers follow the fence's order and the
 * counter loses no update; the checker (checker.ts) reads both.
 */
import type { EntityManager } from 'typeorm';

export interface HistoryWrite {
  opId: string;
  target: string;
  fencingToken: bigint;
  worker: string;
}

export async function recordWrite(manager: EntityManager, write: HistoryWrite): Promise<void> {
  const [counter] = await manager.query('SELECT n FROM fault_counter WHERE target = $1', [write.target]);
  await manager.query(
    `INSERT INTO fault_history (op_id, target, fencing_token, worker, commit_seq, at)
     VALUES ($1, $2, $3, $4, nextval('fault_commit_seq'), clock_timestamp())`,
    [write.opId, write.target, write.fencingToken.toString(), write.worker],
  );
  await manager.query('UPDATE fault_counter SET n = $2 WHERE target = $1', [write.target, Number(counter.n) + 1]);
}

/** The history target of a lease's writes: its key, or `<key>#<slot>` for a semaphore's slot. */
export function historyTarget(lease: { targetKey: string; slot?: number }): string {
  return lease.slot === undefined ? lease.targetKey : `${lease.targetKey}#${lease.slot}`;
}

/** The counter rows of a semaphore's keys: one per slot (`historyTarget`). */
export function slotTargets(keys: readonly string[], limit: number): string[] {
  return keys.flatMap((key) => Array.from({ length: limit }, (_, slot) => `${key}#${slot}`));
}

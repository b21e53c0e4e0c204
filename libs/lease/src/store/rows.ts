/**
 * What the statements' rows mean: pure mappings from the rows (and the requests) to the store's results, so each
 * can be read, and tested, apart from running the statement.
 */
import { messages } from '../errors/lease.messages.js';
import type { EngineSettings } from '../options/engine-settings.js';
import type { ItemOutcome } from './group-commit.js';
import type { PrivilegeCheck } from './sql/bootstrap.sql.js';
import type { LeaseObjectNames } from './sql/fragments.js';
import type {
  AcquireBatchItem,
  AcquireBatchRow,
  AcquiredRow,
  AcquiredSlot,
  AcquireRequest,
  LeaseHistory,
  Refusal,
  RenewResult,
  ServerHistory,
  SlotRefusal,
} from './store.types.js';

/** The server's history as the history statements (and the renewal) report it. */
export interface ServerHistoryRow {
  recovery: boolean;
  timeline: string | null;
  system_id: string | null;
}

export function serverHistory(row: ServerHistoryRow): ServerHistory {
  const timeline = row.timeline === null ? null : BigInt(row.timeline);
  return { recovery: row.recovery, timeline, systemId: row.system_id };
}

function outOfOrder(index: number): Error {
  return new Error(messages.batchOutOfOrder(index));
}

/**
 * The first nine parameters of the single acquire statement, which the semaphore's statement shares ($1 target … $9
 * hold: see `singleAcquireSql`).
 */
export function acquireParameters(
  request: AcquireRequest,
  options: Pick<EngineSettings, 'owner' | 'leaseTimeoutMs' | 'agingIntervalMs'>,
): unknown[] {
  return [
    request.targetKey,
    request.leaseToken,
    options.owner,
    request.priority,
    request.leaseTimeoutMs ?? options.leaseTimeoutMs,
    request.waiterId ?? null,
    request.waiterSeq === undefined ? null : request.waiterSeq.toString(),
    options.agingIntervalMs,
    request.holdMs,
  ];
}

/** The callers of an acquire batch as its one jsonb parameter's items (i = 1 … n). */
export function acquireBatchItems(requests: readonly AcquireRequest[]): AcquireBatchItem[] {
  return requests.map((request, index) => ({
    i: index + 1,
    target_id: request.targetKey,
    lease_token: request.leaseToken,
    priority: request.priority,
    waiter_id: request.waiterId ?? null,
    waiter_seq: request.waiterSeq === undefined ? null : request.waiterSeq.toString(),
    hold_ms: request.holdMs,
    lease_timeout_ms: request.leaseTimeoutMs ?? null,
  }));
}

/** Each caller's outcome of an acquire batch, by its position (a row out of order fails that caller: a bug). */
export function acquireBatchOutcomes(
  count: number,
  rows: readonly AcquireBatchRow[],
  sentAt: number,
): Array<ItemOutcome<AcquiredRow | Refusal | 'retry'>> {
  return Array.from({ length: count }, (_, index): ItemOutcome<AcquiredRow | Refusal | 'retry'> => {
    const row = rows[index];
    if (row?.i !== index + 1) return { ok: false, error: outOfOrder(index) };
    if (row.outcome === 'retry') return { ok: true, value: 'retry' };
    if (row.outcome === 'refused') return { ok: true, value: { refused: true, holdLeftMs: row.hold_left_ms } };
    const value = {
      fencingToken: BigInt(row.fencing_token!),
      sentAt,
      tookOver: row.took_over === true,
      previousOwner: row.previous_owner,
    };
    return { ok: true, value };
  });
}

/** One caller of a slot batch (`semaphoreBatchAcquireSql`), as its one jsonb parameter's item (i = 1 … n). */
export interface SlotBatchItem {
  i: number;
  target_id: string;
  lease_token: string;
  priority: number;
  hold_ms: number;
  /** The call's own lease length; null: the statement's (the module's). */
  lease_timeout_ms: number | null;
  slot_limit: number;
}

/** What each caller of a slot batch gets back, by its position `i` (1-based). */
export interface SlotBatchRow {
  i: number;
  /** `raced`: it passed the pre-check but lost its slot (or asked another limit than the key's in the batch). */
  outcome: 'won' | 'refused' | 'raced';
  slot: number | null;
  fencing_token: string | null;
  took_over: boolean | null;
  previous_owner: string | null;
  held_limit: number | null;
  hold_left_ms: number | null;
}

/** The callers of a slot batch (newcomers: no waiter id) as its one jsonb parameter's items. */
export function slotBatchItems(
  items: ReadonlyArray<{ readonly request: AcquireRequest; readonly limit: number }>,
): SlotBatchItem[] {
  return items.map(({ request, limit }, index) => ({
    i: index + 1,
    target_id: request.targetKey,
    lease_token: request.leaseToken,
    priority: request.priority,
    hold_ms: request.holdMs,
    lease_timeout_ms: request.leaseTimeoutMs ?? null,
    slot_limit: limit,
  }));
}

/** Each caller's outcome of a slot batch, by its position (a row out of order fails that caller: a bug). */
export function slotBatchOutcomes(
  count: number,
  rows: readonly SlotBatchRow[],
  sentAt: number,
): Array<ItemOutcome<AcquiredSlot | SlotRefusal | 'raced'>> {
  return Array.from({ length: count }, (_, index): ItemOutcome<AcquiredSlot | SlotRefusal | 'raced'> => {
    const row = rows[index];
    if (row?.i !== index + 1) return { ok: false, error: outOfOrder(index) };
    if (row.outcome === 'raced') return { ok: true, value: 'raced' };
    if (row.outcome === 'refused' || row.fencing_token === null || row.slot === null) {
      return { ok: true, value: { refused: true, holdLeftMs: row.hold_left_ms, heldLimit: row.held_limit } };
    }
    const value = {
      rowSlot: row.slot,
      fencingToken: BigInt(row.fencing_token),
      sentAt,
      tookOver: row.took_over === true,
      previousOwner: row.previous_owner,
    };
    return { ok: true, value };
  });
}

/** The row of the single acquisition statement. */
export interface AcquireRow {
  fencing_token: string | null;
  took_over: boolean | null;
  previous_owner: string | null;
  hold_left_ms: number | null;
  seq: string | null;
  queued_at: Date | null;
  behind?: boolean | null;
}

/** The single acquisition's outcome: a grant, or a refusal (with the caller's place when it was to be queued). */
export function acquireOutcome(row: AcquireRow | undefined, sentAt: number, queued: boolean): AcquiredRow | Refusal {
  if (!row || row.fencing_token === null) {
    const refusal = { refused: true as const, holdLeftMs: row?.hold_left_ms ?? null };
    if (!queued) return refusal;
    const place = row?.seq ? { seq: BigInt(row.seq), queuedAt: row.queued_at! } : null;
    return { ...refusal, place, behind: row?.behind === true };
  }
  return {
    fencingToken: BigInt(row.fencing_token),
    sentAt,
    tookOver: row.took_over === true,
    previousOwner: row.previous_owner,
  };
}

/** The row of the lone caller's acquisition (`loneAcquireSql`): a grant, a refusal, or `full` (see there). */
export interface LoneAcquireRow {
  fencing_token: string | null;
  hold_left_ms: number | null;
  full: boolean;
}

/** What the lone caller's acquisition answered; `full`: the single statement decides. */
export function loneAcquireOutcome(row: LoneAcquireRow | undefined, sentAt: number): AcquiredRow | Refusal | 'full' {
  if (!row) return 'full';
  if (row.fencing_token !== null) {
    return { fencingToken: BigInt(row.fencing_token), sentAt, tookOver: false, previousOwner: null, lone: true };
  }
  return row.full ? 'full' : { refused: true, holdLeftMs: row.hold_left_ms };
}

/** A row of the renewal statement: one per lease, each carrying the server's history. */
export type RenewRow = {
  lease_token: string;
  outcome: 'kept' | 'skipped' | 'expired' | 'lost' | 'failover' | 'forced' | 'preempted';
} & ServerHistoryRow;

/** What a renewal found, by lease token (see `LeaseStore.renew`). */
export function renewOutcome(rows: readonly RenewRow[], history: LeaseHistory | undefined): RenewResult {
  const outcome: RenewResult = {
    kept: new Set(),
    skipped: new Set(),
    expired: new Set(),
    forced: new Set(),
    preempted: new Set(),
  };
  if (history) {
    outcome.failover = new Set();
    if (rows[0]) outcome.history = serverHistory(rows[0]);
  }
  for (const row of rows) {
    if (row.outcome === 'failover') outcome.failover?.add(row.lease_token);
    else if (row.outcome === 'forced') outcome.forced?.add(row.lease_token);
    else if (row.outcome === 'preempted') outcome.preempted?.add(row.lease_token);
    else if (row.outcome !== 'lost') outcome[row.outcome].add(row.lease_token);
  }
  return outcome;
}

/** Each caller's outcome of a release batch, by its position. */
export function releaseBatchOutcomes(
  count: number,
  rows: ReadonlyArray<{ i: number; outcome: 'released' | 'gone' | 'retry' }>,
): Array<ItemOutcome<boolean | 'retry'>> {
  return Array.from({ length: count }, (_, index): ItemOutcome<boolean | 'retry'> => {
    const row = rows[index];
    if (row?.i !== index + 1) return { ok: false, error: outOfOrder(index) };
    return { ok: true, value: row.outcome === 'retry' ? 'retry' : row.outcome === 'released' };
  });
}

/** A row of the shutdown's dequeue (`dequeueAllSql`): a waiter whose row a grant took, or nulls (none). */
export interface DequeueAllRow {
  target_id: string | null;
  waiter_id: string | null;
}

/** The waiters whose row a release took with a grant the shutdown's dequeue could not see (see `dequeueAllSql`). */
export function dequeueAllTaken(rows: readonly DequeueAllRow[]): Array<{ targetKey: string; waiterId: string }> {
  return rows.flatMap((row) =>
    row.target_id === null || row.waiter_id === null ? [] : [{ targetKey: row.target_id, waiterId: row.waiter_id }],
  );
}

/** Which lease objects exist (the bootstrap check). */
export interface ObjectsRow {
  lease: boolean;
  waiter: boolean;
  seq: boolean;
  wseq: boolean;
  /** Whether the sequence is of the 47-bit token layout (null: it is missing). */
  seq_layout: boolean | null;
  wseq_layout: boolean | null;
}

/** What the bootstrap check found: the objects missing, and the sequences of the 40-bit token layout. */
export interface SchemaState {
  missing: string[];
  oldLayout: string[];
}

/** The quoted names of the objects the row says are missing, in creation order. */
export function missingObjectNames(row: ObjectsRow, n: LeaseObjectNames): string[] {
  const missing: string[] = [];
  if (!row.lease) missing.push(n.lease);
  if (!row.waiter) missing.push(n.waiter);
  if (!row.seq) missing.push(n.fencingSequence);
  if (!row.wseq) missing.push(n.waiterSequence);
  return missing;
}

/** The quoted names of the sequences still of the 40-bit token layout, which the layout migration moves. */
export function oldLayoutSequences(row: ObjectsRow, n: LeaseObjectNames): string[] {
  const old: string[] = [];
  if (row.seq_layout === false) old.push(n.fencingSequence);
  if (row.wseq_layout === false) old.push(n.waiterSequence);
  return old;
}

/** The names of the rights not granted (`granted`: one boolean per check, in order). */
export function missingRights(checks: readonly PrivilegeCheck[], granted: readonly boolean[]): string[] {
  return checks.filter((_, i) => !granted[i]).map(([, , , name]) => name);
}

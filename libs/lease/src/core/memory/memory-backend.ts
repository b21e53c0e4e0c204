/**
 * The memory backend (`nest-pg-lease/testing`): `LeaseBackend` over Maps, for unit tests of an application's own code.
 * The same core (`LeaseEngine`) runs over it as over PostgreSQL — its waits, heartbeat, drain, preemption, joins and
 * semaphores — so the kit does what production does by construction. The rows follow the statements' rules (no
 * barging, aged priority then FIFO, hold tails, slots, takeovers, preemption's ask and take), answered at once;
 * wake-ups are direct calls. Not modelled: direct handoff, other processes' joins, force-release, the journal.
 *
 * The test controls (`hold`, `takeOver`, `expire`, `lose`, `free`) are operations on these rows, standing in for
 * the other processes; the core hears of them as from PostgreSQL: at its next renewal (the kit runs one at once).
 */
import type { LeaseLossReason } from '../../interfaces/lease-loss-reason.interface.js';
import type { DrainEntry } from '../../interfaces/lease-operator.interface.js';
import { MAX_TIMER_MS } from '../../options/limits.js';
import type { EngineSettings } from '../../options/engine-settings.js';
import { OWN_ROW_SLOT, rowSlotOf, SHARED_LIMIT } from '../../options/slot-limits.js';
import { memoryOperator } from './memory-operator.js';
import { pickReadWrite } from './memory-read-write.js';
import type {
  AcquiredRow,
  AcquiredSlot,
  AcquireRequest,
  AskedGrant,
  FenceBackend,
  LeaseBackend,
  OperatorBackend,
  PreemptBackend,
  PreemptedRow,
  Preemptor,
  Refusal,
  RenewResult,
  RowRef,
  SlotRefusal,
  SnapshotRow,
  WaiterBackend,
  WaiterPlace,
  WaiterRef,
  WakeupListener,
  Wakeups,
} from '../backend.js';
import type { FencedTransaction } from './fenced-transaction.types.js';

interface Row {
  leaseToken: string | null;
  fencingToken: bigint;
  owner: string;
  priority: number;
  /** The limit its holder asked (slots); 1 for a key's own row. */
  limit: number;
  acquiredAt: number;
  expiresAt: number;
  leaseTimeoutMs: number;
  holdUntil: number;
  /** The lease token a preempting caller asked to stop. */
  preemptOf: string | null;
  /** Freed by an operator (a test control) and not acquired since. */
  forced: boolean;
}

interface WaiterRow {
  readonly id: string;
  readonly priority: number;
  readonly seq: bigint;
  readonly queuedAt: Date;
  readonly since: number;
  expiresAt: number;
}

/** Why a lease token was lost by a test control: what its holder's next renewal reports. */
type Loss = Exclude<LeaseLossReason, 'released'>;

const now = () => performance.now();

export class MemoryBackend implements LeaseBackend {
  readonly waiters: WaiterBackend;
  readonly fence: FenceBackend;
  readonly preempt: PreemptBackend;
  readonly operator: OperatorBackend;
  /** Rows by key, then by row slot (0: the key's own; i + 1: a semaphore's slot i). */
  private readonly rows = new Map<string, Map<number, Row>>();
  private readonly lines = new Map<string, WaiterRow[]>();
  private readonly losses = new Map<string, Loss>();
  private readonly listeners = new Set<WakeupListener>();
  private readonly drains: DrainEntry[] = [];
  private lastToken = 0n;
  private lastSeq = 0n;

  constructor(
    private readonly options: EngineSettings,
    fencedTransaction: FencedTransaction,
  ) {
    this.waiters = {
      enqueue: (targetKey, waiterId, priority, place) =>
        Promise.resolve(this.enqueue(targetKey, waiterId, priority, place)),
      dequeue: (targetKey, waiterId) => Promise.resolve(this.dequeue(targetKey, waiterId)),
      dequeueAll: (waiters: readonly WaiterRef[]) => {
        for (const waiter of waiters) this.dequeue(waiter.targetKey, waiter.id);
        return Promise.resolve();
      },
      renew: (targetKeys, waiterIds) => Promise.resolve(this.renewWaiters(targetKeys, waiterIds)),
      // No direct handoff here: a waiter is never handed a grant to confirm.
      confirmGrant: () => Promise.resolve(null),
    };
    const lockOf = (row: RowRef) => {
      const held = this.rowAt(row);
      const leaseToken = held && this.live(held) ? held.leaseToken : null;
      return { leaseToken, timeline: 0n, forced: held?.forced ?? false, preemptOf: held?.preemptOf ?? null };
    };
    this.fence = {
      // The lock read and the release happen inside the test's transaction, around the work.
      transaction: (row, _lockWaitMs, work) =>
        fencedTransaction(async (manager) => {
          const { result, releaseToken } = await work(manager, lockOf(row));
          if (releaseToken !== undefined) this.releaseRow(row, releaseToken);
          return result;
        }),
      timelineOf: () => 0n,
      transactionAll: (rows, _lockWaitMs, work) => fencedTransaction((manager) => work(manager, rows.map(lockOf))),
    };
    this.preempt = {
      ask: (caller) => Promise.resolve(this.ask(caller)),
      take: (...args) => Promise.resolve(this.take(...args)),
    };
    this.operator = memoryOperator(this.drains);
  }

  open(): Promise<string | null> {
    return Promise.resolve(null);
  }

  settleAgain(): Promise<void> {
    return Promise.resolve();
  }

  attempt(request: AcquireRequest): Promise<AcquiredRow | Refusal> {
    const { targetKey } = request;
    const own = this.rowAt({ targetKey, slot: OWN_ROW_SLOT });
    const slotsHeld = [...(this.rows.get(targetKey)?.entries() ?? [])].some(
      ([slot, row]) => slot > 0 && this.live(row),
    );
    const holdLeft = this.holdLeft(own);
    if ((own && this.live(own)) || slotsHeld || holdLeft > 0 || this.waitersAhead(request) > 0) {
      return Promise.resolve(this.refuse(request, holdLeft > 0 && !(own && this.live(own)) ? holdLeft : null));
    }
    return Promise.resolve(this.grant(request, OWN_ROW_SLOT, 1));
  }

  attemptSlot(request: AcquireRequest, limit: number): Promise<AcquiredSlot | SlotRefusal> {
    const { targetKey } = request;
    if (limit <= 0) return Promise.resolve(this.attemptReadWrite(request, limit));
    const heldLimit = this.heldLimit(targetKey);
    if (heldLimit !== null && heldLimit !== limit)
      return Promise.resolve({ refused: true, holdLeftMs: null, heldLimit });
    const free = Array.from({ length: limit }, (_, slot) => rowSlotOf(slot)).filter((rowSlot) => {
      const row = this.rowAt({ targetKey, slot: rowSlot });
      return !row || (!this.live(row) && this.holdLeft(row) <= 0);
    });
    if (free.length <= this.waitersAhead(request)) {
      return Promise.resolve({ ...this.refuse(request, null), heldLimit: null });
    }
    return Promise.resolve({ ...this.grant(request, free[0], limit), rowSlot: free[0] });
  }

  /** A read-write call's grant (see memory-read-write.ts); a reader's wakes the line (the next may be a reader). */
  private attemptReadWrite(request: AcquireRequest, limit: number): AcquiredSlot | SlotRefusal {
    const taken = (row: Row) => this.live(row) || this.holdLeft(row) > 0;
    const rules = { live: (row: Row) => this.live(row), taken, ahead: this.waitersAhead(request) };
    const pick = pickReadWrite(this.rows.get(request.targetKey), limit, rules);
    if ('heldLimit' in pick) return { ...this.refuse(request, null), heldLimit: pick.heldLimit };
    if (limit === SHARED_LIMIT) this.wake(request.targetKey);
    return { ...this.grant(request, pick.slot, limit), rowSlot: pick.slot };
  }

  renew(rows: readonly RowRef[], leaseTokens: string[]): Promise<RenewResult> {
    const result: RenewResult = {
      kept: new Set(),
      skipped: new Set(),
      expired: new Set(),
      forced: new Set(),
      preempted: new Set(),
      failover: new Set(),
    };
    rows.forEach((ref, i) => {
      const token = leaseTokens[i];
      const row = this.rowAt(ref);
      const loss = this.losses.get(token);
      if (row?.leaseToken === token && row.preemptOf === token) result.preempted!.add(token);
      else if (row?.leaseToken === token && this.live(row)) {
        row.expiresAt = now() + row.leaseTimeoutMs;
        result.kept.add(token);
      } else if (row?.leaseToken === token || loss === 'renewal-deadline') result.expired.add(token);
      else if (loss === 'preempted' || row?.preemptOf === token) result.preempted!.add(token);
      else if (loss === 'failover') result.failover!.add(token);
      else if (loss === 'released-by-operator') result.forced!.add(token);
    });
    return Promise.resolve(result);
  }

  release(row: RowRef, leaseToken: string): Promise<boolean> {
    return Promise.resolve(this.releaseRow(row, leaseToken));
  }

  snapshot(targetKey?: string): Promise<SnapshotRow[]> {
    const at = now();
    const keys = [...new Set([...this.rows.keys(), ...this.lines.keys()])].sort();
    const out: SnapshotRow[] = [];
    for (const key of keys) {
      if (targetKey !== undefined && key !== targetKey) continue;
      const slots = [...(this.rows.get(key)?.entries() ?? [])].sort(([a], [b]) => a - b);
      for (const [slot, row] of slots) {
        if (!this.live(row)) continue;
        out.push({
          state: 'held',
          target_id: key,
          slot,
          slot_limit: row.limit,
          owner: row.owner,
          priority: row.priority,
          effective_priority: String(row.priority),
          fencing_token: String(row.fencingToken),
          seq: null,
          age_ms: at - row.acquiredAt,
          since_heartbeat_ms: 0,
          timeout_ms: row.leaseTimeoutMs,
        });
      }
      for (const waiter of this.liveLine(key)) {
        out.push({
          state: 'waiting',
          target_id: key,
          slot: null,
          owner: this.options.owner,
          priority: waiter.priority,
          effective_priority: String(this.aged(waiter)),
          fencing_token: null,
          seq: String(waiter.seq),
          age_ms: at - waiter.since,
          since_heartbeat_ms: 0,
          timeout_ms: this.options.waiterTimeoutMs,
        });
      }
    }
    return Promise.resolve(out);
  }

  purge(): Promise<number> {
    let removed = 0;
    for (const [key, slots] of this.rows) {
      for (const [slot, row] of slots) {
        if (!this.live(row) && this.holdLeft(row) <= 0 && row.leaseToken === null) {
          slots.delete(slot);
          removed++;
        }
      }
      if (slots.size === 0) this.rows.delete(key);
    }
    return Promise.resolve(removed);
  }

  wakeups(listener: WakeupListener): Wakeups {
    return {
      start: () => {
        this.listeners.add(listener);
        return Promise.resolve();
      },
      close: () => {
        this.listeners.delete(listener);
        return Promise.resolve();
      },
    };
  }

  closeHeartbeats(): Promise<void> {
    return Promise.resolve();
  }

  close(): Promise<void> {
    this.listeners.clear();
    return Promise.resolve();
  }

  // ---- the test controls: other processes' doings ----

  /** Another owner holds the key's own row (free now, or taken from its holder: that lease is lost, `taken-over`). */
  hold(targetKey: string, owner: string): bigint {
    const row = this.ownRow(targetKey);
    if (row.leaseToken !== null) this.losses.set(row.leaseToken, 'taken-over');
    Object.assign(row, this.fresh(`${owner}:${String(this.lastToken + 1n)}`, owner, 0, 1));
    return row.fencingToken;
  }

  /** The key's leases expire (their holders lose them, `renewal-deadline`); the next acquisition is a takeover. */
  expire(targetKey: string): void {
    const held = [...(this.rows.get(targetKey)?.values() ?? [])].filter((row) => this.live(row));
    for (const row of held) Object.assign(row, { expiresAt: now(), holdUntil: 0 });
    if (held.length > 0) this.wake(targetKey);
  }

  /** The key's holder loses its lease for `reason`; the key is free (a lost row is an expired one). */
  lose(targetKey: string, reason: Loss): void {
    const row = this.rowAt({ targetKey, slot: OWN_ROW_SLOT });
    if (!row?.leaseToken || !this.live(row)) return;
    this.losses.set(row.leaseToken, reason);
    // Free, and taken over by the next acquisition (a lost row is an expired one), under another token than the lost.
    row.leaseToken = `lost:${row.leaseToken}`;
    row.expiresAt = now();
    row.holdUntil = 0;
    row.forced = reason === 'released-by-operator';
    this.wake(targetKey);
  }

  /** The other owner of the key releases it (from `hold` or `takeOver`): waiters are woken. */
  free(targetKey: string): void {
    const row = this.rowAt({ targetKey, slot: OWN_ROW_SLOT });
    if (!row || row.owner === this.options.owner) return;
    row.leaseToken = null;
    row.preemptOf = null;
    this.wake(targetKey);
  }

  /** The rows' rules, from here on. */
  private rowAt(ref: RowRef): Row | undefined {
    return this.rows.get(ref.targetKey)?.get(ref.slot);
  }

  private ownRow(targetKey: string): Row {
    let slots = this.rows.get(targetKey);
    if (!slots) this.rows.set(targetKey, (slots = new Map()));
    let row = slots.get(OWN_ROW_SLOT);
    if (!row) slots.set(OWN_ROW_SLOT, (row = this.fresh(null, this.options.owner, 0, 1)));
    return row;
  }

  private fresh(leaseToken: string | null, owner: string, priority: number, limit: number): Row {
    const at = now();
    const fencingToken = leaseToken === null ? 0n : ++this.lastToken;
    const expiresAt = leaseToken === null ? at : at + MAX_TIMER_MS;
    return {
      leaseToken,
      fencingToken,
      owner,
      priority,
      limit,
      acquiredAt: at,
      expiresAt,
      leaseTimeoutMs: this.options.leaseTimeoutMs,
      holdUntil: 0,
      preemptOf: null,
      forced: false,
    };
  }

  private live(row: Row): boolean {
    return row.leaseToken !== null && now() < row.expiresAt;
  }

  private holdLeft(row: Row | undefined): number {
    return row ? Math.max(0, row.holdUntil - now()) : 0;
  }

  private heldLimit(targetKey: string): number | null {
    for (const [slot, row] of this.rows.get(targetKey) ?? []) {
      if (this.live(row)) return slot === OWN_ROW_SLOT ? 1 : row.limit;
    }
    return null;
  }

  private liveLine(targetKey: string): WaiterRow[] {
    const [at, wall] = [now(), Date.now()];
    const line = (this.lines.get(targetKey) ?? []).filter((waiter) => waiter.expiresAt > at);
    return line.sort((a, b) => this.aged(b, wall) - this.aged(a, wall) || Number(a.seq - b.seq));
  }

  /** Effective priority: one more per `agingIntervalMs` waited since it first queued (the statements' `aged`). */
  private aged(waiter: WaiterRow, wall = Date.now()): number {
    const aging = this.options.agingIntervalMs;
    return waiter.priority + (aging ? Math.floor((wall - waiter.queuedAt.getTime()) / aging) : 0);
  }

  /** Live waiters the request may not pass: at least as urgent, and (for a queued caller) queued before it. */
  private waitersAhead({ targetKey, priority, waiterId, waiterSeq }: AcquireRequest): number {
    const line = this.liveLine(targetKey);
    if (waiterId === undefined) return line.filter((waiter) => this.aged(waiter) >= priority).length;
    const own = line.findIndex((waiter) => waiter.id === waiterId);
    if (own >= 0) return own;
    const seq = waiterSeq ?? this.lastSeq + 1n;
    return line.filter((w) => this.aged(w) > priority || (this.aged(w) === priority && w.seq < seq)).length;
  }

  private refuse(request: AcquireRequest, holdLeftMs: number | null): Refusal {
    if (!request.queueAs) return { refused: true, holdLeftMs };
    const place = this.enqueue(request.targetKey, request.queueAs.waiterId, request.priority, undefined);
    return { refused: true, holdLeftMs, place };
  }

  private grant(request: AcquireRequest, slot: number, limit: number): AcquiredRow {
    const { targetKey, leaseToken, priority, holdMs, waiterId } = request;
    if (waiterId !== undefined) this.dequeue(targetKey, waiterId, false);
    let slots = this.rows.get(targetKey);
    if (!slots) this.rows.set(targetKey, (slots = new Map()));
    const before = slots.get(slot);
    const tookOver = before?.leaseToken != null;
    const row = this.fresh(leaseToken, this.options.owner, priority, limit);
    row.leaseTimeoutMs = request.leaseTimeoutMs ?? this.options.leaseTimeoutMs;
    row.expiresAt = row.acquiredAt + row.leaseTimeoutMs;
    row.holdUntil = holdMs > 0 ? row.acquiredAt + holdMs : 0;
    if (holdMs > 0) setTimeout(() => this.wake(targetKey), Math.min(holdMs, MAX_TIMER_MS)).unref();
    slots.set(slot, row);
    return {
      fencingToken: row.fencingToken,
      sentAt: row.acquiredAt,
      tookOver,
      previousOwner: tookOver ? before.owner : null,
    };
  }

  private releaseRow(ref: RowRef, leaseToken: string): boolean {
    const row = this.rowAt(ref);
    if (!row || row.leaseToken !== leaseToken) return false;
    row.leaseToken = null;
    row.preemptOf = null;
    this.wake(ref.targetKey);
    return true;
  }

  private enqueue(
    targetKey: string,
    waiterId: string,
    priority: number,
    place: WaiterPlace | undefined,
  ): WaiterPlace | null {
    const line = (this.lines.get(targetKey) ?? []).filter((waiter) => waiter.id !== waiterId);
    if (this.liveLine(targetKey).length >= this.options.maxWaitersPerTarget) return null;
    const at = now();
    const seq = place?.seq ?? ++this.lastSeq;
    const queuedAt = place?.queuedAt ?? new Date();
    line.push({ id: waiterId, priority, seq, queuedAt, since: at, expiresAt: at + this.options.waiterTimeoutMs });
    this.lines.set(targetKey, line);
    return { seq, queuedAt };
  }

  private dequeue(targetKey: string, waiterId: string, wake = true): void {
    const line = this.lines.get(targetKey);
    if (!line) return;
    const rest = line.filter((waiter) => waiter.id !== waiterId);
    if (rest.length === 0) this.lines.delete(targetKey);
    else this.lines.set(targetKey, rest);
    // The one who left may have kept a newcomer (or the next in line) out.
    if (wake && rest.length < line.length) this.wake(targetKey);
  }

  private renewWaiters(targetKeys: string[], waiterIds: string[]): Set<string> {
    const kept = new Set<string>();
    const at = now();
    waiterIds.forEach((id, i) => {
      const waiter = this.lines.get(targetKeys[i])?.find((candidate) => candidate.id === id);
      if (waiter && waiter.expiresAt > at) {
        waiter.expiresAt = at + this.options.waiterTimeoutMs;
        kept.add(id);
      }
    });
    return kept;
  }

  private ask(caller: Preemptor): AskedGrant | null {
    const row = this.rowAt({ targetKey: caller.targetKey, slot: OWN_ROW_SLOT });
    if (!row || !this.live(row) || row.priority >= caller.priority) return null;
    if (this.waitersAhead({ ...caller, leaseToken: '', holdMs: 0 }) > 0) return null;
    row.preemptOf = row.leaseToken;
    return { leaseToken: row.leaseToken!, fencingToken: row.fencingToken, owner: row.owner, priority: row.priority };
  }

  private take(caller: Preemptor, leaseToken: string, holdMs: number, asked: AskedGrant): PreemptedRow | null {
    const row = this.rowAt({ targetKey: caller.targetKey, slot: OWN_ROW_SLOT });
    if (!row || row.leaseToken !== asked.leaseToken) return null;
    if (this.waitersAhead({ ...caller, leaseToken, holdMs }) > 0) return null;
    this.losses.set(asked.leaseToken, 'preempted');
    row.leaseToken = null;
    const granted = this.grant({ ...caller, leaseToken, holdMs }, OWN_ROW_SLOT, 1);
    return {
      ...granted,
      tookOver: false, // as the statement answers: no takeover of an expired lease (`acquired`, then `preempted`)
      previousOwner: asked.owner,
      previousFencingToken: asked.fencingToken,
      previousPriority: asked.priority,
    };
  }

  /** Tells the listeners the key's line may move (a NOTIFY of the key, for PostgreSQL). */
  private wake(targetKey: string): void {
    for (const listener of this.listeners) queueMicrotask(() => listener.line(targetKey));
  }
}

/**
 * The hot key's re-queue (docs/waiting.md, "The parked place"). A process that asked for a key again within
 * `PARK_WINDOW_MS` of releasing it marks the key hot (`HotKeys`); its next release of the key, when it hands the key to
 * a waiter, also queues this process at the end of its priority in the same statement (`LeaseBackend.releaseAndPark`):
 * a parked place, a waiter with no call yet. A waiting call of the key and priority adopts it and sends no statement
 * until its turn (`ParkedPlaces.adopt`); a place nobody adopts within the window leaves, and one handed a grant before a
 * call adopts it passes the grant on at once.
 */
import { LeaseShutdownError } from '../errors/lease.errors.js';
import { PARK_WINDOW_MS, PARKED_KEYS_MAX } from '../options/limits.js';
import { OWN_ROW_SLOT } from '../options/slot-limits.js';
import type { LeaseBackend, WaiterPlace } from '../core/backend.js';
import type { DrainCache } from './drain-cache.js';
import type { HeldLease } from './held-lease.js';
import type { ReleaseRetries } from './release-retries.js';
import type { Waiter, WaiterRequest } from './waiter.js';

/** What the parked places need of the wait queue they belong to. */
export interface ParkingLine {
  /** Whether a call of this process waits in the key's line (or is about to: its first attempt in flight). */
  waitsFor(targetKey: string): boolean;
  /** Whether the queue listens for wake-ups (a grant to a place reaches it only then). */
  listening(): boolean;
  closed(): boolean;
  /** A waiter with its room taken (null: the line is full or shut down). */
  reserve(request: WaiterRequest): Waiter | null;
  unreserve(waiter: Waiter): void;
  /** Makes a waiter part of the line: woken by NOTIFY, heartbeated, removed at shutdown. */
  register(waiter: Waiter): void;
  unregister(waiter: Waiter): void;
  /** Swaps a registered waiter for `taker` (same id and row), reserved for its call's wait; the heartbeat goes on. */
  handOver(parked: Waiter, taker: Waiter): void;
  newWaiter(request: WaiterRequest): Waiter;
  /** Removes a waiter's row, passing on a grant handed to it; never rejects. */
  leave(waiter: Waiter): Promise<void>;
}

/** Parked places by key, one per key (see the module note). */
export class ParkedPlaces {
  /** How long a place waits for a call to adopt it (a test may lengthen it, see `internal.ts`). */
  windowMs = PARK_WINDOW_MS;
  /** `timer` ends a place's window once its release placed it (no timer: the release is still in flight). */
  private readonly places = new Map<string, { readonly waiter: Waiter; timer?: NodeJS.Timeout }>();

  constructor(private readonly line: ParkingLine) {}

  /** Places placed and not adopted (they are no waiting call). */
  get placed(): number {
    let count = 0;
    for (const entry of this.places.values()) if (entry.timer) count++;
    return count;
  }

  /**
   * A waiter for a release of `targetKey` to queue this process at, at `priority`: reserved before the release is sent,
   * so a NOTIFY naming it (the grant of a later release) is caught. Null when the queue does not listen (no direct
   * handoff, so nothing to queue behind), its line is full or shut down, the key has a parked place already, or a call
   * of this process waits for it. `settle` settles it once the release answered.
   */
  reserve(targetKey: string, priority: number, keyTemplate: string): Waiter | null {
    // A call of this process already waits for the key: the key comes back to it anyway, and a place behind it would
    // be handed the key when that call releases it, with no call of this process left to take it.
    if (!this.line.listening() || this.places.has(targetKey) || this.line.waitsFor(targetKey)) return null;
    const waiter = this.line.reserve({ targetKey, priority, holdMs: 0, keyTemplate });
    if (waiter) this.places.set(targetKey, { waiter });
    return waiter;
  }

  /**
   * The release that was to park `waiter` answered: with its place (it waits `windowMs` for a call, heartbeated like
   * any waiter), null (nothing queued: the key was not handed over, or the line was full), or `unknown` (the statement
   * failed: its place, if it landed, is removed). A place whose grant came first, or placed after shutdown began,
   * leaves at once. Resolves once such a removal is done.
   */
  settle(waiter: Waiter, place: WaiterPlace | null | 'unknown'): Promise<void> {
    if (place === null || place === 'unknown') {
      this.line.unreserve(waiter);
      this.places.delete(waiter.targetKey);
      return place === null ? Promise.resolve() : this.line.leave(waiter);
    }
    waiter.place = place;
    if (this.line.closed() || waiter.granted !== undefined) return this.unpark(waiter);
    this.line.register(waiter);
    const entry = this.places.get(waiter.targetKey);
    if (entry?.waiter === waiter) {
      entry.timer = setTimeout(() => void this.unpark(waiter), this.windowMs);
      entry.timer.unref();
    }
    return Promise.resolve();
  }

  /**
   * A waiting call of `request`'s key and priority takes over the key's place: a waiter of its own with the place's id,
   * row and wake-ups, reserved for its wait — which sleeps at once, as a caller queued behind a live waiter does (the
   * release that parked it handed the key to one ahead). Null when there is none of that priority.
   */
  adopt(request: WaiterRequest): Waiter | null {
    const entry = this.places.get(request.targetKey);
    const parked = entry?.waiter;
    if (!entry?.timer || !parked || parked.priority !== request.priority || this.line.closed()) return null;
    clearTimeout(entry.timer);
    this.places.delete(request.targetKey);
    const { id, place, evicted, pending, granted } = parked;
    const taker: Waiter = { ...this.line.newWaiter(request), id, place, evicted, pending, granted, queuedBehind: true };
    this.line.handOver(parked, taker);
    return taker;
  }

  /** Whether `waiter` is a parked place no call adopted (a grant to it is passed on: see `unpark`). */
  holds(waiter: Waiter): boolean {
    return this.places.get(waiter.targetKey)?.waiter === waiter;
  }

  /** A place nobody adopted (its window ended, a grant came first, shutdown) leaves the line. */
  unpark(waiter: Waiter): Promise<void> {
    const entry = this.places.get(waiter.targetKey);
    if (entry?.waiter !== waiter) return Promise.resolve();
    clearTimeout(entry.timer);
    this.places.delete(waiter.targetKey);
    this.line.unregister(waiter);
    return this.line.leave(waiter);
  }

  /**
   * Shutdown: forgets the placed ones and takes them out of the line (their rows go with the line's, which it listed
   * before); one whose release is in flight leaves when it answers (`settle`).
   */
  close(): void {
    for (const [key, entry] of this.places) {
      if (!entry.timer) continue;
      clearTimeout(entry.timer);
      this.places.delete(key);
      this.line.unregister(entry.waiter);
    }
  }
}

/**
 * Which keys are hot for this process: per key, when it last released a lease of it granted through the line, and the
 * priority of a waiting call that asked for it again within the window of such a release. Bounded: past
 * `PARKED_KEYS_MAX` keys it forgets them all.
 */
export class HotKeys {
  private readonly releasedAt = new Map<string, number>();
  private readonly hot = new Map<string, number>();

  constructor(private readonly windowMs: () => number) {}

  /** A waiting call of `targetKey` at `priority` asks: whether it came within the window (the key is then hot). */
  asked(targetKey: string, priority: number): boolean {
    const releasedAt = this.releasedAt.get(targetKey);
    if (releasedAt === undefined) return false;
    if (performance.now() - releasedAt > this.windowMs()) {
      this.releasedAt.delete(targetKey);
      return false;
    }
    if (this.hot.size >= PARKED_KEYS_MAX) this.hot.clear();
    this.hot.set(targetKey, priority);
    return true;
  }

  /** A lease of `targetKey` granted through the line is released: the priority to park at if the key is hot. */
  released(targetKey: string): number | undefined {
    if (this.releasedAt.size >= PARKED_KEYS_MAX) this.releasedAt.clear();
    this.releasedAt.set(targetKey, performance.now());
    const priority = this.hot.get(targetKey);
    this.hot.delete(targetKey);
    return priority;
  }
}

/** The engine's side: which calls adopt a place, and which releases park one. */
export class Parking {
  private readonly hot = new HotKeys(() => this.places.windowMs);

  constructor(
    private readonly places: ParkedPlaces,
    private readonly backend: Pick<LeaseBackend, 'releaseAndPark'>,
    private readonly retries: ReleaseRetries,
    private readonly drains: Pick<DrainCache, 'active' | 'current' | 'check'>,
    /** Tracks work for close() (the engine's `track`). */
    private readonly track: <T>(work: Promise<T>) => Promise<T>,
    /** Whether the engine is shutting down. */
    private readonly closing: () => boolean,
  ) {}

  /**
   * A waiting call (a single holder's, not preempting): marks its key hot when it asks within the window of this
   * process's release of it, and takes over the place such a release parked for its priority, if any. A drained key
   * is refused first, as an attempt would be; with a view of the drains that is not current, the call attempts instead.
   */
  adopt(request: WaiterRequest): Waiter | null {
    if (!this.hot.asked(request.targetKey, request.priority)) return null;
    if (this.closing()) throw new LeaseShutdownError(request.targetKey);
    // A view of the drains not kept current (no attempt for a refresh period): the call attempts, which reads it.
    if (!this.drains.current) return null;
    if (this.drains.active) this.drains.check(request.targetKey, request.keyTemplate);
    return this.places.adopt(request);
  }

  /**
   * The release of `lease` by the statement that also parks a place for this process's next call, when it should:
   * a key's own row granted through the line (a single holder that waited) of a hot key, with no drain in force (in a
   * current view: a call could not adopt the place otherwise), the service open and a backend that parks. Null when
   * it does not (the caller releases as usual).
   */
  release(lease: HeldLease, until: number, onReleased: () => void): Promise<void> | null {
    if (!lease.throughLine) return null;
    const priority = this.hot.released(lease.targetKey);
    const plain = lease.mode === undefined && lease.rowSlot === OWN_ROW_SLOT && !lease.lone;
    if (priority === undefined || !plain || this.closing() || this.drains.active || !this.drains.current) return null;
    const park = this.backend.releaseAndPark && this.places.reserve(lease.targetKey, priority, lease.keyTemplate);
    if (!park) return null;
    const parked = { waiterId: park.id, priority };
    const releasing = this.retries.releaseParking(lease.row, lease.token, until, parked, onReleased);
    return this.track(releasing.then((place) => this.places.settle(park, place)));
  }
}

import { engineOf } from '../engine-of.js';
import { LeaseEngine } from '../engine/lease-engine.js';
import { unavailableOr } from '../errors/database-errors.js';
import { LeaseArgumentError, LeaseConfigError } from '../errors/lease.errors.js';
import { messages } from '../errors/lease.messages.js';
import type {
  DrainEntry,
  ForceReleaseResult,
  OperatorAction,
  OperatorAuditEntry,
  TimelineEntry,
} from '../interfaces/lease-operator.interface.js';
import type { LeaseService } from '../lease.service.js';
import { assertTargetKey } from '../options/call-input.js';

const MAX_TEXT = 1_000;
const MAX_ROWS = 10_000;

function text(name: string, value: unknown): string {
  if (typeof value !== 'string' || value.trim().length === 0 || value.length > MAX_TEXT) {
    const got = typeof value === 'string' ? `a string of ${value.length} characters` : typeof value;
    throw new LeaseArgumentError(messages.operatorInput(name, got));
  }
  return value;
}

function rows(limit: unknown, fallback: number): number {
  if (limit === undefined) return fallback;
  if (typeof limit !== 'number' || !Number.isInteger(limit) || limit < 1 || limit > MAX_ROWS) {
    throw new LeaseArgumentError(messages.operatorLimit(MAX_ROWS, JSON.stringify(limit) ?? typeof limit));
  }
  return limit;
}

/**
 * The operator's API (docs/console.md): end a grant (`forceRelease`), stop new acquisitions of a key or
 * a key template (`drain` / `undrain`), read the audit trail and a key's timeline (`history`). Every action writes
 * its audit row in the same statement. Provided by `LeaseModule` (inject it); outside Nest, `new LeaseOperator(leases)`.
 * Guard it like any administrative power: whoever may call it may stop any holder's work.
 */
export class LeaseOperator {
  constructor(private readonly leases: LeaseService) {}

  /**
   * Ends the current grant of `targetKey`, live or expired, and writes an audit row (who, when, why; the grant's
   * fencing token and holder). The holder's next renewal, or its next fenced transaction, finds the grant gone: its
   * signal aborts with `released-by-operator` and its fenced writes are refused (`LeaseLostError`). The key is free at
   * once (a hold's tail too); waiters are granted at their next attempt (their poll, at most `waitPollIntervalMs`).
   * The fencing sequence is not advanced: the next acquisition draws a larger token anyway.
   */
  async forceRelease(targetKey: string, action: OperatorAction): Promise<ForceReleaseResult> {
    assertTargetKey(targetKey);
    const [by, reason] = [text('by', action?.by), text('reason', action?.reason)];
    const done = await this.store()
      .forceRelease(targetKey, by, reason)
      .catch((error: unknown) => {
        throw unavailableOr(error, targetKey, 'force-release the lease of');
      });
    return {
      released: done.released,
      ...(done.holder !== null && done.released ? { holder: done.holder } : {}),
      ...(done.fencingToken !== null ? { fencingToken: done.fencingToken } : {}),
      at: done.at,
    };
  }

  /**
   * Refuses new acquisitions of `subject` — a target key, or with `template: true` every key of a key template
   * (`report:{userId}`) — with `LeaseDrainedError`, in every process, until `undrain`. Holders keep their leases;
   * queued waiters are refused at their next attempt. Takes effect in this process at once, in others within
   * `DRAIN_REFRESH_MS` (1 s) plus one statement. Draining again updates the actor and reason.
   */
  async drain(subject: string, action: OperatorAction & { template?: boolean }): Promise<DrainEntry> {
    let entry: DrainEntry | undefined;
    await this.changeDrain('drain', subject, action, async (kind, by, reason) => {
      entry = { kind, subject, actor: by, reason, at: await this.store().drain(kind, subject, by, reason) };
    });
    return entry!;
  }

  /** Ends a drain (audited either way); true when one was in force. Same propagation bound as `drain`. */
  async undrain(subject: string, action: OperatorAction & { template?: boolean }): Promise<boolean> {
    let removed = false;
    await this.changeDrain('undrain', subject, action, async (kind, by, reason) => {
      removed = await this.store().undrain(kind, subject, by, reason);
    });
    return removed;
  }

  /** Checks the input, runs the change (a database failure as `LeaseUnavailableError`), refreshes this process's view. */
  private async changeDrain(
    what: 'drain' | 'undrain',
    subject: string,
    action: OperatorAction & { template?: boolean },
    change: (kind: DrainEntry['kind'], by: string, reason: string) => Promise<void>,
  ): Promise<void> {
    const kind = this.kindOf(subject, action);
    const [by, reason] = [text('by', action?.by), text('reason', action?.reason)];
    await change(kind, by, reason).catch((error: unknown) => {
      throw unavailableOr(error, kind === 'key' ? subject : undefined, what);
    });
    await operatorEngineOf(this.leases).operator.drains.refresh();
  }

  /** The drains in force (database view). */
  drains(): Promise<DrainEntry[]> {
    return this.store()
      .drains()
      .catch((error: unknown) => {
        throw unavailableOr(error, undefined, 'read the drains');
      });
  }

  /** The newest audit rows, newest first (default 100). */
  audit(options: { limit?: number } = {}): Promise<OperatorAuditEntry[]> {
    return this.store()
      .audit(rows(options.limit, 100))
      .catch((error: unknown) => {
        throw unavailableOr(error, undefined, 'read the audit trail');
      });
  }

  /**
   * The key's timeline, oldest first (the newest `limit`, default 200): holders with their fencing tokens, takeovers,
   * losses with their reason, waits — as journaled by every process with `journal: true` — and force-releases. This
   * process's buffered rows are written first; other processes' rows arrive within their flush interval (250 ms).
   */
  async history(targetKey: string, options: { limit?: number } = {}): Promise<TimelineEntry[]> {
    assertTargetKey(targetKey);
    const limit = rows(options.limit, 200);
    const engine = operatorEngineOf(this.leases);
    await engine.operator.flushJournal();
    return engine.operator.store.history(targetKey, limit).catch((error: unknown) => {
      throw unavailableOr(error, targetKey, 'read the timeline of');
    });
  }

  private store() {
    return operatorEngineOf(this.leases).operator.store;
  }

  private kindOf(subject: string, action: { template?: boolean } | undefined): DrainEntry['kind'] {
    if (action?.template !== undefined && typeof action.template !== 'boolean') {
      throw new LeaseArgumentError(messages.operatorTemplateNotBoolean(typeof action.template));
    }
    if (action?.template) {
      text('subject', subject);
      if (subject.length > 255) throw new LeaseArgumentError(messages.keyTemplateInvalid(subject.length));
      return 'template';
    }
    assertTargetKey(subject);
    return 'key';
  }
}

/** The engine behind `leases` (over PostgreSQL, or the testing kit's memory backend). */
function operatorEngineOf(leases: LeaseService): LeaseEngine {
  const engine = engineOf(leases);
  if (!(engine instanceof LeaseEngine)) throw new LeaseConfigError(messages.operatorNeedsEngine());
  return engine;
}

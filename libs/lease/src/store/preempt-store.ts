/**
 * The statements of preemption (docs/preemption.md; SQL in `sql/preempt.sql.ts`): the request on the holder's row
 * and the takeover at the end of the grace. On the statement pool, bounded like an acquisition.
 */
import { retryingSerializationFailures } from '../database/sessions.js';
import { exhausted, readOnly } from '../errors/database-errors.js';
import type { EngineSettings } from '../options/engine-settings.js';
import { acquireBoundMs, slackMs } from '../options/bounds.js';
import type { RunStatement } from './schema-store.js';
import type { StatementTexts } from './statement-texts.js';
import type { AcquiredRow } from './store.types.js';

/** The grant a preempting caller asked to stop. */
export interface AskedGrant {
  readonly leaseToken: string;
  readonly fencingToken: bigint;
  readonly owner: string;
  readonly priority: number;
}

/** The caller of a preemption statement: its key, priority and place in line (when it is queued). */
export interface Preemptor {
  readonly targetKey: string;
  readonly priority: number;
  readonly waiterId?: string;
  readonly waiterSeq?: bigint;
  /** The call's own lease length; absent: the module's. */
  readonly leaseTimeoutMs?: number;
}

/** A takeover's grant, and what it ended. */
export interface PreemptedRow extends AcquiredRow {
  readonly previousFencingToken: bigint;
  readonly previousPriority: number;
}

export class PreemptStore {
  constructor(
    private readonly run: RunStatement,
    /** The statement texts in use (rebuilt when the timeline is fixed at bootstrap). */
    private readonly sql: () => StatementTexts,
    private readonly options: EngineSettings,
    private readonly named: (statement: string) => { name?: string },
    /** The fencing sequence's quoted name (for the error of an exhausted sequence). */
    private readonly fencingSequence: string,
  ) {}

  /**
   * Asks the live holder of the key to stop, when the caller may preempt it (strictly lower priority, no live waiter
   * ahead of the caller): its grant, or null (it may not, the key is free, or the row is locked now).
   */
  async ask(caller: Preemptor): Promise<AskedGrant | null> {
    const { rows } = await this.send<{ lease_token: string; fencing_token: string; owner: string; priority: number }>(
      'preempt_ask',
      this.sql().preemptAsk,
      [caller.targetKey, caller.priority, caller.waiterId ?? null, caller.waiterSeq?.toString() ?? null, this.aging],
      caller.targetKey,
    );
    const [row] = rows;
    return row
      ? {
          leaseToken: row.lease_token,
          fencingToken: BigInt(row.fencing_token),
          owner: row.owner,
          priority: row.priority,
        }
      : null;
  }

  /**
   * Takes the key over from the grant `asked` (see `preemptTakeSql`): the new grant, or null when that grant no
   * longer holds the row or a live waiter is ahead.
   */
  async take(caller: Preemptor, leaseToken: string, holdMs: number, asked: AskedGrant): Promise<PreemptedRow | null> {
    const { rows, sentAt } = await this.send<{
      fencing_token: string;
      previous_owner: string;
      previous_token: string;
      previous_priority: number;
    }>(
      'preempt_take',
      this.sql().preemptTake,
      [
        caller.targetKey,
        leaseToken,
        this.options.owner,
        caller.priority,
        caller.leaseTimeoutMs ?? this.options.leaseTimeoutMs,
        caller.waiterId ?? null,
        caller.waiterSeq?.toString() ?? null,
        this.aging,
        holdMs,
        asked.leaseToken,
      ],
      caller.targetKey,
    );
    const [row] = rows;
    if (!row) return null;
    return {
      fencingToken: BigInt(row.fencing_token),
      sentAt,
      tookOver: false,
      previousOwner: row.previous_owner,
      previousFencingToken: BigInt(row.previous_token),
      previousPriority: row.previous_priority,
    };
  }

  private get aging(): number | null {
    return this.options.agingIntervalMs;
  }

  private send<R extends Record<string, unknown>>(name: string, text: string, values: unknown[], targetKey: string) {
    const bounds = { boundMs: acquireBoundMs(this.options), slackMs: slackMs(this.options) };
    return retryingSerializationFailures(() =>
      this.run<R>({ ...this.named(name), ...bounds, text, values }).catch((error: unknown) => {
        throw exhausted(error, 'fencing_token', this.fencingSequence) ?? readOnly(error, targetKey) ?? error;
      }),
    );
  }
}

/**
 * The lone caller's statements (issue 27; SQL: `loneAcquireSql`, `loneReleaseSql`): a newcomer that does not wait,
 * on a key without a waiter line, acquires and releases with a lean statement each. Each answers `full` / `line`
 * when the key needs the single statement's rules; the caller (`LeaseStore`) then sends that statement. On the
 * statement pool.
 */
import { retryingSerializationFailures } from '../database/sessions.js';
import { exhausted, readOnly } from '../errors/database-errors.js';
import type { EngineSettings } from '../options/engine-settings.js';
import { loneAcquireOutcome, type LoneAcquireRow } from './rows.js';
import type { RunStatement } from './schema-store.js';
import type { StatementTexts } from './statement-texts.js';
import type { AcquiredRow, AcquireRequest, Refusal } from './store.types.js';

/** How long a release's row lock may be waited for, as `lock_timeout` text: its whole bound. */
export const lockWaitMs = (timeoutMs: number) => String(Math.max(1, Math.floor(timeoutMs)));

export class LoneStore {
  /** The statements' names (fixed by the options: looked up once). */
  private readonly names: { readonly acquire: { name?: string }; readonly release: { name?: string } };

  constructor(
    private readonly run: RunStatement,
    /** The statement texts in use (rebuilt when the timeline is fixed at bootstrap). */
    private readonly sql: () => StatementTexts,
    private readonly options: EngineSettings,
    statement: (name: string) => { name?: string },
    private readonly acquireBounds: () => { boundMs: number; slackMs: number },
    private readonly fencingSequence: string,
  ) {
    this.names = { acquire: statement('acquire_lone'), release: statement('release_lone') };
  }

  /** The lean acquisition; `full` when the key has a line (or an expired holder, or changed meanwhile). */
  async acquire(request: AcquireRequest): Promise<AcquiredRow | Refusal | 'full'> {
    const { boundMs, slackMs } = this.acquireBounds();
    // Built with a fixed shape, not spread: the lone caller's path pays for every object copy.
    const { rows, sentAt } = await this.run<LoneAcquireRow>({
      name: this.names.acquire.name,
      boundMs,
      slackMs,
      text: this.sql().acquireLone,
      values: [
        request.targetKey,
        request.leaseToken,
        this.options.owner,
        request.priority,
        request.leaseTimeoutMs ?? this.options.leaseTimeoutMs,
        request.holdMs,
      ],
    }).catch((error: unknown) => {
      throw exhausted(error, 'fencing_token', this.fencingSequence) ?? readOnly(error, request.targetKey) ?? error;
    });
    return loneAcquireOutcome(rows[0], sentAt);
  }

  /**
   * The lean release of a lease `acquire` granted: whether it was released, or `line` when a line formed meanwhile
   * (it then wrote nothing). Waits for a locked row within `timeoutMs`.
   */
  async release(targetKey: string, leaseToken: string, timeoutMs: number): Promise<boolean | 'line'> {
    const { rows } = await retryingSerializationFailures(() =>
      this.run<{ released: boolean; line: boolean }>({
        name: this.names.release.name,
        boundMs: timeoutMs,
        text: this.sql().releaseLone,
        values: [targetKey, leaseToken, lockWaitMs(timeoutMs), this.options.asyncReleaseCommits],
      }),
    );
    return rows[0]?.line ? 'line' : rows[0]?.released === true;
  }
}

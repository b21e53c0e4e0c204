/**
 * The purge of free lease rows (docs/purging.md): which rows may go, and why no fencing token goes back
 * once they have (see `purge`). Statements on the statement pool, bounded like an acquisition.
 */
import type { EngineSettings } from '../options/engine-settings.js';
import { acquireBoundMs, PURGE_BATCH_ROWS } from '../options/bounds.js';
import { retryingSerializationFailures } from '../database/sessions.js';
import type { RunStatement } from './schema-store.js';
import type { StatementTexts } from './statement-texts.js';

export class PurgeStore {
  constructor(
    private readonly run: RunStatement,
    /** The statement texts in use (rebuilt when the timeline is fixed at bootstrap). */
    private readonly sql: () => StatementTexts,
    private readonly options: EngineSettings,
    private readonly purgeAfterMs: number,
  ) {}

  /**
   * Deletes the rows of keys that are free (released, or expired: a holder that crashed; past their hold) and whose
   * token was granted more than the purge bound ago, in statements of at most `PURGE_BATCH_ROWS` rows, never waiting
   * for a locked row; `stop` ends it between statements. The row of the table's largest token stays (read once per
   * run: the largest timeline in the tables, which a fixed timeline is read from). Resolves with the count deleted.
   *
   * Why no token goes back: an acquisition draws its token before the key's row exists only when it inserts the key's
   * first row; every acquisition statement fails on the server, undone, once it has run past half the purge bound
   * (`acquireRunCapMs`), after its writes and before its commit. A purge deletes a row only when its grant is older than
   * the bound, so any acquisition that drew a smaller value than that grant's started more than the bound ago: its
   * insert either ran while the row still existed (it then takes the row under its lock with a new token, or waits for
   * this purge and is past its cap), or it fails. A new row of a purged key draws a later sequence value, so a larger
   * token (same timeline, or a larger one). docs/purging.md.
   */
  async purge(stop: () => boolean): Promise<number> {
    const bound = { boundMs: acquireBoundMs(this.options) };
    const largest = await this.run<{ token: string | null }>({ text: this.sql().largestToken, ...bound });
    const keep = largest.rows[0].token;
    if (keep === null) return 0;
    let purged = 0;
    for (;;) {
      const { rows } = await retryingSerializationFailures(() =>
        this.run<{ purged: number }>({
          text: this.sql().purge,
          values: [this.purgeAfterMs, PURGE_BATCH_ROWS, keep],
          ...bound,
        }),
      );
      purged += rows[0].purged;
      if (rows[0].purged < PURGE_BATCH_ROWS || stop()) return purged;
    }
  }
}

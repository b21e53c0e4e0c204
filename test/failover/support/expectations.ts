/**
 * What the failover suite asserts, beyond what it always asserts (fenced exclusion within the promoted history,
 * nothing lost under synchronous replication, lost writes seen under an asynchronous gap, every process working
 * again after the switch). The two properties below are what issue 15 asks the library to provide after an
 * *asynchronous* failover; until it does, the suite measures and reports them, and asserts them only when asked:
 *
 *   FAILOVER_ASSERT=tokens,told npm run test:failover      (or FAILOVER_ASSERT=all; FAILOVER_ASSERT=none)
 *
 * Under synchronous replication both already hold and are always asserted.
 */
export interface Expectations {
  /** Per key, every grant after the failover carries a larger fencing token than every grant before it. */
  tokensNeverGoBack: boolean;
  /**
   * Every holder whose lease row did not survive the failover has ended (its signal aborted) before a newer grant's
   * fenced write on its key is acknowledged, and no key is ever granted while an earlier holder still holds it.
   */
  oldHoldersTold: boolean;
}

/** Today's defaults: both reported, not asserted (the library does not provide them yet: issue 15, items 1–2). */
const DEFAULTS: Expectations = { tokensNeverGoBack: false, oldHoldersTold: false };

export function expectations(env = process.env.FAILOVER_ASSERT): Expectations {
  if (env === undefined || env.trim() === '') return DEFAULTS;
  const names = new Set(env.split(',').map((name) => name.trim()).filter(Boolean));
  const known = new Set(['tokens', 'told', 'all', 'none']);
  for (const name of names) {
    if (!known.has(name)) throw new Error(`FAILOVER_ASSERT: unknown "${name}" (use tokens, told, all or none)`);
  }
  const all = names.has('all');
  return { tokensNeverGoBack: all || names.has('tokens'), oldHoldersTold: all || names.has('told') };
}

/**
 * What the failover suite asserts about the library after a failover, beyond what it always asserts (fenced exclusion
 * within the promoted history, nothing lost under synchronous replication, lost writes seen under an asynchronous gap,
 * every process working again after the switch). Both are on by default since issue 15 part 2 (tokens carry the
 * timeline; renewals and fenced writes check the server's history); turn them off to measure an older version:
 *
 *   FAILOVER_ASSERT=none npm run test:failover      (or tokens, told, all — the default)
 */
export interface Expectations {
  /** Per key, every grant after the failover carries a larger fencing token than every grant before it. */
  tokensNeverGoBack: boolean;
  /**
   * What the library guarantees to the holders of the old history, whatever the replication: each ends within
   * `toldWithinMs` of the switch (see scenario.ts) and none of its fenced writes commits on the promoted server.
   * Under synchronous replication, also: no key is granted while an earlier holder still holds it, and no holder is
   * cut off. ("Told before any newer grant's write" cannot hold under asynchronous replication: the promoted server
   * can grant a key whose row it never received the moment it accepts connections; the checker still reports it.)
   */
  oldHoldersTold: boolean;
}

const ALL: Expectations = { tokensNeverGoBack: true, oldHoldersTold: true };

export function expectations(env = process.env.FAILOVER_ASSERT): Expectations {
  if (env === undefined || env.trim() === '') return ALL;
  const names = new Set(
    env
      .split(',')
      .map((name) => name.trim())
      .filter(Boolean),
  );
  const known = new Set(['tokens', 'told', 'all', 'none']);
  for (const name of names) {
    if (!known.has(name)) throw new Error(`FAILOVER_ASSERT: unknown "${name}" (use tokens, told, all or none)`);
  }
  const all = names.has('all');
  return { tokensNeverGoBack: all || names.has('tokens'), oldHoldersTold: all || names.has('told') };
}

/**
 * Test-only defects for the fault schedule's negative controls (`test/fault-schedule`): each re-introduces a defect
 * the schedule must catch. Given to the statement builders as an argument (`buildStatements`), by a store whose test
 * harness asked for them (`useStatementFaults` of internal.ts): never by the library itself, never module state.
 */
export interface StatementFaults {
  /**
   * The historical bug fixed by the engine hardening, in the shape it had then: every grant of the single acquire
   * statement goes through its `INSERT … ON CONFLICT DO UPDATE`, which keeps the fencing token drawn in the INSERT's
   * source row (`EXCLUDED.fencing_token`), i.e. before the row lock, instead of drawing it after. A statement stalled
   * between the two (the schedule's acquire-insert racepoint) then grants a token older than a grant that committed
   * meanwhile. The batch statement is not affected: the control runs with `maxBatchSize: 1`.
   */
  readonly tokenBeforeLock: boolean;
  /**
   * A reader let in beside a writer (read-write leases, docs/read-write.md): a reader's grant no longer checks that
   * the key's writer's row is free, and leaves it as it is. The read-write exclusion test must catch it.
   */
  readonly readerBesideWriter?: boolean;
  /**
   * One lease's length becomes another's (a lease length per call, docs/configuration.md): the heartbeat's renewal
   * writes the first renewed lease's timeout to every row it renews, instead of each lease's own. A long lease renewed
   * beside a shorter one then expires early on the server while its holder still holds it by its own length.
   */
  readonly renewOneLength?: boolean;
}

/** The statements as the library sends them. */
export const NO_FAULTS: StatementFaults = Object.freeze({
  tokenBeforeLock: false,
  readerBesideWriter: false,
  renewOneLength: false,
});

/**
 * Test-only switches for the fault schedule's negative controls (`test/fault-schedule`): each re-introduces a defect
 * the schedule must catch. Never exported from `index.ts`, never set by the library; a worker process of the schedule
 * sets them before it builds its `LeaseService` (the statements are built once per store).
 */
export const faultSwitches = {
  /**
   * The historical bug fixed by the engine hardening, in the shape it had then: every grant of the single acquire
   * statement goes through its `INSERT … ON CONFLICT DO UPDATE`, which keeps the fencing token drawn in the INSERT's
   * source row (`EXCLUDED.fencing_token`), i.e. before the row lock, instead of drawing it after. A statement stalled
   * between the two (the schedule's acquire-insert racepoint) then grants a token older than a grant that committed
   * meanwhile. The batch statement is not affected: the control runs with `maxBatchSize: 1`.
   */
  tokenBeforeLock: false,
};

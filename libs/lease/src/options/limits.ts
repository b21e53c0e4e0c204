/**
 * The fixed limits of the library, named once: PostgreSQL's `integer` range (the columns priority, hold_ms and the
 * timeouts), setTimeout's longest delay, the one-second cap of the short bounds, and the retry limit of a statement
 * rolled back whole. errors/ and interfaces/ may import this file (and nothing else of options/).
 */

/** The largest PostgreSQL `integer` (and setTimeout's longest delay: a longer one fires at once, with a warning). */
export const INT32_MAX = 2_147_483_647;

/** The smallest PostgreSQL `integer`. */
export const INT32_MIN = -2_147_483_648;

/** setTimeout's longest delay. */
export const MAX_TIMER_MS = INT32_MAX;

/**
 * The cap of the short bounds that follow the heartbeat interval (`min(interval, 1 s)`): the group commit's stall
 * bound, a wait's grace, closing one connection, the client's slack, the poll behind a blind pooler.
 */
export const ONE_SECOND_MS = 1_000;

/** How many times a statement (or a fence's lock step) rolled back whole by a serialization failure is sent. */
export const SERIALIZATION_ATTEMPTS = 10;

/**
 * The first value of both lease sequences in the 47-bit fencing token layout (their MINVALUE; see
 * `store/sql/fencing-token.ts` and `tokenLayoutStatement`).
 */
export const SEQUENCE_FLOOR = 1n << 40n;

/**
 * The parked place's window (see `WaitQueue.parkFor`): a process that asked for a key again within this long after
 * releasing it has its next release of the key queue it again in the same statement, and a place nobody adopts within
 * this long leaves.
 */
export const PARK_WINDOW_MS = 250;

/** How many keys the engine remembers for the parked place (recent releases, hot keys); past it, it forgets them all. */
export const PARKED_KEYS_MAX = 1_024;

/**
 * The head-only NOTIFY protocol: the statements (store/sql) write `<waiter id> <target key>` on the head channel —
 * or `<waiter id>/<fencing token> <target key>` for a grant a release handed that waiter (direct handoff) — and the
 * notifier parses it. Here, below both, so the database layer never imports the store.
 */

/** The channel of head-only wake-ups of the tables named `tableName`. */
export function headChannelOf(tableName: string): string {
  return `${tableName}_next`;
}

/** A head-only NOTIFY payload: `<waiter id>[/<fencing token>] <target key>` (on the channel `LeaseStore.headChannel`). */
export function parseHeadPayload(payload: string): { waiterId: string; targetKey: string; grant?: bigint } | undefined {
  const match = /^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})(?:\/([0-9]{1,19}))? (.+)$/s.exec(
    payload,
  );
  if (!match) return undefined;
  const [, waiterId, grant, targetKey] = match;
  return grant === undefined ? { waiterId, targetKey } : { waiterId, targetKey, grant: BigInt(grant) };
}

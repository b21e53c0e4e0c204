/**
 * The head-only NOTIFY protocol: the statements (store/sql) write `<waiter id> <target key>` on the head channel, the
 * notifier parses it. Here, below both, so the database layer never imports the store.
 */

/** The channel of head-only wake-ups of the tables named `tableName`. */
export function headChannelOf(tableName: string): string {
  return `${tableName}_next`;
}

/** A head-only NOTIFY payload: `<waiter id> <target key>` (on the channel `LeaseStore.headChannel`). */
export function parseHeadPayload(payload: string): { waiterId: string; targetKey: string } | undefined {
  const match = /^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}) (.+)$/s.exec(payload);
  return match ? { waiterId: match[1], targetKey: match[2] } : undefined;
}

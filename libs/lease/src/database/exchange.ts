/**
 * Several statements in one exchange with the server: the extended protocol's messages of each (Parse only the first
 * time a named statement is sent on the connection, then Bind, Describe, Execute) written at once, closed by one Sync,
 * so they cost one round trip and a named one is parsed and planned once per connection. The fenced transaction sends
 * its BEGIN and lock this way, and its release with its COMMIT (docs/fencing.md): in one message as before, but with
 * bound parameters and a prepared plan instead of a text planned per call.
 *
 * Between a statement's error and the Sync the server skips the rest (as it skips the rest of a simple-query
 * message): a COMMIT after a failed statement never runs, and a transaction opened by a BEGIN before it stays open,
 * failed, for the caller to roll back.
 *
 * Written against `pg`'s submittable interface (what `pg-cursor` uses): `submit(connection)` writes the messages, the
 * client hands the answers to the `handle…` methods. A client without the JavaScript protocol (`pg-native`) has no
 * such connection, and `pg`'s pipeline mode takes none: `canExchange` says so and the caller sends a simple-query
 * message instead.
 */
import pg from 'pg';

/** A parameter as the library binds it: sent as text, like `pg` sends an untyped parameter. */
export type ParameterValue = string | number | bigint | boolean | null | undefined;

/**
 * Where an exchange of prepared statements keeps the transaction's own `enable_seqscan` while its statements are
 * planned with scans off (`SCANS_OFF`), for the fenced lock to put it back (store/sql/fence.sql.ts).
 */
export const SAVED_SEQSCAN = 'nest_pg_lease.enable_seqscan';

/**
 * Sent before the prepared statements of an exchange: they are planned with sequential scans off, as on the library's
 * own sessions (sessions.ts), so a generic plan made while the lease table was nearly empty does not scan it whole on
 * every later run. The transaction's own setting is saved first; the fenced lock puts it back for the work
 * (`SAVED_SEQSCAN`), and a release is followed by COMMIT. Prepared like the statements it precedes: parsed and
 * planned once per connection (a text parsed and planned on every call cost the server more than the lock itself).
 */
export const SCANS_OFF: BoundStatement = {
  name: 'nest_pg_lease_scans_off',
  text: `WITH saved AS MATERIALIZED (
          SELECT set_config('${SAVED_SEQSCAN}', current_setting('enable_seqscan'), true) AS setting
        ) SELECT set_config('enable_seqscan', 'off', true) AS scans FROM saved`,
};

/** A statement of the library: its text, its parameters, and its prepared name (none behind a transaction pooler). */
export interface BoundStatement {
  readonly text: string;
  readonly values?: readonly ParameterValue[];
  readonly name?: string;
  /** The statement with its values written in as literals, for a simple-query message (required with `values`). */
  readonly inline?: () => string;
}

/** The part of `pg`'s protocol connection an exchange writes to. */
interface ProtocolConnection {
  parsedStatements: Record<string, string>;
  stream: { cork?: () => void; uncork?: () => void };
  parse(query: { text: string; name?: string; types?: number[] }): void;
  bind(config: { statement?: string; values?: Array<string | null> }): void;
  describe(message: { type: 'P'; name: string }): void;
  execute(config: { portal: string; rows: number }): void;
  close(message: { type: 'S'; name: string }): void;
  sync(): void;
}

/** `pg`'s `Result` as an exchange uses it: rows parsed by the client's type parsers (its typings leave this out). */
interface RowReader {
  readonly rows: Array<Record<string, unknown>>;
  addFields(fields: unknown[]): void;
  parseRow(fields: unknown[]): Record<string, unknown>;
  addRow(row: Record<string, unknown>): void;
}
type RowReaderClass = new (rowMode: undefined, types: Pick<pg.ClientBase, 'getTypeParser'>) => RowReader;

interface ServerError extends Error {
  code?: string;
}

/**
 * Whether an exchange can be sent on `client`: `pg`'s JavaScript client (it speaks the protocol itself), not in its
 * pipeline mode (`pipeline: true`), which refuses a submittable of its own.
 */
export function canExchange(client: pg.ClientBase): boolean {
  const { connection, pipeline } = client as unknown as {
    connection?: Partial<ProtocolConnection>;
    pipeline?: boolean;
  };
  return (
    pipeline !== true && typeof connection?.parse === 'function' && typeof connection.parsedStatements === 'object'
  );
}

/**
 * The names the exchanges prepared on each connection. A `DEALLOCATE ALL` or `DISCARD ALL` of the application drops
 * them all at once; the first exchange to meet one missing forgets them all (never a name `pg` prepared for others).
 */
const preparedOn = new WeakMap<ProtocolConnection, Set<string>>();

/** What a statement's parameter is sent as: text, the way `pg` sends an untyped parameter (`null` for NULL). */
function textOf(value: ParameterValue): string | null {
  return value === null || value === undefined ? null : String(value);
}

/** The statements' rows, one array per statement, in order; rejects with the first statement's error. */
export function exchange(
  client: pg.ClientBase,
  statements: readonly BoundStatement[],
): Promise<Array<Array<Record<string, unknown>>>> {
  return new Promise((resolve, reject) => {
    // `pg` hands a submittable back instead of a promise: the exchange settles this one itself.
    void client.query(new Exchange(client, statements, resolve, reject) as unknown as pg.QueryConfig);
  });
}

class Exchange {
  /** What the statements are, for whoever reads a query's text and values (a log, a test's recorder). */
  readonly text: string;
  readonly values: readonly ParameterValue[];
  private readonly results: Array<Array<Record<string, unknown>>> = [];
  private current: RowReader;
  private connection?: ProtocolConnection;
  private settled = false;
  /** The names this exchange parses (usually none: a connection parses each once). */
  private parsing?: string[];
  /** Set by `pg` when it times the query (`query_timeout`): told of the end, so its timer stops. */
  callback?: (error: unknown, rows?: unknown) => void;

  constructor(
    private readonly client: pg.ClientBase,
    private readonly statements: readonly BoundStatement[],
    private readonly resolve: (rows: Array<Array<Record<string, unknown>>>) => void,
    private readonly reject: (error: unknown) => void,
  ) {
    this.text = statements.map((statement) => statement.text).join('; ');
    this.values = statements.flatMap((statement) => statement.values ?? []);
    this.current = this.reader();
  }

  private reader(): RowReader {
    return new (pg.Result as unknown as RowReaderClass)(undefined, this.client);
  }

  /** Called by `pg` when the connection is this exchange's: every message written at once (one packet, one Sync). */
  submit(connection: ProtocolConnection): null {
    this.connection = connection;
    connection.stream.cork?.();
    try {
      for (const { text, values = [], name } of this.statements) {
        if (!name || connection.parsedStatements[name] !== text) {
          // A name left half-known by an earlier failed exchange is closed first (no error if it does not exist).
          if (name) {
            connection.close({ type: 'S', name });
            (this.parsing ??= []).push(name);
          }
          connection.parse({ text, name, types: [] });
        }
        connection.bind({ statement: name, values: values.map(textOf) });
        connection.describe({ type: 'P', name: '' });
        connection.execute({ portal: '', rows: 0 });
      }
      connection.sync();
    } finally {
      connection.stream.uncork?.();
    }
    return null;
  }

  handleRowDescription(message: { fields: unknown[] }): void {
    this.current.addFields(message.fields);
  }

  handleDataRow(message: { fields: unknown[] }): void {
    this.current.addRow(this.current.parseRow(message.fields));
  }

  handleCommandComplete(): void {
    this.next();
  }

  handleEmptyQuery(): void {
    this.next();
  }

  private next(): void {
    this.results.push(this.current.rows);
    this.current = this.reader();
  }

  /** The server's (or the client's) error: the exchange is over, whatever was skipped up to the Sync. */
  handleError(error: ServerError): void {
    if (this.settled) return;
    this.settled = true;
    // A prepared statement the server no longer knows (a `DEALLOCATE` or `DISCARD ALL` on this connection): every
    // name the exchanges prepared there is parsed again next time, not only this exchange's.
    if (error.code === '26000' && this.connection) this.forget(this.connection);
    this.callback?.(error);
    this.reject(error);
  }

  handleReadyForQuery(): void {
    if (this.settled) return;
    this.settled = true;
    // Every named statement of the exchange was parsed (or was already): only now is it known on this connection.
    const connection = this.connection!;
    for (const { text, name } of this.statements) if (name) connection.parsedStatements[name] = text;
    if (this.parsing) {
      const prepared = preparedOn.get(connection) ?? new Set<string>();
      for (const name of this.parsing) prepared.add(name);
      preparedOn.set(connection, prepared);
    }
    this.callback?.(null, this.results);
    this.resolve(this.results);
  }

  private forget(connection: ProtocolConnection): void {
    for (const { name } of this.statements) if (name) delete connection.parsedStatements[name];
    for (const name of preparedOn.get(connection) ?? []) delete connection.parsedStatements[name];
    preparedOn.delete(connection);
  }

  handlePortalSuspended(): void {
    this.handleError(new Error('nest-pg-lease: a statement of an exchange was suspended'));
  }

  handleCopyInResponse(): void {
    this.handleError(new Error('nest-pg-lease: a statement of an exchange asked for COPY data'));
  }

  handleCopyData(): void {
    // Never asked for.
  }
}

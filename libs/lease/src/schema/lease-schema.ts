/**
 * The lease tables, described once. The DDL (the migration and `createSchema`), the names of every derived object
 * and the TypeORM entities all derive from the two table descriptions below, so they cannot drift: a test runs
 * TypeORM's schema diff after the migration and expects nothing to change.
 */
import { EntitySchema, type EntitySchemaColumnOptions } from 'typeorm';
import type { LeaseNames } from '../options/lease-names.js';
import { SEQUENCE_FLOOR } from '../options/limits.js';

/** Quotes a validated identifier. */
export function quoteIdentifier(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

type ColumnType = 'text' | 'uuid' | 'bigint' | 'integer' | 'timestamptz';

interface Column {
  /** The entity's property. */
  readonly property: string;
  readonly name: string;
  readonly type: ColumnType;
  readonly nullable?: boolean;
  readonly primary?: boolean;
  readonly default?: number;
  /** A CHECK on this column alone (SQL over the column), named as PostgreSQL names column checks. */
  readonly check?: string;
}

interface Table {
  readonly columns: readonly Column[];
  /** Storage parameter: room on each page for HOT updates (see the lease table's comment in `schemaStatements`). */
  readonly fillfactor: number;
}

const KEY_CHECK = 'octet_length(target_id) BETWEEN 1 AND 255';

/**
 * The lease table. A row is `(target_id, slot)`: slot 0 is a key's own row (its single holder), slots 1 … limit a
 * semaphore's (see options/slot-limits.ts), slot -1 the purge's high-water row. A row stays while its key is in use: a
 * release only clears lease_token (see LeaseStore.release), so every later acquisition of the key draws its fencing
 * token under the row lock; free rows granted longer ago than the purge bound are deleted (LeaseStore.purge).
 */
const LEASE_TABLE: Table = {
  fillfactor: 50,
  columns: [
    { property: 'targetId', name: 'target_id', type: 'text', primary: true, check: KEY_CHECK },
    { property: 'leaseToken', name: 'lease_token', type: 'uuid', nullable: true },
    { property: 'fencingToken', name: 'fencing_token', type: 'bigint' },
    { property: 'owner', name: 'owner', type: 'text' },
    { property: 'priority', name: 'priority', type: 'integer', default: 0 },
    { property: 'leaseTimeoutMs', name: 'lease_timeout_ms', type: 'integer', check: 'lease_timeout_ms > 0' },
    { property: 'acquiredAt', name: 'acquired_at', type: 'timestamptz' },
    { property: 'updatedAt', name: 'updated_at', type: 'timestamptz' },
    { property: 'holdMs', name: 'hold_ms', type: 'integer', default: 0, check: 'hold_ms >= 0' },
    // The limit a semaphore's slot row was granted under (docs/semaphores.md); null on a key's own row.
    { property: 'slotLimit', name: 'slot_limit', type: 'integer', nullable: true },
    // The lease token of the grant a caller of higher priority asked to stop (docs/preemption.md): the holder's
    // renewals and fenced transactions find it (before the takeover as after it) and end the lease as `preempted`.
    { property: 'preemptOf', name: 'preempt_of', type: 'uuid', nullable: true },
    // Last, where the migration that added it puts it (`slotColumnStatements`): new and migrated tables agree.
    { property: 'slot', name: 'slot', type: 'integer', primary: true, default: 0 },
  ],
};

/**
 * The lease table as the first migration creates it, and as it was before the slot column: one row per name, `target_id` its
 * primary key (a semaphore's slots were rows named `<key>\u001f<slot>`). The slot column's migration
 * (`slotColumnStatements`) moves it to `LEASE_TABLE`; `createSchema` creates `LEASE_TABLE` directly.
 */
const FIRST_LEASE_TABLE: Table = {
  ...LEASE_TABLE,
  columns: LEASE_TABLE.columns.filter((column) => column.name !== 'slot'),
};

/** The waiter table: one row per waiting call, ordered by the order index (priority, then arrival). */
const WAITER_TABLE: Table = {
  fillfactor: 80,
  columns: [
    { property: 'targetId', name: 'target_id', type: 'text', primary: true, check: KEY_CHECK },
    { property: 'waiterId', name: 'waiter_id', type: 'uuid', primary: true },
    { property: 'owner', name: 'owner', type: 'text' },
    { property: 'priority', name: 'priority', type: 'integer' },
    { property: 'timeoutMs', name: 'timeout_ms', type: 'integer', check: 'timeout_ms > 0' },
    { property: 'queuedAt', name: 'queued_at', type: 'timestamptz' },
    { property: 'seq', name: 'seq', type: 'bigint' },
    { property: 'heartbeatAt', name: 'heartbeat_at', type: 'timestamptz' },
  ],
};

/**
 * The join results (`onBusy: 'join'`): the outcome of a joinable run, keyed by target and fencing token, written in
 * the run's fenced transaction and kept until `expires_at` (`joinResultTtlMs`). No entity: nothing maps it.
 */
const RESULT_TABLE: Table = {
  fillfactor: 100,
  columns: [
    { property: 'targetId', name: 'target_id', type: 'text', primary: true, check: KEY_CHECK },
    { property: 'fencingToken', name: 'fencing_token', type: 'bigint', primary: true },
    { property: 'outcome', name: 'outcome', type: 'text' },
    { property: 'expiresAt', name: 'expires_at', type: 'timestamptz' },
  ],
};

/** The order index of the waiter table: grant order within a target. */
const WAITER_ORDER = { columns: ['target_id', 'priority', 'seq'], sql: 'target_id, priority DESC, seq' };

const NAMEDATALEN = 64;

/** `text` cut to at most `bytes` bytes of UTF-8, on a character boundary (PostgreSQL's pg_mbcliplen). */
function clip(text: string, bytes: number): string {
  let out = '';
  for (const char of text) {
    if (Buffer.byteLength(out + char, 'utf8') > bytes) break;
    out += char;
  }
  return out;
}

/**
 * The name PostgreSQL gives a column's CHECK constraint (`makeObjectName(table, column, 'check')`): both parts cut,
 * the longer first, until the name fits in 63 bytes. Written out in the DDL, so new and old tables agree.
 */
export function columnCheckName(table: string, column: string): string {
  const available = NAMEDATALEN - 1 - ('check'.length + 2);
  let tableBytes = Buffer.byteLength(table, 'utf8');
  let columnBytes = Buffer.byteLength(column, 'utf8');
  while (tableBytes + columnBytes > available) {
    if (tableBytes > columnBytes) tableBytes--;
    else columnBytes--;
  }
  return `${clip(table, tableBytes)}_${clip(column, columnBytes)}_check`;
}

/** Quoted, qualified names of every database object, derived from the names. */
export function leaseObjectNames(names: LeaseNames) {
  const q = (name: string) => `${quoteIdentifier(names.schema)}.${quoteIdentifier(name)}`;
  return {
    schema: quoteIdentifier(names.schema),
    lease: q(names.tableName),
    waiter: q(names.waiterTableName),
    fencingSequence: q(`${names.tableName}_fencing_seq`),
    waiterSequence: q(`${names.waiterTableName}_seq`),
    waiterOrderIndex: quoteIdentifier(`${names.waiterTableName}_order_idx`),
    result: q(`${names.tableName}_result`),
    /** NOTIFY channel of join results (`<target key>`): a plain string argument of pg_notify. */
    resultChannel: `${names.tableName}_joined`,
    /** NOTIFY channel: a plain string argument of pg_notify, never spliced into SQL. */
    channel: `${names.tableName}_wake`,
    /** The operator's tables (see `consoleSchemaStatements`). */
    audit: q(`${names.tableName}_audit`),
    drain: q(`${names.tableName}_drain`),
    journal: q(`${names.tableName}_journal`),
    journalKeyIndex: quoteIdentifier(`${names.tableName}_jk_idx`),
    journalAtIndex: quoteIdentifier(`${names.tableName}_jat_idx`),
  };
}

/**
 * The operator's tables (docs/console.md), created by the second migration and by `createSchema`: the
 * audit trail of operator actions, the drains in force (read by every process), and the opt-in journal of lease
 * events the timeline is drawn from. Idempotent, like `schemaStatements`.
 */
export function consoleSchemaStatements(names: LeaseNames): string[] {
  const n = leaseObjectNames(names);
  return [
    `CREATE TABLE IF NOT EXISTS ${n.audit} (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      at timestamptz NOT NULL DEFAULT clock_timestamp(),
      action text NOT NULL CHECK (action IN ('force-release', 'drain', 'undrain')),
      kind text NOT NULL CHECK (kind IN ('key', 'template')),
      subject text NOT NULL,
      actor text NOT NULL,
      reason text NOT NULL,
      fencing_token bigint,
      holder text
    )`,
    `CREATE TABLE IF NOT EXISTS ${n.drain} (
      kind text NOT NULL CHECK (kind IN ('key', 'template')),
      subject text NOT NULL,
      actor text NOT NULL,
      reason text NOT NULL,
      at timestamptz NOT NULL DEFAULT clock_timestamp(),
      PRIMARY KEY (kind, subject)
    )`,
    `CREATE TABLE IF NOT EXISTS ${n.journal} (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      at timestamptz NOT NULL,
      target_id text NOT NULL,
      key_template text NOT NULL,
      type text NOT NULL,
      owner text NOT NULL,
      fencing_token bigint,
      detail text
    )`,
    `CREATE INDEX IF NOT EXISTS ${n.journalKeyIndex} ON ${n.journal} (target_id, at)`,
    `CREATE INDEX IF NOT EXISTS ${n.journalAtIndex} ON ${n.journal} (at)`,
  ];
}

export function dropConsoleSchemaStatements(names: LeaseNames): string[] {
  const n = leaseObjectNames(names);
  return [`DROP TABLE IF EXISTS ${n.journal}`, `DROP TABLE IF EXISTS ${n.drain}`, `DROP TABLE IF EXISTS ${n.audit}`];
}

function createTable(qualified: string, tableName: string, table: Table): string {
  const keys = table.columns.filter((column) => column.primary);
  const lines = table.columns.map((column) => {
    let line = `${column.name} ${column.type}`;
    if (keys.length === 1 && column.primary) line += ' PRIMARY KEY';
    else if (!column.nullable) line += ' NOT NULL';
    if (column.default !== undefined) line += ` DEFAULT ${column.default}`;
    if (column.check) {
      line += ` CONSTRAINT ${quoteIdentifier(columnCheckName(tableName, column.name))} CHECK (${column.check})`;
    }
    return line;
  });
  if (keys.length > 1) lines.push(`PRIMARY KEY (${keys.map((column) => column.name).join(', ')})`);
  return `CREATE TABLE IF NOT EXISTS ${qualified} (\n      ${lines.join(',\n      ')}\n    ) WITH (fillfactor = ${table.fillfactor})`;
}

/**
 * The DDL of every lease table in its latest shape (`createSchema`): the migrations' statements, the lease table
 * created with its slot column; idempotent, so it also brings the tables of an earlier version up to date.
 */
export function schemaStatements(names: LeaseNames): string[] {
  return [
    ...baseSchemaStatements(names, LEASE_TABLE),
    ...joinResultStatements(names),
    ...preemptionStatements(names),
    ...slotColumnStatements(names),
  ];
}

/**
 * The preemption column (`preempt_of`, docs/preemption.md), added by its own migration to tables made before it;
 * idempotent (tables the first migration creates now have it).
 */
export function preemptionStatements(names: LeaseNames): string[] {
  return [`ALTER TABLE ${leaseObjectNames(names).lease} ADD COLUMN IF NOT EXISTS preempt_of uuid`];
}

/** The DDL of the join result table (the second migration). */
export function joinResultStatements(names: LeaseNames): string[] {
  return [createTable(leaseObjectNames(names).result, `${names.tableName}_result`, RESULT_TABLE)];
}

/**
 * The DDL of the first migration: the lease and waiter tables and their sequences. `leaseTable`: the lease table's
 * shape (the first migration's own, or the latest for `createSchema`).
 */
export function baseSchemaStatements(names: LeaseNames, leaseTable: Table = FIRST_LEASE_TABLE): string[] {
  const n = leaseObjectNames(names);
  return [
    ...(names.schema === 'public' ? [] : [`CREATE SCHEMA IF NOT EXISTS ${n.schema}`]),
    `CREATE SEQUENCE IF NOT EXISTS ${n.fencingSequence} AS bigint MINVALUE ${SEQUENCE_FLOOR}`,
    // Only the primary key is indexed, and half of each page is left free, so a heartbeat of every lease in one tick
    // still finds room for the new row versions on their own pages: HOT updates (measured: 99.8 % at 10,000 leases).
    createTable(n.lease, names.tableName, leaseTable),
    `CREATE SEQUENCE IF NOT EXISTS ${n.waiterSequence} AS bigint MINVALUE ${SEQUENCE_FLOOR}`,
    createTable(n.waiter, names.waiterTableName, WAITER_TABLE),
    `CREATE INDEX IF NOT EXISTS ${n.waiterOrderIndex} ON ${n.waiter} (${WAITER_ORDER.sql})`,
    tokenLayoutStatement(names),
    slotLimitStatement(names),
  ];
}

/**
 * Adds the semaphores' `slot_limit` column to a lease table created before it (the fifth migration); a no-op on
 * tables the first migration created with it. Nullable, no default: adding it rewrites nothing.
 */
export function slotLimitStatement(names: LeaseNames): string {
  return `ALTER TABLE ${leaseObjectNames(names).lease} ADD COLUMN IF NOT EXISTS slot_limit integer`;
}

/**
 * The slot column (the seventh migration, `AddLeaseSlotColumn`): a lease row becomes `(target_id, slot)`. Converts a
 * table from before it, in one transaction, once (a no-op on a table that has the column):
 * - a semaphore's slot row `<key>\u001f<n>` becomes `(key, n + 1)` (slot 0 is the key's own row), its lease token,
 *   fencing token and limit kept: a slot held across the migration is renewed, fenced and released by its holder;
 * - the rows recording a key's limit (`<key>\u001f`) go: every slot row records the limit it was granted under, and
 *   the acquisition now reads all of a key's slot rows;
 * - the purge's high-water row (a lone U+001F) takes slot -1, so it no longer reserves a key: keys may contain U+001F;
 * - the primary key becomes `(target_id, slot)`.
 * Processes of a version before it cannot acquire on the result (their `ON CONFLICT (target_id)` has no unique index to use: every
 * acquisition fails) and lose the slots they held at their next renewal: stop them, or let them fail closed.
 */
export function slotColumnStatements(names: LeaseNames): string[] {
  const { lease } = leaseObjectNames(names);
  const table = literal(lease);
  return [
    `DO $slots$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = ${table}::regclass AND attname = 'slot'
      AND NOT attisdropped) THEN
    RETURN;
  END IF;
  ALTER TABLE ${lease} ADD COLUMN slot integer NOT NULL DEFAULT 0;
  EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', ${table},
    (SELECT conname FROM pg_catalog.pg_constraint WHERE conrelid = ${table}::regclass AND contype = 'p'));
  DELETE FROM ${lease} WHERE octet_length(target_id) > 1 AND right(target_id, 1) = chr(31);
  UPDATE ${lease} SET slot = -1 WHERE target_id = chr(31);
  UPDATE ${lease} SET target_id = left(target_id, strpos(target_id, chr(31)) - 1),
    slot = substr(target_id, strpos(target_id, chr(31)) + 1)::int + 1
  WHERE strpos(target_id, chr(31)) > 1;
  ALTER TABLE ${lease} ADD PRIMARY KEY (target_id, slot);
END
$slots$`,
  ];
}

/**
 * The slot column's `down()`: the names from before it back — slot rows `<key>\u001f<n>`, a row recording each such key's limit
 * (its latest grant's), the high-water row under its lone U+001F — and the primary key `(target_id)`. Refused,
 * changing nothing, while a key holds U+001F (the names before it could not tell it from a slot row) or is too long for its slot
 * rows' names.
 */
export function dropSlotColumnStatements(names: LeaseNames): string[] {
  const { lease } = leaseObjectNames(names);
  const table = literal(lease);
  return [
    `DO $slots$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = ${table}::regclass AND attname = 'slot'
      AND NOT attisdropped) THEN
    RETURN;
  END IF;
  IF EXISTS (SELECT 1 FROM ${lease} WHERE slot >= 0 AND strpos(target_id, chr(31)) > 0) THEN
    RAISE EXCEPTION 'nest-pg-lease: % holds keys with U+001F, which the table before the slot column cannot tell from a semaphore''s slot rows: delete them first', ${table};
  END IF;
  IF EXISTS (SELECT 1 FROM ${lease} WHERE slot > 0 AND octet_length(target_id) + 1 + length((slot - 1)::text) > 255) THEN
    RAISE EXCEPTION 'nest-pg-lease: % holds semaphore keys too long for the slot rows'' names of the table before the slot column: delete them first', ${table};
  END IF;
  EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', ${table},
    (SELECT conname FROM pg_catalog.pg_constraint WHERE conrelid = ${table}::regclass AND contype = 'p'));
  INSERT INTO ${lease} (target_id, slot, lease_token, fencing_token, owner, priority, lease_timeout_ms, acquired_at,
      updated_at, hold_ms, slot_limit)
    SELECT DISTINCT ON (target_id) target_id || chr(31), -2, NULL, 0, owner, 0, lease_timeout_ms, acquired_at,
      updated_at, 0, slot_limit
    FROM ${lease} WHERE slot > 0 ORDER BY target_id, acquired_at DESC;
  UPDATE ${lease} SET target_id = target_id || chr(31) || (slot - 1) WHERE slot > 0;
  ALTER TABLE ${lease} DROP COLUMN slot;
  ALTER TABLE ${lease} ADD PRIMARY KEY (target_id);
END
$slots$`,
  ];
}

/** `name` as an SQL string literal (quotes doubled). */
function literal(name: string): string {
  return `'${name.replace(/'/g, "''")}'`;
}

/**
 * Moves sequences of the 40-bit token layout (`(timeline << 40) | n`, n < 2^40, before it) to this one: both start at
 * 2^40 (`SEQUENCE_FLOOR`, set as their MINVALUE), so every new token `(timeline << 47) | n` is above every old one
 * (an old timeline t < 128 gives tokens below `t << 47`, and the timeline never goes back), and a process of the
 * old version, which refuses values past 2^40, fails closed. Refuses, changing nothing, tables holding a token or
 * place of timeline 128 or more (which the new layout could not order). Idempotent: nothing happens on migrated
 * sequences. One-way: the old layout cannot come back (its processes keep failing closed).
 */
export function tokenLayoutStatement(names: LeaseNames): string {
  const n = leaseObjectNames(names);
  const limit = 1n << 47n;
  const move = (sequence: string) => `
  IF (SELECT seqmin FROM pg_catalog.pg_sequence WHERE seqrelid = ${literal(sequence)}::regclass) < ${SEQUENCE_FLOOR} THEN
    PERFORM setval(${literal(sequence)}, ${SEQUENCE_FLOOR}, false) WHERE (SELECT last_value FROM ${sequence}) < ${SEQUENCE_FLOOR};
    ALTER SEQUENCE ${sequence} MINVALUE ${SEQUENCE_FLOOR} START WITH ${SEQUENCE_FLOOR};
  END IF;`;
  return `DO $layout$
BEGIN
  IF (SELECT max(fencing_token) FROM ${n.lease}) >= ${limit} OR (SELECT max(seq) FROM ${n.waiter}) >= ${limit} THEN
    IF (SELECT seqmin FROM pg_catalog.pg_sequence WHERE seqrelid = ${literal(n.fencingSequence)}::regclass) < ${SEQUENCE_FLOOR} THEN
      RAISE EXCEPTION 'nest-pg-lease: % holds fencing tokens of timeline 128 or more in the 40-bit layout, which the 47-bit layout cannot order new tokens above; see docs/failover.md, "Fencing token layout"', ${literal(n.lease)};
    END IF;
  END IF;${move(n.fencingSequence)}${move(n.waiterSequence)}
END
$layout$`;
}

/** The GRANTs a least-privileged application role needs, run by the owner of the lease objects. */
export function grantStatements(names: LeaseNames, role: string): string[] {
  const n = leaseObjectNames(names);
  const to = quoteIdentifier(role);
  return [
    `GRANT USAGE ON SCHEMA ${n.schema} TO ${to}`,
    `GRANT SELECT, INSERT, UPDATE, DELETE ON ${n.lease}, ${n.waiter}, ${n.result} TO ${to}`,
    `GRANT USAGE ON SEQUENCE ${n.fencingSequence}, ${n.waiterSequence} TO ${to}`,
    // The operator's tables: journal rows are written by every process, drains read by every process.
    `GRANT SELECT, INSERT, DELETE ON ${n.audit}, ${n.drain}, ${n.journal} TO ${to}`,
  ];
}

export function dropSchemaStatements(names: LeaseNames): string[] {
  const n = leaseObjectNames(names);
  return [
    `DROP TABLE IF EXISTS ${n.result}`,
    `DROP TABLE IF EXISTS ${n.waiter}`,
    `DROP SEQUENCE IF EXISTS ${n.waiterSequence}`,
    `DROP TABLE IF EXISTS ${n.lease}`,
    `DROP SEQUENCE IF EXISTS ${n.fencingSequence}`,
  ];
}

function entityColumns(table: Table): Record<string, EntitySchemaColumnOptions> {
  return Object.fromEntries(
    table.columns.map((column): [string, EntitySchemaColumnOptions] => [
      column.property,
      {
        name: column.name,
        type: column.type,
        ...(column.primary ? { primary: true } : {}),
        ...(column.nullable ? { nullable: true } : {}),
        ...(column.default !== undefined ? { default: column.default } : {}),
      },
    ]),
  );
}

function entityChecks(tableName: string, table: Table) {
  return table.columns
    .filter((column) => column.check)
    .map((column) => ({ name: columnCheckName(tableName, column.name), expression: column.check! }));
}

/**
 * TypeORM entity schemas of the two tables, with their CHECK constraints and the order index, so a DataSource knows
 * them and its schema diff (`synchronize`, `migration:generate`) finds nothing to change after the migration.
 */
export function leaseEntitySchemas<L, W>(names: LeaseNames): [EntitySchema<L>, EntitySchema<W>] {
  const { schema, tableName, waiterTableName } = names;
  const property = (column: string) => WAITER_TABLE.columns.find((c) => c.name === column)!.property;
  const lease = new EntitySchema<L>({
    name: `LeaseRow:${schema}.${tableName}`,
    tableName,
    schema,
    columns: entityColumns(LEASE_TABLE),
    checks: entityChecks(tableName, LEASE_TABLE),
  });
  const waiter = new EntitySchema<W>({
    name: `LeaseWaiterRow:${schema}.${waiterTableName}`,
    tableName: waiterTableName,
    schema,
    columns: entityColumns(WAITER_TABLE),
    checks: entityChecks(waiterTableName, WAITER_TABLE),
    indices: [{ name: `${waiterTableName}_order_idx`, columns: WAITER_ORDER.columns.map(property) as never }],
  });
  return [lease, waiter];
}

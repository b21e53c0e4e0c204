/**
 * Every message of the library's errors, in one place, so the wording (and its advice) can be read and kept
 * consistent (the classes are the API, the wording may improve). Private. The log lines' texts are still written
 * where they are logged (see the redesign notes: left for later).
 */
import { types } from 'node:util';
import type { LeaseLossReason } from '../interfaces/lease-loss-reason.interface.js';

const lossCauses: Record<LeaseLossReason, string> = {
  'taken-over': 'another holder took it over',
  'renewal-deadline': 'its renewals could not be confirmed before the safety deadline',
  released: 'it was already released',
  failover: 'the database failed over since it was acquired',
  'released-by-operator': 'an operator force-released it',
  preempted: 'a caller of higher priority preempted it',
};

/** Why a lease was lost, as a client of the interrupted work is told (no option, no internal mechanism named). */
const clientLossCauses: Record<LeaseLossReason, string> = {
  'taken-over': 'another instance took it over',
  'renewal-deadline': 'the service lost touch with its database',
  released: 'it had ended already',
  failover: 'the database failed over',
  'released-by-operator': 'an operator stopped it',
  preempted: 'more urgent work took its place',
};

/** The messages, by what they are about. */
export const messages = {
  busy: (targetKey: string) =>
    `Target "${targetKey}" is leased by another holder: try again later, or wait in line (onBusy: 'wait', or ` +
    'acquire())',
  slotsBusy: (targetKey: string, limit: number) =>
    `All ${limit} slots of "${targetKey}" are held: try again later, or wait in line for one (onBusy: 'wait', or ` +
    'acquire())',
  queueFull: (targetKey: string, detail: string) => `Cannot wait for "${targetKey}": ${detail}`,
  drained: (targetKey: string, kind: 'key' | 'template', subject: string, reason: string) =>
    `Target "${targetKey}" is drained (${kind === 'key' ? 'the key' : `its template "${subject}"`}: ${reason}): no ` +
    'new acquisition is granted until an operator undrains it',
  // What a client is told (the `message` of HTTP, WebSocket, RPC and GraphQL answers, transport/lease-answers.ts):
  // what happened and when to try again. Never which option the developer could change: that advice is the error's
  // own message, which goes to the log (transport/answer-advice.ts), once per key and kind per period.
  answerBusy: (targetKey: string, seconds: number) =>
    `"${targetKey}" is busy: another request is working on it. Try again in ${seconds} s`,
  answerSlotsBusy: (targetKey: string, limit: number, seconds: number) =>
    `All ${limit} slots of "${targetKey}" are in use. Try again in ${seconds} s`,
  answerLineFull: (targetKey: string, seconds: number) =>
    `Too many requests are waiting for "${targetKey}". Try again in ${seconds} s`,
  answerDrained: (targetKey: string, seconds: number) =>
    `"${targetKey}" is paused by an operator. Try again in ${seconds} s`,
  answerLost: (targetKey: string, reason: LeaseLossReason) =>
    `The work on "${targetKey}" was interrupted before it completed (${clientLossCauses[reason]}) and its result ` +
    'was discarded: the request may be sent again',
  answerWaitTimeout: (targetKey: string, waitedMs: number, seconds: number) =>
    `Waited ${waitedMs} ms for a turn on "${targetKey}" without getting one. Try again in ${seconds} s`,
  answerUnavailable: (targetKey: string | undefined, seconds: number) =>
    `${targetKey === undefined ? 'The request' : `"${targetKey}"`} cannot be served now: the service's database ` +
    `is unavailable. Try again in ${seconds} s`,
  answerShutdown: (seconds: number) =>
    `This instance is shutting down. Try again in ${seconds} s: another instance, or this one restarted, can serve ` +
    'the request',
  answerInternal: () => 'Internal server error',
  /** The log line of an answer's developer advice (transport/answer-advice.ts). */
  answerAdvice: (status: number, message: string, periodSeconds: number) =>
    `Answered ${status}: ${message} (the client was told what happened and when to retry; this advice is logged once ` +
    `per key and error every ${periodSeconds} s)`,
  operatorRightsMissing: (detail: string) =>
    `The operator's tables are out of this role's rights (${detail}): as their owner, run the GRANT of the docs ` +
    'page docs/privileges.md ("Database privileges")',
  operatorTablesMissing: (table: string) =>
    `The operator's tables are missing (${table}): run the library's migrations (leaseMigrations includes ` +
    'CreateLeaseConsoleTables) or set createSchema',
  operatorTemplateNotBoolean: (got: string) => `template must be a boolean, got ${got}`,
  operatorLimit: (max: number, got: string) => `limit must be an integer from 1 to ${max}, got ${got}`,
  consoleNeedsGuard: () =>
    "LeaseConsoleModule.forRoot({ actions: true }) needs a guard: the actions stop other holders' work, so they are " +
    'never mounted unauthenticated. Pass guard: a CanActivate class or instance that authenticates the operator',
  consolePath: (got: string) => `LeaseConsoleModule path must be a non-empty string, got ${got}`,
  // The operator's console (LeaseConsoleModule): its options, and its refusals of cross-site write requests.
  consoleNeedsGuardOrPublic: () =>
    'LeaseConsoleModule.forRoot() needs a guard: its routes show every key and its holder to whoever reaches them ' +
    '(keys may be personal data). Pass guard: a CanActivate class or instance that authenticates the operator, or ' +
    'public: true to serve the reads unauthenticated on purpose (a network only operators reach)',
  consolePublicWithGuard: () =>
    'LeaseConsoleModule.forRoot(): guard and public: true contradict each other (public mounts the routes without ' +
    'a guard): keep the guard and drop public',
  consoleOption: (name: string, expected: string, got: string) =>
    `LeaseConsoleModule option ${name} must be ${expected}, got ${got}`,
  consoleTrustedOrigins: (got: string) =>
    'LeaseConsoleModule option trustedOrigins must be a list of origins, each scheme://host[:port] with http or ' +
    `https and no path (e.g. https://admin.example.com), got ${got}`,
  consolePage: (got: string) =>
    'LeaseConsoleModule option page must be true, false or { headers: [...] } naming request headers a page may ' +
    "send (e.g. { headers: ['authorization'] }; not cookie, content-type, origin, host or another header the " +
    `browser sets itself), got ${got}`,
  consoleForeignOrigin: (origin: string) =>
    `Refused: the console's actions take a request from its own origin only, and this one came from origin ` +
    `${origin} (a page of another origin must not act with the operator's session: CSRF). Nothing was done. An ` +
    'admin page on another origin, or a proxy that rewrites Host: list its origin in trustedOrigins',
  consoleForeignSite: (site: string, origin: string | undefined) =>
    `Refused: the console's actions take a request from its own origin only, and the browser says this one came ` +
    `from another (Sec-Fetch-Site: ${site}${origin === undefined ? '' : `, origin ${origin}`}): a page of another ` +
    "origin must not act with the operator's session (CSRF). Nothing was done. An admin page on another origin: " +
    'list its origin in trustedOrigins',
  consoleNotJson: (type: string) =>
    `The console's actions take a JSON body only (Content-Type: application/json), got ${type}: a form or ` +
    'text/plain post is what a page of another origin can send without asking. Nothing was done',
  operatorInput: (name: string, got: string) =>
    `${name} must be a non-empty string of at most 1000 characters, got ${got}`,
  /**
   * Fencing guarantees one thing: this lease's fenced writes are refused from now on. Work done outside a fenced
   * write (a call to another system, a file) was not prevented, so the message does not claim it.
   */
  lost: (targetKey: string, reason: LeaseLossReason, detail?: string) =>
    `Lease on "${targetKey}" was lost (${lossCauses[reason]}${detail ? `: ${detail}` : ''}): its fenced writes are ` +
    'refused (a refused fenced write committed nothing); work done outside fenced writes was not undone — make it ' +
    'idempotent or fence it with lease.fencingToken',
  waitTimeout: (targetKey: string, waitTimeoutMs: number) =>
    `Gave up waiting for "${targetKey}" after ${waitTimeoutMs} ms: raise the policy's timeoutMs (or ` +
    'timing.defaultWaitTimeoutMs) or the priority, or try later',
  readOnly: (targetKey: string | undefined, detail: string) =>
    `No lease${targetKey === undefined ? '' : ` on "${targetKey}"`} can be granted now: the database server ` +
    `accepts no writes (${detail}) — a standby in recovery, or a failover under way. Point the application at the ` +
    "primary (a multi-host URL with target_session_attrs=read-write, or the cluster's read-write endpoint), then retry",
  databaseFailing: (targetKey: string | undefined, operation: string, detail: string) =>
    `Could not ${operation}${targetKey === undefined ? '' : ` "${targetKey}"`}: the database is unreachable or ` +
    `failing (${detail}). Transient: retry later; if it lasts, check the database and the connection settings`,
  shutdown: (what: 'leases' | 'waits' | 'cancelled' | 'released') =>
    what === 'cancelled'
      ? 'LeaseService is shutting down: the wait was cancelled (its waiter row is removed)'
      : what === 'released'
        ? 'LeaseService is shutting down: the lease was released and its work told to stop (retry: another ' +
          'instance can serve it)'
        : `LeaseService is shut down: no new ${what} (the application is closing; acquire before shutdown begins)`,
  durationArgument: (path: string, got: unknown) =>
    `${path} must be a non-negative integer of at most 2147483647 (about 24.8 days), got ${describeValue(got)}`,
  holdArgument: (got: unknown) =>
    'holdAtLeastMs must be a non-negative integer number of milliseconds (at most 2147483647), got ' +
    (typeof got === 'string' ? JSON.stringify(got) : String(got)),
  leaseTimeoutArgument: (got: unknown) =>
    'leaseTimeoutMs must be a positive integer number of milliseconds (at most 2147483647), got ' +
    (typeof got === 'string' ? JSON.stringify(got) : String(got)),
  leaseTimeoutBelowFloor: (
    leaseTimeoutMs: number,
    floorMs: number,
    rule: 'heartbeat' | 'margin' | 'fenced',
    o: { heartbeatIntervalMs: number; safetyMarginMs: number; fencedIdleTimeoutMs: number },
  ) =>
    `leaseTimeoutMs (${leaseTimeoutMs}) must be at least ${floorMs} under this module’s timing: ` +
    {
      heartbeat:
        `3 × heartbeatIntervalMs ${o.heartbeatIntervalMs}, so a late heartbeat is not taken for a dead holder ` +
        '(the heartbeat interval is the process’s, for every lease). Ask a longer lease, or shorten ' +
        'timing.heartbeatIntervalMs',
      margin:
        `safetyMarginMs ${o.safetyMarginMs} + 2 × heartbeatIntervalMs ${o.heartbeatIntervalMs}, so a renewal (or ` +
        'its retry) is confirmed before the local deadline. Ask a longer lease, or lower timing.safetyMarginMs',
      fenced:
        `(fencedIdleTimeoutMs ${o.fencedIdleTimeoutMs} + safetyMarginMs ${o.safetyMarginMs} + 2 × ` +
        `heartbeatIntervalMs ${o.heartbeatIntervalMs}) / 2, so a takeover blocked behind a paused fenced ` +
        'transaction still gets a usable lease. Ask a longer lease, or lower timing.fencedIdleTimeoutMs',
    }[rule],
  fencedOptionsArgument: (got: unknown) =>
    `fenced() options must be an object whose release is a boolean, got ${describeValue(got)}`,
  memoryForceRelease: () =>
    'LeaseOperator.forceRelease needs PostgreSQL (the grant and its audit row end in one statement): the ' +
    'in-memory service of nest-pg-lease/testing does not model it; end a grant there with the controls (free, lose)',
  operatorNeedsEngine: () =>
    'LeaseOperator works on a LeaseService made by LeaseModule, new LeaseService() or nest-pg-lease/testing',
  releaseInOpenFence: () =>
    'fenced(work, { release: true }) inside an open fenced() of the same lease: the release must ride on the ' +
    'outermost transaction (call it there), or it would commit before the outer work',
  releaseOfBorrowedLease: () =>
    'fenced(work, { release: true }) on the lease of a reentrant call: the outer call that acquired the lease ' +
    'releases it (call it there)',
  priorityArgument: (got: unknown) =>
    `priority must be an integer between -2147483648 and 2147483647, got ${String(got)}`,
  sequenceExhausted: (sequence: string) =>
    `The sequence ${sequence} has passed 2^47 (or the server's timeline 2^16): nest-pg-lease refuses to hand out ` +
    'numbers that would overflow into the timeline bits of its fencing tokens, and nothing was written. Tokens ' +
    'cannot grow further in these tables: move to new ones (tableName, waiterTableName) and let downstream systems ' +
    'that compare fencing tokens start afresh; see docs/failover.md (fencing token layout)',
  batchOutOfOrder: (index: number) =>
    `nest-pg-lease: a batch answered out of order at row ${index} (a bug: please report it)`,
  processLineFull: (waiting: number) => `this process already has ${waiting} waiting calls (maxWaitersPerProcess)`,
  targetLineFull: (max: number) => `it already has ${max} live waiters (maxWaitersPerTarget)`,
  /** The log line of a lost lease (a warning, not an error's message). */
  leaseLost: (targetKey: string, fencingToken: bigint, reason: Exclude<LeaseLossReason, 'released'>, detail?: string) =>
    `Lost lease on "${targetKey}" (fencing token ${fencingToken}): ${
      {
        'taken-over': 'another holder took it over',
        'renewal-deadline': 'no renewal confirmed before the safety deadline',
        failover: `the database failed over since it was acquired (${detail ?? 'another history'}); its row may be gone`,
        'released-by-operator': 'an operator force-released it (see the audit table)',
        preempted: 'a caller of higher priority preempts it: stop the work, its fenced writes are refused',
      }[reason]
    }`,
  grantPastDeadline: (localLimitMs: number) => `the grant arrived after its local deadline (${localLimitMs} ms)`,
  // Configuration, declaration and bootstrap errors (LeaseConfigError), and the call-input errors of keys.
  positiveInteger: (name: string | number, max: string | number, v3: string | number) =>
    `${name} must be a positive integer (at most ${max}), got ${v3}`,
  nonNegativeInteger: (name: string, max: number, got: string) =>
    `${name} must be an integer from 0 to ${max}, got ${got}`,
  fencedIdleTimeoutTooLong: (timeout: string | number, max: string | number) =>
    `timing.fencedIdleTimeoutMs (${timeout}) must be at most 2 × leaseTimeoutMs − safetyMarginMs − 2 × ` +
    `heartbeatIntervalMs (${max}): a takeover blocked behind a paused fenced transaction for longer would ` +
    'receive a lease already past its deadline',
  optionsNotObject: () => 'LeaseModule options must be an object',
  unknownOption: (key: string, nearest: string | undefined, keys: string) =>
    nearest === undefined
      ? `Unknown LeaseModule option "${key}": the options are ${keys}`
      : `Unknown LeaseModule option "${key}": did you mean "${nearest}"?`,
  optionGroupNotObject: (group: string, got: string) =>
    `LeaseModule option ${group} must be an object (a group of options), got ${got}`,
  leaseTimeoutTooShort: (leaseTimeoutMs: string | number, heartbeatIntervalMs: string | number, v3: string | number) =>
    `timing.leaseTimeoutMs (${leaseTimeoutMs}) must be at least 3 × heartbeatIntervalMs (${heartbeatIntervalMs}) = ` +
    `${v3}: raise the timeout or shorten the interval, so that a late heartbeat is not ` +
    'taken for a dead holder',
  safetyMarginTooLarge: (
    safetyMarginMs: string | number,
    heartbeatIntervalMs: string | number,
    leaseTimeoutMs: string | number,
    v4: string | number,
  ) =>
    `timing.safetyMarginMs (${safetyMarginMs}) leaves less than two heartbeatIntervalMs (${heartbeatIntervalMs}) ` +
    `before the local deadline (leaseTimeoutMs ${leaseTimeoutMs} − safetyMarginMs): lower the margin to at ` +
    `most ${v4}`,
  asyncReleaseCommitsNotBoolean: () => 'connections.asyncReleaseCommits must be a boolean',
  waiterTimeoutTooShort: (waiterTimeoutMs: string | number) =>
    `timing.waiterTimeoutMs (${waiterTimeoutMs}) must be at least 30 ms`,
  ownerEmpty: () => 'owner must be a non-empty string when given',
  ownerNul: () => 'owner must not contain NUL characters: choose a printable process identity',
  ownerLoneSurrogate: () => 'owner must be well-formed UTF-16 (it contains a lone surrogate)',
  notifyNotBoolean: () => 'connections.notify must be a boolean',
  traceTargetKeysNotBoolean: () => 'observability.traceTargetKeys must be a boolean',
  journalNotBoolean: () => 'observability.journal must be a boolean',
  keyTemplateInvalid: (got: string | number) =>
    `keyTemplate must be a non-empty string of at most 255 characters, got ${got}`,
  poolerUnknown: (v1: string | number) => `connections.pooler must be 'none' or 'transaction', got ${v1}`,
  sessionUrlEmpty: () => 'connections.sessionUrl must be a non-empty connection string when given',
  notifyBehindBlindPooler: () =>
    "connections.notify: true cannot work behind pooler: 'transaction' without sessionUrl (LISTEN through a " +
    'transaction pooler never delivers): give sessionUrl (a direct or session-mode connection string), or leave ' +
    'notify unset',
  dataSourceNameEmpty: () => 'connections.dataSourceName must be a non-empty string when given',
  dataSourceNotObject: () => 'connections.dataSource must be TypeORM DataSource options (an object) when given',
  identifierEmpty: (name: string | number, v2: string | number) => `${name} must be a non-empty string, got ${v2}`,
  identifierNul: (name: string | number) => `${name} must not contain NUL characters`,
  identifierTooLong: (
    name: string | number,
    value: string | number,
    bytes: string | number,
    room: string | number,
    IDENTIFIER_MAX_BYTES: string | number,
  ) =>
    `${name} "${value}" is ${bytes} bytes; at most ${room} fit (PostgreSQL identifiers are at most ` +
    `${IDENTIFIER_MAX_BYTES} bytes, including suffixes for sequences and indexes): choose a shorter name`,
  derivedNamesCollide: (v1: string | number, what: string | number, name: string | number) =>
    `${v1} collides with ${what} (both are "${name}"): ` + `choose table names that are not each other's derived names`,
  namesNotObject: () => 'The lease table names must be an object: { schema, tableName, waiterTableName }',
  tableNamesEqual: (tableName: string | number) =>
    `tableName and waiterTableName must differ (both are "${tableName}")`,
  keyNotString: (v1: string | number) => `A target key must be a string, got ${v1}`,
  keyEmpty: () => 'A target key must not be empty: name the work, e.g. "report:user:42"',
  keyNul: () => 'A target key must not contain NUL characters',
  limitArgument: (got: unknown, max: number) =>
    `limit must be an integer between 1 and ${max} (how many may hold the key at once), got ${String(got)}`,
  limitWithSingleHolderOption: (option: string) =>
    `limit above 1 cannot be combined with ${option}: both need a single holder of the key`,
  slotLimitUnmigrated: (tableName: string) =>
    `The lease table "${tableName}" has no slot_limit column, which semaphores (limit above 1) need: run the ` +
    'AddLeaseSlotLimit migration of leaseMigrations (or start once with createSchema: true)',
  limitConflict: (targetKey: string, asked: number, held: number) =>
    `"${targetKey}" is held ${limitName(held)}, but this call asked ${limitName(asked)}: every caller of one key must ` +
    'ask the same limit (declare it once, e.g. as a constant next to the key template), or every one a mode; a ' +
    'call without limit or mode asks limit 1',
  modeArgument: (got: unknown) => `mode must be 'shared' or 'exclusive', got ${describeValue(got)}`,
  modeWith: (option: string) =>
    `mode (a read-write lease) cannot be combined with ${option}: a read-write key's holders are its readers and its ` +
    'writer (docs/read-write.md)',
  sharedNotUpgraded: (targetKey: string) =>
    `This call chain holds "${targetKey}" in shared mode: a nested call of the key cannot ask more than a reader's ` +
    'lease (no upgrade: release the reader, then acquire the writer)',
  readWriteBusy: (targetKey: string, mode: 'shared' | 'exclusive') =>
    mode === 'shared'
      ? `"${targetKey}" is held by a writer, or a writer waits ahead: try again later, or wait in line (onBusy: 'wait')`
      : `"${targetKey}" is held by readers or a writer: try again later, or wait in line (onBusy: 'wait')`,
  keyLoneSurrogate: () =>
    'A target key must be well-formed UTF-16 (it contains a lone surrogate, half of an emoji or similar): ' +
    'build keys from whole characters',
  keyTooLong: (MAX_TARGET_KEY_BYTES: string | number, bytes: string | number) =>
    `A target key must be at most ${MAX_TARGET_KEY_BYTES} bytes of UTF-8, got ${bytes}: ` +
    'hash long identifiers into the key',
  declared: (decorator: string, message: string) => `${decorator} ${message}`,
  leaderDeclared: (label: string | number, message: string | number) => `@LeaderElection on ${label}: ${message}`,
  stickyNeedsFixedKey: () =>
    '@Sticky needs a fixed key (a string without placeholders, not a key function): one owner keeps one key',
  exclusiveKeyMissing: () => '@Exclusive needs a key template such as "report:{id}" or a function returning the key',
  callOptionsNotObject: (door: string, got: string) => `${door} options must be an object, got ${got}`,
  unknownCallOption: (door: string, key: string, hint: string) => `${door}: unknown option "${key}": ${hint}`,
  onBusyInvalid: (door: string, forms: string, got: string) => `${door}: onBusy must be one of ${forms}; got ${got}`,
  policyNotObject: (name: string, fields: string, got: string) =>
    `onBusy: { ${name}: … } takes an object ({ ${fields} }), got ${got}`,
  unknownPolicyField: (name: string, field: string, hint: string) =>
    `onBusy: { ${name}: … } has no field "${field}": ${hint}`,
  joinObservable: (label: string) =>
    `@Exclusive on ${label} (onBusy: 'join') returned an Observable: a joined run shares one value — return a Promise`,
  joinResultNotJson: (targetKey: string, detail: string) =>
    `The run on "${targetKey}" (onBusy: 'join') returned a value that is not JSON (${detail}): calls that join it, ` +
    'in this process or another, receive its value as JSON — return plain data (strings for BigInts and dates)',
  notPostgres: (v1: string | number, advice: string | number) =>
    `nest-pg-lease needs a PostgreSQL DataSource (type "postgres"), got "${v1}": ${advice}`,
  dataSourceAndName: () =>
    'Give either connections.dataSource (the module creates its own) or connections.dataSourceName (reuse one), ' +
    'not both',
  dataSourceNotFound: (v1: string | number, v2: string | number) =>
    `No TypeORM DataSource ${v1} found: import ` +
    `TypeOrmModule.forRoot(...)${v2}, or pass dataSource options to ` +
    'LeaseModule.forRoot() so it creates its own',
  serviceNotInitialized: () => 'LeaseService is not initialized: call init() (Nest does it at bootstrap) first',
  isolationLevelUnknown: (level: string) =>
    `The DataSource's isolationLevel "${level}" is not one of PostgreSQL's: use READ COMMITTED, REPEATABLE READ ` +
    'or SERIALIZABLE (or leave it unset for the server default)',
  dataSourceNotInitialized: () =>
    'The DataSource is not initialized: initialize it (or let Nest do it) before using leases',
  tablesMissing: (v1: string | number) =>
    `Lease tables are missing (${v1}): add leaseMigrations to your DataSource's migrations and ` +
    'run them, or set createSchema: true',
  joinResultsMissing: (table: string, statement: string) =>
    `The join result table ${table} is missing (an installation older than onBusy: 'join'): run leaseMigrations ` +
    '(its migration AddLeaseJoinResults), set createSchema: true, or, as the owner of the lease tables, run: ' +
    statement,
  preemptionMissing: (table: string, migration: string, statement: string) =>
    `The lease table ${table} has no preempt_of column (an installation older than onBusy: 'preempt'): run ` +
    `leaseMigrations (its migration ${migration}), set createSchema: true, or, as the owner of the lease tables, run: ` +
    statement,
  slotColumnMissing: (table: string, migration: string, statement: string) =>
    `The lease table ${table} has no slot column (an installation older than the slot column, whose semaphore ` +
    `slots are rows named <key>\\u001f<slot>): run leaseMigrations (its migration ${migration}, which converts the ` +
    `rows), set createSchema: true, or, as the owner of the lease tables, run: ${statement}`,
  sequencesMissing: (sequences: string, statements: string) =>
    `The lease tables exist but the sequences ${sequences} are missing: the tables were built by TypeORM's ` +
    'synchronize: true from leaseEntities before leaseMigrations ran (entities cannot declare sequences). Set ' +
    'createSchema: true (it creates only what is missing), or, as the owner of the lease tables, run: ' +
    statements,
  tokenLayoutMissing: (sequences: string, migration: string, statement: string) =>
    `The sequences ${sequences} are of the 40-bit fencing token layout of an earlier nest-pg-lease (tokens ` +
    '(timeline << 40) | n): this version draws (timeline << 47) | n from sequences that start at 2^40. Stop every ' +
    `process of an earlier version, then run the migration ${migration} (in leaseMigrations / ` +
    'createLeaseMigrations()), or set createSchema: true, or, as the owner of the lease tables, run: ' +
    statement,
  createSchemaNotAllowed: (role: string | number, schema: string | number) =>
    `createSchema: the lease tables are missing and the role "${role}" lacks CREATE on schema ` +
    `"${schema}": run leaseMigrations as the schema's owner and grant this role the rights listed ` +
    'in docs/privileges.md ("Database privileges"), or grant it CREATE on the schema',
  privilegesMissing: (role: string | number, v2: string | number, v3: string | number) =>
    `The database role "${role}" lacks rights nest-pg-lease needs: ${v2}. ` +
    `As the owner of the lease tables, run: ${v3}`,
  placeholderPositionUndeclared: (label: string | number, name: string | number, index: string | number) =>
    `@Exclusive on ${label}: placeholder {${name}} names argument ${index}, ` +
    'which the handler does not declare with a parameter decorator',
  placeholderAmbiguous: (label: string | number, name: string | number, sources: string | number) =>
    `@Exclusive on ${label}: placeholder {${name}} is ambiguous: ${sources} all declare it; ` +
    'name the argument by position ({0}, {1}, …) or rename one',
  placeholderUndeclared: (label: string | number, name: string | number, alternatives: string | number) =>
    `@Exclusive on ${label}: placeholder {${name}} names no parameter of the handler; ` +
    `declare it with ${alternatives}`,
  keyFunctionNotString: (label: string | number, v2: string | number) =>
    `The @Exclusive key function of ${label} returned ${v2}, not a string`,
  placeholderEmpty: (template: string | number, name: string | number) =>
    `Key template "${template}": placeholder {${name}} resolved to nothing`,
  moduleImportedTwice: () =>
    'LeaseModule is imported more than once in this application (two LeaseModule.forRoot / forRootAsync): ' +
    'import it once, in the root module — it is global, so every module can inject LeaseService — and give ' +
    'other lease tables a service of their own (new LeaseService(dataSource, options))',
  noServiceRunning: (label: string | number) =>
    `@Exclusive on ${label}: no LeaseService is running; import LeaseModule.forRoot() in the application`,
  instanceOfNoApplication: (label: string | number, v2: string | number, v3: string | number, v4: string | number) =>
    `@Exclusive on ${label}: ${v2} of the ${v3} Nest applications ` +
    `of this process provide${v4} this instance, and no application's injector made ` +
    'it; call it on an instance the application created (app.get(…), app.resolve(…))',
  exclusiveNotOnMethod: (decorator: string, name: string) => `${decorator} goes on a method; ${name} is not one`,
  templateNeverValid: (decorator: string, label: string, message: string) =>
    `${decorator} on ${label}: its key template can never make a valid key: ${message}`,
  declaredOn: (decorator: string, label: string, message: string) => `${decorator} on ${label}: ${message}`,
  skipOnHttpHandler: (decorator: string, label: string, onBusy: string) =>
    `${decorator} on ${label}: onBusy '${onBusy}' ` +
    (onBusy === 'wait' ? 'skips the call on an instance that does not own the key, which ' : '') +
    'is for provider methods and message handlers; an HTTP handler answers 409 (with Retry-After) when the ' +
    "target is busy. Use onBusy 'throw', or call a provider method that has it",
  noLeaseRow: (helper: string, targetKey: string) =>
    `${helper}: no lease row for "${targetKey}" (acquire the lease first)`,
  noTestRunnerHooks: (helper: string) =>
    `${helper} needs the test runner's global beforeAll/afterAll (Jest; Vitest with globals)`,
  noTestServer: (helper: string) =>
    `${helper} needs a PostgreSQL server: set DATABASE_URL (a server of yours, a CI service, one testcontainers ` +
    'starts) or pass { serverUrl }',
  // Several keys at once (docs/multi-key.md).
  multiKeysNotArray: (got: string) => `run() of several keys takes a non-empty array of target keys, got ${got}`,
  multiKeysEmpty: () => 'run() of several keys takes at least one target key, got an empty array',
  multiKeysTooMany: (max: number, got: number) =>
    `run() of several keys takes at most ${max} target keys, got ${got}: split the work, or lock a parent key`,
  multiKeyDuplicate: (targetKey: string) =>
    `run() of several keys names "${targetKey}" twice: name each key once (the set is acquired all or none)`,
  multiKeyOption: (what: string) =>
    `run() of several keys takes onBusy 'throw' (the default) or 'wait' with one holder per key, got ${what}: ` +
    'a set of keys has no one run to join and no one holder to preempt',
  multiFenceBorrowed: (targetKey: string) =>
    `fenced() of several keys needs every lease taken by its own run(): "${targetKey}" is borrowed from an ` +
    'outer call; call fenced() of that lease there',
  multiFenceNested: (targetKey: string) =>
    `fenced() of several keys cannot open inside an open fenced() of "${targetKey}" (its row is locked by that ` +
    'transaction): call it outside, or write in the open one',
  multiFenceOptions: () => 'fenced() of several keys takes no options (no release rides on its commit)',
  multiKeyObservable: (label: string) =>
    `@Exclusive with several keys on ${label}: the method returned an Observable; return a value or a Promise`,
};

/** An error (or any thrown value) as one line of a log message. */
export function errorText(error: unknown): string {
  // Of any realm: Node's own errors are not `instanceof Error` in a vm context (a Jest suite).
  if (error instanceof Error || types.isNativeError(error)) return `${error.name}: ${error.message}`;
  return typeof error === 'string' ? error : (JSON.stringify(error) ?? typeof error);
}

/** A limit as the conflict names it: a semaphore's, a single holder's, or a read-write mode (0, -1). */
function limitName(limit: number): string {
  if (limit === 0) return 'in shared mode';
  if (limit === -1) return 'in exclusive mode';
  return `with limit ${limit}`;
}

/** A value as JSON where it has one (a cycle, a function, undefined: its type). */
function describeValue(value: unknown): string {
  try {
    return JSON.stringify(value) ?? typeof value;
  } catch {
    return typeof value;
  }
}

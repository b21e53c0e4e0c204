// The dependency rules of libs/lease/src (issue 22), checked by `npm run lint` (`npm run lint:deps` alone). Folders
// are areas; these are the arrows allowed between them. Type-only imports count like any other: a type is a
// dependency of the design too.
const SRC = '^libs/lease/src/';
const area = (name) => `${SRC}${name}/`;

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'No cycles, of values or of types.',
      from: {},
      to: { circular: true },
    },
    {
      name: 'no-orphans',
      severity: 'error',
      comment: 'Every file of the library is reached from an entry point (index, internal, integrations) or a spec.',
      from: {
        orphan: true,
        path: SRC,
        pathNot: [
          '\\.spec\\.ts$',
          `${SRC}(index|internal)\\.ts$`,
          `${SRC}integrations/`,
          `${SRC}testing/index\\.ts$`,
          '\\.d\\.ts$',
        ],
      },
      to: {},
    },
    {
      name: 'store-not-above',
      severity: 'error',
      comment: 'The store runs statements: it never imports the engine, the door or the transport mapping.',
      from: { path: area('store') },
      to: { path: [area('engine'), area('exclusive'), area('transport')] },
    },
    {
      name: 'database-not-above',
      severity: 'error',
      comment: 'Connections and sessions never import the store, the engine or the door.',
      from: { path: area('database') },
      to: { path: [area('store'), area('engine'), area('exclusive'), area('transport')] },
    },
    {
      name: 'schema-below',
      severity: 'error',
      comment: 'The schema imports only options, errors and interfaces (and itself).',
      from: { path: area('schema') },
      to: { path: SRC, pathNot: [area('schema'), area('options'), area('errors'), area('interfaces')] },
    },
    {
      name: 'engine-not-door',
      severity: 'error',
      comment: 'The engine never imports the door, leader election (built on it) or the transport mapping.',
      from: { path: area('engine') },
      to: { path: [area('exclusive'), area('leader'), area('transport')] },
    },
    {
      name: 'core-through-contract',
      severity: 'error',
      comment:
        'The acquisition core (engine/) calls its backend only through core/backend.ts: it never imports the store ' +
        "or the database (SQL, connections, group commit are the PostgreSQL backend's).",
      from: { path: area('engine') },
      to: { path: [area('store'), area('database')] },
    },
    {
      name: 'core-builds-postgres-once',
      severity: 'error',
      comment:
        'Only lease-engine.ts names the PostgreSQL backend (the default backend of a DataSource); the core never ' +
        'names the memory backend (the testing kit builds the engine over it).',
      from: { path: area('engine'), pathNot: `${SRC}engine/lease-engine\\.ts$` },
      to: { path: [area('core/postgres'), area('core/memory')] },
    },
    {
      name: 'core-never-memory',
      severity: 'error',
      comment: "The memory backend is the testing kit's: the engine never imports it.",
      from: { path: area('engine') },
      to: { path: area('core/memory') },
    },
    {
      name: 'contract-is-types',
      severity: 'error',
      comment:
        "The contract (core/backend.ts) holds no code of a backend: it imports the store's row types only, " +
        'type-only, and nothing of the database, the engine or a backend.',
      from: { path: `${SRC}core/backend\\.ts$` },
      to: {
        path: SRC,
        pathNot: [
          `${SRC}store/(store\\.types|remote-joins|operator-store|preempt-store|semaphore-store)\\.ts$`,
          `${SRC}store/sql/statement-faults\\.ts$`,
          `${SRC}options/engine-settings\\.ts$`,
        ],
      },
    },
    {
      name: 'contract-types-only',
      severity: 'error',
      comment: 'What the contract takes from the store is types, never values.',
      from: { path: `${SRC}core/backend\\.ts$` },
      to: { path: area('store'), dependencyTypesNot: ['type-only'] },
    },
    {
      name: 'backend-not-core',
      severity: 'error',
      comment: 'A backend implements the contract; it never imports the core (engine/) or a door.',
      from: { path: [area('core/postgres'), area('core/memory')] },
      to: { path: [area('engine'), area('exclusive'), area('leader'), area('transport'), area('testing')] },
    },
    {
      name: 'memory-backend-no-sql',
      severity: 'error',
      comment: 'The memory backend knows the contract, not the store, the database or the PostgreSQL backend.',
      from: { path: area('core/memory') },
      to: { path: [area('store'), area('database'), area('core/postgres')] },
    },
    {
      name: 'store-below-contract',
      severity: 'error',
      comment: 'The store and the database never import the core area, the contract excepted.',
      from: { path: [area('store'), area('database')] },
      to: { path: area('core'), pathNot: `${SRC}core/backend\\.ts$` },
    },
    {
      name: 'leader-not-door',
      severity: 'error',
      comment: 'Leader election builds on the engine; the door (sticky @Exclusive) uses it, never the reverse.',
      from: { path: area('leader') },
      to: { path: [area('exclusive'), area('transport')] },
    },
    {
      name: 'observability-below',
      severity: 'error',
      comment: 'Traces and diagnostics channels know only the public types, errors, options and constants.',
      from: { path: area('observability') },
      to: {
        path: SRC,
        pathNot: [
          area('observability'),
          area('interfaces'),
          area('errors'),
          area('options'),
          `${SRC}lease\\.constants\\.ts$`,
        ],
      },
    },
    {
      name: 'errors-and-interfaces-alone',
      severity: 'error',
      comment: 'Errors and public types import only each other and options/limits.ts.',
      from: { path: [area('errors'), area('interfaces')] },
      to: { path: SRC, pathNot: [area('errors'), area('interfaces'), `${SRC}options/limits\\.ts$`] },
    },
    {
      name: 'testing-kit-aside',
      comment: 'The testing kit (nest-pg-lease/testing) uses the library; nothing of the library uses the kit.',
      severity: 'error',
      from: { path: SRC, pathNot: area('testing') },
      to: { path: area('testing') },
    },
    {
      name: 'only-entry-points-from-outside',
      severity: 'error',
      comment: 'Outside src, only index.ts, internal.ts, integrations/* and testing/index.ts are imported.',
      from: { pathNot: SRC },
      to: {
        path: SRC,
        pathNot: [`${SRC}(index|internal)\\.ts$`, `${SRC}integrations/[^/]+\\.ts$`, `${SRC}testing/index\\.ts$`],
      },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: ['(^|/)dist/', '^node_modules/', '^artifacts/', '^coverage/'] },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: {
      exportsFields: ['exports'],
      conditionNames: ['import', 'require', 'node', 'default', 'types'],
      extensions: ['.ts', '.js', '.mjs', '.cjs', '.d.ts'],
    },
    moduleSystems: ['es6', 'cjs'],
  },
};

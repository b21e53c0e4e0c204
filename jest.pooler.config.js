// The PgBouncer suite (`npm run test:pooler`): the library behind a real PgBouncer in transaction mode (Debian's
// `pgbouncer` package; .ci/run installs it). One file at a time: the scenarios hold leases across heartbeats.
import base from './jest.config.js';

/** @type {import('jest').Config} */
export default {
  ...base,
  testMatch: ['<rootDir>/test/pooler/**/*.pooler-spec.ts'],
  maxWorkers: 1,
  testTimeout: 120_000,
};

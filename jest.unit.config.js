// The unit tier: fast specs next to the code (libs/**/*.spec.ts) and the memory half of the lease contract, no
// PostgreSQL, no global setup. `npm run test:unit`.
// `npm test` (jest.config.js) runs them too, with everything else.
import base from './jest.config.js';

// CPU-bound specs: two workers, not the e2e tier's 3 (nothing here waits on a server). Jest's default (cores − 1)
// ran them in band on 2 cores: 15.3–15.5 s once the memory contract joined, against 12.5 s with two workers.
const { maxWorkers: _e2eWorkers, ...shared } = base;

/** @type {import('jest').Config} */
export default {
  ...shared,
  // The lease contract over the memory backend needs no PostgreSQL: it belongs here (test/contract/).
  testMatch: ['<rootDir>/libs/**/*.spec.ts', '<rootDir>/test/contract/memory.e2e-spec.ts'],
  globalSetup: undefined,
  globalTeardown: undefined,
  testTimeout: 10_000,
  maxWorkers: 2,
};

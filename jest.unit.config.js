// The unit tier: fast specs next to the code (libs/**/*.spec.ts), no PostgreSQL, no global setup. `npm run test:unit`.
// `npm test` (jest.config.js) runs them too, with everything else.
import base from './jest.config.js';

// CPU-bound specs: Jest's default worker count (cores − 1: in band on 2 cores), not the e2e tier's 3.
const { maxWorkers: _e2eWorkers, ...shared } = base;

/** @type {import('jest').Config} */
export default {
  ...shared,
  testMatch: ['<rootDir>/libs/**/*.spec.ts'],
  globalSetup: undefined,
  globalTeardown: undefined,
  testTimeout: 10_000,
};

// The fault suite (`npm run test:faults`): real worker processes, SIGSTOP/SIGKILL, killed backends, a TCP proxy and a
// PostgreSQL restart. One file at a time: the scenarios measure timing and must not compete with each other for CPU.
import base from './jest.config.js';

/** @type {import('jest').Config} */
export default {
  ...base,
  testMatch: ['<rootDir>/test/faults/**/*.fault-spec.ts'],
  globalSetup: '<rootDir>/test/faults/support/global-setup.js',
  globalTeardown: '<rootDir>/test/faults/support/global-teardown.js',
  maxWorkers: 1,
  testTimeout: 180_000,
};

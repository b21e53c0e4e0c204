// The failover suite (`npm run test:failover`): each scenario starts its own primary and streaming standby, crashes
// the primary and promotes the standby under load. One run at a time: the runs measure timing and load the CPU.
import base from './jest.config.js';

/** @type {import('jest').Config} */
export default {
  ...base,
  testMatch: ['<rootDir>/test/failover/**/*.failover-spec.ts'],
  globalSetup: '<rootDir>/test/failover/support/global-setup.js',
  globalTeardown: '<rootDir>/test/failover/support/global-teardown.js',
  maxWorkers: 1,
  testTimeout: 180_000,
};

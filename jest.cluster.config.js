// The cluster suite (`npm run test:cluster`): each scenario starts its own three-node Patroni cluster over etcd, the
// application behind HAProxy, and fails it over under load. One run at a time: the runs measure timing and load the CPU.
import base from './jest.config.js';

/** @type {import('jest').Config} */
export default {
  ...base,
  testMatch: ['<rootDir>/test/cluster/**/*.cluster-spec.ts'],
  globalSetup: '<rootDir>/test/cluster/support/global-setup.js',
  globalTeardown: '<rootDir>/test/cluster/support/global-teardown.js',
  maxWorkers: 1,
  testTimeout: 180_000,
};

// The unit tier: fast specs next to the code (libs/**/*.spec.ts) and the memory half of the lease contract, no
// PostgreSQL, no global setup. `npm run test:unit`.
// `npm test` (jest.config.js) runs them too, with everything else.
import base from './jest.config.js';

/** @type {import('jest').Config} */
export default {
  ...base,
  // Transpile only (the type check is `tsc --noEmit` in CI and `npm test`'s ts-jest): seconds, not a minute.
  transform: {
    '^.+\\.ts$': ['ts-jest', { useESM: true, tsconfig: 'tsconfig.unit.json' }],
  },
  // The lease contract over the memory backend needs no PostgreSQL: it belongs here (test/contract/).
  testMatch: ['<rootDir>/libs/**/*.spec.ts', '<rootDir>/test/contract/memory.e2e-spec.ts'],
  globalSetup: undefined,
  globalTeardown: undefined,
  testTimeout: 10_000,
};

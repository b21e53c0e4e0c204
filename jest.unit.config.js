// The unit tier: fast specs next to the code (libs/**/*.spec.ts), no PostgreSQL, no global setup. `npm run test:unit`.
// `npm test` (jest.config.js) runs them too, with everything else.
import base from './jest.config.js';

/** @type {import('jest').Config} */
export default {
  ...base,
  testMatch: ['<rootDir>/libs/**/*.spec.ts'],
  globalSetup: undefined,
  globalTeardown: undefined,
  testTimeout: 10_000,
};

// The lifecycle suite (`npm run test:lifecycle`): several Nest applications as child processes, SIGTERMed, SIGKILLed
// and SIGSTOPped around a drain, a leader election or a sticky scheduled job (issue 23); scheduled jobs on three
// processes with skewed clocks; the semaphores' model-based test (issue 30). Real timings (lease timeouts of
// seconds): kept out of `npm test` for its length, run by `.ci/run`.
import base from './jest.config.js';

/** @type {import('jest').Config} */
export default {
  ...base,
  testMatch: ['<rootDir>/test/**/*.lifecycle-spec.ts'],
  testTimeout: 180_000,
};

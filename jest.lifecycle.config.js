// The lifecycle suite (`npm run test:lifecycle`): several Nest applications as child processes, SIGTERMed, SIGKILLed
// and SIGSTOPped around a drain, a leader election or a sticky scheduled job (issue 23); scheduled jobs on three
// processes with skewed clocks; the semaphores' model-based test (issue 30). Real timings (lease timeouts of
// seconds): kept out of `npm test` for its length, run by `.ci/run`. Files side by side (the base config's 3 workers),
// each on a database of its own: their processes mostly wait on lease timeouts (124 s against 340 s one at a time).
import base from './jest.config.js';

/** @type {import('jest').Config} */
export default {
  ...base,
  testMatch: ['<rootDir>/test/**/*.lifecycle-spec.ts'],
  testTimeout: 180_000,
};

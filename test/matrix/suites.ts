/** What `npm run test:matrix` runs on each major (run.ts), and what statements.ts checks the smoke subset against. */

/** The four suites, for `--full`. */
export const FULL = ['test/lease', 'test/priority', 'test/exclusive', 'test/privilege'];

/**
 * The smoke subset: files that, between them, send every SQL statement of the library that the four suites send
 * but TypeORM's savepoints of a nested fenced() (checked with pg_stat_statements by statements.ts; what each file
 * covers: README.md here), in one to two minutes per major.
 */
export const SMOKE = [
  'test/lease/acquire.e2e-spec.ts',
  'test/lease/group-commit.e2e-spec.ts',
  'test/lease/fencing.e2e-spec.ts',
  'test/lease/history.e2e-spec.ts',
  'test/lease/migrations.e2e-spec.ts',
  'test/priority/barging.e2e-spec.ts',
  'test/priority/head-only.e2e-spec.ts',
  'test/privilege/least-privilege.e2e-spec.ts',
];

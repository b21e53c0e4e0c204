/**
 * A real PostgreSQL for this repository's tests, the demo and the benchmarks (not published: `nest-pg-lease/testing`
 * starts no server, its users bring their own). Compiled on its own (`npm ci`, `npm run build:harness`) so that plain
 * `node` scripts and Jest's global setup can load it before the library is built.
 */
export * from './embedded-postgres.js';

/**
 * A real PostgreSQL for this repository's tests, the demo and the benchmarks: the published testing kit's embedded
 * server (`nest-pg-lease/testing`), compiled here from its source so that plain `node` scripts and Jest's global
 * setup can load it before the library is built. After an edit there, `npm run build:harness`.
 */
export * from '../../lease/src/testing/embedded-postgres.js';

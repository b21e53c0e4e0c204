export default async function globalTeardown(): Promise<void> {
  await globalThis.__LEASE_TEST_PG__?.destroy();
}

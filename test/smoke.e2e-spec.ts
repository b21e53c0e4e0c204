import { createTestDatabase, startService } from './support/db.js';

test('smoke', async () => {
  const db = await createTestDatabase();
  const a = await startService(db.url);
  const b = await startService(db.url);
  const lease = await a.service.tryAcquire('k');
  expect(lease).not.toBeNull();
  expect(await b.service.tryAcquire('k')).toBeNull();
  await lease!.release();
  const again = await b.service.tryAcquire('k');
  expect(again!.fencingToken).toBeGreaterThan(lease!.fencingToken);
  await again!.fenced(async (m) => m.query('select 1'));
  await a.close(); await b.close(); await db.drop();
});

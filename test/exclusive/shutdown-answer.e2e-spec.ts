/**
 * Issue 28, item 6: shutdown (SIGTERM with `enableShutdownHooks()`, here `app.close()`) during a decorated request
 * answers 503 with Retry-After — the lease is released and its signal aborted with `LeaseShutdownError`, not a bare
 * AbortError that the client would hear as a 500.
 */
import { Controller, Param, Post } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { CurrentLease, Exclusive, type Lease, LeaseModule, leaseEntities } from 'nest-pg-lease';
import { eventually, FAST, useTestDatabase } from '../support/db.js';
import { Gate, post, startApp } from './fixtures.js';
import { mergeLeaseOptions } from '../../libs/lease/src/internal.js';

const entered = new Gate();

@Controller('work')
class WorkController {
  /** Slow work that passes the lease's signal on, as to `fetch`: it rejects with the signal's reason. */
  @Post(':id')
  @Exclusive('work:{id}')
  async work(@Param('id') id: string, @CurrentLease() lease: Lease) {
    entered.entered += 1;
    await new Promise((_, reject) =>
      lease.signal.addEventListener('abort', () => reject(lease.signal.reason as Error)),
    );
    return { id };
  }
}

describe('shutdown during a decorated request', () => {
  const db = useTestDatabase('shutdown-answer');

  test('answers 503 with Retry-After, naming the shutdown', async () => {
    const { app, url } = await startApp(
      [
        TypeOrmModule.forRoot({ type: 'postgres', url: db.url, entities: [...leaseEntities] }),
        LeaseModule.forRoot(mergeLeaseOptions(FAST, { tables: { createSchema: true } })),
      ],
      [WorkController],
    );
    let closed: Promise<void> | undefined;
    try {
      const answer = post(`${url}/work/1`);
      await eventually(
        () => entered.entered,
        (n) => n === 1,
        'the request to hold its lease',
      );
      closed = app.close();
      const { status, body, retryAfter } = await answer;
      expect(status).toBe(503);
      expect(retryAfter).not.toBeNull();
      expect(body).toMatchObject({ code: 'LeaseShutdownError', targetKey: 'work:1' });
    } finally {
      await (closed ?? app.close());
    }
  });
});

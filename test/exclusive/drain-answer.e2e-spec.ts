/**
 * Issue 23, part 1, over HTTP: Nest's `app.close()` runs `beforeApplicationShutdown` (the lease drain) while the HTTP
 * server still listens, and closes the server afterwards. A decorated request already running finishes with its normal
 * answer; one arriving during the drain answers 503 with Retry-After (`LeaseShutdownError`), not a hang or a reset.
 */
import { Controller, Param, Post } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { CurrentLease, Exclusive, type Lease, LeaseModule, leaseEntities } from 'nest-pg-lease';
import { eventually, FAST, useTestDatabase } from '../support/db.js';
import { Gate, post, startApp } from './fixtures.js';
import { mergeLeaseOptions } from '../../libs/lease/src/internal.js';

const gate = new Gate();

@Controller('work')
class WorkController {
  @Post(':id')
  @Exclusive('drain-answer:{id}')
  async work(@Param('id') id: string, @CurrentLease() lease: Lease) {
    gate.entered += 1;
    await gate.opened;
    return { id, aborted: lease.signal.aborted };
  }
}

describe('the drain during decorated HTTP requests', () => {
  const db = useTestDatabase('drain-answer');

  test('the running request gets its normal answer; a new one during the drain gets 503 + Retry-After', async () => {
    const { app, url } = await startApp(
      [
        TypeOrmModule.forRoot({ type: 'postgres', url: db.url, entities: [...leaseEntities] }),
        LeaseModule.forRoot(
          mergeLeaseOptions(FAST, { tables: { createSchema: true }, timing: { shutdownGraceMs: 30_000 } }),
        ),
      ],
      [WorkController],
    );
    let closed: Promise<void> | undefined;
    try {
      const running = post(`${url}/work/1`);
      await eventually(
        () => gate.entered,
        (n) => n === 1,
        'the request to hold its lease',
      );
      closed = app.close();
      const refused = await post(`${url}/work/2`);
      expect(refused.status).toBe(503);
      expect(refused.retryAfter).not.toBeNull();
      expect(refused.body).toMatchObject({ code: 'LeaseShutdownError', targetKey: 'drain-answer:2' });
      expect(gate.entered).toBe(1);
      gate.release();
      const answer = await running;
      expect(answer.status).toBe(201);
      expect(answer.body).toEqual({ id: '1', aborted: false });
      await closed;
    } finally {
      gate.release();
      await (closed ?? app.close());
    }
  });
});

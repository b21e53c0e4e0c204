/**
 * Issue 28, item 3: no lease outlives its caller, whatever the order of a timeout interceptor and `@Exclusive`.
 * Listed above `@Exclusive`, `@UseInterceptors(Timeout)` runs inside `@Exclusive`'s interceptor; listed below, outside
 * it. Either way the 408 releases the lease at once, while the handler's work (which ignores its signal) goes on.
 */
import {
  type CallHandler,
  Controller,
  Injectable,
  type NestInterceptor,
  Param,
  Post,
  RequestTimeoutException,
  UseInterceptors,
} from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { Exclusive, LeaseModule, leaseEntities } from 'nest-pg-lease';
import { catchError, type Observable, throwError, timeout, TimeoutError } from 'rxjs';
import { eventually, FAST, useTestDatabase } from '../support/db.js';
import { Gate, post, startApp } from './fixtures.js';
import { mergeLeaseOptions } from '../../libs/lease/src/internal.js';

@Injectable()
class TimeoutInterceptor implements NestInterceptor {
  intercept(_: unknown, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      timeout(300),
      catchError((error: unknown) =>
        throwError(() => (error instanceof TimeoutError ? new RequestTimeoutException() : error)),
      ),
    );
  }
}

const work = new Gate();

@Controller('order')
class OrderController {
  @Post('above/:id')
  @UseInterceptors(TimeoutInterceptor)
  @Exclusive('order:{id}')
  async above(@Param('id') id: string) {
    await work.opened;
    return { id };
  }

  @Post('below/:id')
  @Exclusive('order:{id}')
  @UseInterceptors(TimeoutInterceptor)
  async below(@Param('id') id: string) {
    await work.opened;
    return { id };
  }
}

describe('a timeout interceptor and @Exclusive, in either order', () => {
  const db = useTestDatabase('interceptor-order');
  let url: string;
  let close: () => Promise<void>;

  beforeAll(async () => {
    const started = await startApp(
      [
        TypeOrmModule.forRoot({ type: 'postgres', url: db.url, entities: [...leaseEntities] }),
        LeaseModule.forRoot(mergeLeaseOptions(FAST, { tables: { createSchema: true } })),
      ],
      [OrderController],
    );
    url = started.url;
    close = () => started.app.close();
  });
  afterAll(() => work.release());
  db.beforeDrop(() => close());

  test.each(['above', 'below'])(
    'timeout listed %s @Exclusive: 408, and the lease is released while the work goes on',
    async (order) => {
      const { service } = await db.open();
      const key = `order:${order}`;
      const answer = await post(`${url}/order/${order}/${order}`);
      expect(answer.status).toBe(408);
      // The work has not ended (its gate is closed), yet the key is free again within a heartbeat or two.
      const lease = await eventually(
        () => service.tryAcquire(key),
        (taken) => taken !== null,
        `${key} free after the 408`,
        1_500,
        50,
      );
      await lease!.release();
    },
  );
});

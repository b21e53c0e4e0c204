/**
 * The walk (issue 39, "one way down"; docs/internals/walk.md): the library files an `@Exclusive` HTTP call runs code
 * of, from Nest's interceptor to its first statement. Measured, not read: V8's precise coverage counts every function
 * call of the process; the counters are reset just before the request and read, synchronously, as the first `pg`
 * query of the call is sent. A file counts when one of its functions ran in that window.
 */
import { Session } from 'node:inspector';
import { Controller, Param, Post } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import pg from 'pg';
import { Exclusive, LeaseModule, leaseEntities } from 'nest-pg-lease';
import { useTestDatabase } from '../support/db.js';
import { post, startApp } from '../exclusive/fixtures.js';

@Controller()
class WalkController {
  @Post('walk/:id')
  @Exclusive('walk:{id}')
  async walk(@Param('id') id: string) {
    return { id };
  }
}

interface ScriptCoverage {
  url: string;
  functions: Array<{ functionName: string; ranges: Array<{ count: number }> }>;
}

/** Files of the library's source with a function called since the last take (the first range is the function's). */
function filesRun(result: ScriptCoverage[]): Map<string, string[]> {
  const files = new Map<string, string[]>();
  for (const script of result) {
    const at = script.url.indexOf('/libs/lease/src/');
    if (at < 0) continue;
    const called = script.functions.filter((f) => f.functionName !== '' && f.ranges[0].count > 0);
    if (called.length > 0)
      files.set(
        script.url.slice(at + '/libs/lease/src/'.length),
        called.map((f) => f.functionName),
      );
  }
  return files;
}

describe('the walk of an @Exclusive HTTP call to its first statement', () => {
  const db = useTestDatabase('walk');
  const session = new Session();

  beforeAll(() => session.connect());
  afterAll(() => session.disconnect());

  const post$ = <T>(method: string, params?: object) =>
    new Promise<T>((resolve, reject) =>
      session.post(method, params, (error, result) => (error ? reject(error) : resolve(result as T))),
    );

  it('crosses at most 12 files of the library', async () => {
    const { app, url } = await startApp(
      [
        TypeOrmModule.forRoot({ type: 'postgres', url: db.url, entities: [...leaseEntities] }),
        // No heartbeat tick in the measured windows: one would run library code that is not the call's.
        LeaseModule.forRoot({
          tables: { createSchema: true },
          timing: { heartbeatIntervalMs: 20_000, leaseTimeoutMs: 60_000, shutdownGraceMs: 100 },
        }),
      ],
      [WalkController],
    );
    const proto = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
    const query = proto.query;
    // The key of the measured call: the window ends at the first statement that names it (not at another file's
    // leftover timer's statement, which may run in the same Jest worker meanwhile).
    let armed: string | undefined;
    let seen: ScriptCoverage[] | undefined;
    const names = (args: unknown[], key: string) =>
      ((args[0] as { values?: unknown[] } | undefined)?.values ?? []).includes(key);
    proto.query = function (this: unknown, ...args: unknown[]) {
      if (armed !== undefined && names(args, armed)) {
        armed = undefined;
        // An in-process session answers synchronously: the coverage is read before the statement leaves.
        session.post('Profiler.takePreciseCoverage', (error, result) => {
          if (!error) seen = result.result;
        });
      }
      return query.apply(this, args);
    };
    try {
      await post$('Profiler.enable');
      await post$('Profiler.startPreciseCoverage', { callCount: true, detailed: false });
      // Warm: the application's first call builds what later calls reuse.
      expect((await post(`${url}/walk/warm`)).status).toBe(201);
      // Twice, keeping the files both calls ran: in a Jest worker, timers an earlier test file left running (its
      // heartbeats, say) may run library code during one window, never the same code in both. Such code can only add
      // files, never remove one the call needs: on a loaded machine, where windows are long, the pair is measured
      // again (at most three pairs) and the smallest walk is the one judged.
      let files = new Map<string, string[]>();
      for (let pair = 0; pair < 3 && (pair === 0 || files.size > 12); pair++) {
        const measured: Array<Map<string, string[]>> = [];
        for (const id of [`${pair}-1`, `${pair}-2`]) {
          await post$('Profiler.takePreciseCoverage');
          seen = undefined;
          armed = `walk:${id}`;
          expect((await post(`${url}/walk/${id}`)).status).toBe(201);
          expect(seen).toBeDefined();
          measured.push(filesRun(seen!));
        }
        const both = new Map([...measured[0]].filter(([file]) => measured[1].has(file)));
        if (pair === 0 || both.size < files.size) files = both;
      }
      const walk = [...files].map(([file, functions]) => `${file}: ${functions.join(', ')}`).join('\n');
      // The interceptor, where the walk starts, and the statement pool, where it ends: the measure sees both ends.
      expect(walk).toContain('exclusive/exclusive.interceptor.ts');
      expect(walk).toContain('database/statement-pool.ts');
      console.log(`The walk, ${files.size} files:\n${walk}`);
      expect(files.size).toBeLessThanOrEqual(12);
    } finally {
      proto.query = query;
      await post$('Profiler.stopPreciseCoverage').catch(() => undefined);
      await app.close();
    }
  });
});

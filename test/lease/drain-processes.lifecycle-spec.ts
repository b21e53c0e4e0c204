/**
 * Issue 23, part 1, across two processes: instance A runs an `@Exclusive` job and gets SIGTERM mid-job (Nest's
 * `enableShutdownHooks()`); instance B keeps calling the same job meanwhile. From the job's history table (database
 * clock): B never starts before A's run ended — or, when A's job outlives `shutdownGraceMs`, before the grace expired
 * — and B does start after that.
 */
import { join } from 'node:path';
import { startService, useTestDatabase } from '../support/db.js';
import { startChild, type TestChild } from '../support/processes.js';

const CHILD = join(process.cwd(), 'test/lease/support/drain-instance.ts');
const TABLE = 'drain_history';

interface HistoryRow {
  instance: string;
  event: string;
  at: Date;
}

describe('the drain across two processes, SIGTERM mid-job', () => {
  const db = useTestDatabase('drain-procs', 'read committed', (admin) =>
    admin.query(
      `CREATE TABLE ${TABLE} (seq bigserial PRIMARY KEY, instance text NOT NULL, event text NOT NULL,
        at timestamptz NOT NULL DEFAULT clock_timestamp())`,
    ),
  );
  const children: TestChild[] = [];
  db.beforeDrop(() => {
    for (const child of children) if (child.process.exitCode === null) child.process.kill('SIGKILL');
  });

  beforeAll(async () => {
    // The lease tables, made once (two instances creating them at once would race on the catalog).
    const schema = await startService(db.url);
    await schema.close();
  });

  function instance(name: string, key: string, shutdownGraceMs: number): TestChild {
    const child = startChild(
      CHILD,
      { DRAIN_INSTANCE: { url: db.url, name, key, table: TABLE, shutdownGraceMs } },
      { captureOutput: true },
    );
    children.push(child);
    return child;
  }
  const exited = (child: TestChild) =>
    new Promise<string>((resolve) => {
      if (child.process.exitCode !== null || child.process.signalCode !== null) {
        resolve(String(child.process.exitCode ?? child.process.signalCode));
      } else child.process.once('exit', (code, signal) => resolve(String(code ?? signal)));
    });
  async function history(key: string): Promise<HistoryRow[]> {
    const { rows } = await db.admin.query<HistoryRow>(
      `SELECT instance, event, at FROM ${TABLE} WHERE instance LIKE $1 ORDER BY seq`,
      [`${key}:%`],
    );
    return rows;
  }
  const at = (rows: HistoryRow[], instance: string, event: string) =>
    rows.find((row) => row.instance === instance && row.event === event)?.at.getTime();

  /** A runs the job (`jobMs`); once it started, B keeps trying; once B was refused, A gets SIGTERM. */
  async function sigtermMidJob(key: string, jobMs: number, shutdownGraceMs: number) {
    const a = instance(`${key}:a`, key, shutdownGraceMs);
    const b = instance(`${key}:b`, key, shutdownGraceMs);
    await Promise.all([a.message('ready', 30_000), b.message('ready', 30_000)]);
    a.process.send({ type: 'run', jobMs });
    await a.message('started', 10_000);
    b.process.send({ type: 'try' });
    await b.message('busy', 10_000);
    await db.admin.query(`INSERT INTO ${TABLE} (instance, event) VALUES ($1, 'sigterm')`, [`${key}:a`]);
    a.process.kill('SIGTERM');
    const ran = await b.message<{ busy: number }>('ran', 60_000);
    const aExit = await exited(a);
    b.process.send({ type: 'stop' });
    await exited(b);
    return { rows: await history(key), busy: ran.busy, aExit, output: a.output.join('') };
  }

  test('a job shorter than the grace: B starts only after A ended its run (its fenced save included)', async () => {
    const key = 'drain-procs:finishes';
    const { rows, busy, aExit, output } = await sigtermMidJob(key, 3_000, 20_000);
    const [aStart, aTerm, aEnd, bStart] = [
      at(rows, `${key}:a`, 'start'),
      at(rows, `${key}:a`, 'sigterm'),
      at(rows, `${key}:a`, 'end'),
      at(rows, `${key}:b`, 'start'),
    ];
    expect([aStart, aTerm, aEnd, bStart].every((t) => t !== undefined)).toBe(true);
    expect(aTerm!).toBeGreaterThanOrEqual(aStart!);
    expect(aEnd!).toBeGreaterThan(aTerm!); // A was mid-job at SIGTERM, and its run went on to its end
    expect(bStart!).toBeGreaterThanOrEqual(aEnd!); // B never started before A's run ended
    expect(busy).toBeGreaterThan(0); // B kept trying meanwhile, refused while A drained
    expect(aExit).toBe('SIGTERM');
    expect(output).not.toMatch(/error/i);
    console.log(
      `drain, job 3 s, grace 20 s: SIGTERM → A end ${aEnd! - aTerm!} ms, A end → B start ${bStart! - aEnd!} ms, ` +
        `B refused ${busy} times meanwhile`,
    );
  });

  test('a job longer than the grace: B starts only after the grace expired, A never ended its run', async () => {
    const key = 'drain-procs:too-long';
    const graceMs = 2_500;
    const { rows, busy, aExit } = await sigtermMidJob(key, 60_000, graceMs);
    const [aTerm, aEnd, bStart] = [
      at(rows, `${key}:a`, 'sigterm'),
      at(rows, `${key}:a`, 'end'),
      at(rows, `${key}:b`, 'start'),
    ];
    expect(aEnd).toBeUndefined();
    expect(bStart! - aTerm!).toBeGreaterThanOrEqual(graceMs - 50);
    expect(busy).toBeGreaterThan(0);
    expect(aExit).toBe('SIGTERM');
    console.log(
      `drain, job 60 s, grace ${graceMs} ms: SIGTERM → B start ${bStart! - aTerm!} ms, B refused ${busy} times meanwhile`,
    );
  });
});

import { leaseEntities, LeaseArgumentError, type LeaseModuleOptions } from 'nest-pg-lease';
import pg from 'pg';
import { mergeLeaseOptions } from '../../libs/lease/src/internal.js';
import { openService } from '../support/lease-service.js';
import { FAST, ISOLATIONS, useTestDatabase } from '../support/db.js';

/**
 * `fenced()` of a multi-key run (`MultiLease`, docs/multi-key.md) on PostgreSQL: one statement sent with BEGIN locks
 * every lease row and reads every token (three messages for one write, as a single lease's), the rows stay locked
 * until COMMIT, a nested `fenced()` of one of the leases joins the open transaction, and a `fenced()` of one of the
 * leases already open refuses a multi-key one inside it (its row is locked by that transaction).
 */
function recordStatements() {
  const sent: Array<{ client: unknown; text: string }> = [];
  const query = pg.Client.prototype.query;
  pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
    // A statement's parameters (the fenced lock's rows, bound off a pooler) follow its text.
    const config = args[0] as string | { text?: string; values?: unknown[] };
    const text = typeof config === 'string' ? config : config?.text;
    const values = typeof config === 'string' ? undefined : config?.values;
    if (typeof text === 'string')
      sent.push({ client: this, text: values?.length ? `${text} ${JSON.stringify(values)}` : text });
    return (query as (...a: unknown[]) => unknown).apply(this, args);
  } as typeof query;
  return {
    stop: () => (pg.Client.prototype.query = query),
    on: (marker: string) => {
      const client = sent.find((one) => one.text.includes(marker))?.client;
      if (!client) throw new Error(`no statement sent with ${marker}`);
      return sent.filter((one) => one.client === client).map((one) => one.text.trim());
    },
  };
}

describe.each(ISOLATIONS)('fenced() of several keys (default_transaction_isolation = %s)', (isolation) => {
  const db = useTestDatabase('multi_fence', isolation, (admin) =>
    admin.query('CREATE TABLE multi_trip (id serial PRIMARY KEY, note text NOT NULL)'),
  );
  const open = (name: string, options: LeaseModuleOptions = {}) =>
    openService(db.url, mergeLeaseOptions({ tables: { createSchema: true } }, FAST, options), {
      applicationName: name,
      entities: [...leaseEntities],
    });
  /** Whether the admin connection finds the key's lease row locked (`FOR UPDATE NOWAIT` refused). */
  const locked = async (key: string) => {
    await db.admin.query('BEGIN');
    try {
      await db.admin.query(`SELECT 1 FROM job_lease WHERE target_id = $1 FOR UPDATE NOWAIT`, [key]);
      return false;
    } catch (error) {
      if ((error as { code?: string }).code === '55P03') return true;
      throw error;
    } finally {
      await db.admin.query('ROLLBACK');
    }
  };

  test('one statement with BEGIN locks every row and checks every token; the rows stay locked until COMMIT', async () => {
    const a = await open('multi-fence-one');
    const keys = [`${isolation}:invoice:9`, `${isolation}:account:7`];
    try {
      const seen = await a.service.run(keys, async (lease) => {
        const recording = recordStatements();
        let during: boolean[] = [];
        try {
          await lease.fenced(async (manager) => {
            await manager.query(`INSERT INTO multi_trip (note) VALUES ('both-locked')`);
            during = [await locked(keys[0]), await locked(keys[1])];
          });
        } finally {
          recording.stop();
        }
        return { sent: recording.on('both-locked'), during, after: [await locked(keys[0]), await locked(keys[1])] };
      });
      expect(seen.sent).toEqual([
        expect.stringMatching(/^BEGIN\b[\s\S]*jsonb_array_elements[\s\S]*FOR UPDATE/),
        `INSERT INTO multi_trip (note) VALUES ('both-locked')`,
        'COMMIT',
      ]);
      // The statement names the rows in the global order (account before invoice).
      expect(seen.sent[0].indexOf('account:7')).toBeLessThan(seen.sent[0].indexOf('invoice:9'));
      expect(seen.during).toEqual([true, true]);
      expect(seen.after).toEqual([false, false]);
      const rows = await db.admin.query(`SELECT note FROM multi_trip WHERE note = 'both-locked'`);
      expect(rows.rowCount).toBe(1);
    } finally {
      await a.close();
    }
  });

  test('the application deallocates its prepared statements: the next fenced() of several keys prepares them again', async () => {
    // One connection: the application's DEALLOCATE ALL runs on the connection the lock was prepared on.
    const a = await openService(db.url, mergeLeaseOptions({ tables: { createSchema: true } }, FAST), {
      applicationName: 'multi-fence-deallocated',
      entities: [...leaseEntities],
      poolSize: 1,
    });
    const keys = [`${isolation}:deallocated:1`, `${isolation}:deallocated:2`];
    const notes = [`${isolation}:prepared`, `${isolation}:again`];
    try {
      await a.service.run(keys, async (lease) => {
        await lease.fenced((manager) => manager.query(`INSERT INTO multi_trip (note) VALUES ($1)`, [notes[0]]));
        await a.dataSource.query('DEALLOCATE ALL');
        await lease.fenced((manager) => manager.query(`INSERT INTO multi_trip (note) VALUES ($1)`, [notes[1]]));
      });
      const { rows } = await db.admin.query<{ note: string }>(
        'SELECT note FROM multi_trip WHERE note = ANY($1) ORDER BY id',
        [notes],
      );
      expect(rows.map((row) => row.note)).toEqual(notes);
    } finally {
      await a.close();
    }
  });

  test('a nested fenced() of one of the leases joins the open transaction; the other way round is refused', async () => {
    const a = await open('multi-fence-nested');
    const keys = [`${isolation}:nested:a`, `${isolation}:nested:b`];
    try {
      await a.service.run(keys, async (lease) => {
        const one = lease.lease(keys[0])!;
        const inner = await lease.fenced(() =>
          one.fenced(async (manager) => {
            await manager.query(`INSERT INTO multi_trip (note) VALUES ('nested')`);
            return 'joined';
          }),
        );
        expect(inner).toBe('joined');
        const refused = await one.fenced(() => lease.fenced(async () => 'never')).catch((error: unknown) => error);
        expect(refused).toBeInstanceOf(LeaseArgumentError);
        expect(lease.isHeld()).toBe(true);
      });
      const rows = await db.admin.query(`SELECT note FROM multi_trip WHERE note = 'nested'`);
      expect(rows.rowCount).toBe(1);
    } finally {
      await a.close();
    }
  });
});

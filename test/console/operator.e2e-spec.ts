import { LeaseBusyError, LeaseDrainedError, LeaseLostError, LeaseOperator, type LeaseEvent } from 'nest-pg-lease';
import { eventually, useTestDatabase } from '../support/db.js';

// The operator's API (issue 26 part 3) against a real PostgreSQL, with two LeaseServices standing for two processes:
// a force-release observed by its holder (signal, fenced save, audit row), drains across processes, the timeline.

describe('LeaseOperator', () => {
  const db = useTestDatabase('operator');

  test('force-release: the holder loses the lease (released-by-operator), its fenced save is refused, audited', async () => {
    const holder = await db.open({ observability: { journal: true } }, 'holder');
    const ops = await db.open({}, 'ops');
    const operator = new LeaseOperator(ops.service);
    const lease = (await holder.service.tryAcquire('invoice:1'))!;
    expect(lease).not.toBeNull();

    const done = await operator.forceRelease('invoice:1', { by: 'alice', reason: 'stuck job' });
    expect(done).toMatchObject({ released: true, fencingToken: lease.fencingToken });
    expect(done.holder).toBe(holder.service.options.owner);

    // The fenced save finds the grant gone before any heartbeat, and says why.
    await expect(
      lease.fenced(async (manager) => {
        await manager.query('SELECT 1');
      }),
    ).rejects.toMatchObject({ constructor: LeaseLostError, reason: 'released-by-operator' });
    expect(lease.signal.aborted).toBe(true);
    expect((lease.signal.reason as LeaseLostError).reason).toBe('released-by-operator');

    const { rows } = await db.admin.query(
      `SELECT action, kind, subject, actor, reason, fencing_token::text AS token, holder FROM job_lease_audit`,
    );
    expect(rows).toEqual([
      {
        action: 'force-release',
        kind: 'key',
        subject: 'invoice:1',
        actor: 'alice',
        reason: 'stuck job',
        token: String(lease.fencingToken),
        holder: holder.service.options.owner,
      },
    ]);
    // The key is free at once, with a larger token.
    const next = (await ops.service.tryAcquire('invoice:1'))!;
    expect(next.fencingToken).toBeGreaterThan(lease.fencingToken);
    await next.release();
  });

  test("force-release: the holder's next heartbeat aborts its signal with released-by-operator", async () => {
    const holder = await db.open({}, 'holder-hb');
    const operator = new LeaseOperator(holder.service);
    const lost: LeaseEvent[] = [];
    const subscription = holder.service.events$.subscribe((event) => event.type === 'lost' && lost.push(event));
    const lease = (await holder.service.tryAcquire('invoice:2'))!;
    await operator.forceRelease('invoice:2', { by: 'bob', reason: 'test' });
    await eventually(() => lease.signal.aborted, Boolean, 'the holder noticed');
    subscription.unsubscribe();
    expect((lease.signal.reason as LeaseLostError).reason).toBe('released-by-operator');
    expect(lost).toEqual([expect.objectContaining({ targetKey: 'invoice:2', reason: 'released-by-operator' })]);
  });

  test('force-release of a free key writes the audit row and releases nothing', async () => {
    const ops = await db.open({}, 'ops-free');
    const done = await new LeaseOperator(ops.service).forceRelease('nobody:1', { by: 'carol', reason: 'check' });
    expect(done.released).toBe(false);
    const { rows } = await db.admin.query(`SELECT count(*)::int AS n FROM job_lease_audit WHERE subject = 'nobody:1'`);
    expect(rows[0].n).toBe(1);
  });

  test('bad input is a LeaseArgumentError and writes nothing', async () => {
    const ops = await db.open({}, 'ops-bad');
    const operator = new LeaseOperator(ops.service);
    const before = (await db.admin.query('SELECT count(*)::int AS n FROM job_lease_audit')).rows[0].n;
    await expect(operator.forceRelease('k', { by: '', reason: 'x' })).rejects.toThrow('by must be');
    await expect(operator.drain('', { by: 'a', reason: 'x' })).rejects.toThrow();
    await expect(operator.drain('t', { by: 'a', reason: 'x', template: 'yes' as never })).rejects.toThrow(
      'template must be a boolean',
    );
    const after = (await db.admin.query('SELECT count(*)::int AS n FROM job_lease_audit')).rows[0].n;
    expect(after).toBe(before);
  });

  test('drain a key: refused in another process until undrained; holders keep theirs', async () => {
    // Slower heartbeats than FAST: the held lease must outlive a busy machine's stalls (it is not what is tested).
    const a = await db.open({ timing: { heartbeatIntervalMs: 200, leaseTimeoutMs: 6_000 } }, 'proc-a');
    const b = await db.open({ timing: { heartbeatIntervalMs: 200, leaseTimeoutMs: 6_000 } }, 'proc-b');
    const held = (await b.service.tryAcquire('report:9'))!;
    const operator = new LeaseOperator(a.service);
    await operator.drain('report:7', { by: 'dave', reason: 'maintenance' });
    await operator.drain('report:9', { by: 'dave', reason: 'maintenance' });
    // This process at once; the other within its refresh (1 s) plus a statement.
    await expect(a.service.tryAcquire('report:7')).rejects.toBeInstanceOf(LeaseDrainedError);
    const refused = await eventually(
      () =>
        b.service.tryAcquire('report:7').then(
          (lease) => lease?.release().then(() => null) ?? null,
          (e) => e,
        ),
      (value) => value instanceof LeaseDrainedError,
      'process b sees the drain',
    );
    expect(refused).toBeInstanceOf(LeaseBusyError);
    expect(refused).toMatchObject({ drainKind: 'key', drainReason: 'maintenance', targetKey: 'report:7' });
    expect(held.signal.aborted).toBe(false);
    expect(await operator.drains()).toEqual([
      expect.objectContaining({ kind: 'key', subject: 'report:7', actor: 'dave' }),
      expect.objectContaining({ kind: 'key', subject: 'report:9' }),
    ]);

    expect(await operator.undrain('report:7', { by: 'dave', reason: 'done' })).toBe(true);
    const lease = await eventually(
      () => b.service.tryAcquire('report:7').catch(() => null),
      (value) => value !== null,
      'process b sees the undrain',
    );
    await lease!.release();
    await operator.undrain('report:9', { by: 'dave', reason: 'done' });
    await held.release();
    const { rows } = await db.admin.query(
      `SELECT action, subject FROM job_lease_audit WHERE subject LIKE 'report:%' ORDER BY id`,
    );
    expect(rows.map((row) => `${row.action} ${row.subject}`)).toEqual([
      'drain report:7',
      'drain report:9',
      'undrain report:7',
      'undrain report:9',
    ]);
  });

  test('drain a template: every key of it is refused, others are not; run() rejects with LeaseDrainedError', async () => {
    const a = await db.open({}, 'tpl-a');
    const operator = new LeaseOperator(a.service);
    await operator.drain('export:{id}', { by: 'erin', reason: 'migration', template: true });
    await expect(a.service.tryAcquire('export:1', { keyTemplate: 'export:{id}' })).rejects.toBeInstanceOf(
      LeaseDrainedError,
    );
    await expect(a.service.run('export:2', () => 1, { keyTemplate: 'export:{id}' })).rejects.toBeInstanceOf(
      LeaseDrainedError,
    );
    const other = (await a.service.tryAcquire('import:1', { keyTemplate: 'import:{id}' }))!;
    await other.release();
    await operator.undrain('export:{id}', { by: 'erin', reason: 'done', template: true });
    const lease = (await a.service.tryAcquire('export:1', { keyTemplate: 'export:{id}' }))!;
    await lease.release();
  });

  test('history: holders with tokens, waits, the force-release, the loss with its reason, a takeover', async () => {
    const a = await db.open({ observability: { journal: true } }, 'hist-a');
    const b = await db.open({ observability: { journal: true } }, 'hist-b');
    const operator = new LeaseOperator(a.service);
    const first = (await a.service.tryAcquire('timeline:1'))!;
    // b waits in line; a's lease is force-released; b is granted.
    const waiting = b.service.acquire('timeline:1', { onBusy: { wait: { timeoutMs: 10_000 } } });
    await eventually(
      () => b.service.waitingCount(),
      (n) => n === 1,
      'b waits',
    );
    await operator.forceRelease('timeline:1', { by: 'frank', reason: 'stuck' });
    const second = await waiting;
    await eventually(() => first.signal.aborted, Boolean, 'a noticed');
    await second.release();
    // A takeover: a's next lease expires (its row aged by hand), b takes it over.
    const third = (await a.service.tryAcquire('timeline:1'))!;
    await db.admin.query(
      `UPDATE job_lease SET updated_at = updated_at - interval '1 hour', acquired_at = acquired_at - interval '1 hour'
       WHERE target_id = 'timeline:1'`,
    );
    const fourth = (await b.service.tryAcquire('timeline:1'))!;
    expect(fourth).not.toBeNull();
    await fourth.release();
    await eventually(() => third.signal.aborted, Boolean, 'a noticed the takeover');
    const entries = await eventually(
      async () => {
        await new LeaseOperator(b.service).history('timeline:1');
        return operator.history('timeline:1');
      },
      (rows) => rows.some((row) => row.type === 'released' && row.fencingToken === fourth.fencingToken),
      'the timeline is complete',
    );
    const seen = entries.map((row) => [row.type, row.owner.split('/')[0], row.fencingToken, row.detail]);
    expect(seen).toEqual(
      expect.arrayContaining([
        ['acquired', expect.any(String), first.fencingToken, undefined],
        ['waiting', expect.any(String), undefined, 'priority 0'],
        ['force-release', 'frank', first.fencingToken, 'stuck'],
        // released-by-operator when a's heartbeat came first; taken-over when b was granted before it.
        ['lost', expect.any(String), first.fencingToken, expect.stringMatching(/^(released-by-operator|taken-over)$/)],
        ['wait-ended', expect.any(String), undefined, expect.stringMatching(/^granted after \d+ ms$/)],
        ['acquired', expect.any(String), second.fencingToken, undefined],
        ['released', expect.any(String), second.fencingToken, expect.stringMatching(/^held \d+ ms$/)],
        ['taken-over', expect.any(String), fourth.fencingToken, `from ${a.service.options.owner}`],
        ['lost', expect.any(String), third.fencingToken, expect.stringMatching(/^(renewal-deadline|taken-over)$/)],
      ]),
    );
    const owners = new Set(entries.filter((row) => row.type === 'acquired').map((row) => row.owner));
    expect(owners).toEqual(new Set([a.service.options.owner, b.service.options.owner]));
  });
});

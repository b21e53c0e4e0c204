/**
 * Test instrumentation in the run's database, on top of the library's tables (never part of the library):
 *
 * - `sched_lease_event`: the server's own history of the lease table, written by an AFTER trigger while the statement
 *   still holds the row lock, numbered by a sequence — so per key the numbers follow the order in which grants
 *   committed. Every grant (a new lease token on a row: key, fencing token, owner, priority, the session that made it,
 *   the transaction, and a snapshot of the key's waiter rows once the statement's own changes are done), every
 *   release (the session, the owner it cleared), and every renewal that is suspect: made by a session of another
 *   process than the row's owner, or of a row already expired when the statement began. Ordinary renewals are not
 *   logged (a heartbeat renews every lease of a process every tick).
 * - `sched_waiter_landed` / `sched_waiter_gone`: when each waiter row was inserted, and each deleted row with its
 *   transaction and the process that deleted it (the grantee of a grant is the row its own transaction deleted; a row
 *   deleted by another process was evicted as dead, and its waiter keeps its place).
 * - `sched_handoff`: every grant a release (or a waiter leaving) handed to a waiter, and when its owner confirmed it
 *   (its first update of the row: the `confirm-grant` racepoint stalls there).
 * - Racepoints: BEFORE triggers at named points that sleep in the server, for one owner, while a row of
 *   `sched_racepoint` arms them. They are installed once and armed by a row instead of being created and dropped per
 *   step: CREATE TRIGGER waits for the table's writers and DROP TRIGGER takes an ACCESS EXCLUSIVE lock that queues
 *   behind the sleeping statement and blocks every statement on the table behind it — a global freeze that would be a
 *   fault of the harness, not of the schedule.
 */
import type pg from 'pg';
import { RW_PREFIX } from './checker-read-write.js';
import type { Racepoint } from './schedule.js';

const MS = `* interval '1 millisecond'`;

/** Racepoint → the table and event of its trigger, and the column naming the owner it stalls. */
const RACEPOINT_TRIGGERS: Readonly<Record<Racepoint, { table: string; event: string; owner: string }>> = {
  'acquire-insert': { table: 'job_lease', event: 'BEFORE INSERT', owner: 'owner' },
  'acquire-inserted': { table: 'job_lease', event: 'AFTER INSERT', owner: 'owner' },
  'lease-row-locked': { table: 'job_lease', event: 'BEFORE UPDATE', owner: 'owner' },
  enqueue: { table: 'job_lease_waiter', event: 'BEFORE INSERT', owner: 'owner' },
  'waiter-heartbeat': { table: 'job_lease_waiter', event: 'BEFORE UPDATE', owner: 'owner' },
  dequeue: { table: 'job_lease_waiter', event: 'BEFORE DELETE', owner: 'owner' },
  'fenced-write': { table: 'fault_history', event: 'BEFORE INSERT', owner: 'worker' },
};

export async function installInstrumentation(admin: pg.Client): Promise<void> {
  await admin.query(`
    CREATE SEQUENCE sched_event_seq AS bigint;
    CREATE TABLE sched_lease_event (
      seq bigint PRIMARY KEY, kind text NOT NULL, target_id text NOT NULL, fencing_token bigint NOT NULL,
      owner text, priority int, app text NOT NULL, txid bigint NOT NULL, at timestamptz NOT NULL,
      stmt_at timestamptz NOT NULL, old_owner text, old_fencing_token bigint,
      -- how long before the statement began the old row had expired (positive: it had)
      old_expired_ms float8, waiters jsonb,
      -- a grant: whether the row it replaced still named a holder (a takeover or a handoff, not a free row)
      old_held boolean,
      -- the row of the key: 0 its own (a single holder's), 1 a read-write key's writer's, above a reader's
      slot int NOT NULL DEFAULT 0,
      -- the row's lease length after the write and before it (a lease length per call: checker-length.ts), and how
      -- long the old row still had to live by its own length when the write was made (positive: it was live)
      lease_ms int, old_lease_ms int, old_left_ms float8,
      -- the row's lease token after the write (a handed-over grant's is its waiter's id: sched_waiter_gone)
      lease_token uuid,
      -- when its transaction committed (sched_event_committed): others see the write from then on, which can be long
      -- after at — a statement whose Sync or COMMIT the network held back, a framed statement's COMMIT
      committed_at timestamptz);
    -- Grants made by another process than their owner's: a release (or a waiter leaving) handed the key over. The
    -- owner's first update of the grant is its confirmation.
    CREATE TABLE sched_handoff (target_id text NOT NULL, fencing_token bigint NOT NULL, owner text NOT NULL,
      app text NOT NULL, granted_at timestamptz NOT NULL, confirmed_at timestamptz,
      PRIMARY KEY (target_id, fencing_token));
    CREATE INDEX ON sched_lease_event (target_id, seq);

    CREATE FUNCTION sched_lease_event() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
      kind text;
      app text := split_part(current_setting('application_name'), ':', 1);
      expired_ms float8;
    BEGIN
      IF TG_OP = 'UPDATE' THEN
        expired_ms := extract(epoch FROM statement_timestamp() - (OLD.updated_at + OLD.lease_timeout_ms ${MS})) * 1000;
      END IF;
      IF NEW.lease_token IS NULL THEN
        IF TG_OP = 'INSERT' OR OLD.lease_token IS NULL THEN RETURN NULL; END IF;
        kind := 'release';
      -- A grant draws a new fencing token; the lease token may stay: a waiter's is its id in each of its attempts,
      -- so one that retries after a lost answer takes its own expired grant again (a new token, not a renewal).
      ELSIF TG_OP = 'INSERT' OR OLD.lease_token IS DISTINCT FROM NEW.lease_token
        OR OLD.fencing_token IS DISTINCT FROM NEW.fencing_token THEN
        kind := 'grant';
        IF app <> NEW.owner THEN
          INSERT INTO sched_handoff VALUES (NEW.target_id, NEW.fencing_token, NEW.owner, app, clock_timestamp());
        END IF;
      ELSIF OLD.updated_at IS DISTINCT FROM NEW.updated_at THEN
        IF app = NEW.owner THEN
          UPDATE sched_handoff h SET confirmed_at = clock_timestamp()
          WHERE h.target_id = NEW.target_id AND h.fencing_token = NEW.fencing_token AND h.confirmed_at IS NULL;
        END IF;
        -- A renewal: logged only when it is suspect (someone else's session, or a row expired before it began) or
        -- when it changed the row's lease length (a confirmation of a handed-over grant does; a renewal must not).
        IF app = OLD.owner AND expired_ms < 0 AND OLD.lease_timeout_ms IS NOT DISTINCT FROM NEW.lease_timeout_ms THEN
          RETURN NULL;
        END IF;
        kind := 'renew';
      ELSE
        RETURN NULL;
      END IF;
      INSERT INTO sched_lease_event VALUES (nextval('sched_event_seq'), kind, NEW.target_id, NEW.fencing_token,
        NEW.owner, NEW.priority, app, txid_current(), clock_timestamp(), statement_timestamp(),
        CASE WHEN TG_OP = 'UPDATE' THEN OLD.owner END, CASE WHEN TG_OP = 'UPDATE' THEN OLD.fencing_token END,
        expired_ms,
        CASE WHEN kind = 'grant' THEN (
          SELECT coalesce(jsonb_agg(jsonb_build_object(
            'id', w.waiter_id, 'owner', w.owner, 'priority', w.priority, 'seq', w.seq::text,
            -- how long it still lives after the grant's write (the statement reads the line by the clock somewhere
            -- between its start and this write: a row live now, not renewed since the start, was live then), and how
            -- long before the statement began it was renewed, and landed (visible to the statement's snapshot)
            'liveMs', extract(epoch FROM w.heartbeat_at + w.timeout_ms ${MS} - clock_timestamp()) * 1000,
            'renewedMs', extract(epoch FROM statement_timestamp() - w.heartbeat_at) * 1000,
            'landedMs', extract(epoch FROM statement_timestamp() - l.landed_at) * 1000)), '[]'::jsonb)
          FROM job_lease_waiter w LEFT JOIN sched_waiter_landed l ON l.waiter_id = w.waiter_id
          WHERE w.target_id = NEW.target_id) END,
        CASE WHEN kind = 'grant' THEN TG_OP = 'UPDATE' AND OLD.lease_token IS NOT NULL END, NEW.slot,
        NEW.lease_timeout_ms, CASE WHEN TG_OP = 'UPDATE' THEN OLD.lease_timeout_ms END,
        CASE WHEN TG_OP = 'UPDATE' THEN
          extract(epoch FROM OLD.updated_at + OLD.lease_timeout_ms ${MS} - clock_timestamp()) * 1000 END,
        NEW.lease_token);
      RETURN NULL;
    END $$;

    -- A deferred constraint trigger runs as its transaction commits: it stamps the event with that time.
    CREATE FUNCTION sched_event_committed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      UPDATE sched_lease_event SET committed_at = clock_timestamp() WHERE seq = NEW.seq;
      RETURN NULL;
    END $$;
    CREATE CONSTRAINT TRIGGER sched_event_committed AFTER INSERT ON sched_lease_event
      DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION sched_event_committed();

    CREATE TABLE sched_waiter_landed (waiter_id uuid PRIMARY KEY, landed_at timestamptz NOT NULL);
    CREATE TABLE sched_waiter_gone (txid bigint NOT NULL, target_id text NOT NULL, waiter_id uuid NOT NULL,
      owner text NOT NULL, priority int NOT NULL, seq bigint NOT NULL, at timestamptz NOT NULL, app text NOT NULL);
    CREATE INDEX ON sched_waiter_gone (txid);
    CREATE FUNCTION sched_waiter_event() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'INSERT' THEN
        INSERT INTO sched_waiter_landed VALUES (NEW.waiter_id, clock_timestamp())
        ON CONFLICT (waiter_id) DO UPDATE SET landed_at = EXCLUDED.landed_at;
      ELSE
        INSERT INTO sched_waiter_gone VALUES (txid_current(), OLD.target_id, OLD.waiter_id, OLD.owner, OLD.priority,
          OLD.seq, clock_timestamp(), split_part(current_setting('application_name'), ':', 1));
      END IF;
      RETURN NULL;
    END $$;

    CREATE TABLE sched_racepoint (point text NOT NULL, owner text NOT NULL, sleep_s float8 NOT NULL,
      until timestamptz NOT NULL);
    CREATE FUNCTION sched_racepoint() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
      who text := to_jsonb(CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END) ->> TG_ARGV[1];
      s float8;
    BEGIN
      SELECT r.sleep_s INTO s FROM sched_racepoint r
      WHERE r.point = TG_ARGV[0] AND r.owner = who AND r.until > clock_timestamp() LIMIT 1;
      IF s IS NOT NULL THEN PERFORM pg_sleep(s); END IF;
      RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
    END $$;

    -- The confirm-grant racepoint: the owner's confirmation of a grant handed to it (its first update of the grant,
    -- by the confirmation statement or by an acquire statement that recognises the grant), before the row is written.
    CREATE FUNCTION sched_confirm_point() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
      s float8;
    BEGIN
      IF NEW.lease_token IS NULL OR OLD.lease_token IS DISTINCT FROM NEW.lease_token
        OR split_part(current_setting('application_name'), ':', 1) <> NEW.owner THEN
        RETURN NEW;
      END IF;
      SELECT r.sleep_s INTO s FROM sched_racepoint r
      WHERE r.point = 'confirm-grant' AND r.owner = NEW.owner AND r.until > clock_timestamp() LIMIT 1;
      IF s IS NOT NULL AND EXISTS (SELECT 1 FROM sched_handoff h WHERE h.target_id = NEW.target_id
          AND h.fencing_token = NEW.fencing_token AND h.confirmed_at IS NULL) THEN
        PERFORM pg_sleep(s);
      END IF;
      RETURN NEW;
    END $$;
    CREATE TRIGGER sched_rp_confirm_grant BEFORE UPDATE ON job_lease FOR EACH ROW
      EXECUTE FUNCTION sched_confirm_point();`);
  // A BEFORE trigger sleeps before the row is written (on INSERT: before conflict detection); an AFTER trigger once
  // the statement wrote it, its transaction not yet committed (a concurrent insert of the key waits for it).
  for (const [point, { table, event, owner }] of Object.entries(RACEPOINT_TRIGGERS)) {
    const name = `sched_rp_${point.replace(/-/g, '_')}`;
    await admin.query(`CREATE TRIGGER ${name} ${event} ON ${table} FOR EACH ROW
      EXECUTE FUNCTION sched_racepoint('${point}', '${owner}')`);
  }
  await admin.query(`
    CREATE TRIGGER sched_lease_event AFTER INSERT OR UPDATE ON job_lease
      FOR EACH ROW EXECUTE FUNCTION sched_lease_event();
    CREATE TRIGGER sched_waiter_event AFTER INSERT OR DELETE ON job_lease_waiter
      FOR EACH ROW EXECUTE FUNCTION sched_waiter_event();`);
}

/** Arms `point` for `owner` for `durationMs`: each of its statements reaching the point meanwhile sleeps `sleepMs`. */
export async function armRacepoint(
  admin: pg.Client,
  point: Racepoint | 'confirm-grant',
  owner: string,
  sleepMs: number,
  durationMs: number,
): Promise<void> {
  await admin.query(`INSERT INTO sched_racepoint VALUES ($1, $2, $3, clock_timestamp() + $4 ${MS})`, [
    point,
    owner,
    sleepMs / 1000,
    durationMs,
  ]);
}

export async function disarmRacepoints(admin: pg.Client): Promise<void> {
  await admin.query('DELETE FROM sched_racepoint');
}

/** Backends of `owner`'s process (pool and the library's own connections) sleeping in a racepoint now. */
export async function sleepingBackends(admin: pg.Client, owner: string): Promise<number> {
  const { rows } = await admin.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_stat_activity
     WHERE datname = current_database() AND split_part(application_name, ':', 1) = $1 AND wait_event = 'PgSleep'`,
    [owner],
  );
  return rows[0].n;
}

/**
 * The cheap part of the checker, run after every step: per key, a grant whose token is not above every earlier
 * grant's, and a fenced write whose token is below one already committed. The first few, as text. Read-write keys
 * (`RW_PREFIX`, many holders at once) are left to the read-write checks.
 */
export async function probe(admin: pg.Client): Promise<string[]> {
  const { rows } = await admin.query<{ what: string }>(
    `
    SELECT format('tokens rising per key: %s granted token %s to %s at #%s after token %s',
      target_id, fencing_token, owner, seq, top) AS what
    FROM (SELECT target_id, fencing_token, owner, seq, max(fencing_token) OVER (PARTITION BY target_id ORDER BY seq
      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS top FROM sched_lease_event
      WHERE kind = 'grant' AND NOT starts_with(target_id, $1)) g
    WHERE fencing_token <= top
    UNION ALL
    SELECT format('fenced exclusion: %s token %s (%s) committed at #%s after token %s', target, fencing_token, worker,
      commit_seq, top)
    FROM (SELECT target, fencing_token, worker, commit_seq, max(fencing_token) OVER (PARTITION BY target
      ORDER BY commit_seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS top FROM fault_history) h
    WHERE fencing_token < top
    LIMIT 5`,
    [RW_PREFIX],
  );
  return rows.map((row) => row.what);
}

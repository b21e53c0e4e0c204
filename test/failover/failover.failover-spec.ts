/**
 * The failover suite (`npm run test:failover`): a real primary and a streaming standby, 14 clients on the library
 * (7 LeaseServices × 2 loops: acquire → work → fenced write → release), the primary crashed, the standby promoted,
 * the clients switched; see support/scenario.ts for one run and support/checker.ts for what is checked.
 *
 * Always asserted: fenced exclusion within the promoted server's history; nothing the promoted server acknowledged
 * is lost; every process works again after the switch; under synchronous replication no acknowledged fenced write,
 * acquisition or release is lost (tokens never go back, no two holders); under an asynchronous gap the checker does
 * see acknowledged writes vanish (its negative control: a property of the database, not of the library).
 * Asserted by default (FAILOVER_ASSERT, see support/expectations.ts; `none` to measure an older version): tokens never
 * go back, and every holder of the old history is told within a bound and never writes on the promoted server, after
 * an asynchronous failover too. FAILOVER_RUNS=n repeats every scenario n times.
 */
import { createWriteStream, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Logger, type LoggerService } from '@nestjs/common';
import { expectations } from './support/expectations.js';
import { recordRun, runSlug } from './support/report.js';
import { ARTIFACTS, runScenario, type Scenario } from './support/scenario.js';

const SCENARIOS: Scenario[] = [
  { name: 'async, plain loopback', synchronous: false, gapMs: 0 },
  { name: 'async, 100 ms partition', synchronous: false, gapMs: 100 },
  { name: 'async, standby disconnected 2 s', synchronous: false, gapMs: 2_000 },
  { name: 'synchronous, standby disconnected 2 s', synchronous: true, gapMs: 2_000 },
  {
    name: 'synchronous + asyncReleaseCommits, standby disconnected 2 s',
    synchronous: true,
    gapMs: 2_000,
    lease: { connections: { asyncReleaseCommits: true } },
  },
];
const RUNS = Math.max(1, Number(process.env.FAILOVER_RUNS ?? 1));
const expected = expectations();

// The library's log lines (lost leases, failed heartbeats, takeovers) go to a file, not through Jest's console.
mkdirSync(ARTIFACTS, { recursive: true });
const libraryLog = createWriteStream(join(ARTIFACTS, 'library.log'));
const line =
  (level: string) =>
  (message: unknown, ...rest: unknown[]) =>
    libraryLog.write(`${new Date().toISOString()} ${level} ${String(message)} ${rest.map(String).join(' ')}\n`);
const fileLogger: LoggerService = {
  log: line('log'),
  warn: line('warn'),
  error: line('error'),
  debug: line('debug'),
  verbose: line('verbose'),
};

beforeAll(() => Logger.overrideLogger(fileLogger));
afterAll(() => new Promise<void>((resolve) => libraryLog.end(resolve)));

describe.each(SCENARIOS)('$name', (scenario) => {
  for (let run = 1; run <= RUNS; run++) {
    test(`failover run ${run}`, async () => {
      const result = await runScenario(scenario, join(ARTIFACTS, runSlug(scenario.name, run)));
      recordRun(result, run);
      const f = result.findings;

      // The load really ran across the failover, in every process.
      expect(f.grantsBefore).toBeGreaterThan(50);
      expect(f.grantsAfter).toBeGreaterThan(50);
      expect(result.timeline).toBe(2);
      result.writesAfterSwitchByProcess.forEach((writes, process) =>
        expect({ process, workingAfterSwitch: writes > 0 }).toEqual({ process, workingAfterSwitch: true }),
      );

      // Fenced exclusion within the promoted history, and nothing the promoted server acknowledged is lost.
      expect(f.exclusionViolations).toEqual([]);
      expect(f.acknowledgedWritesLost.after).toBe(0);

      if (scenario.synchronous) {
        expect(f.acknowledgedWritesLost.before).toBe(0);
        expect(f.tokenViolations).toEqual([]);
        expect(f.cutOffHolders).toBe(0);
        expect(f.twoHolders).toEqual([]);
        // An asynchronously committed release does not wait for the standby: it may come back (liveness only).
        if (!scenario.lease?.connections?.asyncReleaseCommits) expect(f.acknowledgedReleasesBack).toBe(0);
      } else if (scenario.gapMs >= 1_000) {
        // The negative control: seconds of WAL the standby never received hold acknowledged fenced writes.
        expect(f.acknowledgedWritesLost.before).toBeGreaterThan(0);
      }

      if (expected.tokensNeverGoBack) expect(f.tokenViolations).toEqual([]);
      if (expected.oldHoldersTold) {
        // Every lease of the old history ends soon after the switch, and none writes on the promoted server.
        expect(f.oldHoldersLate).toEqual([]);
        expect(f.oldHistoryWritesAfterSwitch).toEqual([]);
      }
    });
  }
});

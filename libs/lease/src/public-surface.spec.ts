import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import ts from 'typescript';

/**
 * What the package publishes is its built `.d.ts`: built here exactly as `npm pack` builds it (libs/lease's
 * tsconfig.cjs.json, which emits the package's one set of declarations, `stripInternal`), then read with the
 * compiler's own checker. No PostgreSQL needed.
 */
const EXPORTS = [
  'TimelineEntry',
  'OperatorAuditEntry',
  'OperatorAction',
  'LeaseOperator',
  'LeaseDrainedError',
  'LeaseConsoleOptions',
  'LeaseConsoleModule',
  'ForceReleaseResult',
  'DrainEntry',
  'AcquireOptions',
  'AcquireOutcome',
  'BusyPolicy',
  'CurrentLease',
  'ElectOptions',
  'Exclusive',
  'ExclusiveInterceptor',
  'ExclusiveKey',
  'ExclusiveOptions',
  'FencedOptions',
  'JoinPolicy',
  'LeaderElection',
  'LeaderElectionOptions',
  'Leadership',
  'LeadershipEndReason',
  'Lease',
  'LEASE_CHANNELS',
  'LeaseArgumentError',
  'LeaseBusyError',
  'LeaseConfigError',
  'LeaseError',
  'LeaseEvent',
  'LeaseEventType',
  'LeaseExceptionFilter',
  'LeaseJoinedRunError',
  'LeaseKeyError',
  'LeaseLimitConflictError',
  'LeaseLossReason',
  'LeaseLostError',
  'LeaseModule',
  'LeaseModuleAsyncOptions',
  'LeaseModuleOptions',
  'LeaseOptionsFactory',
  'LeaseQueueFullError',
  'LeaseRow',
  'LeaseService',
  'LeaseShutdownError',
  'LeaseSnapshot',
  'LeaseUnavailableError',
  'LeaseWaitTimeoutError',
  'LeaseWaiterRow',
  'MAX_TARGET_KEY_BYTES',
  'MultiExclusiveOptions',
  'MultiLease',
  'MultiRunOptions',
  'OnLeadership',
  'PreemptPolicy',
  'ResolvedLeaseOptions',
  'RetryAfterContext',
  'RunOptions',
  'Sticky',
  'StickyOptions',
  'TryAcquireOptions',
  'WaitPolicy',
  'createLeaseEntities',
  'createLeaseMigrations',
  'leaseEntities',
  'leaseErrorToHttp',
  'leaseMigrations',
];

/** The `nest-pg-lease/testing` subpath's names, as docs/testing.md documents them. */
const TESTING_EXPORTS = [
  'DatabaseStall',
  'FencedTransaction',
  'LeaseTableNames',
  'LeaseTestingController',
  'LeaseTestingModule',
  'LeaseTestingOptions',
  'TakeOverOptions',
  'createTestingLeaseService',
  'expire',
  'stallDatabase',
  'takeOver',
  'testLeaseOptions',
  'useLeaseDatabase',
];

/** LeaseService's members as docs/lease-service.md documents them. */
const SERVICE_MEMBERS = [
  'acquire',
  'close',
  'current',
  'elect',
  'events$',
  'heldLeases',
  'init',
  'list',
  'options',
  'run',
  'tryAcquire',
  'waitingCount',
];

describe('the published type declarations', () => {
  let outDir: string;
  let program: ts.Program;
  let checker: ts.TypeChecker;

  beforeAll(() => {
    outDir = mkdtempSync(join(tmpdir(), 'lease-dts-'));
    execFileSync(
      process.execPath,
      [
        'node_modules/typescript/bin/tsc',
        '-p',
        'libs/lease/tsconfig.cjs.json',
        '--emitDeclarationOnly',
        '--outDir',
        outDir,
      ],
      { stdio: 'pipe' },
    );
    program = ts.createProgram([join(outDir, 'index.d.ts'), join(outDir, 'testing/index.d.ts')], {
      skipLibCheck: true,
      strict: true,
    });
    checker = program.getTypeChecker();
  }, 120_000);

  afterAll(() => rmSync(outDir, { recursive: true, force: true }));

  const moduleExports = (file: string) => {
    const source = program.getSourceFile(join(outDir, file))!;
    return checker.getExportsOfModule(checker.getSymbolAtLocation(source)!);
  };

  it('contain no @internal declaration', () => {
    const files = readdirSync(outDir, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.d.ts'));
    expect(files.length).toBeGreaterThan(10);
    const leaking = files.filter((file) => readFileSync(join(outDir, file), 'utf8').includes('@internal'));
    expect(leaking).toEqual([]);
  });

  it('export exactly the documented names from the main entry', () => {
    const names = moduleExports('index.d.ts').map((symbol) => symbol.getName());
    expect(names.sort()).toEqual([...EXPORTS].sort());
  });

  it('export exactly the documented names from nest-pg-lease/testing', () => {
    const names = moduleExports('testing/index.d.ts').map((symbol) => symbol.getName());
    expect(names.sort()).toEqual([...TESTING_EXPORTS].sort());
  });

  it('give LeaseService exactly the documented members and one public constructor', () => {
    const service = moduleExports('index.d.ts').find((symbol) => symbol.getName() === 'LeaseService')!;
    const resolved = service.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(service) : service;
    const instance = checker.getDeclaredTypeOfSymbol(resolved);
    const members = checker.getPropertiesOfType(instance).map((symbol) => symbol.getName());
    expect(members.sort()).toEqual([...SERVICE_MEMBERS].sort());
    const statics = checker.getTypeOfSymbolAtLocation(resolved, resolved.valueDeclaration!);
    const constructors = statics.getConstructSignatures();
    expect(constructors).toHaveLength(1);
    expect(constructors[0].getParameters().map((p) => p.getName())).toEqual(['dataSource', 'options']);
  });
});

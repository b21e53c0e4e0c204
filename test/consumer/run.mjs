// `npm run test:consumer`: nest-pg-lease as new users get it, on the matrix docs/install.md states.
// Packs libs/lease once and checks the tarball (both builds, their module systems, @arethetypeswrong/cli on every
// entry point). Then, for each application of the matrix — NestJS 12 as ES modules, NestJS 11 as CommonJS — installs
// the tarball into a fresh app in a temporary directory (real packages from the registry, with the README's install
// commands of that application's subsection), writes the app from the README's Usage code blocks (so the README is
// what is tested), and compiles it with plain `tsc` under `strict` without `skipLibCheck`. One install and one build
// per application; then the built app is started with `node` of each Node.js major of the matrix on a real
// PostgreSQL and proven over HTTP: a duplicate request refused with 409 + Retry-After by a decorated provider method
// called from an undecorated controller while the first runs (its 2 s of work), one fenced save in the database with
// its fencing token, the next build saved under a larger token, a clean SIGTERM (prove-app.mjs). The two applications
// go side by side, and so do an application's Node.js majors (each row has a database and a port of its own): the
// steps mostly wait on the registry and on child processes.
// Prints a table (application, module system, Node → result, time) and writes it to artifacts/consumer/summary.md.
//
//   npm run test:consumer                                    the whole matrix
//   npm run test:consumer -- --app nest11-cjs --node 20,22   a part of it
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { dropDatabase, startPostgres } from '@app/pg-harness';
import { proveApp } from './prove-app.mjs';
import {
  capture,
  fileOf,
  filesUnder,
  installCommands,
  log,
  nodeBinary,
  npmCli,
  npmNoise,
  readmeBlocks,
  repo,
  run,
  runSplit,
} from './tools.mjs';

/** The applications, each written from its subsection of the README's Install section. */
const APPS = [
  { id: 'nest12-esm', subsection: 'NestJS 12 (ES modules)', modules: 'ESM', type: 'module', nodes: [20, 22, 24] },
  // A NestJS 11 app as `nest new` made them: no "type" in package.json, so CommonJS. Also type-checked as a
  // `"module": "commonjs"` tsconfig would (TypeScript's node10 resolution: `types` and `typesVersions`).
  { id: 'nest11-cjs', subsection: 'NestJS 11 and CommonJS', modules: 'CommonJS', nodes: [20, 22, 24], node10: true },
];

const { values: options } = parseArgs({
  options: { app: { type: 'string' }, node: { type: 'string' } },
});
const apps = APPS.filter((app) => !options.app || options.app.split(',').includes(app.id));
const majors = options.node?.split(',').map(Number);
for (const app of apps) app.nodes = app.nodes.filter((major) => !majors || majors.includes(major));
if (apps.length === 0 || apps.every((app) => app.nodes.length === 0))
  throw new Error('nothing to run: check --app and --node');

const startedAt = performance.now();
const seconds = (since) => ((performance.now() - since) / 1000).toFixed(1);
const failures = [];
/** The checks of one row of the summary (its failures are its result), printed with its label. */
const checker = (row) => (ok, message) => {
  if (ok) log(`ok   ${row.label}: ${message}`);
  else {
    failures.push(`${row.label}: ${message}`);
    row.failures.push(message);
    console.error(`[consumer] FAIL ${row.label}: ${message}`);
  }
};
const packageRow = { label: 'package', failures: [] };

/**
 * A file of the app that uses the testing kit's subpath (`nest-pg-lease/testing`): compiled with the app under strict
 * (its types resolve in both module systems); never run — an app's tests would.
 */
const TESTING_KIT_CHECK = `import type { DynamicModule } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import type { LeaseService } from 'nest-pg-lease';
import {
  createTestingLeaseService,
  expire,
  LeaseTestingController,
  LeaseTestingModule,
  stallDatabase,
  takeOver,
  testLeaseOptions,
  useLeaseDatabase,
} from 'nest-pg-lease/testing';

export function unitModule(): DynamicModule {
  return LeaseTestingModule.forRoot({ fencedTransaction: (work) => work({} as never) });
}

export function integrationModule(url: string): DynamicModule {
  return LeaseTestingModule.forPostgres(url, { ...testLeaseOptions(), owner: 'test' });
}

export function inMemory(): { service: LeaseService; controls: LeaseTestingController } {
  const service = createTestingLeaseService();
  return { service, controls: LeaseTestingController.of(service) };
}

export function database(): { readonly url: string } {
  return useLeaseDatabase({ prefix: 'report', serverUrl: process.env.PG_URL });
}

export async function faults(dataSource: DataSource): Promise<bigint> {
  await expire(dataSource, 'report:1');
  const stall = await stallDatabase(dataSource, 'report:1');
  await stall.release();
  return takeOver(dataSource, 'report:1', { owner: 'another-process' });
}
`;

const work = mkdtempSync(join(tmpdir(), 'nest-pg-lease-consumer-'));
/** The summary's rows: one per application and Node.js major. */
const rows = [];
const notes = [];
let server;
/** What the rows started (databases; per row its app processes): ended at the latest at exit. */
const databases = [];
const started = [];
const startedBy = () => {
  const live = { databases, children: new Set() };
  started.push(live);
  return live;
};
const end = (live) => {
  for (const child of live.children) child.kill('SIGKILL');
  live.children.clear();
};

/** A module system's answer to "where does `specifier` resolve from `dir`?" (`import.meta.resolve`, `require.resolve`). */
const resolveFrom = (modules, specifier, dir) =>
  modules === 'ESM'
    ? run(process.execPath, ['--input-type=module', '-e', `console.log(import.meta.resolve('${specifier}'))`], dir)
    : run(process.execPath, ['-e', `console.log(require.resolve('${specifier}'))`], dir);

/**
 * One application of the matrix: a fresh app from its README subsection, installed and built once (3-5), then
 * proven on each Node.js major side by side (6), then the README's file-type override judged on each (7).
 */
async function appMatrix(app, { tarball, packed, nodes, installBlocks, usageBlocks }) {
  const buildStarted = performance.now();
  const buildRow = { label: `${app.id} install + build`, failures: [] };
  const check = checker(buildRow);
  const say = (message) => log(`${app.id}: ${message}`);
  const appRows = app.nodes.map((major) => ({
    label: `${app.id} on Node ${major}`,
    app,
    major,
    node: nodes.get(major).version,
    failures: [],
  }));
  rows.push(...appRows);
  const dir = join(work, app.id);
  const blocks = installBlocks.filter((block) => block.subsection === app.subsection);
  const override = blocks.find((block) => block.lang === 'json' && block.body.includes('"overrides"'));
  try {
    // 3. A fresh app: package.json (the subsection's overrides, if it gives any), then its install commands.
    say(`── ${app.subsection} ──`);
    mkdirSync(dir);
    if (blocks.length === 0) throw new Error(`README Install has no "### ${app.subsection}" subsection`);
    const overrides = override ? JSON.parse(`{${override.body}}`) : {};
    const manifest = { name: 'consumer-app', private: true, ...(app.type && { type: app.type }), ...overrides };
    writeFileSync(join(dir, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
    const commands = installCommands(blocks, tarball);
    if (commands.length === 0) throw new Error(`README "### ${app.subsection}" shows no npm install command`);
    for (const { line, args } of commands) {
      say(line.replace('nest-pg-lease', packed.filename));
      const noise = npmNoise(await runSplit('npm', [...args, '--no-audit', '--no-fund'], dir));
      for (const text of noise) console.log(`  ${app.id}: ${text}`);
      check(
        !noise.some((text) => /EBADENGINE/.test(text)),
        `install is free of EBADENGINE on Node ${process.versions.node}`,
      );
      check(noise.length === 0, `install is quiet (no npm warnings): ${line.split(' ').slice(0, 3).join(' ')} …`);
    }
    const installed = JSON.parse(await run('npm', ['ls', '--json', '--depth=0'], dir)).dependencies;
    const version = (name) => installed[name]?.version ?? '?';
    say(
      `installed: ${Object.entries(installed)
        .map(([name, info]) => `${name}@${info.version}`)
        .join(', ')}`,
    );
    const fileType = JSON.stringify(
      JSON.parse(await run('npm', ['ls', 'file-type', '--json'], dir)).dependencies ?? {},
    ).match(/"file-type":\{"version":"([^"]+)"/)?.[1];
    say(`file-type resolved: ${fileType}`);
    Object.assign(app, {
      nest: version('@nestjs/core'),
      typeorm: version('typeorm'),
      typescript: version('typescript'),
    });

    // 4. The installed package: which build each module system gets, and that neither build loads the other.
    const pkg = join(dir, 'node_modules/nest-pg-lease/dist');
    const esmFiles = filesUnder(join(pkg, 'esm')).filter((file) => file.endsWith('.js'));
    const cjsFiles = filesUnder(join(pkg, 'cjs')).filter((file) => file.endsWith('.js'));
    const text = (build, file) => readFileSync(join(pkg, build, file), 'utf8');
    check(
      esmFiles.every((file) => !/\brequire\(|\/cjs\//.test(text('esm', file))),
      `dist/esm: ${esmFiles.length} ES modules, none requires anything or names dist/cjs`,
    );
    check(
      cjsFiles.every((file) => !/^(import|export)\s|\bimport\(|\/esm\//m.test(text('cjs', file))),
      `dist/cjs: ${cjsFiles.length} CommonJS modules, none imports anything or names dist/esm`,
    );
    const resolved = await resolveFrom(app.modules, 'nest-pg-lease', dir);
    const expected = app.modules === 'ESM' ? '/dist/esm/index.js' : '/dist/cjs/index.js';
    check(resolved.trim().endsWith(expected), `the ${app.modules} app resolves nest-pg-lease to ${expected}`);
    const kit = await resolveFrom(app.modules, 'nest-pg-lease/testing', dir);
    const kitExpected = app.modules === 'ESM' ? '/dist/esm/testing/index.js' : '/dist/cjs/testing/index.js';
    check(kit.trim().endsWith(kitExpected), `the ${app.modules} app resolves nest-pg-lease/testing to ${kitExpected}`);

    // 5. The README's Usage (and its tsconfig), file by file; plain tsc, every .d.ts checked.
    const written = [...installBlocks, ...usageBlocks].filter((block) => fileOf(block));
    for (const block of written) {
      const path = join(dir, fileOf(block));
      mkdirSync(dirname(path), { recursive: true });
      writeFileSync(path, block.body);
    }
    say(`wrote from the README: ${written.map(fileOf).join(', ')}`);
    writeFileSync(join(dir, 'src/testing-kit.check.ts'), TESTING_KIT_CHECK);
    say('wrote src/testing-kit.check.ts (imports nest-pg-lease/testing)');
    const tsconfig = readFileSync(join(dir, 'tsconfig.json'), 'utf8');
    check(
      /"strict": true/.test(tsconfig) && !/skipLibCheck/.test(tsconfig),
      'tsconfig is strict, without skipLibCheck',
    );
    check(written.map(fileOf).includes('src/main.ts'), 'the README gives src/main.ts');
    const compile = async (args, what) => {
      say(`npx tsc ${args.join(' ')} …`);
      const tsc = await capture('npx', ['--no-install', 'tsc', ...args], dir);
      if (tsc.stdout.trim()) console.log(tsc.stdout.trim().replace(/^/gm, `  ${app.id}: `));
      check(
        tsc.status === 0,
        `tsc ${app.typescript} (strict, no skipLibCheck) compiles the app ${what}: exit ${tsc.status}`,
      );
      return tsc.status === 0;
    };
    if (!(await compile(['-p', 'tsconfig.json'], `as ${app.modules}`))) throw new Error('the app does not compile');
    if (app.node10) {
      // TypeScript 6 deprecates node10 resolution; the apps that still use it are on TypeScript 5.
      const deprecated = Number(app.typescript.split('.')[0]) >= 6 ? ['--ignoreDeprecations', '6.0'] : [];
      await compile(
        ['-p', 'tsconfig.json', '--noEmit', '--module', 'commonjs', '--moduleResolution', 'node10', ...deprecated],
        'with "module": "commonjs" (node10 resolution)',
      );
    }
    const main = readFileSync(join(dir, 'dist/app.module.js'), 'utf8');
    check(
      app.modules === 'ESM'
        ? /^import .* from 'nest-pg-lease';$/m.test(main) && !/\brequire\(/.test(main)
        : /\brequire\("nest-pg-lease"\)/.test(main) && !/^import /m.test(main),
      `tsc emitted ${app.modules} (dist/app.module.js ${app.modules === 'ESM' ? 'imports' : 'requires'} nest-pg-lease)`,
    );
    notes.push(
      `${app.id}: install + build ${seconds(buildStarted)} s (@nestjs/core ${app.nest}, typeorm ${app.typeorm}, ` +
        `typescript ${app.typescript}, file-type ${fileType})`,
    );
  } catch (error) {
    check(false, String(error?.message ?? error));
  }
  if (buildRow.failures.length > 0) {
    for (const appRow of appRows) appRow.skipped = `${buildRow.label} failed`;
    return;
  }

  // 6. The built app on each Node.js major, side by side.
  await Promise.all(
    appRows.map(async (appRow) => {
      const rowCheck = checker(appRow);
      const live = startedBy();
      log(`── ${appRow.label} (${appRow.node}) ──`);
      const runStarted = performance.now();
      try {
        await proveApp({
          dir,
          node: nodes.get(appRow.major).binary,
          serverUrl: server.url,
          check: rowCheck,
          log: (message) => log(`${appRow.label}: ${message}`),
          live,
        });
      } catch (error) {
        rowCheck(false, String(error?.message ?? error));
      } finally {
        end(live);
      }
      appRow.seconds = seconds(runStarted);
    }),
  );

  // 7. The README's Node 20 override of file-type: needed on Node 20, not on Node ≥ 22. npm resolves the same
  //    install commands without the override (a lock file only, nothing downloaded) under each Node.js.
  if (!override) return;
  await Promise.all(
    appRows.map(async (appRow) => {
      const rowCheck = checker(appRow);
      const scratch = join(work, `${app.id}-engines-${appRow.major}`);
      mkdirSync(scratch);
      writeFileSync(
        join(scratch, 'package.json'),
        `${JSON.stringify({ name: 'engines', private: true, type: app.type })}\n`,
      );
      const warned = new Set();
      for (const { args } of installCommands(blocks, tarball)) {
        const result = await capture(
          nodes.get(appRow.major).binary,
          [npmCli(), ...args, '--package-lock-only', '--no-audit', '--no-fund'],
          scratch,
        );
        if (result.status !== 0) {
          rowCheck(false, `npm (lock only) failed on Node ${appRow.node}:\n${result.stderr}`);
          return;
        }
        for (const match of result.stderr.matchAll(/EBADENGINE\s+package: '([^']+)'/g)) warned.add(match[1]);
      }
      const names = [...warned];
      log(
        `${appRow.label}: without the override on Node ${appRow.node}: ` +
          `${names.length > 0 ? `EBADENGINE for ${names.join(', ')}` : 'no EBADENGINE'}`,
      );
      rowCheck(
        appRow.major < 22
          ? names.length > 0 && names.every((name) => name.startsWith('file-type@'))
          : names.length === 0,
        appRow.major < 22
          ? `without the README's override, npm warns EBADENGINE on Node ${appRow.node} for file-type alone (the override is needed)`
          : `without the README's override, npm is free of EBADENGINE on Node ${appRow.node} (none needed)`,
      );
      appRow.override = appRow.major < 22 ? 'needed' : 'not needed';
    }),
  );
}

const check = checker(packageRow);
try {
  // 1. The tarball, exactly as `npm publish` would make it (prepack builds a clean dist), checked once.
  const packStarted = performance.now();
  log(`npm pack libs/lease (prepack builds dist/esm and dist/cjs) …`);
  const packed = JSON.parse(
    await run('npm', ['pack', '--json', '--pack-destination', work, '--loglevel=error'], join(repo, 'libs/lease')),
  )[0];
  const tarball = join(work, packed.filename);
  const files = packed.files.map((file) => file.path).sort();
  log(
    `${packed.filename}: ${packed.entryCount} files, ${(packed.size / 1024).toFixed(1)} kB packed, ` +
      `${(packed.unpackedSize / 1024).toFixed(1)} kB unpacked`,
  );
  for (const file of packed.files) console.log(`  ${String(file.size).padStart(7)}  ${file.path}`);
  for (const build of ['esm', 'cjs']) {
    check(
      files.includes(`dist/${build}/index.js`) && files.includes(`dist/${build}/index.d.ts`),
      `tarball has dist/${build}/index.js and its .d.ts`,
    );
  }
  check(
    files.includes('dist/esm/package.json') && files.includes('dist/cjs/package.json'),
    'tarball has the package.json that marks each build',
  );
  check(files.includes('README.md') && files.includes('LICENSE'), 'tarball has README.md and LICENSE');
  check(!files.some((file) => file.startsWith('src/')), 'tarball has no src/');
  check(!files.some((file) => /\.spec\./.test(file)), 'tarball has no spec files');
  check(!files.some((file) => /tsconfig|^scripts\//.test(file)), 'tarball has no tsconfig or build script');
  check(!files.some((file) => file.endsWith('.ts') && !file.endsWith('.d.ts')), 'tarball has no TypeScript sources');
  // Types for every entry point and every resolution mode: node10, node16 from CJS and from ESM, bundler. The
  // Node.js binaries of the matrix download meanwhile.
  const majors = [...new Set(apps.flatMap((app) => app.nodes))].sort();
  const binaries = Promise.all(majors.map((major) => nodeBinary(major)));
  binaries.catch(() => undefined); // awaited below
  const attw = await capture(
    process.execPath,
    [
      join(repo, 'node_modules/@arethetypeswrong/cli/dist/index.js'),
      tarball,
      '--no-definitely-typed',
      '--format',
      'table-flipped',
      '--no-emoji',
      '--no-color',
    ],
    work,
  );
  console.log(`${attw.stdout}${attw.stderr}`.trim().replace(/^/gm, '  '));
  check(attw.status === 0, `@arethetypeswrong/cli finds no problem in the tarball's types: exit ${attw.status}`);
  notes.push(`pack + checks + @arethetypeswrong/cli: ${seconds(packStarted)} s`);

  // 2. The Node.js binaries of the matrix, and one PostgreSQL (DATABASE_URL or embedded) for every run.
  const nodes = new Map();
  for (const [i, binary] of (await binaries).entries()) {
    nodes.set(majors[i], { binary, version: (await run(binary, ['--version'], repo)).trim() });
  }
  log(`Node.js: ${[...nodes.values()].map((node) => `${node.version} (${node.binary})`).join(', ')}`);
  server = await startPostgres();

  const installBlocks = readmeBlocks('Install');
  const usageBlocks = readmeBlocks('Usage').filter((block) => fileOf(block));
  await Promise.all(apps.map((app) => appMatrix(app, { tarball, packed, nodes, installBlocks, usageBlocks })));
} catch (error) {
  check(false, String(error?.stack ?? error));
} finally {
  for (const live of started) end(live);
  for (const databaseUrl of databases) await dropDatabase(server.url, databaseUrl).catch(() => undefined);
  await server?.destroy();
  rmSync(work, { recursive: true, force: true });
}

// The summary: printed, and written to artifacts/consumer/summary.md.
const result = (r) =>
  r.skipped ? `not run (${r.skipped})` : r.failures.length === 0 ? 'pass' : `FAIL: ${r.failures.join('; ')}`;
const table = [
  '| NestJS | modules | TypeORM | TypeScript | Node.js | result | time |',
  '|---|---|---|---|---|---|---|',
  ...rows.map(
    (r) =>
      `| ${r.app.nest ?? '?'} | ${r.app.modules} | ${r.app.typeorm ?? '?'} | ${r.app.typescript ?? '?'} | ${r.node} | ` +
      `${result(r)} | ${r.seconds ? `${r.seconds} s` : '–'} |`,
  ),
];
const total = seconds(startedAt);
const summary = [
  '# Consumer matrix (`npm run test:consumer`)',
  '',
  ...table,
  '',
  'Time per row: the built app started with that `node`, proven over HTTP, stopped with SIGTERM. Shared steps:',
  '',
  ...notes.map((note) => `- ${note}`),
  ...rows.filter((r) => r.override).map((r) => `- the README's file-type override on Node ${r.node}: ${r.override}`),
  `- package checks (tarball, both builds, @arethetypeswrong/cli): ${result(packageRow)}`,
  `- total: ${total} s`,
  ...(failures.length > 0 ? ['', `${failures.length} failure(s):`, '', ...failures.map((f) => `- ${f}`)] : []),
  '',
].join('\n');
console.log(`\n${summary}`);
mkdirSync(join(repo, 'artifacts/consumer'), { recursive: true });
writeFileSync(join(repo, 'artifacts/consumer/summary.md'), summary);
const counted = [packageRow, ...rows];
const passed = counted.filter((r) => !r.skipped && r.failures.length === 0).length;
if (failures.length > 0) console.error(`[consumer] ${failures.length} failure(s)`);
else log('all checks passed');
// The closing line: the matrix's rows and the package checks.
console.log(`consumer: ${passed} passed, ${counted.length - passed} failed`);
if (failures.length > 0) process.exit(1);

// `npm run release`: releases the version libs/lease/package.json names (docs/releasing.md). In order:
//   1. refuses, changing nothing: a dirty tree (untracked files included), a version that is not semver, a root
//      package.json of another version, a tag v<version> that exists, a CHANGELOG.md that has a section for the
//      version already or whose [Unreleased] section is empty (a version without a CHANGELOG entry);
//   2. runs the checks: `npm run lint` (types, eslint, prettier, dependency rules, commit convention, the package's
//      size budget), `npm run test:unit`, `npm run build`, then `npm pack` of libs/lease into artifacts/release/ and
//      the size budget on that very tarball;
//   3. moves [Unreleased] under `## [<version>] - <date>` (a fresh empty [Unreleased] above it, the compare links
//      below), commits it (`chore(release): <version>`) and tags the commit `v<version>` (annotated, the section as
//      its message). Nothing is pushed or published: docs/releasing.md says what comes next.
//
//   npm run release                    release the version of libs/lease/package.json
//   npm run release -- 0.3.0           the same, refused unless package.json names 0.3.0 (a guard)
//   npm run release -- --dry-run       everything but the commit and the tag: CHANGELOG.md is left as it is, the
//                                      section it would get is written to artifacts/release/CHANGELOG.md and printed
//   npm run release -- --set-version 0.4.0
//                                      only sets the version (both package.json files and package-lock.json), for a
//                                      commit of its own before the release
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { BUDGET, overBudget } from './check-pack-size.mjs';

export const REPOSITORY = 'https://github.com/nest-pg-lease/nest-pg-lease';
const SEMVER = /^\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?$/;
const UNRELEASED = '## [Unreleased]';

/** The checks, in order: each an npm script of the workspace. */
export const CHECKS = [
  ['npm', ['run', 'lint']],
  ['npm', ['run', 'test:unit']],
  ['npm', ['run', 'build']],
];

class Refusal extends Error {}

/**
 * The CHANGELOG with [Unreleased] released as `version` on `date`: the entries move under `## [version] - date`, an
 * empty [Unreleased] stays on top, and the link references at the bottom compare each version with the one before.
 * Refuses (a `Refusal`) a version it has already, or an empty [Unreleased].
 */
export function releasedChangelog(text, version, date) {
  if (text.includes(`## [${version}]`)) throw new Refusal(`CHANGELOG.md has a section for ${version} already`);
  const start = text.indexOf(UNRELEASED);
  if (start < 0) throw new Refusal(`CHANGELOG.md has no "${UNRELEASED}" section`);
  const bodyStart = start + UNRELEASED.length;
  const next = text.slice(bodyStart).search(/^## \[|^\[[^\]]+\]: /m);
  const bodyEnd = next < 0 ? text.length : bodyStart + next;
  const body = text.slice(bodyStart, bodyEnd).trim();
  if (!/^\s*[-*] |^### /m.test(body)) {
    throw new Refusal(`CHANGELOG.md's [Unreleased] section is empty: write what ${version} changes first`);
  }
  const previous = text.slice(bodyEnd).match(/^## \[([^\]]+)\]/m)?.[1];
  const links = text
    .slice(bodyEnd)
    .split('\n')
    .filter((line) => /^\[[^\]]+\]: /.test(line) && !line.startsWith('[Unreleased]: '));
  const rest = text
    .slice(bodyEnd)
    .split('\n')
    .filter((line) => !/^\[[^\]]+\]: /.test(line))
    .join('\n')
    .trimEnd();
  const references = [
    `[Unreleased]: ${REPOSITORY}/compare/v${version}...HEAD`,
    previous
      ? `[${version}]: ${REPOSITORY}/compare/v${previous}...v${version}`
      : `[${version}]: ${REPOSITORY}/releases/tag/v${version}`,
    ...links,
  ];
  const section = `## [${version}] - ${date}\n\n${body}\n`;
  const released =
    `${text.slice(0, start)}${UNRELEASED}\n\n${section}${rest ? `\n${rest}\n` : ''}\n` + `${references.join('\n')}\n`;
  return { text: released, section };
}

/** Sets `version` in the workspace's and the package's package.json and in package-lock.json. */
export function setVersion(root, version) {
  if (!SEMVER.test(version)) throw new Refusal(`"${version}" is not a semver version (1.2.3 or 1.2.3-rc.1)`);
  const edit = (path, change) => {
    const file = join(root, path);
    if (!existsSync(file)) return;
    const json = JSON.parse(readFileSync(file, 'utf8'));
    change(json);
    writeFileSync(file, `${JSON.stringify(json, null, 2)}\n`);
  };
  edit('package.json', (json) => (json.version = version));
  edit('libs/lease/package.json', (json) => (json.version = version));
  edit('package-lock.json', (json) => {
    json.version = version;
    if (json.packages?.['']) json.packages[''].version = version;
    if (json.packages?.['libs/lease']) json.packages['libs/lease'].version = version;
  });
}

function git(root, ...args) {
  return execFileSync('git', args, { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();
}

function step(root, command, args, cwd = root) {
  const label = `${command} ${args.join(' ')}`;
  console.log(`release: ${label}${cwd === root ? '' : ` (in ${cwd.slice(root.length + 1)})`}`);
  const started = performance.now();
  const result = spawnSync(command, args, { cwd, stdio: 'inherit' });
  if (result.status !== 0) throw new Error(`release: ${label} failed (exit ${result.status ?? result.signal})`);
  console.log(`release: ${label}: ok in ${((performance.now() - started) / 1000).toFixed(0)} s`);
}

/** Packs libs/lease into artifacts/release/ and checks that tarball against the size budget. */
function pack(root) {
  const destination = join(root, 'artifacts/release');
  mkdirSync(destination, { recursive: true });
  console.log('release: npm pack (in libs/lease)');
  const output = execFileSync('npm', ['pack', '--json', '--loglevel=error', '--pack-destination', destination], {
    cwd: join(root, 'libs/lease'),
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const [report] = JSON.parse(output.slice(output.lastIndexOf('\n[') + 1));
  const size = { files: report.entryCount, packedBytes: report.size, unpackedBytes: report.unpackedSize };
  const problems = overBudget(size);
  if (problems.length > 0) throw new Error(`release: the tarball is over its budget: ${problems.join('; ')}`);
  console.log(
    `release: ${report.filename}: ${size.files} files, ${size.packedBytes} bytes packed, ${size.unpackedBytes} ` +
      `unpacked (budget ${BUDGET.files} files, ${BUDGET.packedBytes}, ${BUDGET.unpackedBytes})`,
  );
  return join(destination, report.filename);
}

/** Releases (see the top of this file). `date`: YYYY-MM-DD, today (UTC) by default. */
export function release({ root, version: asked, dryRun = false, date = new Date().toISOString().slice(0, 10) }) {
  const read = (path) => readFileSync(join(root, path), 'utf8');
  const version = JSON.parse(read('libs/lease/package.json')).version;
  // 1. Refusals, before anything runs or changes.
  const dirty = git(root, 'status', '--porcelain', '--untracked-files=all');
  if (dirty) throw new Refusal(`the tree is not clean: commit or remove these first:\n${dirty}`);
  if (!SEMVER.test(version)) throw new Refusal(`libs/lease/package.json's version "${version}" is not semver`);
  if (asked !== undefined && asked !== version) {
    throw new Refusal(
      `libs/lease/package.json names ${version}, not ${asked}: set it first (npm run release -- --set-version ${asked})`,
    );
  }
  const rootVersion = JSON.parse(read('package.json')).version;
  if (rootVersion !== version) {
    throw new Refusal(`package.json names ${rootVersion}, libs/lease/package.json ${version}: use --set-version`);
  }
  if (git(root, 'tag', '--list', `v${version}`)) throw new Refusal(`the tag v${version} exists already`);
  const changelog = releasedChangelog(read('CHANGELOG.md'), version, date);

  // 2. The checks.
  for (const [command, args] of CHECKS) step(root, command, args);
  const tarball = pack(root);

  // 3. The changelog, the commit and the tag.
  if (dryRun) {
    writeFileSync(join(root, 'artifacts/release/CHANGELOG.md'), changelog.text);
    console.log(
      `release: dry run: every check passed; ${tarball} is what would be published. Not done: CHANGELOG.md would ` +
        `get this section (whole file in artifacts/release/CHANGELOG.md), committed as "chore(release): ` +
        `${version}" and tagged v${version}:\n\n${changelog.section}`,
    );
    return { version, tarball, section: changelog.section, committed: false };
  }
  writeFileSync(join(root, 'CHANGELOG.md'), changelog.text);
  git(root, 'add', 'CHANGELOG.md');
  git(
    root,
    'commit',
    '--quiet',
    '-m',
    `chore(release): ${version}`,
    '-m',
    `CHANGELOG.md: [Unreleased] becomes [${version}] - ${date}.`,
  );
  git(root, 'tag', '--annotate', `v${version}`, '-m', `nest-pg-lease ${version}\n\n${changelog.section}`);
  console.log(
    `release: committed and tagged v${version}. Next (docs/releasing.md): git push origin HEAD v${version}, then ` +
      `npm publish ${tarball}`,
  );
  return { version, tarball, section: changelog.section, committed: true };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: { 'dry-run': { type: 'boolean', default: false }, 'set-version': { type: 'string' } },
  });
  const root = git(process.cwd(), 'rev-parse', '--show-toplevel');
  try {
    if (values['set-version'] !== undefined) {
      setVersion(root, values['set-version']);
      console.log(`release: version set to ${values['set-version']}: commit it ("chore: version …"), then release`);
    } else release({ root, version: positionals[0], dryRun: values['dry-run'] });
  } catch (error) {
    console.error(error instanceof Refusal ? `release: refused: ${error.message}` : error.message);
    process.exitCode = 1;
  }
}

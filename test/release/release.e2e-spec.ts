import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

// The release script (scripts/release.mjs) and the commit convention (scripts/check-commits.mjs) as a maintainer runs
// them, in a repository of their own: a copy of the two scripts and the size budget's, a package.json whose lint,
// test:unit and build scripts record that they ran (the workspace's own take minutes and are tested where they are),
// a libs/lease package, a CHANGELOG. Real git, real npm (npm pack included), real processes.

const repo = process.cwd();
const COMMIT_ENV = {
  GIT_AUTHOR_NAME: 'Release Test',
  GIT_AUTHOR_EMAIL: 'release@example.com',
  GIT_COMMITTER_NAME: 'Release Test',
  GIT_COMMITTER_EMAIL: 'release@example.com',
};

const CHANGELOG = `# Changelog

All notable changes to \`nest-pg-lease\` are documented in this file.

## [Unreleased]

### Added

- A console page.
`;

interface Run {
  status: number | null;
  output: string;
}

/** A repository laid out like the workspace, committed, clean. */
function fixture(): string {
  const dir = mkdtempSync(join(tmpdir(), 'release-test-'));
  mkdirSync(join(dir, 'scripts'));
  mkdirSync(join(dir, 'libs/lease'), { recursive: true });
  for (const script of ['release.mjs', 'check-pack-size.mjs', 'check-commits.mjs']) {
    copyFileSync(join(repo, 'scripts', script), join(dir, 'scripts', script));
  }
  const record = (name: string, exit = 0) =>
    `node -e "require('fs').appendFileSync('steps.log', '${name}\\n'); process.exit(${exit})"`;
  writeFileSync(
    join(dir, 'package.json'),
    JSON.stringify(
      {
        name: 'workspace',
        version: '0.3.0',
        private: true,
        scripts: { lint: record('lint'), 'test:unit': record('unit'), build: record('build') },
      },
      null,
      2,
    ),
  );
  writeFileSync(
    join(dir, 'libs/lease/package.json'),
    JSON.stringify({ name: 'nest-pg-lease', version: '0.3.0', files: ['index.js'] }, null, 2),
  );
  writeFileSync(join(dir, 'libs/lease/index.js'), 'module.exports = {};\n');
  writeFileSync(join(dir, 'CHANGELOG.md'), CHANGELOG);
  writeFileSync(join(dir, '.gitignore'), 'artifacts/\nsteps.log\n');
  git(dir, 'init', '--quiet', '--initial-branch=main');
  git(dir, 'add', '.');
  git(dir, 'commit', '--quiet', '-m', 'chore: the fixture', '-m', 'A repository to release.');
  return dir;
}

function git(dir: string, ...args: string[]): string {
  return execFileSync('git', args, { cwd: dir, encoding: 'utf8', env: { ...process.env, ...COMMIT_ENV } }).trim();
}

function release(dir: string, ...args: string[]): Run {
  const result = spawnSync(process.execPath, ['scripts/release.mjs', ...args], {
    cwd: dir,
    encoding: 'utf8',
    env: { ...process.env, ...COMMIT_ENV },
    timeout: 120_000,
  });
  return { status: result.status, output: `${result.stdout}${result.stderr}` };
}

const steps = (dir: string) => (existsSync(join(dir, 'steps.log')) ? readFileSync(join(dir, 'steps.log'), 'utf8') : '');

describe('scripts/release.mjs', () => {
  const dirs: string[] = [];
  const made = () => {
    const dir = fixture();
    dirs.push(dir);
    return dir;
  };

  afterAll(() => {
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  test('--dry-run: every check and the pack run, nothing is committed, tagged or changed', () => {
    const dir = made();
    const head = git(dir, 'rev-parse', 'HEAD');
    const run = release(dir, '--dry-run');
    expect(run).toEqual({ status: 0, output: expect.stringContaining('dry run: every check passed') });
    expect(steps(dir)).toBe('lint\nunit\nbuild\n');
    expect(existsSync(join(dir, 'artifacts/release/nest-pg-lease-0.3.0.tgz'))).toBe(true);
    // What the release would write: the section, dated, under a fresh [Unreleased], and the links.
    const date = new Date().toISOString().slice(0, 10);
    expect(run.output).toContain(`## [0.3.0] - ${date}\n\n### Added\n\n- A console page.`);
    const preview = readFileSync(join(dir, 'artifacts/release/CHANGELOG.md'), 'utf8');
    expect(preview).toContain(`## [Unreleased]\n\n## [0.3.0] - ${date}\n\n### Added\n\n- A console page.\n`);
    expect(preview).toContain('[0.3.0]: https://github.com/nest-pg-lease/nest-pg-lease/releases/tag/v0.3.0');
    // Not done: the tree, the history and the tags are as they were.
    expect(readFileSync(join(dir, 'CHANGELOG.md'), 'utf8')).toBe(CHANGELOG);
    expect(git(dir, 'status', '--porcelain')).toBe('');
    expect(git(dir, 'rev-parse', 'HEAD')).toBe(head);
    expect(git(dir, 'tag', '--list')).toBe('');
  });

  test('refuses a dirty tree, a version argument package.json does not name, an empty [Unreleased]: nothing runs', () => {
    const dir = made();
    writeFileSync(join(dir, 'notes.txt'), 'untracked\n');
    expect(release(dir, '--dry-run')).toEqual({
      status: 1,
      output: expect.stringMatching(/refused: the tree is not clean.*\n.*notes\.txt/),
    });
    rmSync(join(dir, 'notes.txt'));
    expect(release(dir, '0.4.0', '--dry-run')).toEqual({
      status: 1,
      output: expect.stringContaining('refused: libs/lease/package.json names 0.3.0, not 0.4.0'),
    });
    writeFileSync(join(dir, 'CHANGELOG.md'), '# Changelog\n\n## [Unreleased]\n\n## [0.2.0] - 2026-01-01\n\n- x\n');
    git(dir, 'commit', '--quiet', '-am', 'docs: empty changelog', '-m', 'For the test.');
    expect(release(dir, '--dry-run')).toEqual({
      status: 1,
      output: expect.stringContaining("refused: CHANGELOG.md's [Unreleased] section is empty"),
    });
    expect(steps(dir)).toBe('');
  });

  test('a failing check stops the release before the commit and the tag', () => {
    const dir = made();
    const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
    manifest.scripts['test:unit'] = `node -e "process.exit(3)"`;
    writeFileSync(join(dir, 'package.json'), JSON.stringify(manifest, null, 2));
    git(dir, 'commit', '--quiet', '-am', 'test: a failing unit tier', '-m', 'For the test.');
    const head = git(dir, 'rev-parse', 'HEAD');
    const run = release(dir);
    expect(run).toEqual({ status: 1, output: expect.stringContaining('npm run test:unit failed (exit 3)') });
    expect(steps(dir)).toBe('lint\n');
    expect(git(dir, 'rev-parse', 'HEAD')).toBe(head);
    expect(git(dir, 'tag', '--list')).toBe('');
    expect(readFileSync(join(dir, 'CHANGELOG.md'), 'utf8')).toBe(CHANGELOG);
  });

  test('a tarball over the size budget stops the release', () => {
    const dir = made();
    writeFileSync(join(dir, 'libs/lease/index.js'), `module.exports = '${'x'.repeat(2_100_000)}';\n`);
    git(dir, 'commit', '--quiet', '-am', 'feat: a heavy package', '-m', 'For the test.');
    const run = release(dir, '--dry-run');
    expect(run).toEqual({ status: 1, output: expect.stringMatching(/over its budget: unpackedBytes [\d,]+ is over/) });
  });

  test('the release commits the changelog and tags it; the same version again is refused', () => {
    const dir = made();
    const run = release(dir, '0.3.0');
    expect(run).toEqual({ status: 0, output: expect.stringContaining('committed and tagged v0.3.0') });
    expect(git(dir, 'log', '-1', '--format=%s')).toBe('chore(release): 0.3.0');
    expect(git(dir, 'tag', '--list')).toBe('v0.3.0');
    expect(git(dir, 'rev-parse', 'v0.3.0^{commit}')).toBe(git(dir, 'rev-parse', 'HEAD'));
    expect(git(dir, 'status', '--porcelain')).toBe('');
    const changelog = readFileSync(join(dir, 'CHANGELOG.md'), 'utf8');
    expect(changelog).toMatch(
      /## \[Unreleased\]\n\n## \[0\.3\.0\] - \d{4}-\d\d-\d\d\n\n### Added\n\n- A console page\.\n/,
    );
    // Its own commit follows the convention it checks.
    writeFileSync(join(dir, 'artifacts/COMMIT_EDITMSG'), git(dir, 'log', '-1', '--format=%B'));
    const checked = spawnSync(process.execPath, ['scripts/check-commits.mjs', 'artifacts/COMMIT_EDITMSG'], {
      cwd: dir,
    });
    expect(checked.status).toBe(0);
    expect(release(dir, '--dry-run')).toEqual({
      status: 1,
      output: expect.stringContaining('refused: the tag v0.3.0 exists already'),
    });
  });
});

describe('scripts/check-commits.mjs', () => {
  const check = (message: string) => {
    const file = join(mkdtempSync(join(tmpdir(), 'commit-msg-')), 'COMMIT_EDITMSG');
    writeFileSync(file, message);
    const result = spawnSync(process.execPath, [join(repo, 'scripts/check-commits.mjs'), file], { encoding: 'utf8' });
    rmSync(file);
    return { status: result.status, problems: result.stderr.trim() };
  };

  test.each([
    'feat: a console page in the package',
    'fix(console): escape the owner',
    'refactor!: one answer table',
    'chore(release): 0.3.0',
    "Merge branch 'main' into feat/x",
  ])('%j follows the convention', (subject) => {
    expect(check(`${subject}\n\nWhy it was done.\n`)).toEqual({ status: 0, problems: '' });
  });

  test.each([
    [
      'Add a console page',
      /no type prefix: start it with one of feat, fix, docs, test, refactor, perf, build, ci, chore/,
    ],
    ['feature: a console page', /no type prefix/],
    ['feat:a console page', /no type prefix/],
    ['Feat: a console page', /no type prefix/],
    [`feat: ${'x'.repeat(70)}`, /the subject has 76 characters \(at most 72\)/],
  ])('%j is refused', (subject, why) => {
    expect(check(`${subject}\n\nWhy.\n`)).toEqual({ status: 1, problems: expect.stringMatching(why) });
  });

  test('the history since the base commit follows it (the base itself and before: as written)', () => {
    const result = spawnSync(process.execPath, ['scripts/check-commits.mjs'], { cwd: repo, encoding: 'utf8' });
    expect({ status: result.status, stderr: result.stderr }).toEqual({ status: 0, stderr: '' });
    expect(result.stdout).toMatch(/since [0-9a-f]{7}, typed\), 0 not following the convention|nothing checked/);
  });
});

// `npm run lint:commits`: the commit-message convention — a subject of at most 72 characters, then a blank line and a
// body that says why — for every commit after BASELINE (the history before it is left as it was written); and, for
// every commit after TYPED_BASELINE, a type prefix on the subject (`feat: …`, `fix(console): …`, `feat!: …`), so the
// changelog can be gathered by type (docs/releasing.md). Also run by .githooks/commit-msg on a message being written
// (`git config core.hooksPath .githooks`), where both rules apply.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

/** The last commit before the convention (main at the start of issue 22). */
const BASELINE = 'c930540b175b1ee5cfbe9e7c71bfb945636316bb';
/**
 * The last commit before the type prefix (the merge of issue 41's package work, which introduced it, into main):
 * the commits that descend from it carry a type. A branch that began before it keeps its messages as written when it is merged (only the
 * descendants of this commit are held to the prefix; the merge commits themselves are written by git).
 */
const TYPED_BASELINE = '826bbb2bc7299b53448a10ec07534e68f2adfe94';
const MAX_SUBJECT = 72;
/** The types, as Conventional Commits names them; the changelog groups by them (docs/releasing.md). */
export const TYPES = ['feat', 'fix', 'docs', 'test', 'refactor', 'perf', 'build', 'ci', 'chore'];
/** `type: subject`, `type(scope): subject`, `type!: subject` (a breaking change). */
const TYPED = new RegExp(`^(?:${TYPES.join('|')})(?:\\([a-z0-9][a-z0-9-]*\\))?!?: \\S`);
/**
 * Commits written on branches that began before the convention and merged after BASELINE (the version matrix and
 * the Nest 11 work): left as they were written, like the history before BASELINE.
 */
const WRITTEN_BEFORE = new Set(['a2c60d9', '72a3a17', 'ce03800']);

/** The problems of one commit message (empty: it follows the convention); `typed`: the type prefix is required. */
export function problemsOf(message, { typed = true } = {}) {
  const [subject = '', second, ...rest] = message.replace(/\r/g, '').split('\n');
  const problems = [];
  if (subject.trim().length === 0) problems.push('the subject is empty');
  if (subject.length > MAX_SUBJECT)
    problems.push(`the subject has ${subject.length} characters (at most ${MAX_SUBJECT})`);
  if (typed && subject.trim().length > 0 && !TYPED.test(subject)) {
    problems.push(
      `the subject has no type prefix: start it with one of ${TYPES.join(', ')} ("fix: …", "docs(console): …")`,
    );
  }
  if (second !== undefined && second.trim() !== '' && !second.startsWith('#')) {
    problems.push('the subject is not followed by a blank line');
  }
  void rest;
  return problems;
}

const git = (...args) => execFileSync('git', args, { encoding: 'utf8' });

function exists(commit) {
  try {
    execFileSync('git', ['cat-file', '-e', `${commit}^{commit}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** The non-merge commits of `range` (git log arguments), as [hash, message]. */
function commitsOf(...range) {
  return git('log', '--no-merges', '--format=%H%x00%B%x01', ...range)
    .split('\x01')
    .map((entry) => entry.replace(/^\n/, '').split('\x00'))
    .filter(([hash, message]) => hash && message !== undefined);
}

function checkRange() {
  if (!exists(BASELINE)) {
    console.log(`check-commits: the baseline ${BASELINE.slice(0, 7)} is not in this clone (shallow?): nothing checked`);
    return 0;
  }
  // Held to the type prefix: the descendants of TYPED_BASELINE (a shallow clone without it: none).
  const typed = new Set(
    exists(TYPED_BASELINE)
      ? git('rev-list', '--no-merges', '--ancestry-path', `${TYPED_BASELINE}..HEAD`).split('\n').filter(Boolean)
      : [],
  );
  let failed = 0;
  let count = 0;
  for (const [hash, message] of commitsOf(`${BASELINE}..HEAD`)) {
    if (WRITTEN_BEFORE.has(hash.slice(0, 7))) continue;
    count++;
    const problems = problemsOf(message.trim(), { typed: typed.has(hash) });
    if (problems.length > 0) {
      failed++;
      console.error(`${hash.slice(0, 7)} ${message.split('\n')[0]}\n  ${problems.join('; ')}`);
    }
  }
  console.log(
    `check-commits: ${count} commit(s) since ${BASELINE.slice(0, 7)} (${typed.size} since ` +
      `${TYPED_BASELINE.slice(0, 7)}, typed), ${failed} not following the convention`,
  );
  return failed > 0 ? 1 : 0;
}

function checkFile(path) {
  const message = readFileSync(path, 'utf8')
    .split('\n')
    .filter((line) => !line.startsWith('#'))
    .join('\n')
    .trim();
  // git writes merge messages itself ("Merge branch 'x'"): only the length rules apply to them.
  const problems = problemsOf(message, { typed: !/^Merge /.test(message) });
  for (const problem of problems) console.error(`commit-msg: ${problem}`);
  return problems.length > 0 ? 1 : 0;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  process.exitCode = process.argv[2] ? checkFile(process.argv[2]) : checkRange();
}

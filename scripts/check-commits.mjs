// `npm run lint:commits`: the commit-message convention — a subject of at most 72 characters, then a blank line and a
// body that says why — for every commit after BASELINE (the history before it is left as it was written). Also run by
// .githooks/commit-msg on a message being written (`git config core.hooksPath .githooks`).
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

/** The last commit before the convention (main at the start of issue 22). */
const BASELINE = 'c930540b175b1ee5cfbe9e7c71bfb945636316bb';
const MAX_SUBJECT = 72;
/**
 * Commits written on branches that began before the convention and merged after BASELINE (the version matrix and
 * the Nest 11 work): left as they were written, like the history before BASELINE.
 */
const WRITTEN_BEFORE = new Set(['a2c60d9', '72a3a17', 'ce03800']);

/** The problems of one commit message (empty: it follows the convention). */
export function problemsOf(message) {
  const [subject = '', second, ...rest] = message.replace(/\r/g, '').split('\n');
  const problems = [];
  if (subject.trim().length === 0) problems.push('the subject is empty');
  if (subject.length > MAX_SUBJECT)
    problems.push(`the subject has ${subject.length} characters (at most ${MAX_SUBJECT})`);
  if (second !== undefined && second.trim() !== '' && !second.startsWith('#')) {
    problems.push('the subject is not followed by a blank line');
  }
  void rest;
  return problems;
}

const git = (...args) => execFileSync('git', args, { encoding: 'utf8' });

function checkRange() {
  try {
    execFileSync('git', ['cat-file', '-e', `${BASELINE}^{commit}`], { stdio: 'ignore' });
  } catch {
    console.log(`check-commits: the baseline ${BASELINE.slice(0, 7)} is not in this clone (shallow?): nothing checked`);
    return 0;
  }
  const log = git('log', '--format=%H%x00%B%x01', `${BASELINE}..HEAD`);
  let failed = 0;
  let count = 0;
  for (const entry of log.split('\x01')) {
    const [hash, message] = entry.replace(/^\n/, '').split('\x00');
    if (!hash || message === undefined) continue;
    if (WRITTEN_BEFORE.has(hash.slice(0, 7))) continue;
    count++;
    const problems = problemsOf(message.trim());
    if (problems.length > 0) {
      failed++;
      console.error(`${hash.slice(0, 7)} ${message.split('\n')[0]}\n  ${problems.join('; ')}`);
    }
  }
  console.log(
    `check-commits: ${count} commit(s) since ${BASELINE.slice(0, 7)}, ${failed} not following the convention`,
  );
  return failed > 0 ? 1 : 0;
}

function checkFile(path) {
  const message = readFileSync(path, 'utf8')
    .split('\n')
    .filter((line) => !line.startsWith('#'))
    .join('\n')
    .trim();
  const problems = problemsOf(message);
  for (const problem of problems) console.error(`commit-msg: ${problem}`);
  return problems.length > 0 ? 1 : 0;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  process.exitCode = process.argv[2] ? checkFile(process.argv[2]) : checkRange();
}

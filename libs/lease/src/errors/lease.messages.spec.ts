import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { messages } from './lease.messages.js';

const SRC = new URL('..', import.meta.url).pathname;

/** The catalogue: every error message of the library is written there, and the texts are the ones users know. */
describe('the message catalogue', () => {
  it('no error of the library is constructed with a message written inline', () => {
    const files = readdirSync(SRC, { recursive: true, encoding: 'utf8' }).filter(
      (file) => file.endsWith('.ts') && !file.endsWith('.spec.ts'),
    );
    const inline = files.filter((file) => /new Lease\w*Error\(\s*['"`]/.test(readFileSync(join(SRC, file), 'utf8')));
    expect(inline).toEqual([]);
  });

  it.each<[string, string]>([
    [messages.optionsNotObject(), 'LeaseModule options must be an object'],
    [messages.positiveInteger('poolSize', 1000, '0'), 'poolSize must be a positive integer (at most 1000), got 0'],
    [messages.keyEmpty(), 'A target key must not be empty: name the work, e.g. "report:user:42"'],
    [
      messages.keyTooLong(255, 300),
      'A target key must be at most 255 bytes of UTF-8, got 300: hash long identifiers into the key',
    ],
    [
      messages.tablesMissing('"public"."job_lease"'),
      `Lease tables are missing ("public"."job_lease"): add leaseMigrations to your DataSource's migrations and run them, or set createSchema: true`,
    ],
    [
      messages.busy('k'),
      'Target "k" is leased by another holder: try again later, or wait in line (onBusy: \'wait\', or acquire())',
    ],
  ])('%s', (text, expected) => {
    expect(text).toBe(expected);
  });
});

// Builds the package from libs/lease/src twice: dist/esm (ES modules, what `import` gets) and dist/cjs (CommonJS,
// what `require` gets), and marks each folder's module system with a package.json of its own. The type declarations
// are emitted once, into dist/cjs; each ES entry point's .d.ts (the `import` condition's `types` in package.json) is
// one line re-exporting its CommonJS twin — an ES module may import a CommonJS one, so TypeScript reads the same
// declarations either way, and @arethetypeswrong/cli finds each entry point's types in its own module system. Both builds compile every file under src (tsconfig.lib.json's `include`), so the build does not depend on the
// source layout; what it checks at the end is that every file package.json names (`main`, `types`, `exports`,
// `typesVersions`) was built, that `typesVersions` lists every subpath of `exports`, and that nothing built starts a
// process (the PostgreSQL launcher of this repository's tests lives in libs/pg-harness, which is not published).
//
//   node scripts/build.mjs           the workspace's build (npm run build:lib): overwrites dist in place
//   node scripts/build.mjs --clean   the package's build (prepack): removes dist first, so nothing stale is packed
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const lib = join(dirname(fileURLToPath(import.meta.url)), '..');
const tsc = createRequire(join(lib, 'package.json')).resolve('typescript/bin/tsc');

if (process.argv.includes('--clean')) rmSync(join(lib, 'dist'), { recursive: true, force: true });
for (const project of ['tsconfig.lib.json', 'tsconfig.cjs.json']) {
  execFileSync(process.execPath, [tsc, '-p', project], { cwd: lib, stdio: 'inherit' });
}
// Node and TypeScript read a .js / .d.ts file's module system from the nearest package.json.
writeFileSync(join(lib, 'dist/esm/package.json'), '{ "type": "module" }\n');
writeFileSync(join(lib, 'dist/cjs/package.json'), '{ "type": "commonjs" }\n');

/** Every file path named in a package.json field (conditions nested at any depth). */
function targets(value) {
  if (typeof value === 'string') return [value];
  return Object.values(value ?? {}).flatMap(targets);
}
const manifest = JSON.parse(readFileSync(join(lib, 'package.json'), 'utf8'));
// The ES entry points' declarations: `export *` of the CommonJS twin (the package has no default export).
for (const entry of Object.values(manifest.exports)) {
  const types = entry?.import?.types;
  if (typeof types !== 'string') continue;
  const twin = types.replace('/dist/esm/', '/dist/cjs/');
  const from = relative(dirname(join(lib, types)), join(lib, twin)).replace(/\.d\.ts$/, '.js');
  writeFileSync(join(lib, types), `export * from '${from.startsWith('.') ? from : `./${from}`}';\n`);
}
const problems = [];
const named = [manifest.main, manifest.types, ...targets(manifest.exports), ...targets(manifest.typesVersions)];
for (const target of new Set(named)) {
  if (!existsSync(join(lib, target))) problems.push(`${target} is named in package.json but was not built`);
}
// TypeScript's node10 resolution (`"module": "commonjs"` without `moduleResolution`) ignores `exports`: it finds a
// subpath's types through `typesVersions`, which must therefore list every subpath entry point.
for (const subpath of Object.keys(manifest.exports)) {
  const name = subpath.slice(2);
  if (name && name !== 'package.json' && !manifest.typesVersions?.['*']?.[name]) {
    problems.push(`exports has ${subpath} but typesVersions["*"] has no "${name}"`);
  }
}
// The package starts no process: `nest-pg-lease/testing` works on a PostgreSQL the application's tests provide. The
// sources are read (what both builds compile: src without its specs), not dist, which the in-place build keeps.
for (const file of readdirSync(join(lib, 'src'), { recursive: true, encoding: 'utf8' })) {
  if (!/\.ts$/.test(file) || /\.spec\.ts$/.test(file)) continue;
  if (/\bchild_process\b/.test(readFileSync(join(lib, 'src', file), 'utf8'))) {
    problems.push(`src/${file} uses node:child_process: the published package starts no process`);
  }
}
if (problems.length > 0) {
  console.error(`nest-pg-lease build:\n  ${problems.join('\n  ')}`);
  process.exit(1);
}

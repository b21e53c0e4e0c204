// `npm run docs:examples` (also run by `npm run lint`): every TypeScript code block of README.md and docs/*.md,
// type-checked under `strict` against the library's sources, so that an example cannot rot.
//
// - A block whose first line is `// path/to/file.ts` is that file of one application, the README's Usage (a page's
//   recipe may add a file to it, `src/data-source.ts`): all such blocks are written together under their paths, so
//   their relative imports (`./report.entity.js`) resolve to one another. Two blocks naming one path are an error.
// - Any other block is a module of its own.
// - An HTML comment right before a block changes how it is checked, and does not show on the page:
//     <!-- prelude: import type { Lease } from 'nest-pg-lease'; declare const lease: Lease; -->
//       the comment's code (after `prelude:`) is put before the block: the names a snippet takes from its context;
//     <!-- fragment -->
//       the block is not checked (a piece of a call, a shape with `…`); counted and listed.
// - `nest-pg-lease`, `nest-pg-lease/testing`, `nest-pg-lease/prometheus` and `nest-pg-lease/terminus` resolve to
//   the library's sources (libs/lease/src), the other packages to the repository's node_modules.
//
// Prints one line per block (checked or fragment), then `doc examples: N checked, M fragments`; exits 1 on any
// type error, with the page and line of the block it is in.
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '..');
/** Inside the repository (git-ignored), so that imports of other packages find its node_modules. */
const work = join(repo, '.cache', 'doc-examples');

const pages = [
  'README.md',
  ...readdirSync(join(repo, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => `docs/${name}`),
];

/** The TypeScript blocks of one page: their text, the line of their fence, and their marker. */
function blocksOf(page) {
  const lines = readFileSync(join(repo, page), 'utf8').split('\n');
  const blocks = [];
  for (let index = 0; index < lines.length; index++) {
    const fence = /^(`{3,})(ts|typescript)\s*$/.exec(lines[index]);
    if (!fence) continue;
    const end = lines.findIndex((line, at) => at > index && line.startsWith(fence[1]) && line.trim() === fence[1]);
    if (end < 0) throw new Error(`${page}:${index + 1}: a code block that never closes`);
    // The marker: an HTML comment ending on the line before the fence (it may span lines).
    let marker;
    if (lines[index - 1]?.trimEnd().endsWith('-->')) {
      let start = index - 1;
      while (start > 0 && !lines[start].includes('<!--')) start--;
      marker = lines
        .slice(start, index)
        .join('\n')
        .replace(/^[\s\S]*<!--/, '')
        .replace(/-->\s*$/, '')
        .trim();
    }
    blocks.push({ page, line: index + 1, body: lines.slice(index + 1, end).join('\n'), marker });
    index = end;
  }
  return blocks;
}

rmSync(work, { recursive: true, force: true });
mkdirSync(work, { recursive: true });

const checked = [];
const fragments = [];
/** Written file → the block it came from and how many lines were put before the block's first line. */
const origins = new Map();
for (const page of pages) {
  const slug = page.replace(/\.md$/, '').replace(/[^\w]+/g, '-');
  blocksOf(page).forEach((block, n) => {
    if (block.marker === 'fragment') {
      fragments.push(block);
      return;
    }
    if (block.marker !== undefined && !block.marker.startsWith('prelude:')) {
      throw new Error(`${page}:${block.line}: unknown marker <!-- ${block.marker} --> (fragment, or prelude: …)`);
    }
    const prelude = block.marker?.slice('prelude:'.length).trim() ?? '';
    const named = /^\/\/ ([\w./-]+\.ts)\n/.exec(`${block.body}\n`)?.[1];
    const file = named ? join(work, 'app', named) : join(work, slug, `block-${String(n + 1).padStart(2, '0')}.ts`);
    if (origins.has(file)) throw new Error(`${page}:${block.line}: ${named} is written by another block too`);
    mkdirSync(dirname(file), { recursive: true });
    // `export {}` makes every block a module, whatever it contains.
    const head = prelude ? `${prelude}\n` : '';
    writeFileSync(file, `${head}${block.body}\nexport {};\n`);
    origins.set(file, { block, offset: head.split('\n').length - 1 });
    checked.push(block);
  });
}

const library = (path) => join(repo, 'libs/lease/src', path);
const options = {
  target: ts.ScriptTarget.ES2022,
  lib: ['lib.es2023.d.ts', 'lib.dom.d.ts', 'lib.esnext.disposable.d.ts'],
  module: ts.ModuleKind.NodeNext,
  moduleResolution: ts.ModuleResolutionKind.NodeNext,
  experimentalDecorators: true,
  emitDecoratorMetadata: true,
  strict: true,
  noImplicitOverride: true,
  esModuleInterop: true,
  skipLibCheck: true,
  noEmit: true,
  types: ['node', 'jest'],
  typeRoots: [join(repo, 'node_modules/@types')],
  paths: {
    'nest-pg-lease': [library('index.ts')],
    'nest-pg-lease/testing': [library('testing/index.ts')],
    'nest-pg-lease/*': [library('integrations/*.ts')],
  },
};
const program = ts.createProgram([...origins.keys()], options);
const diagnostics = ts.getPreEmitDiagnostics(program);

let errors = 0;
for (const diagnostic of diagnostics) {
  const message = ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n');
  const origin = diagnostic.file && origins.get(resolve(diagnostic.file.fileName));
  if (!origin) {
    // An error in the library itself, or a global one: `npm run typecheck` owns those, but say so.
    const where = diagnostic.file ? relative(repo, diagnostic.file.fileName) : 'global';
    console.error(`[doc-examples] ${where}: TS${diagnostic.code} ${message}`);
    errors++;
    continue;
  }
  const { line, character } = diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start ?? 0);
  const inBlock = line - origin.offset;
  const where =
    inBlock < 0
      ? `${origin.block.page}:${origin.block.line - 1} (its prelude)`
      : `${origin.block.page}:${origin.block.line + 1 + inBlock}:${character + 1}`;
  console.error(`[doc-examples] ${where}: TS${diagnostic.code} ${message}`);
  errors++;
}

for (const block of checked) console.log(`[doc-examples] checked   ${block.page}:${block.line}`);
for (const block of fragments) console.log(`[doc-examples] fragment  ${block.page}:${block.line}`);
console.log(`doc examples: ${checked.length} checked, ${fragments.length} fragments, ${errors} type errors`);
if (errors > 0) process.exit(1);
rmSync(work, { recursive: true, force: true });

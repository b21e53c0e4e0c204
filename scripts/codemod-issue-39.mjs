// One-off codemod of issue 39 ("modes in the type"), kept for review and for branches still to be rebased: rewrites
// the object literals the type checker knows to be the library's options, in the given files (default: test/, apps/,
// bench/ and the library's specs), and prints what it cannot decide for a human to finish.
//
//   node scripts/codemod-issue-39.mjs [--dry] [path prefix …]
//
// - Module options (`LeaseModuleOptions`, `LeaseTestingOptions`): the flat fields moved into their groups (timing,
//   connections, tables, limits, observability); `owner` and spreads stay where they are (a spread of grouped options
//   merges shallowly: reported).
// - Call options (`run`, `acquire`, `@Exclusive`): the old flags turned into one busy policy, with the old meaning —
//   `preempt: true` → `onBusy: { preempt: { graceMs, waitTimeoutMs } }`; `onBusy: 'join'` → `{ join: { timeoutMs } }`
//   (its joinTimeoutMs, else its waitTimeoutMs); a `priority` or `waitTimeoutMs` of `run` / `@Exclusive` (which used to
//   make the call wait) → `onBusy: 'wait'` / `{ wait: { timeoutMs } }`; `acquire`'s waitTimeoutMs → `{ wait: … }`.
// Not shipped (scripts/ is not in the package); Prettier formats the result.
import { writeFileSync } from 'node:fs';
import { dirname, relative, resolve } from 'node:path';
import ts from 'typescript';

const ROOT = resolve(import.meta.dirname, '..');
const args = process.argv.slice(2);
const dry = args.includes('--dry');
const prefixes = args.filter((arg) => !arg.startsWith('--'));
const roots = (prefixes.length > 0 ? prefixes : ['test/', 'apps/', 'bench/', 'libs/lease/src/']).map((p) =>
  resolve(ROOT, p),
);

const GROUPS = {
  timing: [
    'heartbeatIntervalMs',
    'leaseTimeoutMs',
    'safetyMarginMs',
    'waiterTimeoutMs',
    'defaultWaitTimeoutMs',
    'waitPollIntervalMs',
    'preemptGraceMs',
    'joinResultTtlMs',
    'shutdownGraceMs',
    'fencedIdleTimeoutMs',
    'agingIntervalMs',
  ],
  connections: [
    'dataSourceName',
    'dataSource',
    'poolSize',
    'maxBatchSize',
    'pooler',
    'sessionUrl',
    'notify',
    'asyncReleaseCommits',
  ],
  tables: ['schema', 'tableName', 'waiterTableName', 'createSchema'],
  limits: ['maxWaitersPerTarget', 'maxWaitersPerProcess'],
  observability: ['traceTargetKeys', 'journal'],
};
const GROUP_OF = new Map(Object.entries(GROUPS).flatMap(([group, fields]) => fields.map((f) => [f, group])));
/** Names that only the old flat module options or the old call options used: a literal still holding one is reported. */
const OLD_CALL_NAMES = new Set(['waitTimeoutMs', 'preempt', 'preemptGraceMs', 'joinTimeoutMs', 'sticky']);
const UNAMBIGUOUS_MODULE_NAMES = new Set(
  [...GROUP_OF.keys()].filter((n) => !['schema', 'dataSource', 'notify', 'journal', 'poolSize'].includes(n)),
);

/** The options type a contextual type is, by the names of its constituents. */
const DOORS = new Map([
  ['LeaseModuleOptions', 'module'],
  ['LeaseTestingOptions', 'module'],
  ['SingleRunOptions', 'run'],
  ['SemaphoreRunOptions', 'run'],
  ['RunOptions', 'run'],
  ['SingleAcquireOptions', 'acquire'],
  ['SemaphoreAcquireOptions', 'acquire'],
  ['AcquireOptions', 'acquire'],
  ['SingleExclusiveOptions', 'exclusive'],
  ['SemaphoreExclusiveOptions', 'exclusive'],
  ['ExclusiveOptions', 'exclusive'],
]);

const config = ts.getParsedCommandLineOfConfigFile(
  resolve(ROOT, 'tsconfig.json'),
  {},
  { ...ts.sys, onUnRecoverableConfigFileDiagnostic: () => {} },
);
const program = ts.createProgram(config.fileNames, config.options);
const checker = program.getTypeChecker();

function doorOf(type) {
  if (!type) return undefined;
  const names = [];
  const visit = (t) => {
    if (t.aliasSymbol) names.push(t.aliasSymbol.name);
    if (t.symbol) names.push(t.symbol.name);
    if (t.isUnionOrIntersection()) t.types.forEach(visit);
  };
  visit(type);
  for (const name of names) if (DOORS.has(name)) return DOORS.get(name);
  return undefined;
}

const report = [];
const where = (file, node) => {
  const { line, character } = file.getLineAndCharacterOfPosition(node.getStart(file));
  return `${file.fileName.slice(ROOT.length + 1)}:${line + 1}:${character + 1}`;
};

const nameOf = (property) =>
  (ts.isPropertyAssignment(property) || ts.isShorthandPropertyAssignment(property)) &&
  (ts.isIdentifier(property.name) || ts.isStringLiteral(property.name))
    ? property.name.text
    : undefined;
const valueText = (file, property) =>
  ts.isShorthandPropertyAssignment(property) ? property.name.text : property.initializer.getText(file);

/** `{ a, b: 1 }` from [name, value] pairs (shorthand when the value is the name). */
const objectText = (entries) =>
  `{ ${entries.map(([name, value]) => (name === value ? name : `${name}: ${value}`)).join(', ')} }`;

/** Whether a literal the checker cannot type is module options: only their names, one of them not a table's. */
function looksLikeModuleOptions(node) {
  const names = node.properties.map(nameOf);
  if (names.length === 0 || names.some((name) => name !== undefined && name !== 'owner' && !GROUP_OF.has(name))) {
    return false;
  }
  return names.some((name) => name && UNAMBIGUOUS_MODULE_NAMES.has(name) && GROUP_OF.get(name) !== 'tables');
}

/** The files that need `mergeLeaseOptions` imported. */
const needsMerge = new Set();

function moduleOptions(file, node) {
  const properties = node.properties;
  if (properties.some((p) => ['timing', 'connections', 'tables', 'limits', 'observability'].includes(nameOf(p)))) {
    return undefined; // grouped already
  }
  if (!properties.some((p) => GROUP_OF.has(nameOf(p)) || ts.isSpreadAssignment(p))) return undefined;
  // Runs of plain properties become grouped literals; spreads become layers of a group-by-group merge.
  const layers = [];
  let run;
  for (const property of properties) {
    if (ts.isSpreadAssignment(property)) {
      run = undefined;
      layers.push(property.expression.getText(file));
      continue;
    }
    if (!run) layers.push((run = { out: [], groups: new Map() }));
    const name = nameOf(property);
    const group = name && GROUP_OF.get(name);
    if (!group) {
      run.out.push({ text: property.getText(file) });
      continue;
    }
    if (!run.groups.has(group)) {
      run.groups.set(group, []);
      run.out.push({ group });
    }
    run.groups.get(group).push([name, valueText(file, property)]);
  }
  const render = (layer) =>
    typeof layer === 'string'
      ? layer
      : `{ ${layer.out.map((e) => (e.group ? `${e.group}: ${objectText(layer.groups.get(e.group))}` : e.text)).join(', ')} }`;
  if (layers.length === 1) return render(layers[0]);
  needsMerge.add(file.fileName);
  return `mergeLeaseOptions(${layers.map(render).join(', ')})`;
}

function callOptions(file, node, door) {
  const properties = node.properties;
  const byName = new Map(properties.map((p) => [nameOf(p), p]).filter(([n]) => n));
  const has = (name) => byName.has(name);
  if (![...OLD_CALL_NAMES].some(has) && !(door !== 'acquire' && has('priority'))) return undefined;
  if (properties.some((p) => ts.isSpreadAssignment(p))) {
    report.push(`${where(file, node)}: call options with a spread: check by hand`);
  }
  const value = (name) => valueText(file, byName.get(name));
  const literal = (name) => {
    const p = byName.get(name);
    if (!p || !ts.isPropertyAssignment(p)) return undefined;
    const init = p.initializer;
    if (init.kind === ts.SyntaxKind.TrueKeyword) return true;
    if (init.kind === ts.SyntaxKind.FalseKeyword) return false;
    if (ts.isStringLiteralLike(init)) return init.text;
    return undefined;
  };
  if (has('sticky')) {
    report.push(`${where(file, node)}: sticky: use @Sticky(key, { priority, onBusy }) (by hand)`);
    return undefined;
  }
  if (has('onBusy') && literal('onBusy') === undefined) {
    const onBusy = byName.get('onBusy');
    if (ts.isPropertyAssignment(onBusy) && ts.isObjectLiteralExpression(onBusy.initializer)) return undefined; // new
    report.push(`${where(file, node)}: onBusy is not a literal: check by hand`);
    return undefined;
  }
  const drop = new Set();
  let onBusy;
  const preempt = literal('preempt');
  if (has('preempt') && preempt === undefined) {
    report.push(`${where(file, node)}: preempt is not a literal: check by hand`);
    return undefined;
  }
  if (preempt === true) {
    if (has('onBusy')) {
      report.push(`${where(file, node)}: preempt with onBusy (refused before): check by hand`);
      return undefined;
    }
    const fields = [];
    if (has('preemptGraceMs')) fields.push(['graceMs', value('preemptGraceMs')]);
    if (has('waitTimeoutMs')) fields.push(['waitTimeoutMs', value('waitTimeoutMs')]);
    onBusy = fields.length ? `{ preempt: ${objectText(fields)} }` : `'preempt'`;
    ['preempt', 'preemptGraceMs', 'waitTimeoutMs', 'onBusy'].forEach((n) => drop.add(n));
  } else if (literal('onBusy') === 'join') {
    if (preempt === false) ['preempt', 'preemptGraceMs'].forEach((n) => drop.add(n));
    const timeout = has('joinTimeoutMs') ? value('joinTimeoutMs') : has('waitTimeoutMs') ? value('waitTimeoutMs') : '';
    onBusy = timeout ? `{ join: { timeoutMs: ${timeout} } }` : `'join'`;
    ['joinTimeoutMs', 'waitTimeoutMs', 'onBusy'].forEach((n) => drop.add(n));
  } else {
    if (preempt === false) ['preempt', 'preemptGraceMs'].forEach((n) => drop.add(n));
    if (has('joinTimeoutMs')) drop.add('joinTimeoutMs');
    const waits = door === 'acquire' ? has('waitTimeoutMs') : has('priority') || has('waitTimeoutMs');
    if (waits) {
      const priority = byName.get('priority');
      if (door !== 'acquire' && priority && !has('waitTimeoutMs') && ts.isPropertyAssignment(priority)) {
        const type = checker.getTypeAtLocation(priority.initializer);
        if (type.isUnion() && type.types.some((t) => t.flags & ts.TypeFlags.Undefined)) {
          report.push(`${where(file, node)}: priority may be undefined (it waited only when defined): check`);
        }
      }
      onBusy = has('waitTimeoutMs') ? `{ wait: { timeoutMs: ${value('waitTimeoutMs')} } }` : `'wait'`;
      if (door === 'acquire' && !has('waitTimeoutMs')) onBusy = undefined;
      ['waitTimeoutMs', 'onBusy'].forEach((n) => drop.add(n));
      const old = literal('onBusy');
      if (old === 'skip') report.push(`${where(file, node)}: onBusy 'skip' with a wait (it waited): now a wait`);
    }
  }
  if (drop.size === 0 && onBusy === undefined) return undefined;
  const out = [];
  let placed = false;
  for (const property of properties) {
    const name = nameOf(property);
    if (name && drop.has(name)) {
      if (!placed && onBusy !== undefined && (name === 'onBusy' || !has('onBusy'))) {
        out.push(`onBusy: ${onBusy}`);
        placed = true;
      }
      continue;
    }
    out.push(property.getText(file));
  }
  if (!placed && onBusy !== undefined) out.push(`onBusy: ${onBusy}`);
  return out.length ? `{ ${out.join(', ')} }` : '{}';
}

let changedFiles = 0;
for (const file of program.getSourceFiles()) {
  if (file.isDeclarationFile || !roots.some((root) => file.fileName.startsWith(root))) continue;
  // The library itself is written by hand; its specs are rewritten like the tests.
  if (file.fileName.startsWith(resolve(ROOT, 'libs/lease/src')) && !file.fileName.endsWith('.spec.ts')) continue;
  if (file.fileName.includes('/node_modules/')) continue;
  const edits = [];
  const visit = (node) => {
    if (ts.isObjectLiteralExpression(node)) {
      const door = doorOf(checker.getContextualType(node)) ?? (looksLikeModuleOptions(node) ? 'module' : undefined);
      const text = door === 'module' ? moduleOptions(file, node) : door ? callOptions(file, node, door) : undefined;
      if (text !== undefined) {
        edits.push({ start: node.getStart(file), end: node.getEnd(), text });
        return; // nested literals of a rewritten one are left as they were
      }
      if (!door) {
        const names = node.properties.map(nameOf).filter(Boolean);
        const old = names.filter((n) => OLD_CALL_NAMES.has(n));
        const flat = names.filter((n) => UNAMBIGUOUS_MODULE_NAMES.has(n));
        if (old.length || flat.length) {
          report.push(`${where(file, node)}: untyped literal with ${[...old, ...flat].join(', ')}: check`);
        }
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  if (edits.length === 0) continue;
  let text = file.getFullText();
  for (const edit of edits.sort((a, b) => b.start - a.start)) {
    text = text.slice(0, edit.start) + edit.text + text.slice(edit.end);
  }
  if (needsMerge.has(file.fileName) && !/\bmergeLeaseOptions\b[^(]*from/.test(text)) {
    const internal = relative(dirname(file.fileName), resolve(ROOT, 'libs/lease/src/internal.js'));
    const from = internal.startsWith('.') ? internal : `./${internal}`;
    const imports = [...text.matchAll(/^import [^;]+;\n/gm)];
    const at = imports.length ? imports.at(-1).index + imports.at(-1)[0].length : 0;
    text = `${text.slice(0, at)}import { mergeLeaseOptions } from '${from}';\n${text.slice(at)}`;
  }
  changedFiles += 1;
  if (!dry) writeFileSync(file.fileName, text);
  else console.log(`would rewrite ${file.fileName.slice(ROOT.length + 1)} (${edits.length} literals)`);
}
console.log(`${changedFiles} files ${dry ? 'to rewrite' : 'rewritten'}`);
for (const line of report) console.log(line);

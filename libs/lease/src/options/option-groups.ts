/**
 * The groups of `LeaseModuleOptions` (timing, connections, tables, limits, observability, and `owner`): the one table
 * of which field lives where, how a grouped input is checked (an unknown group or field is a `LeaseConfigError` naming
 * the nearest valid path) and flattened for the rules, how the resolved values are shown grouped again
 * (`LeaseService.options`), and how two layers of options merge group by group (the testing kit's defaults).
 */
import { LeaseConfigError } from '../errors/lease.errors.js';
import { messages } from '../errors/lease.messages.js';
import type { LeaseModuleOptions, ResolvedLeaseOptions } from '../interfaces/lease-module-options.interface.js';
import type { EngineSettings } from './engine-settings.js';
import { closeTo, editDistance } from './nearest-name.js';

type Groups = Required<Omit<LeaseModuleOptions, 'owner'>>;
type Group = keyof Groups;
/** Every option of every group, flat (what the rules of `resolveLeaseOptions` read). */
export type FlatLeaseOptions = Groups['timing'] &
  Groups['connections'] &
  Groups['tables'] &
  Groups['limits'] &
  Groups['observability'] & { owner?: string };

/** Each group's fields (the compiler checks each list is complete and exact). */
export const OPTION_GROUPS = {
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
} as const satisfies { [G in Group]: ReadonlyArray<keyof Groups[G]> };
type Listed<G extends Group> = (typeof OPTION_GROUPS)[G][number];
const allListed: { [G in Group]: Exclude<keyof Groups[G], Listed<G>> }[Group] extends never ? true : never = true;
void allListed;

const GROUP_NAMES = Object.keys(OPTION_GROUPS) as Group[];
/** The top level: the groups and `owner`. */
const TOP_LEVEL: readonly string[] = [...GROUP_NAMES, 'owner'];
/** Every option's path (`timing.heartbeatIntervalMs`, …, `owner`), with its field's name. */
const PATHS: ReadonlyArray<{ path: string; field: string; group?: Group }> = [
  ...GROUP_NAMES.flatMap((group) => OPTION_GROUPS[group].map((field) => ({ path: `${group}.${field}`, field, group }))),
  { path: 'owner', field: 'owner' },
];

/** The group of each field: `groupOf.heartbeatIntervalMs` is `'timing'`. */
const GROUP_OF = new Map(PATHS.filter((entry) => entry.group).map((entry) => [entry.field, entry.group!]));

/** An option's path for messages: `timing.heartbeatIntervalMs`, `owner`. */
export function optionPath(field: string): string {
  const group = GROUP_OF.get(field);
  return group ? `${group}.${field}` : field;
}

/**
 * The valid path a mistaken key was meant as: the field of that name in whichever group (`heartbeatIntervalMs` at the
 * top level, `poolSize` under timing), else the nearest field or group by spelling (this group's first on a tie).
 */
function suggestion(key: string, group?: Group): string | undefined {
  const exact = PATHS.find((entry) => entry.field === key && entry.group !== group);
  if (exact) return exact.path;
  const candidates = [
    ...PATHS.map((entry) => ({ name: entry.field, path: entry.path, mine: entry.group === group })),
    ...(group ? [] : GROUP_NAMES.map((name) => ({ name, path: name, mine: true }))),
  ];
  let best: (typeof candidates)[number] | undefined;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const candidate of candidates) {
    const distance = editDistance(key, candidate.name) - (candidate.mine ? 0.5 : 0);
    if (distance < bestDistance) [best, bestDistance] = [candidate, distance];
  }
  return best && closeTo(key, best.name) ? best.path : undefined;
}

const kindOf = (value: unknown) =>
  value === null ? 'null' : Array.isArray(value) ? 'an array' : typeof value === 'string' ? 'a string' : typeof value;

/**
 * The grouped options checked for unknown groups and fields, and flattened (one object of every field given) for the
 * rules. A group must be an object; `owner` stays at the top level.
 */
export function flattenLeaseOptions(options: LeaseModuleOptions): FlatLeaseOptions {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw new LeaseConfigError(messages.optionsNotObject());
  }
  const flat: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(options)) {
    if (key === 'owner') {
      if (value !== undefined) flat.owner = value;
      continue;
    }
    if (!(GROUP_NAMES as string[]).includes(key)) {
      throw new LeaseConfigError(messages.unknownOption(key, suggestion(key), TOP_LEVEL.join(', ')));
    }
    if (value === undefined) continue;
    const group = key as Group;
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      throw new LeaseConfigError(messages.optionGroupNotObject(group, kindOf(value)));
    }
    const fields: readonly string[] = OPTION_GROUPS[group];
    for (const [field, fieldValue] of Object.entries(value as object)) {
      if (!fields.includes(field)) {
        const listed = fields.map((name) => `${group}.${name}`).join(', ');
        throw new LeaseConfigError(messages.unknownOption(`${group}.${field}`, suggestion(field, group), listed));
      }
      if (fieldValue !== undefined) flat[field] = fieldValue;
    }
  }
  return flat;
}

/** The resolved settings in the public, grouped shape (`LeaseService.options`), frozen. */
export function groupedOptions(settings: EngineSettings): ResolvedLeaseOptions {
  const pick = <G extends Group>(group: G) =>
    Object.freeze(Object.fromEntries(OPTION_GROUPS[group].map((field) => [field, settings[field]])));
  return Object.freeze({
    timing: pick('timing'),
    connections: pick('connections'),
    tables: pick('tables'),
    limits: pick('limits'),
    observability: pick('observability'),
    owner: settings.owner,
  }) as unknown as ResolvedLeaseOptions;
}

/** Layers of options merged group by group, later layers winning field by field (defaults, then the caller's). */
export function mergeLeaseOptions<T extends LeaseModuleOptions = LeaseModuleOptions>(
  ...layers: ReadonlyArray<LeaseModuleOptions | undefined>
): T {
  const merged: Record<string, unknown> = {};
  for (const layer of layers) {
    for (const [key, value] of Object.entries(layer ?? {})) {
      const previous = merged[key];
      const bothGroups =
        (GROUP_NAMES as string[]).includes(key) &&
        typeof value === 'object' &&
        value !== null &&
        typeof previous === 'object' &&
        previous !== null;
      merged[key] = bothGroups ? { ...previous, ...value } : value;
    }
  }
  return merged as T;
}

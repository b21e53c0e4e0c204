/** The nearest valid name of a typo, for the advice of an unknown option (module options and call options alike). */

/** Edit distance (insertions, deletions, substitutions), case-insensitive. */
export function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      const same = a[i - 1].toLowerCase() === b[j - 1].toLowerCase();
      row[j] = Math.min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (same ? 0 : 1));
    }
    previous = row;
  }
  return previous[b.length];
}

/** Whether `key` is close enough to `name` to be taken for a typo of it. */
export function closeTo(key: string, name: string): boolean {
  return editDistance(key, name) <= Math.max(2, Math.floor(name.length / 4));
}

/** The valid name nearest to `key` when it is close enough to be a typo of it (the first of equals), else undefined. */
export function nearestName(key: string, names: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const name of names) {
    const distance = editDistance(key, name);
    if (distance < bestDistance) [best, bestDistance] = [name, distance];
  }
  return best !== undefined && closeTo(key, best) ? best : undefined;
}

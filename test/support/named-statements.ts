/**
 * What the library's connections send, counted on the wire side of `pg`: the prepared statements whose name ends with
 * one of the kinds of `kinds` (`<prefix>_<kind>`), by the sending connection's application name (the library names
 * its connections `<application>:<role>`), in order. `stop()` puts `pg` back.
 */
import pg from 'pg';

export function recordNamedStatements(kinds: RegExp): { stop: () => void; of: (application: string) => string[] } {
  const sent = new Map<string, string[]>();
  const query = pg.Client.prototype.query;
  pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
    const config = args[0] as { name?: string } | undefined;
    const kind = kinds.exec(config?.name ?? '')?.[1];
    const app = (this as unknown as { connectionParameters: { application_name?: string } }).connectionParameters
      .application_name;
    const owner = app?.split(':')[0];
    if (kind && owner) sent.set(owner, [...(sent.get(owner) ?? []), kind]);
    return (query as (...a: unknown[]) => unknown).apply(this, args);
  } as typeof query;
  return {
    stop: () => (pg.Client.prototype.query = query),
    of: (application: string) => sent.get(application) ?? [],
  };
}

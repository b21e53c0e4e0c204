export interface PostgresServer {
  /** Connection URL of the maintenance database (`postgres`). */
  readonly url: string;
  /** True when this process started the server (and may stop or restart it). */
  readonly embedded: boolean;
  /** Stops the server (embedded only; a `DATABASE_URL` server is left alone). */
  stop(): Promise<void>;
  /** Starts a stopped embedded server again on the same port and data directory. */
  start(): Promise<void>;
  /** Stops an embedded server for good and deletes its data directory. */
  destroy(): Promise<void>;
}
export interface StartPostgresOptions {
  /** Extra `postgres -c name=value` settings for an embedded server. */
  settings?: Record<string, string | number>;
  /** Messages of the embedded server; silent by default. */
  onLog?: (message: string) => void;
}
/** Why the embedded server cannot start here; the message names the cause and the way out (DATABASE_URL). */
export declare class EmbeddedPostgresError extends Error {
  constructor(message: string, options?: { cause?: unknown });
}
/** Finds a free TCP port on the loopback interface. */
export declare function freePort(): Promise<number>;
/** Uses `DATABASE_URL` when set, else starts an embedded PostgreSQL on a free port. */
export declare function startPostgres(options?: StartPostgresOptions): Promise<PostgresServer>;
/** Replaces the database name of a connection URL. */
export declare function withDatabase(url: string, database: string): string;
/** Creates a fresh database on the server (for one test file, one demo run, one benchmark) and returns its URL. */
export declare function createDatabase(serverUrl: string, prefix?: string): Promise<string>;
/** Drops a database made by `createDatabase`, ending its remaining sessions first. */
export declare function dropDatabase(serverUrl: string, databaseUrl: string): Promise<void>;
/** The embedded binaries as the server's user can run them (see `embeddedBinaries` in index.js). */
export interface EmbeddedBinaries {
  initdb: string;
  postgres: string;
  /** Directory of the binaries. */
  bin: string;
  /** The user the server runs as when we are root (`postgres`); undefined otherwise. */
  user?: { uid: number; gid: number };
}
/** Binaries the server's user can run; a temporary copy's path (when one was needed) is pushed to `cleanup`. */
export declare function embeddedBinaries(cleanup: string[]): Promise<EmbeddedBinaries>;
/** initdb of `dataDir` (empty, owned by the server's user): user `postgres`, password authentication. */
export declare function initCluster(binaries: EmbeddedBinaries, dataDir: string, password: string): void;
/** Once this process is gone (even after SIGKILL): stops `serverPid` (SIGQUIT) and removes `paths`. */
export declare function removeWhenGone(paths: string[], serverPid?: number): { kill(): boolean };

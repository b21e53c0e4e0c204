import { type ChildProcess, fork } from 'node:child_process';

/** A child process of a test, from `startChild`. */
export interface TestChild {
  readonly process: ChildProcess;
  /** Its stdout and stderr, when captured (`captureOutput`); otherwise they go to the test's own. */
  readonly output: string[];
  /**
   * The first message `{ type, … }` of this type, received before the call or after it. Rejects once the child has
   * exited without sending one (with its captured output), or after `timeoutMs`.
   */
  message<T = Record<string, unknown>>(type: string, timeoutMs?: number): Promise<{ type: string } & T>;
}

type Message = { type: string } & Record<string, unknown>;

/**
 * The one way the suites run a process of their own: `script` (TypeScript) under `node --import tsx`, its
 * configuration as JSON in environment variables (`env`: name → value), talking over IPC in messages `{ type, … }`.
 * Messages are kept from the start, so a test never misses one sent before it asked.
 */
export function startChild(
  script: string,
  env: Record<string, unknown>,
  { captureOutput = false }: { captureOutput?: boolean } = {},
): TestChild {
  const child = fork(script, [], {
    execArgv: ['--import', 'tsx'],
    env: {
      ...process.env,
      ...Object.fromEntries(Object.entries(env).map(([name, value]) => [name, JSON.stringify(value)])),
    },
    stdio: ['ignore', captureOutput ? 'pipe' : 'inherit', captureOutput ? 'pipe' : 'inherit', 'ipc'],
  });
  const output: string[] = [];
  child.stdout?.on('data', (chunk: Buffer) => output.push(chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => output.push(chunk.toString()));
  const received: Message[] = [];
  const listeners = new Set<() => void>();
  let exit: string | undefined;
  child.on('message', (message: Message) => {
    received.push(message);
    for (const listener of listeners) listener();
  });
  child.once('exit', (code, signal) => {
    exit = `${script} exited (${code ?? signal}) before sending`;
    for (const listener of listeners) listener();
  });
  return {
    process: child,
    output,
    message: <T>(type: string, timeoutMs?: number) =>
      new Promise<{ type: string } & T>((resolve, reject) => {
        const timer =
          timeoutMs === undefined
            ? undefined
            : setTimeout(() => settle(new Error(`${script}: no ${type} message within ${timeoutMs} ms`)), timeoutMs);
        const settle = (error?: Error) => {
          listeners.delete(check);
          clearTimeout(timer);
          if (error) reject(error);
        };
        const check = () => {
          const found = received.find((message) => message.type === type);
          if (found) {
            settle();
            resolve(found as { type: string } & T);
          } else if (exit !== undefined) {
            settle(new Error(`${exit} ${type}${captureOutput ? `:\n${output.join('')}` : ''}`));
          }
        };
        listeners.add(check);
        check();
      }),
  };
}

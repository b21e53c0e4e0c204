/**
 * The fake external scoring API of the demo: `GET /score/:userId` answers after a latency (seconds, like the real
 * slow API of the story) or fails at a configurable rate. `GET /stats` tells how many calls were answered, failed,
 * or cancelled by their caller — a demo instance that loses its lease cancels its call.
 *
 * Environment: PORT (3003), SCORING_LATENCY_MS (2000; a call may override it with ?latencyMs=),
 * SCORING_FAILURE_RATE (0 … 1, default 0).
 */
import { createServer, type ServerResponse } from 'node:http';

const port = Number(process.env.PORT || 3003);
const host = process.env.HOST || '127.0.0.1';
const defaultLatencyMs = Number(process.env.SCORING_LATENCY_MS || 2_000);
const failureRate = Number(process.env.SCORING_FAILURE_RATE || 0);
if (!(failureRate >= 0 && failureRate <= 1))
  throw new Error(`SCORING_FAILURE_RATE must be within 0 … 1, got ${failureRate}`);

interface Call {
  userId: number;
  caller: string;
  outcome: 'pending' | 'answered' | 'failed' | 'cancelled';
  startedAt: string;
}
const calls: Call[] = [];

function send(response: ServerResponse, status: number, body: unknown): void {
  response.writeHead(status, { 'content-type': 'application/json' });
  response.end(JSON.stringify(body));
}

const server = createServer((request, response) => {
  const url = new URL(request.url ?? '/', 'http://scoring');
  if (request.method === 'GET' && url.pathname === '/stats') {
    const count = (outcome: Call['outcome']) => calls.filter((call) => call.outcome === outcome).length;
    return send(response, 200, {
      calls: calls.length,
      answered: count('answered'),
      failed: count('failed'),
      cancelled: count('cancelled'),
      pending: count('pending'),
      recent: calls.slice(-50),
    });
  }
  const match = request.method === 'GET' ? /^\/score\/(\d+)$/.exec(url.pathname) : null;
  if (!match) return send(response, 404, { error: 'GET /score/:userId or GET /stats' });

  const userId = Number(match[1]);
  const latencyMs = url.searchParams.has('latencyMs') ? Number(url.searchParams.get('latencyMs')) : defaultLatencyMs;
  const call: Call = {
    userId,
    caller: String(request.headers['x-demo-instance'] ?? '?'),
    outcome: 'pending',
    startedAt: new Date().toISOString(),
  };
  calls.push(call);
  if (calls.length > 1_000) calls.shift();
  const timer = setTimeout(
    () => {
      if (Math.random() < failureRate) {
        call.outcome = 'failed';
        return send(response, 503, { error: 'scoring temporarily unavailable (simulated failure)' });
      }
      call.outcome = 'answered';
      send(response, 200, { userId, score: 300 + ((userId * 7919 + Date.now()) % 551), latencyMs });
    },
    Math.max(0, latencyMs || 0),
  );
  response.on('close', () => {
    if (call.outcome !== 'pending') return;
    clearTimeout(timer);
    call.outcome = 'cancelled';
  });
});

server.listen(port, host, () => {
  console.log(`Scoring API on http://${host}:${port} (latency ${defaultLatencyMs} ms, failure rate ${failureRate})`);
});
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.once(signal, () => {
    server.closeAllConnections();
    server.close(() => process.exit(0));
  });
}

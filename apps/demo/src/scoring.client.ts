import { Inject, Injectable } from '@nestjs/common';
import { DEMO_CONFIG, type DemoConfig } from './demo.config.js';

/** The external API answered with an error (the fake one fails on purpose at its configured rate). */
export class ScoringUnavailableError extends Error {
  override readonly name = 'ScoringUnavailableError';
}

/** Client of the slow external scoring API. */
@Injectable()
export class ScoringClient {
  constructor(@Inject(DEMO_CONFIG) private readonly config: DemoConfig) {}

  /**
   * Asks for a user's score. `signal` is the lease's: when the lease is lost the request is cancelled at once and
   * this rejects with the signal's reason (a `LeaseLostError`). `latencyMs` overrides the API's own latency.
   */
  async score(userId: number, options: { signal: AbortSignal; latencyMs?: number }): Promise<number> {
    const url = new URL(`/score/${userId}`, this.config.scoringUrl);
    if (options.latencyMs !== undefined) url.searchParams.set('latencyMs', String(options.latencyMs));
    const response = await fetch(url, { signal: options.signal, headers: { 'x-demo-instance': this.config.instance } });
    if (!response.ok) throw new ScoringUnavailableError(`Scoring API answered ${response.status} for user ${userId}`);
    const body = (await response.json()) as { score: number };
    return body.score;
  }
}

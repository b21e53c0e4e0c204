/**
 * OpenTelemetry spans through `@opentelemetry/api`, an optional peer dependency loaded dynamically (as the transports'
 * optional packages are) by `loadTracing()` in the engine's `init()`. Without the package, or without an SDK
 * registered, nothing is recorded and nothing is allocated per call: `startSpan` returns undefined for a span that
 * would not record.
 */
import { errorText } from '../errors/lease.messages.js';

/** The tracer's name (instrumentation scope). */
export const TRACER_NAME = 'nest-pg-lease';

// The slice of `@opentelemetry/api` the library uses, written here: the published declarations must not name the
// package, which an application without it could not resolve.
type Attributes = Record<string, string | number | boolean>;
type Context = object;
interface Span {
  setAttributes(attributes: Attributes): unknown;
  setAttribute(name: string, value: string | number | boolean): unknown;
  addEvent(name: string, attributes?: Attributes): unknown;
  recordException(exception: Error | string): void;
  setStatus(status: { code: number; message?: string }): unknown;
  isRecording(): boolean;
  end(): void;
}
interface Api {
  context: { active(): Context; with<T>(context: Context, work: () => T): T };
  trace: {
    /** The global provider: a proxy whose delegate an SDK sets (`getDelegateTracer` undefined: no SDK yet). */
    getTracerProvider(): { getDelegateTracer?(name: string): unknown };
    getTracer(name: string): { startSpan(name: string, options: { attributes: Attributes }, context: Context): Span };
    setSpan(context: Context, span: Span): Context;
    getActiveSpan(): Span | undefined;
  };
  SpanStatusCode: { ERROR: number };
}

/** undefined: not loaded yet; null: not installed. */
let api: Api | null | undefined;
let loading: Promise<void> | undefined;

/** Loads `@opentelemetry/api` once, if installed (idempotent; never rejects). */
export function loadTracing(): Promise<void> {
  loading ??= import('@opentelemetry/api').then(
    (loaded: unknown) => {
      // The CJS build may see the module's namespace under `default`: either has `trace`.
      const module = loaded as Api & { default?: Api };
      api = (module.trace as unknown) ? module : (module.default ?? null);
    },
    () => {
      api = null;
    },
  );
  return loading;
}

export type SpanAttributes = Record<string, string | number | boolean | undefined>;

/** One recording span of the library's, with the few operations it needs. */
export class LeaseSpan {
  private ended = false;

  constructor(
    private readonly otel: Api,
    private readonly span: Span,
    private readonly parent: Context,
  ) {}

  set(attributes: SpanAttributes): void {
    if (!this.ended) this.span.setAttributes(defined(attributes));
  }

  event(name: string, attributes: SpanAttributes = {}): void {
    if (!this.ended) this.span.addEvent(name, defined(attributes));
  }

  /** Runs `work` with this span as the active span: spans started inside are its children. */
  within<T>(work: () => T): T {
    return this.otel.context.with(this.otel.trace.setSpan(this.parent, this.span), work);
  }

  /** Ends the span with its `lease.outcome`; `error` marks it failed (status ERROR, the exception recorded). */
  end(outcome: string, error?: unknown): void {
    if (this.ended) return;
    this.span.setAttribute('lease.outcome', outcome);
    if (error !== undefined) {
      this.span.recordException(error instanceof Error ? error : errorText(error));
      this.span.setStatus({ code: this.otel.SpanStatusCode.ERROR, message: errorText(error) });
    }
    this.ended = true;
    this.span.end();
  }
}

/** The span active in the caller's context (an HTTP request's, say), if one records; for events during a hold. */
export class HolderSpan {
  constructor(private readonly span: Span) {}

  event(name: string, attributes: SpanAttributes = {}): void {
    if (this.span.isRecording()) this.span.addEvent(name, defined(attributes));
  }
}

/**
 * Whether a span could record now: `@opentelemetry/api` is installed and an SDK registered a tracer provider (checked
 * per call, one property read and a call: an SDK may register after the engine started). Callers skip building a span's
 * attributes when not.
 */
export function tracing(): boolean {
  if (!api) return false;
  const provider = api.trace.getTracerProvider();
  return typeof provider.getDelegateTracer !== 'function' || provider.getDelegateTracer(TRACER_NAME) !== undefined;
}

/** A span named `name`, child of the caller's active span; undefined when nothing would record it. */
export function startSpan(name: string, attributes: SpanAttributes): LeaseSpan | undefined {
  if (!api || !tracing()) return undefined;
  const parent = api.context.active();
  const span = api.trace.getTracer(TRACER_NAME).startSpan(name, { attributes: defined(attributes) }, parent);
  if (!span.isRecording()) return undefined;
  return new LeaseSpan(api, span, parent);
}

/**
 * Sets `name` on the span active now (one of the library's, when it records), later: for what is known only once a
 * statement went (its batch size). Captured now, since the statement runs from another call's turn of the loop.
 */
export function activeSpanSetter(name: string): ((value: number) => void) | undefined {
  if (!tracing()) return undefined;
  const span = api?.trace.getActiveSpan();
  if (!span?.isRecording()) return undefined;
  return (value) => {
    if (span.isRecording()) span.setAttribute(name, value);
  };
}

/** The caller's active span, if one records. */
export function holderSpan(): HolderSpan | undefined {
  if (!tracing()) return undefined;
  const span = api?.trace.getActiveSpan();
  return span?.isRecording() ? new HolderSpan(span) : undefined;
}

function defined(attributes: SpanAttributes): Attributes {
  const out: Attributes = {};
  for (const [name, value] of Object.entries(attributes)) if (value !== undefined) out[name] = value;
  return out;
}

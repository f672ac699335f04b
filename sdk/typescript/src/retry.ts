/**
 * How a call is retried. A call is tried again after a 429 or 503 answer
 * (the API refused it before acting on it), and after a network error or
 * an attempt timeout when the request is safe to repeat: GET, PUT, DELETE
 * and `messages.send`, whose idempotency key makes a repeat store nothing
 * new. Other requests (a POST that creates an endpoint, say) are not
 * repeated after a network error, since the first may have been carried
 * out.
 */
export interface RetryPolicy {
  /** How many times a call is tried at most, the first included; 1 never retries. */
  maxAttempts: number;
  /** Bounds each attempt, reading the answer included; 0 leaves attempts bounded by the call's signal alone. */
  attemptTimeoutMs: number;
  /** Bound the wait before a retry when the answer asks for none: retry n waits a random time up to minBackoffMs·2ⁿ⁻¹, at most maxBackoffMs. */
  minBackoffMs: number;
  maxBackoffMs: number;
  /** Caps a wait a Retry-After header asks for; a longer one ends the retries and the call fails with the answer's error. */
  maxRetryAfterMs: number;
}

/** Up to 5 tries, 30 s each, waiting up to 0.5 s, 1 s, 2 s and 4 s between tries (or what Retry-After asks, up to a minute). */
export const defaultRetryPolicy: Readonly<RetryPolicy> = Object.freeze({
  maxAttempts: 5,
  attemptTimeoutMs: 30_000,
  minBackoffMs: 500,
  maxBackoffMs: 30_000,
  maxRetryAfterMs: 60_000,
});

/** The wait before retry n (1 for the first): full jitter over an exponentially growing ceiling. */
export function backoffMs(p: RetryPolicy, n: number): number {
  let ceiling = Math.max(p.minBackoffMs, 1);
  for (let i = 1; i < n && ceiling < p.maxBackoffMs; i++) ceiling *= 2;
  ceiling = Math.min(ceiling, Math.max(p.maxBackoffMs, p.minBackoffMs));
  return Math.random() * ceiling;
}

/** Reads a Retry-After value: delay-seconds or an HTTP date (RFC 9110, section 10.2.3), in milliseconds from now. */
export function retryAfterMs(value: string | null, now: number = Date.now()): number | undefined {
  const v = value?.trim() ?? "";
  if (v === "") return undefined;
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  if (!/^[A-Za-z]{3}, /.test(v)) return undefined;
  const t = Date.parse(v);
  return Number.isNaN(t) ? undefined : Math.max(t - now, 0);
}

const repeatableMethods = new Set(["GET", "HEAD", "PUT", "DELETE", "OPTIONS"]);

/** Waits ms, or rejects with the signal's reason once it aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * Runs send with a signal that aborts after ms, and rejects with a
 * TimeoutError then whether or not the abort reaches the request: undici
 * holds a request's signal weakly, and Node may collect a signal made by
 * AbortSignal.any() before it fires, which left an attempt to undici's
 * five-minute headers timeout. The timer never keeps a Node process alive;
 * after send resolves it still aborts a body read past ms.
 */
function withTimeout<T>(ms: number, parent: AbortSignal, send: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const controller = new AbortController();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timedOut = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const err = new DOMException("the attempt timed out", "TimeoutError");
      controller.abort(err);
      reject(err);
    }, ms);
    // Node's timers have unref; a browser's are numbers.
    (timer as { unref?: () => void }).unref?.();
  });
  const sent = send(AbortSignal.any([parent, controller.signal]));
  return Promise.race([sent, timedOut]).catch((err: unknown) => {
    clearTimeout(timer);
    throw err;
  });
}

/**
 * Sends requests with a policy's retries. `fetch(request, repeatable)`
 * sends a request, repeating it after a network error only when
 * `repeatable` (by default, when its method is).
 */
export class Retrier {
  constructor(
    private readonly policy: RetryPolicy,
    private readonly send: (request: Request) => Promise<Response> = (r) => globalThis.fetch(r),
    private readonly wait: (ms: number, signal?: AbortSignal) => Promise<void> = sleep,
  ) {}

  async fetch(request: Request, repeatable = repeatableMethods.has(request.method)): Promise<Response> {
    const p = this.policy;
    for (let attempt = 1; ; attempt++) {
      const last = attempt >= Math.max(p.maxAttempts, 1);
      let wait: number;
      try {
        // Each try sends a copy: the original's body is never read.
        const copy = request.clone();
        const send = (signal: AbortSignal) => this.send(new Request(copy, { signal }));
        const response = await (p.attemptTimeoutMs > 0 ? withTimeout(p.attemptTimeoutMs, request.signal, send) : send(request.signal));
        if (response.status !== 429 && response.status !== 503) return response;
        if (last) return response;
        const asked = retryAfterMs(response.headers.get("Retry-After"));
        if (asked !== undefined && asked > p.maxRetryAfterMs) return response;
        wait = asked ?? backoffMs(p, attempt);
        await response.body?.cancel();
      } catch (err) {
        if (request.signal.aborted || last || !repeatable) throw err;
        wait = backoffMs(p, attempt);
      }
      await this.wait(wait, request.signal);
    }
  }
}

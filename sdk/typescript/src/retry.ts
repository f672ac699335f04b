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
 * A signal that aborts after ms with a TimeoutError. Node may collect an
 * AbortSignal.timeout() that only AbortSignal.any() refers to before it
 * fires, leaving the attempt to undici's five-minute headers timeout; the
 * timer here holds its controller until then, and never keeps a Node
 * process alive.
 */
function attemptTimeout(ms: number): AbortSignal {
  const controller = new AbortController();
  const timer: unknown = setTimeout(() => controller.abort(new DOMException("the attempt timed out", "TimeoutError")), ms);
  // Node's timers have unref; a browser's are numbers.
  (timer as { unref?: () => void }).unref?.();
  return controller.signal;
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
      const signal = p.attemptTimeoutMs > 0 ? AbortSignal.any([request.signal, attemptTimeout(p.attemptTimeoutMs)]) : request.signal;
      let wait: number;
      try {
        // Each try sends a copy: the original's body is never read.
        const response = await this.send(new Request(request.clone(), { signal }));
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

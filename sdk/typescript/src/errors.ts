import type { components } from "./generated/schema.js";

/** One field at fault in a refused request: a JSON name (`url`, `event_types[2]`, `metadata.team`), a query parameter, or `body`. */
export type FieldError = components["schemas"]["FieldError"];

/**
 * An answer of the API other than the one a call expects: the RFC 9457
 * problem it carries (every error of the API is application/problem+json).
 *
 * ```ts
 * try { ... } catch (err) {
 *   if (err instanceof HookdError && err.status === 400) console.log(err.field("url"));
 * }
 * ```
 */
export class HookdError extends Error {
  /** The HTTP status code. */
  readonly status: number;
  /** A URI naming the kind of problem, such as https://hookd.dev/problems/validation. */
  readonly type: string;
  /** The problem kind's short summary. */
  readonly title: string;
  /** What went wrong this time. */
  readonly detail?: string;
  /** The request path. */
  readonly instance?: string;
  /** Every field at fault of a 400. */
  readonly errors: FieldError[];
  /** The wait a 429 or 503 asked for, in milliseconds; undefined when it asked for none. */
  readonly retryAfterMs?: number;
  /** The answer's body as received: the parsed problem, or its text. */
  readonly body: unknown;

  constructor(status: number, body: unknown, retryAfterMs?: number) {
    const p = isProblem(body) ? body : undefined;
    const title = p?.title ?? `HTTP ${status}`;
    const fields = p?.errors ?? [];
    let message = `hookd: ${status} ${title}`;
    if (p?.detail) message += `: ${p.detail}`;
    if (fields.length > 0) message += ` (${fields.map((f) => `${f.field}: ${f.message}`).join("; ")})`;
    super(message);
    this.name = "HookdError";
    this.status = status;
    this.type = p?.type ?? "about:blank";
    this.title = title;
    this.detail = p?.detail;
    this.instance = p?.instance;
    this.errors = fields;
    this.retryAfterMs = retryAfterMs;
    this.body = body;
  }

  /** The error naming `field`, if the problem names it. */
  field(field: string): FieldError | undefined {
    return this.errors.find((f) => f.field === field);
  }
}

function isProblem(v: unknown): v is components["schemas"]["Problem"] {
  return typeof v === "object" && v !== null && typeof (v as { title?: unknown }).title === "string";
}

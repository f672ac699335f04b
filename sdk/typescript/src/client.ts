import createClient, { type Client } from "openapi-fetch";

import { HookdError } from "./errors.js";
import type { components, operations, paths } from "./generated/schema.js";
import { defaultRetryPolicy, Retrier, retryAfterMs, type RetryPolicy } from "./retry.js";

type Schemas = components["schemas"];
/** The query of an operation, without the cursor an iterator sets. */
type Filter<Op extends keyof operations> = Omit<NonNullable<operations[Op]["parameters"]["query"]>, "after">;

export type Endpoint = Schemas["Endpoint"];
export type EnabledEndpoint = Schemas["EnabledEndpoint"];
export type CreateEndpointRequest = Schemas["CreateEndpointRequest"];
export type UpdateEndpointRequest = Schemas["UpdateEndpointRequest"];
export type EndpointSecret = Schemas["EndpointSecret"];
export type Attempt = Schemas["Attempt"];
export type RecoverRequest = Schemas["RecoverRequest"];
export type Recovery = Schemas["Recovery"];
export type Message = Schemas["Message"];
export type MessageAccepted = Schemas["MessageAccepted"];
export type MessageSummary = Schemas["MessageSummary"];
export type NewMessage = Schemas["CreateMessageRequest"];
export type Delivery = Schemas["Delivery"];
export type CreatePortalSessionRequest = Schemas["CreatePortalSessionRequest"];
export type PortalSession = Schemas["PortalSession"];
export type PortalSessionSummary = Schemas["PortalSessionSummary"];
export type Breaker = Schemas["Breaker"];
export type EventType = Schemas["EventTypeEntry"];
export type Token = Schemas["Token"];
export type CreateTokenRequest = Schemas["CreateTokenRequest"];
export type CreatedToken = Schemas["CreatedToken"];
export type OperationalEndpoint = Schemas["OperationalEndpoint"];
export type EndpointFilter = Filter<"listEndpoints">;
export type AttemptFilter = Filter<"listEndpointAttempts">;
export type MessageFilter = Filter<"searchMessages">;
export type DeliveryFilter = Filter<"searchDeliveries">;
export type BreakerFilter = Filter<"listBreakers">;
export type EventTypeFilter = Filter<"listEventTypes">;
export type TokenFilter = Filter<"listTokens">;
export type OperationalEndpointFilter = Filter<"listOperationalEndpoints">;
export type PortalSessionFilter = Filter<"listPortalSessions">;

export interface HookdOptions {
  /** Replaces parts of defaultRetryPolicy. */
  retry?: Partial<RetryPolicy>;
  /** The fetch to send requests with (globalThis.fetch by default). */
  fetch?: (request: Request) => Promise<Response>;
  /** The User-Agent of every request (where the runtime lets it be set). */
  userAgent?: string;
}

/** An openapi-fetch answer. */
interface Answer<T> {
  data?: T;
  error?: unknown;
  response: Response;
}

/** A call's data, or a HookdError when the API answered anything but success. */
async function expect<T>(call: Promise<Answer<T>>): Promise<T> {
  const { data, error, response } = await call;
  if (response.ok) return data as T;
  throw new HookdError(response.status, error, retryAfterMs(response.headers.get("Retry-After")));
}

/** Every item of a keyset-paginated list, page by page. */
async function* pages<T>(page: (after: string | undefined) => Promise<{ data: T[]; next_cursor?: string | null }>): AsyncGenerator<T> {
  let after: string | undefined;
  for (;;) {
    const p = await page(after);
    yield* p.data;
    if (!p.next_cursor || p.data.length === 0) return;
    after = p.next_cursor;
  }
}

/**
 * A client of one hookd API with one token.
 *
 * ```ts
 * const hookd = new Hookd("http://127.0.0.1:8080", token);
 * const msg = await hookd.messages.send({ tenant_id: "acme", event_type: "invoice.paid", payload: { invoice: "in_1" } });
 * ```
 *
 * Every call retries 429 and 503 answers, waiting as their Retry-After
 * asks, and network errors of requests safe to repeat (RetryPolicy).
 * `messages.send` always carries an idempotency key, so its retries store
 * one message. The API's errors are thrown as HookdError; lists are read
 * with async iterators (`for await (const ep of hookd.endpoints.all())`).
 * `raw` is the generated client, for every operation.
 */
export class Hookd {
  /** The openapi-fetch client of every operation, with this client's token and retries. */
  readonly raw: Client<paths>;
  readonly endpoints: Endpoints;
  readonly messages: Messages;
  readonly deliveries: Deliveries;
  readonly portalSessions: PortalSessions;
  readonly breakers: Breakers;
  readonly eventTypes: EventTypes;
  readonly tokens: Tokens;
  readonly operationalEndpoints: OperationalEndpoints;

  constructor(baseUrl: string, token: string, options: HookdOptions = {}) {
    const url = new URL(baseUrl);
    if (url.protocol !== "http:" && url.protocol !== "https:") throw new TypeError(`hookd: base URL ${baseUrl} is not an http(s) URL`);
    if (!token) throw new TypeError("hookd: the token is empty");
    const retrier = new Retrier({ ...defaultRetryPolicy, ...options.retry }, options.fetch);
    this.raw = createClient<paths>({
      baseUrl: baseUrl.replace(/\/+$/, ""),
      headers: { Authorization: `Bearer ${token}`, "User-Agent": options.userAgent ?? "hookd-typescript" },
      fetch: (request) => retrier.fetch(request),
    });
    this.endpoints = new Endpoints(this.raw);
    this.messages = new Messages(this.raw, (request) => retrier.fetch(request, true));
    this.deliveries = new Deliveries(this.raw);
    this.portalSessions = new PortalSessions(this.raw);
    this.breakers = new Breakers(this.raw);
    this.eventTypes = new EventTypes(this.raw);
    this.tokens = new Tokens(this.raw);
    this.operationalEndpoints = new OperationalEndpoints(this.raw);
  }
}

/** Registers and manages webhook endpoints. */
export class Endpoints {
  constructor(private readonly raw: Client<paths>) {}

  create(body: CreateEndpointRequest, signal?: AbortSignal): Promise<Endpoint> {
    return expect(this.raw.POST("/v1/endpoints", { body, signal }));
  }
  get(id: string, signal?: AbortSignal): Promise<Endpoint> {
    return expect(this.raw.GET("/v1/endpoints/{id}", { params: { path: { id } }, signal }));
  }
  update(id: string, body: UpdateEndpointRequest, signal?: AbortSignal): Promise<Endpoint> {
    return expect(this.raw.PATCH("/v1/endpoints/{id}", { params: { path: { id } }, body, signal }));
  }
  async delete(id: string, signal?: AbortSignal): Promise<void> {
    await expect(this.raw.DELETE("/v1/endpoints/{id}", { params: { path: { id } }, signal }));
  }
  disable(id: string, signal?: AbortSignal): Promise<Endpoint> {
    return expect(this.raw.POST("/v1/endpoints/{id}/disable", { params: { path: { id } }, signal }));
  }
  enable(id: string, signal?: AbortSignal): Promise<EnabledEndpoint> {
    return expect(this.raw.POST("/v1/endpoints/{id}/enable", { params: { path: { id } }, signal }));
  }
  /** What verifies the endpoint's signatures: its whsec_ secret, or the whpk_ public key of an ed25519 endpoint. */
  secret(id: string, signal?: AbortSignal): Promise<EndpointSecret> {
    return expect(this.raw.GET("/v1/endpoints/{id}/secret", { params: { path: { id } }, signal }));
  }
  /** A new secret (or key pair); the previous one keeps signing alongside it for 24 hours. */
  rotateSecret(id: string, signal?: AbortSignal): Promise<Endpoint> {
    return expect(this.raw.POST("/v1/endpoints/{id}/secret/rotate", { params: { path: { id } }, signal }));
  }
  /** A new series of attempts for the endpoint's failed deliveries created in the range. */
  recover(id: string, body: RecoverRequest, signal?: AbortSignal): Promise<Recovery> {
    return expect(this.raw.POST("/v1/endpoints/{id}/recover", { params: { path: { id } }, body, signal }));
  }
  /** Every endpoint the filter selects, in creation order. */
  all(filter: EndpointFilter = {}, signal?: AbortSignal): AsyncGenerator<Endpoint> {
    return pages((after) => expect(this.raw.GET("/v1/endpoints", { params: { query: { ...filter, after } }, signal })));
  }
  /** The endpoint's attempts, newest first. */
  attempts(id: string, filter: AttemptFilter = {}, signal?: AbortSignal): AsyncGenerator<Attempt> {
    return pages((after) =>
      expect(this.raw.GET("/v1/endpoints/{id}/attempts", { params: { path: { id }, query: { ...filter, after } }, signal })),
    );
  }
}

/** Sends and finds messages. */
export class Messages {
  constructor(
    private readonly raw: Client<paths>,
    private readonly idempotentFetch: (request: Request) => Promise<Response>,
  ) {}

  /**
   * Stores a message with one delivery per subscribed endpoint of its
   * tenant. It always sends an idempotency key (the message's, or a random
   * UUID) and retries with that key, so a send retried after a timeout, a
   * network error or a 503 stores one message.
   */
  send(message: NewMessage, signal?: AbortSignal): Promise<MessageAccepted> {
    const body = { ...message, idempotency_key: message.idempotency_key || globalThis.crypto.randomUUID() };
    return expect(this.raw.POST("/v1/messages", { body, signal, fetch: this.idempotentFetch }));
  }
  get(id: string, signal?: AbortSignal): Promise<Message> {
    return expect(this.raw.GET("/v1/messages/{id}", { params: { path: { id } }, signal }));
  }
  /** Every message the filter selects, newest first. */
  all(filter: MessageFilter = {}, signal?: AbortSignal): AsyncGenerator<MessageSummary> {
    return pages((after) => expect(this.raw.GET("/v1/messages", { params: { query: { ...filter, after } }, signal })));
  }
}

/** Finds deliveries, reads their attempts and retries them. */
export class Deliveries {
  constructor(private readonly raw: Client<paths>) {}

  get(id: string, signal?: AbortSignal): Promise<Delivery> {
    return expect(this.raw.GET("/v1/deliveries/{id}", { params: { path: { id } }, signal }));
  }
  /** Queues a failed or expired delivery again, for a new series of attempts. */
  retry(id: string, signal?: AbortSignal): Promise<Delivery> {
    return expect(this.raw.POST("/v1/deliveries/{id}/retry", { params: { path: { id } }, signal }));
  }
  /** Lets a FIFO endpoint's queue stopped at a delivery that used up its retries go on; any other delivery is a 409. */
  skip(id: string, signal?: AbortSignal): Promise<Delivery> {
    return expect(this.raw.POST("/v1/deliveries/{id}/skip", { params: { path: { id } }, signal }));
  }
  /** Every delivery the filter selects, newest first. */
  all(filter: DeliveryFilter = {}, signal?: AbortSignal): AsyncGenerator<Delivery> {
    return pages((after) => expect(this.raw.GET("/v1/deliveries", { params: { query: { ...filter, after } }, signal })));
  }
  /** The delivery's attempts, newest first. */
  attempts(id: string, filter: AttemptFilter = {}, signal?: AbortSignal): AsyncGenerator<Attempt> {
    return pages((after) =>
      expect(this.raw.GET("/v1/deliveries/{id}/attempts", { params: { path: { id }, query: { ...filter, after } }, signal })),
    );
  }
}

/** Opens tenant portal sessions (admin tokens only). */
export class PortalSessions {
  constructor(private readonly raw: Client<paths>) {}

  /** A session of the tenant portal: hand its url to the tenant's browser, which opens it once. */
  create(tenantId: string, body: CreatePortalSessionRequest = {}, signal?: AbortSignal): Promise<PortalSession> {
    return expect(this.raw.POST("/v1/tenants/{tenant_id}/portal-sessions", { params: { path: { tenant_id: tenantId } }, body, signal }));
  }
  /** The tenant's portal sessions, newest first: never their codes or cookies. */
  all(tenantId: string, filter: PortalSessionFilter = {}, signal?: AbortSignal): AsyncGenerator<PortalSessionSummary> {
    return pages((after) =>
      expect(this.raw.GET("/v1/tenants/{tenant_id}/portal-sessions", { params: { path: { tenant_id: tenantId }, query: { ...filter, after } }, signal })),
    );
  }
  /** Ends a live session at once: its cookie stops working. */
  async end(id: string, signal?: AbortSignal): Promise<void> {
    await expect(this.raw.DELETE("/v1/portal-sessions/{id}", { params: { path: { id } }, signal }));
  }
}

/** Lists the endpoints' circuit breakers. */
export class Breakers {
  constructor(private readonly raw: Client<paths>) {}

  all(filter: BreakerFilter = {}, signal?: AbortSignal): AsyncGenerator<Breaker> {
    return pages((after) => expect(this.raw.GET("/v1/breakers", { params: { query: { ...filter, after } }, signal })));
  }
}

/** Reads the event type catalogue. */
export class EventTypes {
  constructor(private readonly raw: Client<paths>) {}

  get(name: string, signal?: AbortSignal): Promise<EventType> {
    return expect(this.raw.GET("/v1/event-types/{name}", { params: { path: { name } }, signal }));
  }
  all(filter: EventTypeFilter = {}, signal?: AbortSignal): AsyncGenerator<EventType> {
    return pages((after) => expect(this.raw.GET("/v1/event-types", { params: { query: { ...filter, after } }, signal })));
  }
}

/** Lists, creates and revokes API tokens (admin tokens only). */
export class Tokens {
  constructor(private readonly raw: Client<paths>) {}

  /** A new token; its secret is in this answer only. */
  create(body: CreateTokenRequest, signal?: AbortSignal): Promise<CreatedToken> {
    return expect(this.raw.POST("/v1/tokens", { body, signal }));
  }
  async revoke(id: string, signal?: AbortSignal): Promise<void> {
    await expect(this.raw.DELETE("/v1/tokens/{id}", { params: { path: { id } }, signal }));
  }
  all(filter: TokenFilter = {}, signal?: AbortSignal): AsyncGenerator<Token> {
    return pages((after) => expect(this.raw.GET("/v1/tokens", { params: { query: { ...filter, after } }, signal })));
  }
}

/** Lists the endpoints that receive hookd's own operational events (admin tokens only). */
export class OperationalEndpoints {
  constructor(private readonly raw: Client<paths>) {}

  all(filter: OperationalEndpointFilter = {}, signal?: AbortSignal): AsyncGenerator<OperationalEndpoint> {
    return pages((after) => expect(this.raw.GET("/v1/operational-endpoints", { params: { query: { ...filter, after } }, signal })));
  }
}

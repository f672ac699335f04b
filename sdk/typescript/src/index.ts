export { Hookd, Endpoints, Messages, Deliveries, PortalSessions, Breakers, EventTypes, Tokens, OperationalEndpoints } from "./client.js";
export type * from "./client.js";
export { HookdError, type FieldError } from "./errors.js";
export { defaultRetryPolicy, type RetryPolicy } from "./retry.js";
export type { components, operations, paths } from "./generated/schema.js";

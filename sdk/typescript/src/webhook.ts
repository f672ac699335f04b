/**
 * Verifies the webhooks hookd delivers: their Standard Webhooks
 * signatures (webhook-id, webhook-timestamp and webhook-signature
 * headers), HMAC-SHA256 ("v1,") with an endpoint's whsec_ secret or
 * Ed25519 ("v1a,") with its whpk_ public key, and a timestamp within the
 * tolerance of the receiver's clock. HMAC signatures are made by the
 * standardwebhooks package (re-exported here: `Webhook` verifies an HMAC
 * webhook on its own), Ed25519 ones checked by node:crypto.
 */
import { createPublicKey, timingSafeEqual, verify as verifySignature, type KeyObject } from "node:crypto";

import { Webhook, WebhookVerificationError } from "standardwebhooks";

export { Webhook, WebhookVerificationError } from "standardwebhooks";

/** How far a webhook's timestamp may be from the receiver's clock, either way. */
export const defaultToleranceMs = 5 * 60 * 1000;

export interface VerifierOptions {
  /** Replaces defaultToleranceMs. */
  toleranceMs?: number;
  /** The clock timestamps are checked against, in milliseconds (Date.now by default). */
  now?: () => number;
}

/** Request headers: a fetch Headers, or node:http's IncomingHttpHeaders. */
export type WebhookHeaders = Headers | Record<string, string | string[] | undefined>;

function header(headers: WebhookHeaders, name: string): string {
  if (headers instanceof Headers) return headers.get(name) ?? "";
  const v = headers[name] ?? headers[name.toLowerCase()];
  return Array.isArray(v) ? (v[0] ?? "") : (v ?? "");
}

/** Checks webhooks against an endpoint's keys. */
export class Verifier {
  private readonly hmac: Webhook[] = [];
  private readonly ed25519: KeyObject[] = [];
  private readonly toleranceMs: number;
  private readonly now: () => number;

  /**
   * A verifier of webhooks signed with any of `keys`: an hmac endpoint's
   * whsec_ secret or an ed25519 endpoint's whpk_ public key, as
   * `endpoints.secret` reads them. Give both the secret and the
   * previous_secret during the 24 hours after a rotation.
   */
  constructor(keys: string[], options: VerifierOptions = {}) {
    if (keys.length === 0) throw new TypeError("webhook: no key");
    this.toleranceMs = options.toleranceMs ?? defaultToleranceMs;
    this.now = options.now ?? Date.now;
    keys.forEach((key, i) => {
      if (key.startsWith("whsec_")) {
        this.hmac.push(new Webhook(key));
      } else if (key.startsWith("whpk_")) {
        const raw = Buffer.from(key.slice("whpk_".length), "base64");
        if (raw.length !== 32) throw new TypeError(`webhook: key ${i}: not a whpk_ Ed25519 public key`);
        this.ed25519.push(createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: raw.toString("base64url") }, format: "jwk" }));
      } else {
        throw new TypeError(`webhook: key ${i}: neither a whsec_ secret nor a whpk_ public key`);
      }
    });
  }

  /**
   * Checks one webhook: its headers and its body, exactly as received.
   * Throws WebhookVerificationError unless the timestamp is within the
   * tolerance and a signature checks out with one of the keys.
   */
  verify(headers: WebhookHeaders, body: string | Uint8Array): void {
    const id = header(headers, "webhook-id");
    const ts = header(headers, "webhook-timestamp");
    const signatures = header(headers, "webhook-signature").split(" ").filter((s) => s !== "");
    if (id === "" || ts === "" || signatures.length === 0) throw new WebhookVerificationError("Missing required headers");
    if (!/^\d+$/.test(ts)) throw new WebhookVerificationError("Invalid Signature Headers");
    const sentMs = Number(ts) * 1000;
    const now = this.now();
    if (now - sentMs > this.toleranceMs) throw new WebhookVerificationError("Message timestamp too old");
    if (sentMs - now > this.toleranceMs) throw new WebhookVerificationError("Message timestamp too new");

    const payload = typeof body === "string" ? Buffer.from(body) : Buffer.from(body.buffer, body.byteOffset, body.byteLength);
    for (const wh of this.hmac) {
      const expected = Buffer.from(wh.sign(id, new Date(sentMs), payload));
      for (const sig of signatures) {
        const given = Buffer.from(sig);
        if (given.length === expected.length && timingSafeEqual(given, expected)) return;
      }
    }
    if (this.ed25519.length > 0) {
      const signed = Buffer.concat([Buffer.from(`${id}.${ts}.`), payload]);
      for (const sig of signatures) {
        if (!sig.startsWith("v1a,")) continue;
        const raw = Buffer.from(sig.slice(4), "base64");
        if (raw.length !== 64) continue;
        if (this.ed25519.some((key) => verifySignature(null, signed, key, raw))) return;
      }
    }
    throw new WebhookVerificationError("No matching signature found");
  }
}

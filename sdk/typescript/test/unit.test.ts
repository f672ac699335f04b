import assert from "node:assert/strict";
import { generateKeyPairSync, randomBytes, sign } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";

import { HookdError } from "../src/errors.js";
import { backoffMs, defaultRetryPolicy, Retrier, retryAfterMs } from "../src/retry.js";
import { Verifier, Webhook, WebhookVerificationError } from "../src/webhook.js";
import { close, readBody } from "./helpers.js";

describe("retryAfterMs", () => {
  const now = Date.parse("2026-03-01T12:00:00Z");
  for (const [value, want] of [
    ["1", 1000],
    [" 120 ", 120_000],
    ["0", 0],
    ["Sun, 01 Mar 2026 12:00:30 GMT", 30_000],
    ["Sun, 01 Mar 2026 11:00:00 GMT", 0],
    ["", undefined],
    [null, undefined],
    ["-1", undefined],
    ["1.5", undefined],
    ["soon", undefined],
  ] as const) {
    test(JSON.stringify(value), () => assert.equal(retryAfterMs(value, now), want));
  }
});

test("backoff grows up to its bound", () => {
  const p = { ...defaultRetryPolicy, minBackoffMs: 100, maxBackoffMs: 1000 };
  for (let n = 1; n < 70; n++) {
    const ceiling = n <= 4 ? 100 * 2 ** (n - 1) : 1000;
    for (let i = 0; i < 50; i++) {
      const d = backoffMs(p, n);
      assert.ok(d >= 0 && d <= ceiling, `retry ${n}: ${d}`);
    }
  }
});

describe("Retrier", () => {
  let server: Server;
  let url = "";
  let answer: (n: number, res: import("node:http").ServerResponse) => void = () => {};
  let tries = 0;
  const bodies: string[] = [];
  before(async () => {
    server = createServer(async (req, res) => {
      bodies.push((await readBody(req)).toString());
      answer(++tries, res);
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  });
  after(() => close(server));

  function setup(a: typeof answer, policy = {}) {
    tries = 0;
    bodies.length = 0;
    answer = a;
    const waits: number[] = [];
    const retrier = new Retrier({ ...defaultRetryPolicy, ...policy }, undefined, async (ms) => {
      waits.push(ms);
    });
    return { retrier, waits };
  }

  test("retries refusals, waiting their Retry-After, and sends the whole body each time", async () => {
    const { retrier, waits } = setup((n, res) => {
      if (n === 1) res.writeHead(503, { "Retry-After": "3" }).end();
      else if (n === 2) res.writeHead(429).end();
      else res.writeHead(202).end();
    });
    const resp = await retrier.fetch(new Request(url, { method: "POST", body: '{"a":1}' }));
    assert.equal(resp.status, 202);
    assert.equal(tries, 3);
    assert.deepEqual(bodies, ['{"a":1}', '{"a":1}', '{"a":1}']);
    assert.equal(waits[0], 3000);
    assert.ok(waits[1]! <= 2 * defaultRetryPolicy.minBackoffMs);
  });

  test("stops at maxAttempts and at a Retry-After over maxRetryAfterMs", async () => {
    const refuse = (_: number, res: import("node:http").ServerResponse) => res.writeHead(503, { "Retry-After": "10" }).end();
    let { retrier } = setup(refuse, { maxAttempts: 3 });
    assert.equal((await retrier.fetch(new Request(url))).status, 503);
    assert.equal(tries, 3);
    ({ retrier } = setup(refuse, { maxRetryAfterMs: 5000 }));
    assert.equal((await retrier.fetch(new Request(url))).status, 503);
    assert.equal(tries, 1);
  });

  test("repeats only repeatable requests after a network error", async () => {
    const hangUp = (n: number, res: import("node:http").ServerResponse) => {
      if (n === 1) res.socket?.destroy();
      else res.writeHead(200).end();
    };
    for (const [method, repeatable, want] of [
      ["GET", undefined, 2],
      ["DELETE", undefined, 2],
      ["POST", undefined, 1],
      ["POST", true, 2],
    ] as const) {
      const { retrier } = setup(hangUp);
      const req = new Request(url, { method, body: method === "GET" ? undefined : "{}" });
      if (want === 1) await assert.rejects(retrier.fetch(req, repeatable));
      else assert.equal((await retrier.fetch(req, repeatable)).status, 200);
      assert.equal(tries, want, `${method} ${repeatable}`);
    }
  });

  test("an attempt timeout is retried; an aborted call is not", async () => {
    const held: import("node:http").ServerResponse[] = [];
    const { retrier } = setup(
      (n, res) => {
        if (n === 1) held.push(res); // never answered
        else res.writeHead(200).end();
      },
      { attemptTimeoutMs: 200 },
    );
    assert.equal((await retrier.fetch(new Request(url, { method: "POST", body: "{}" }), true)).status, 200);
    assert.equal(tries, 2);
    held.forEach((r) => r.destroy());
    await assert.rejects(retrier.fetch(new Request(url, { signal: AbortSignal.abort() })));
  });
});

test("HookdError carries the problem", () => {
  const err = new HookdError(400, {
    type: "https://hookd.dev/problems/validation",
    title: "Bad Request",
    status: 400,
    detail: "1 field is invalid",
    errors: [{ field: "url", message: "must be http or https" }],
  });
  assert.equal(err.field("url")?.message, "must be http or https");
  assert.equal(err.field("secret"), undefined);
  assert.match(err.message, /400 Bad Request: 1 field is invalid \(url: must be http or https\)/);
  const proxy = new HookdError(502, "<html>bad gateway</html>");
  assert.equal(proxy.title, "HTTP 502");
  assert.deepEqual(proxy.errors, []);
});

describe("Verifier", () => {
  const now = Date.parse("2026-03-01T12:00:00Z");
  const secret = `whsec_${randomBytes(32).toString("base64")}`;
  const oldSecret = `whsec_${randomBytes(32).toString("base64")}`;
  const { publicKey, privateKey } = generateKeyPairSync("ed25519");
  const other = generateKeyPairSync("ed25519");
  const whpk = `whpk_${Buffer.from(publicKey.export({ format: "jwk" }).x!, "base64url").toString("base64")}`;
  const body = '{"invoice":"in_1","amount":4200}';
  const id = "msg_01J0000000000000000000000";
  const hmac = (s: string, at: number, b = body, i = id) => new Webhook(s).sign(i, new Date(at), b);
  const ed = (key: typeof privateKey, at: number, b = body) =>
    `v1a,${sign(null, Buffer.from(`${id}.${Math.floor(at / 1000)}.${b}`), key).toString("base64")}`;
  const headers = (sig: string, at = now, i = id) => ({ "webhook-id": i, "webhook-timestamp": String(Math.floor(at / 1000)), "webhook-signature": sig });

  for (const [name, keys, hdrs, b, ok] of [
    ["hmac", [secret], headers(hmac(secret, now)), body, true],
    ["ed25519", [whpk], headers(ed(privateKey, now)), body, true],
    ["the previous secret during a rotation", [secret, oldSecret], headers(hmac(oldSecret, now)), body, true],
    ["two signatures, the second matching", [whpk], headers(`${ed(other.privateKey, now)} ${ed(privateKey, now)}`), body, true],
    ["within the tolerance", [secret], headers(hmac(secret, now - 240_000), now - 240_000), body, true],
    ["a fetch Headers", [secret], new Headers(headers(hmac(secret, now))), body, true],
    ["a changed body", [secret], headers(hmac(secret, now)), '{"invoice":"in_1","amount":1}', false],
    ["another secret", [oldSecret], headers(hmac(secret, now)), body, false],
    ["another key pair", [whpk], headers(ed(other.privateKey, now)), body, false],
    ["an hmac signature checked with a public key", [whpk], headers(hmac(secret, now)), body, false],
    ["too old", [secret], headers(hmac(secret, now - 360_000), now - 360_000), body, false],
    ["too new", [secret], headers(hmac(secret, now + 360_000), now + 360_000), body, false],
    ["no signature", [secret], headers(""), body, false],
    ["garbage", [secret, whpk], headers("v1a,!!! v1,??? v2,x"), body, false],
  ] as const) {
    test(name, () => {
      const v = new Verifier([...keys], { now: () => now });
      if (ok) v.verify(hdrs, b);
      else assert.throws(() => v.verify(hdrs, b), WebhookVerificationError);
    });
  }

  test("a tolerance of its own", () => {
    const at = now - 30_000;
    assert.throws(() => new Verifier([secret], { toleranceMs: 10_000, now: () => now }).verify(headers(hmac(secret, at), at), body), WebhookVerificationError);
    new Verifier([secret], { toleranceMs: 60_000, now: () => now }).verify(headers(hmac(secret, at), at), body);
  });

  test("bad keys are refused", () => {
    for (const keys of [[], ["secret"], [`whpk_${Buffer.from("short").toString("base64")}`]]) {
      assert.throws(() => new Verifier(keys), TypeError, JSON.stringify(keys));
    }
  });
});

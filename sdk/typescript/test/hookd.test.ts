import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { after, before, describe, test } from "node:test";

import { Hookd, HookdError, type RetryPolicy } from "../src/index.js";
import { startDevserver, type Devserver } from "./devserver.js";
import { eventually, FaultProxy, newSecret, newTenant, Receiver } from "./helpers.js";
import { Verifier } from "../src/webhook.js";

let server: Devserver;
let failed = false;

before(async () => {
  server = await startDevserver();
});

after(async () => {
  await server?.stop();
  if (failed) console.error(`--- hookd's output ---\n${server?.logs()}`);
});

const quick: Partial<RetryPolicy> = { minBackoffMs: 50, maxBackoffMs: 500 };

function client(baseUrl = server.api, retry: Partial<RetryPolicy> = quick): Hookd {
  return new Hookd(baseUrl, server.token, { retry });
}

async function messageIds(c: Hookd, tenant: string): Promise<string[]> {
  const ids: string[] = [];
  for await (const m of c.messages.all({ tenant_id: tenant })) ids.push(m.id);
  return ids;
}

/** Runs fn as a test, noting a failure so that hookd's output is printed. */
function it(name: string, fn: () => Promise<void>): void {
  test(name, async () => {
    try {
      await fn();
    } catch (err) {
      failed = true;
      throw err;
    }
  });
}

describe("against hookd", { concurrency: true }, () => {
  it("sends a message that both an hmac and an ed25519 endpoint receive and verify", async () => {
    const c = client();
    const tenant = newTenant();
    const hmacRecv = await new Receiver().start();
    const edRecv = await new Receiver().start();
    try {
      const secret = newSecret();
      await c.endpoints.create({ tenant_id: tenant, url: hmacRecv.url, secret });
      hmacRecv.verifier = new Verifier([secret]);
      const ed = await c.endpoints.create({ tenant_id: tenant, url: edRecv.url, signing: "ed25519" });
      const key = await c.endpoints.secret(ed.id);
      assert.match(key.secret, /^whpk_/);
      edRecv.verifier = new Verifier([key.secret]);

      const msg = await c.messages.send({ tenant_id: tenant, event_type: "invoice.paid", payload: { invoice: "in_1", amount: 4200 } });
      assert.equal(msg.deliveries.length, 2);
      assert.ok(msg.idempotency_key, "send sends a key of its own");
      for (const r of [hmacRecv, edRecv]) {
        assert.deepEqual(JSON.parse(await r.waitVerified(msg.id)), { invoice: "in_1", amount: 4200 });
      }
      await eventually("both delivered", async () => {
        const m = await c.messages.get(msg.id);
        return m.deliveries.every((d) => d.status === "delivered");
      });
    } finally {
      await hmacRecv.close();
      await edRecv.close();
    }
  });

  it("stores one message per idempotency key, and a message per keyless send", async () => {
    const c = client();
    const tenant = newTenant();
    const first = await c.messages.send({ tenant_id: tenant, event_type: "order.created", payload: { n: 1 }, idempotency_key: "order-1" });
    const again = await c.messages.send({ tenant_id: tenant, event_type: "order.created", payload: { n: 1 }, idempotency_key: "order-1" });
    assert.equal(again.id, first.id);
    const a = await c.messages.send({ tenant_id: tenant, event_type: "order.created", payload: 2 });
    const b = await c.messages.send({ tenant_id: tenant, event_type: "order.created", payload: 2 });
    assert.notEqual(a.id, b.id);
    assert.notEqual(a.idempotency_key, b.idempotency_key);
    assert.equal((await messageIds(c, tenant)).length, 3);
  });

  it("retries a send through two 503s with Retry-After: 1, storing one message", async () => {
    const keys: string[] = [];
    const proxy = await new FaultProxy(server.api, async (n, req, body, res) => {
      if (!req.url?.startsWith("/v1/messages")) return false;
      keys.push(JSON.parse(body.toString()).idempotency_key);
      if (n > 2) return false;
      res.writeHead(503, { "Retry-After": "1", "Content-Type": "application/problem+json" });
      res.end(JSON.stringify({ type: "https://hookd.dev/problems/unavailable", title: "Service Unavailable", status: 503 }));
      return true;
    }).start();
    try {
      const tenant = newTenant();
      const started = Date.now();
      const msg = await client(proxy.url).messages.send({ tenant_id: tenant, event_type: "invoice.paid", payload: { amount: 1 } });
      assert.ok(Date.now() - started >= 2000, "send waits the Retry-After of both 503s");
      assert.equal(proxy.count("POST", "/v1/messages"), 3);
      assert.equal(keys.length, 3);
      assert.deepEqual(new Set(keys), new Set([msg.idempotency_key]), "every try carries the same key");
      assert.deepEqual(await messageIds(client(), tenant), [msg.id]);
    } finally {
      await proxy.close();
    }
  });

  it("retries a send whose answer timed out with the same key, storing one message", async () => {
    let firstTry: Promise<number> | undefined;
    const proxy = await new FaultProxy(server.api, async (n, req, _body, res, pass) => {
      if (!req.url?.startsWith("/v1/messages") || n > 1) return false;
      // hookd stores the first try; its answer never reaches the client,
      // which gives up after its attempt timeout.
      firstTry = pass().then((a) => a.status);
      await firstTry;
      await new Promise((resolve) => res.once("close", resolve));
      return true;
    }).start();
    try {
      const tenant = newTenant();
      const c = client(proxy.url, { attemptTimeoutMs: 2000, minBackoffMs: 10, maxBackoffMs: 100 });
      const msg = await c.messages.send({ tenant_id: tenant, event_type: "invoice.paid", payload: { amount: 2 } });
      // The retry may be answered before the proxy reads the first try's answer.
      assert.equal(await firstTry, 202, "the first try stored the message");
      // A retry that also timed out on a loaded machine makes a third try, with the same key.
      assert.ok(proxy.count("POST", "/v1/messages") >= 2);
      assert.deepEqual(await messageIds(client(), tenant), [msg.id], "the retry answered the first try's message");
    } finally {
      await proxy.close();
    }
  });

  it("pages through lists larger than a page", async () => {
    const c = client();
    const tenant = newTenant();
    const created: string[] = [];
    for (let i = 0; i < 7; i++) created.push((await c.endpoints.create({ tenant_id: tenant, url: "http://127.0.0.1:9/hooks" })).id);
    const listed: string[] = [];
    for await (const ep of c.endpoints.all({ tenant_id: tenant, limit: 2 })) listed.push(ep.id);
    assert.deepEqual(listed, created, "every endpoint once, in creation order, over 4 pages");

    let n = 0;
    for await (const _ of c.endpoints.all({ tenant_id: tenant, limit: 2 })) {
      if (++n === 3) break;
    }
    assert.equal(n, 3);

    await assert.rejects(
      async () => {
        for await (const _ of c.endpoints.all({ tenant_id: "not a tenant!" })) {
          // nothing: the first page is refused
        }
      },
      (err: unknown) => err instanceof HookdError && err.status === 400,
    );
  });

  it("reads a failed delivery's attempts and retries it", async () => {
    const c = client();
    const tenant = newTenant();
    const recv = await new Receiver().start();
    try {
      const secret = newSecret();
      recv.verifier = new Verifier([secret]);
      recv.status = 500;
      await c.endpoints.create({ tenant_id: tenant, url: recv.url, secret });
      const msg = await c.messages.send({ tenant_id: tenant, event_type: "invoice.paid", payload: "x" });
      const id = msg.deliveries[0]!.id;
      // devserver's dispatcher makes two attempts within about a second.
      await eventually("the delivery fails", async () => (await c.deliveries.get(id)).status === "failed");
      const codes = async () => {
        const out: (number | null | undefined)[] = [];
        for await (const a of c.deliveries.attempts(id)) out.push(a.status_code);
        return out;
      };
      assert.deepEqual(await codes(), [500, 500]);

      recv.status = 200;
      const d = await c.deliveries.retry(id);
      assert.notEqual(d.status, "failed");
      await recv.waitVerified(msg.id);
      await eventually("the retry is delivered", async () => (await c.deliveries.get(id)).status === "delivered");
      assert.deepEqual(await codes(), [200, 500, 500], "newest first");

      await assert.rejects(c.deliveries.retry(id), (err: unknown) => err instanceof HookdError && err.status === 409);
      // Nor skipped: only a FIFO queue's blocking delivery is.
      await assert.rejects(c.deliveries.skip(id), (err: unknown) => err instanceof HookdError && err.status === 409);
    } finally {
      await recv.close();
    }
  });

  it("throws the API's problems as HookdError with their fields", async () => {
    const c = client();
    const err = await c.endpoints.create({ tenant_id: newTenant(), url: "ftp://example.com/hooks" }).catch((e: unknown) => e);
    assert.ok(err instanceof HookdError, String(err));
    assert.equal(err.status, 400);
    assert.equal(err.type, "https://hookd.dev/problems/validation");
    assert.ok(err.field("url")?.message, JSON.stringify(err.errors));
    assert.match(err.message, /url: /);

    await assert.rejects(c.endpoints.get("ep_01HZZZZZZZZZZZZZZZZZZZZZZZ"), (e: unknown) => e instanceof HookdError && e.status === 404);
    const bad = new Hookd(server.api, "not-a-token");
    await assert.rejects(bad.endpoints.get("ep_01HZZZZZZZZZZZZZZZZZZZZZZZ"), (e: unknown) => e instanceof HookdError && e.status === 401);
    assert.throws(() => new Hookd("ftp://127.0.0.1", "t"), TypeError);
  });

  it("opens a portal session and recovers an endpoint", async () => {
    const c = client();
    const tenant = newTenant();
    const s = await c.portalSessions.create(tenant, { read_only: true });
    assert.equal(s.tenant_id, tenant);
    assert.equal(s.read_only, true);
    assert.match(s.url, /\/portal#code=/);

    // Listed without its code, then ended: it no longer lists as live.
    const listed = [];
    for await (const ps of c.portalSessions.all(tenant)) listed.push(ps);
    assert.deepEqual(listed.map((ps) => [ps.id, ps.status]), [[s.id, "pending"]]);
    await c.portalSessions.end(s.id);
    for await (const ps of c.portalSessions.all(tenant)) assert.equal(ps.status, "ended");
    await assert.rejects(c.portalSessions.end(s.id), (e: unknown) => e instanceof HookdError && e.status === 404);

    const ep = await c.endpoints.create({ tenant_id: tenant, url: "http://127.0.0.1:9/hooks" });
    const hourAgo = new Date(Date.now() - 3600_000).toISOString();
    const rec = await c.endpoints.recover(ep.id, { since: hourAgo });
    assert.equal(rec.queued, 0);
    const err = await c.endpoints
      .recover(ep.id, { since: hourAgo, until: new Date(Date.now() - 7200_000).toISOString() })
      .catch((e: unknown) => e);
    assert.ok(err instanceof HookdError && err.status === 400 && err.field("until"), String(err));
  });

  it("runs examples/typescript: the receiver verifies what the sender sends", async () => {
    const examples = fileURLToPath(new URL("../examples/", import.meta.url));
    const secret = newSecret();
    const receiver = spawn(process.execPath, [`${examples}receiver.js`], {
      env: { ...process.env, LISTEN_PORT: "0", WEBHOOK_SECRET: secret },
      stdio: ["ignore", "pipe", "inherit"],
    });
    try {
      const lines = createInterface({ input: receiver.stdout })[Symbol.asyncIterator]();
      const next = async () => {
        const line = await lines.next();
        assert.ok(!line.done, "the receiver exited");
        return line.value;
      };
      const listening = /^listening on (http:\/\/\S+)$/.exec(await next());
      assert.ok(listening);
      const { stdout } = await promisify(execFile)(process.execPath, [`${examples}sender.js`], {
        env: { ...process.env, HOOKD_API: server.api, HOOKD_TOKEN: server.token, RECEIVER_URL: listening[1], WEBHOOK_SECRET: secret },
      });
      const id = /^message (msg_\S+)$/m.exec(stdout)?.[1];
      assert.ok(id, stdout);
      for (;;) {
        const line = await next();
        if (line.startsWith(`${id} verified `)) {
          assert.deepEqual(JSON.parse(line.slice(`${id} verified `.length)), { invoice: "in_1", amount: 4200 });
          return;
        }
      }
    } finally {
      receiver.kill();
    }
  });
});

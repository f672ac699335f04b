import { randomBytes } from "node:crypto";
import { createServer, request as httpRequest, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

import { Verifier } from "../src/webhook.js";

/** A tenant id no other test uses. */
export function newTenant(): string {
  return `sdk-${randomBytes(6).toString("hex")}`;
}

/** A whsec_ secret of 32 random bytes. */
export function newSecret(): string {
  return `whsec_${randomBytes(32).toString("base64")}`;
}

export async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

export async function close(server: Server): Promise<void> {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
}

/** Polls check until it holds, for up to a minute. */
export async function eventually(what: string, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`${what}: not within a minute`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A webhook receiver on 127.0.0.1 that verifies every webhook with the SDK's Verifier and answers status. */
export class Receiver {
  status = 200;
  verifier?: Verifier;
  readonly verified = new Map<string, string>();
  rejected = 0;
  private waiters: (() => void)[] = [];
  private readonly server = createServer(async (req, res) => {
    const body = await readBody(req);
    try {
      if (!this.verifier) throw new Error("no key yet");
      this.verifier.verify(req.headers, body);
    } catch {
      this.rejected++;
      res.writeHead(400).end();
      return;
    }
    if (this.status === 200) {
      this.verified.set(String(req.headers["webhook-id"]), body.toString());
      this.waiters.splice(0).forEach((w) => w());
    }
    res.writeHead(this.status).end();
  });
  url = "";

  async start(): Promise<this> {
    this.url = `${await listen(this.server)}/hooks`;
    return this;
  }

  close(): Promise<void> {
    return close(this.server);
  }

  /** The body of the verified webhook of message id. */
  async waitVerified(id: string): Promise<string> {
    const deadline = Date.now() + 60_000;
    while (!this.verified.has(id)) {
      if (Date.now() > deadline) throw new Error(`no verified webhook of ${id} within a minute (${this.rejected} rejected)`);
      await new Promise<void>((resolve) => {
        this.waiters.push(resolve);
        setTimeout(resolve, 1000).unref();
      });
    }
    return this.verified.get(id)!;
  }
}

/** A proxy before hookd: fault answers a request itself when it returns true; otherwise the request passes through. */
export class FaultProxy {
  readonly counts = new Map<string, number>();
  private readonly server: Server;
  url = "";

  constructor(
    private readonly target: string,
    fault: (n: number, req: IncomingMessage, body: Buffer, res: ServerResponse, pass: () => Promise<{ status: number; body: Buffer }>) => Promise<boolean>,
  ) {
    this.server = createServer(async (req, res) => {
      const key = `${req.method} ${req.url?.split("?")[0]}`;
      const n = (this.counts.get(key) ?? 0) + 1;
      this.counts.set(key, n);
      const body = await readBody(req);
      const pass = () => this.forward(req, body);
      if (await fault(n, req, body, res, pass)) return;
      const answer = await pass().catch(() => undefined);
      if (!answer) {
        res.writeHead(502).end();
        return;
      }
      res.writeHead(answer.status, { "Content-Type": "application/json" }).end(answer.body);
    });
  }

  async start(): Promise<this> {
    this.url = await listen(this.server);
    return this;
  }

  close(): Promise<void> {
    return close(this.server);
  }

  count(method: string, path: string): number {
    return this.counts.get(`${method} ${path}`) ?? 0;
  }

  /** Sends the request to hookd and reads its whole answer. */
  private forward(req: IncomingMessage, body: Buffer): Promise<{ status: number; body: Buffer }> {
    const target = new URL(req.url ?? "/", this.target);
    return new Promise((resolve, reject) => {
      const out = httpRequest(target, { method: req.method, headers: { ...req.headers, host: target.host } }, async (answer) => {
        resolve({ status: answer.statusCode ?? 502, body: await readBody(answer) });
      });
      out.on("error", reject);
      out.end(body);
    });
  }
}

// Receives hookd's webhooks, verifies each one's signature with hookd's
// TypeScript client, and prints it.
//
//   LISTEN_PORT=9000 WEBHOOK_SECRET=whsec_... node receiver.js
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";

import { Verifier } from "@hookd/sdk/webhook";

// The endpoint's whsec_ secret, or the whpk_ public key of an ed25519
// endpoint.
const verifier = new Verifier([process.env.WEBHOOK_SECRET!]);

const server = createServer(async (req, res) => {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const body = Buffer.concat(chunks);
  try {
    verifier.verify(req.headers, body); // the body exactly as received
  } catch {
    res.writeHead(400).end("bad signature");
    return;
  }
  console.log(`${req.headers["webhook-id"]} verified ${body}`);
  res.writeHead(204).end();
});

server.listen(Number(process.env.LISTEN_PORT ?? 9000), "127.0.0.1", () => {
  console.log(`listening on http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`);
});

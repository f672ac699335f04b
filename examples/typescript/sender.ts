// Registers an endpoint for tenant acme and sends it one message with
// hookd's TypeScript client.
//
//   HOOKD_API=http://127.0.0.1:8080 HOOKD_TOKEN=... RECEIVER_URL=http://127.0.0.1:9000/hooks \
//   WEBHOOK_SECRET=whsec_... node sender.js
import { Hookd } from "@hookd/sdk";

const hookd = new Hookd(process.env.HOOKD_API!, process.env.HOOKD_TOKEN!);

// The endpoint signs with the receiver's secret; without one, hookd
// generates it and hookd.endpoints.secret reads it.
const endpoint = await hookd.endpoints.create({
  tenant_id: "acme",
  url: process.env.RECEIVER_URL!,
  secret: process.env.WEBHOOK_SECRET!,
});
console.log("endpoint", endpoint.id);

// send retries 429s, 503s and timeouts with one idempotency key: the
// message is stored once.
const message = await hookd.messages.send({
  tenant_id: "acme",
  event_type: "invoice.paid",
  payload: { invoice: "in_1", amount: 4200 },
});
console.log("message", message.id);

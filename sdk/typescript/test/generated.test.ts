import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

import { Breakers, Deliveries, Endpoints, EventTypes, Messages, OperationalEndpoints, PortalSessions, Tokens } from "../src/index.js";
import { repoRoot } from "./devserver.js";

/** sdk/typescript: dist/test is two levels below it. */
const packageDir = fileURLToPath(new URL("../../", import.meta.url));
const documentPath = join(repoRoot, "internal", "api", "openapi.json");
const schemaPath = join(packageDir, "src", "generated", "schema.ts");

test("src/generated/schema.ts is what `npm run generate` makes of the document now", () => {
  const pkg = JSON.parse(readFileSync(join(packageDir, "package.json"), "utf8")) as { scripts: Record<string, string> };
  const args = pkg.scripts.generate!.split(/\s+/);
  assert.equal(args[0], "openapi-typescript");
  const out = args.indexOf("--output");
  assert.ok(out > 0, "the generate script names its --output");
  const dir = mkdtempSync(join(tmpdir(), "hookd-sdk-generate-"));
  try {
    args[out + 1] = join(dir, "schema.ts");
    execFileSync(process.execPath, [join(packageDir, "node_modules", "openapi-typescript", "bin", "cli.js"), ...args.slice(1)], {
      cwd: packageDir,
      stdio: ["ignore", "ignore", "pipe"],
    });
    const fresh = readFileSync(join(dir, "schema.ts"), "utf8");
    assert.ok(fresh === readFileSync(schemaPath, "utf8"), "src/generated/schema.ts is stale: run `npm run generate` in sdk/typescript (or `make sdk`)");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

/** Every operation of the document: its id and whether it takes an `after` cursor. */
function documentOperations(): { id: string; paged: boolean }[] {
  const doc = JSON.parse(readFileSync(documentPath, "utf8"));
  const params = doc.components?.parameters ?? {};
  const ops: { id: string; paged: boolean }[] = [];
  for (const item of Object.values(doc.paths) as Record<string, any>[]) {
    for (const [method, op] of Object.entries(item)) {
      if (method === "parameters") continue;
      assert.ok(op.operationId, `an operation of ${JSON.stringify(Object.keys(item))} has no operationId`);
      const all = (op.parameters ?? []).map((p: any) => (p.$ref ? params[p.$ref.split("/").pop()] : p));
      ops.push({ id: op.operationId, paged: all.some((p: any) => p?.in === "query" && p?.name === "after") });
    }
  }
  assert.ok(ops.length > 0);
  return ops;
}

test("every operation of the document is typed in src/generated/schema.ts", () => {
  const schema = readFileSync(schemaPath, "utf8");
  const start = schema.indexOf("export interface operations {");
  assert.ok(start >= 0);
  const typed = new Set([...schema.slice(start).matchAll(/^ {4}(\w+): \{$/gm)].map((m) => m[1]));
  for (const op of documentOperations()) {
    assert.ok(typed.has(op.id), `operation ${op.id} is not in src/generated/schema.ts: run \`npm run generate\``);
  }
});

/** The iterator of each paged list operation; a new paged list needs one here. */
const pagedIterators: Record<string, unknown> = {
  listEndpoints: Endpoints.prototype.all,
  listEndpointAttempts: Endpoints.prototype.attempts,
  searchMessages: Messages.prototype.all,
  searchDeliveries: Deliveries.prototype.all,
  listDeliveryAttempts: Deliveries.prototype.attempts,
  listBreakers: Breakers.prototype.all,
  listEventTypes: EventTypes.prototype.all,
  listTokens: Tokens.prototype.all,
  listOperationalEndpoints: OperationalEndpoints.prototype.all,
  listPortalSessions: PortalSessions.prototype.all,
};

test("every paged list has an async iterator", () => {
  const paged = documentOperations()
    .filter((op) => op.paged)
    .map((op) => op.id)
    .sort();
  assert.deepEqual(Object.keys(pagedIterators).sort(), paged);
  for (const fn of Object.values(pagedIterators)) assert.equal(typeof fn, "function");
});

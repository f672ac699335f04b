import { spawn } from "node:child_process";
import { once } from "node:events";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

/** The repository's root: dist/test is four levels below it. */
export const repoRoot = fileURLToPath(new URL("../../../../", import.meta.url));

export interface Devserver {
  api: string;
  token: string;
  /** hookd's output, for a failed run. */
  logs(): string;
  /** Closes devserver's standard input, which stops it, and waits for it to exit. */
  stop(): Promise<void>;
}

/**
 * Starts the repository's devserver (`go run ./internal/devserver`): a
 * private PostgreSQL cluster, the api and a dispatcher with a short retry
 * schedule, and an admin token.
 */
export async function startDevserver(): Promise<Devserver> {
  const child = spawn("go", ["run", "./internal/devserver"], { cwd: repoRoot, stdio: ["pipe", "pipe", "pipe"] });
  let logs = "";
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
    logs = (logs + chunk).slice(-16_384);
  });
  const exited = once(child, "exit");
  const stop = async () => {
    child.stdin.end();
    await exited;
  };
  const lines = createInterface({ input: child.stdout });
  const first = new Promise<string>((resolve, reject) => {
    lines.once("line", resolve);
    child.once("exit", (code) => reject(new Error(`devserver exited (${code}):\n${logs}`)));
    setTimeout(() => reject(new Error(`devserver not ready after 5 minutes:\n${logs}`)), 5 * 60_000).unref();
  });
  try {
    const ready = JSON.parse(await first) as { api: string; token: string };
    return { api: ready.api, token: ready.token, logs: () => logs, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

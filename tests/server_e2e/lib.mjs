// Helpers for the brass serve end-to-end tests: start `brass serve` on a free loopback
// port (the server prints the port it bound), wait for /health, read /metrics, RSS.
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";

export const BIN = process.env.BRASS_BIN || "build/brass";
export const MODEL = process.env.BRASS_MODEL || "build/models/builtin-tiny.gguf";

export async function startServer(args = [], { waitReady = true } = {}) {
  const proc = spawn(BIN, ["serve", "-m", MODEL, "--port", "0", ...args], { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("server did not start: " + stderr)), 30000);
    proc.stderr.on("data", (d) => {
      stderr += d.toString();
      const m = stderr.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    proc.on("exit", (code) => { clearTimeout(timer); reject(new Error(`server exited (${code}): ${stderr}`)); });
  });
  const base = `http://127.0.0.1:${port}`;
  const server = {
    proc, port, base, get stderr() { return stderr; },
    async stop() {
      if (proc.exitCode !== null) return proc.exitCode;
      proc.kill("SIGTERM");
      return await new Promise((resolve) => proc.on("exit", (code) => resolve(code)));
    },
  };
  if (waitReady) await waitHealthy(base);
  return server;
}

export async function waitHealthy(base, timeoutMs = 60000) {
  const t0 = Date.now();
  for (;;) {
    try {
      const r = await fetch(base + "/health");
      if (r.status === 200) return;
    } catch {}
    if (Date.now() - t0 > timeoutMs) throw new Error("server not healthy in time");
    await new Promise((r) => setTimeout(r, 50));
  }
}

// Prometheus text -> { "name{labels}": value }
export async function metrics(base, headers = {}) {
  const text = await (await fetch(base + "/metrics", { headers })).text();
  const out = {};
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const i = line.lastIndexOf(" ");
    out[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return out;
}

export function rssKiB(pid) {
  const m = readFileSync(`/proc/${pid}/status`, "utf8").match(/VmRSS:\s+(\d+) kB/);
  return m ? Number(m[1]) : NaN;
}

export async function postJson(base, path, body, headers = {}) {
  const r = await fetch(base + path, { method: "POST", headers: { "Content-Type": "application/json", ...headers }, body: typeof body === "string" ? body : JSON.stringify(body) });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch {}
  return { status: r.status, headers: r.headers, json, text };
}

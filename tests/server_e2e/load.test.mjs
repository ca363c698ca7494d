// Bounded loopback load test: BRASS_LOAD_CLIENTS (32) concurrent streaming chat clients
// for BRASS_LOAD_SECONDS (120); every third request disconnects mid-stream. Checks: no
// server error (no 5xx, no broken stream), every cancelled sequence freed (/metrics:
// no running sequences, KV holds only prefix-cache entries), RSS back to its level after
// a warm-up round, and continuous batching (more than one sequence in a step).
import { test } from "node:test";
import assert from "node:assert/strict";
import { startServer, metrics, rssKiB } from "./lib.mjs";

const CLIENTS = Number(process.env.BRASS_LOAD_CLIENTS || 32);
const SECONDS = Number(process.env.BRASS_LOAD_SECONDS || 120);

async function oneRequest(base, i, abortEarly) {
  const controller = new AbortController();
  const r = await fetch(base + "/v1/chat/completions", {
    method: "POST", headers: { "Content-Type": "application/json" }, signal: controller.signal,
    body: JSON.stringify({ messages: [{ role: "user", content: `client ${i}: tell me something` }], stream: true,
                           max_tokens: 16 + (i % 5) * 8, seed: i, stream_options: { include_usage: true } }),
  });
  if (r.status !== 200) return { status: r.status, body: await r.text() };
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let text = "", chunks = 0;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += dec.decode(value, { stream: true });
      chunks++;
      if (abortEarly && chunks >= 2) { controller.abort(); return { status: 200, aborted: true }; }
    }
  } catch (e) {
    if (abortEarly) return { status: 200, aborted: true };
    throw e;
  }
  if (!text.trimEnd().endsWith("data: [DONE]")) return { status: 200, broken: true, body: text.slice(-200) };
  if (text.includes('"error"')) return { status: 200, broken: true, body: text };
  return { status: 200 };
}

async function waitIdle(base) {
  for (let i = 0; i < 300; i++) {
    const m = await metrics(base);
    if (m["brass_sequences_running"] === 0 && m["brass_requests_running"] === 0 && m["brass_requests_waiting"] === 0) return m;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("server did not become idle");
}

test(`load: ${CLIENTS} streaming clients for ${SECONDS}s, every third disconnecting`, { timeout: (SECONDS + 240) * 1000 }, async () => {
  const srv = await startServer(["--parallel", String(Math.min(CLIENTS, 16)), "--max-queue", "256", "--ctx", "512"]);
  try {
    // Warm-up round so allocator pools, thread stacks and scratch buffers exist.
    await Promise.all(Array.from({ length: CLIENTS }, (_, i) => oneRequest(srv.base, i, i % 3 === 2)));
    await waitIdle(srv.base);
    const rss0 = rssKiB(srv.proc.pid);
    // (/health answered 503 while the model loaded: count 5xx from here on.)
    const errors0 = (await metrics(srv.base))["brass_server_http_server_errors_total"];
    const deadline = Date.now() + SECONDS * 1000;
    const stats = { ok: 0, aborted: 0, failed: [] };
    await Promise.all(Array.from({ length: CLIENTS }, async (_, c) => {
      for (let k = 0; Date.now() < deadline; k++) {
        const i = c * 100000 + k;
        try {
          const res = await oneRequest(srv.base, i, i % 3 === 2);
          if (res.status !== 200 || res.broken) stats.failed.push(res);
          else if (res.aborted) stats.aborted++;
          else stats.ok++;
        } catch (e) {
          stats.failed.push({ error: String(e) });
        }
      }
    }));
    const m = await waitIdle(srv.base);
    const rss1 = rssKiB(srv.proc.pid);
    console.log(JSON.stringify({ ...stats, failed: stats.failed.length, rss0_kib: rss0, rss1_kib: rss1,
      max_step_seqs: m["brass_sequences_per_step_max"], kv_seqs: m["brass_kv_cache_sequences"], cached: m["brass_prefix_cache_sequences"],
      cancelled: m['brass_completions_finished_total{reason="cancelled"}'], server_5xx: m["brass_server_http_server_errors_total"] - errors0,
      disconnects: m["brass_server_client_disconnects_total"] }));
    assert.deepEqual(stats.failed.slice(0, 3), []);
    assert.ok(stats.ok > CLIENTS && stats.aborted > CLIENTS / 3, JSON.stringify(stats));
    assert.equal(m["brass_server_http_server_errors_total"] - errors0, 0, "no 5xx under load");
    assert.ok(m['brass_completions_finished_total{reason="cancelled"}'] >= 1);
    assert.equal(m["brass_sequences_running"], 0);
    assert.equal(m["brass_kv_cache_sequences"], m["brass_prefix_cache_sequences"], "only prefix-cache entries may hold KV");
    assert.ok(m["brass_sequences_per_step_max"] > 1, "continuous batching: several sequences per step");
    assert.ok(rss1 <= rss0 * 1.10 + 16384, `RSS grew: ${rss0} -> ${rss1} KiB`);
    assert.equal((await fetch(srv.base + "/health")).status, 200);
  } finally {
    assert.equal(await srv.stop(), 0);
  }
});

// Server throughput bench: requests/s, generated tokens/s and time to first token at
// 1, 8 and 32 concurrent streaming chat clients (loopback).
//   node tests/server_e2e/bench.mjs [--seconds 20] [--max-tokens 64] [--parallel 32] [--model FILE]
// Starts its own `brass serve` (BRASS_BIN, default build/brass) unless --url is given.
import { startServer } from "./lib.mjs";

const arg = (name, def) => { const i = process.argv.indexOf("--" + name); return i > 0 ? process.argv[i + 1] : def; };
const SECONDS = Number(arg("seconds", 20));
const MAX_TOKENS = Number(arg("max-tokens", 64));
const LEVELS = (arg("levels", "1,8,32")).split(",").map(Number);

// Streams a completion of the Harmony-rendered chat prompt (token ids from /tokenize):
// the same prompt and work as a chat request, but every generated token arrives as text,
// so time to first token is measured at the client. (With random weights a chat
// request's tokens mostly land in an unparsed Harmony header and stream no deltas.)
async function streamOnce(base, i) {
  const tk = await (await fetch(base + "/tokenize", { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ messages: [{ role: "user", content: `Request ${i}: write a short poem.` }] }) })).json();
  const t0 = performance.now();
  const r = await fetch(base + "/v1/completions", {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ prompt: tk.tokens, stream: true, max_tokens: MAX_TOKENS, seed: i, stream_options: { include_usage: true } }),
  });
  if (r.status !== 200) throw new Error("HTTP " + r.status + " " + (await r.text()));
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let buf = "", ttft = null, tokens = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const line = buf.slice(0, cut); buf = buf.slice(cut + 2);
      if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
      const j = JSON.parse(line.slice(6));
      if (j.usage) tokens = j.usage.completion_tokens;
      if (ttft === null && j.choices?.[0]?.text) ttft = performance.now() - t0;
    }
  }
  return { ms: performance.now() - t0, ttft, tokens };
}

async function ttftProbe(base, n) {
  // Non-streaming requests report the engine's TTFT (submit -> first token) in `timings`.
  const out = [];
  for (let i = 0; i < n; i++) {
    const r = await fetch(base + "/v1/chat/completions", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ messages: [{ role: "user", content: `probe ${i}` }], max_tokens: 1 }) });
    out.push((await r.json()).timings.ttft_ms);
  }
  return out;
}

async function level(base, clients) {
  const deadline = performance.now() + SECONDS * 1000;
  const res = [];
  await Promise.all(Array.from({ length: clients }, async (_, c) => {
    for (let k = 0; performance.now() < deadline; k++) res.push(await streamOnce(base, c * 1e6 + k));
  }));
  const elapsed = SECONDS + Math.max(0, ...res.map(() => 0));
  const tokens = res.reduce((a, r) => a + r.tokens, 0);
  const ttfts = res.map((r) => r.ttft).filter((x) => x !== null).sort((a, b) => a - b);
  const lat = res.map((r) => r.ms).sort((a, b) => a - b);
  const pct = (a, p) => (a.length ? a[Math.min(a.length - 1, Math.floor(p * a.length))].toFixed(0) : "-");
  return { clients, requests: res.length, req_per_s: (res.length / elapsed).toFixed(2), tok_per_s: (tokens / elapsed).toFixed(1),
           ttft_p50_ms: pct(ttfts, 0.5), ttft_p90_ms: pct(ttfts, 0.9), latency_p50_ms: pct(lat, 0.5) };
}

const url = arg("url", null);
const srv = url ? null : await startServer(["--parallel", arg("parallel", "32"), "--max-queue", "512", "--ctx", "1024",
                                            ...(arg("model", null) ? ["-m", arg("model")] : [])]);
const base = url || srv.base;
try {
  const probe = await ttftProbe(base, 10);
  probe.sort((a, b) => a - b);
  console.log(`idle TTFT (engine, prompt ~80 tokens): p50 ${probe[5].toFixed(1)} ms`);
  console.log(`max_tokens ${MAX_TOKENS}, ${SECONDS} s per level`);
  for (const c of LEVELS) console.log(JSON.stringify(await level(base, c)));
} finally {
  await srv?.stop();
}

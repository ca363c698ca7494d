// Oracle one: llama.cpp (node-llama-cpp's prebuilt CPU library) on a GGUF file.
//   node llama_logits.mjs MODEL.gguf IDS N_GEN OUT_PREFIX [THREADS]
// Feeds the prompt IDS (comma separated) in one batch, then greedily generates N_GEN
// tokens one at a time. Writes OUT_PREFIX.json {tokens: prompt + generated,
// n_prompt, n_vocab} and OUT_PREFIX.f32: float32 logits (n_positions, n_vocab) where
// row i is llama.cpp's raw logits after token i. brass then evaluates the same
// sequence and must produce the same argmax at every position and close logits.
// The KV cache is F32 and flash attention off, so only the weights' and llama.cpp's
// own activation rounding (8-bit activations for quantized weights) remain.
import fs from "node:fs";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const [modelPath, idsArg, nGenArg, outPrefix, threadsArg] = process.argv.slice(2);
if (!modelPath || !idsArg || !nGenArg || !outPrefix) {
  console.error("usage: node llama_logits.mjs MODEL.gguf IDS N_GEN OUT_PREFIX [THREADS]");
  process.exit(2);
}
const prompt = idsArg.split(",").map(Number);
const nGen = Number(nGenArg);
const threads = Number(threadsArg || 2);

const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
// f32 KV cache (llama.cpp defaults to f16) so an all-F32 model can be compared tightly.
const context = await model.createContext({
  contextSize: 512, batchSize: 512, threads, flashAttention: false,
  experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
});
const sequence = context.getSequence();

const rows = [];
let vocab = 0;
function toArray(map) {
  if (!vocab) for (const t of map.keys()) vocab = Math.max(vocab, t + 1);
  const a = new Float32Array(vocab);
  a.fill(NaN);
  for (const [t, v] of map) a[t] = v;
  return a;
}
function argmax(a) {
  let best = 0;
  for (let i = 1; i < a.length; i++) if (a[i] > a[best]) best = i;
  return best;
}

const first = await sequence.controlledEvaluate(prompt.map(t => [t, {generateNext: {logits: true}}]));
for (let i = 0; i < prompt.length; i++) {
  if (!first[i]?.next?.logits) throw new Error(`no logits for prompt position ${i}`);
  rows.push(toArray(first[i].next.logits));
}
const tokens = [...prompt];
for (let s = 0; s < nGen; s++) {
  const next = argmax(rows[rows.length - 1]);
  tokens.push(next);
  const r = await sequence.controlledEvaluate([[next, {generateNext: {logits: true}}]]);
  if (!r[0]?.next?.logits) throw new Error(`no logits at generation step ${s}`);
  rows.push(toArray(r[0].next.logits));
}
// The last generated token's logits row exists; tokens has one entry per row.
const out = Buffer.alloc(rows.length * vocab * 4);
rows.forEach((r, i) => Buffer.from(r.buffer).copy(out, i * vocab * 4));
fs.writeFileSync(outPrefix + ".f32", out);
fs.writeFileSync(outPrefix + ".json", JSON.stringify({tokens, n_prompt: prompt.length, n_vocab: vocab}));
await context.dispose();
await model.dispose();
console.log(`llama.cpp: ${rows.length} positions x ${vocab} logits -> ${outPrefix}.f32`);

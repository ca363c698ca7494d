// llama.cpp's CPU speed on a GGUF, measured through node-llama-cpp (the same prebuilt
// library the oracle tests use), for BENCHMARKS.md side by side with brass.
//   node bench/llama_cpu_bench.mjs MODEL.gguf [THREADS=2] [PP=512] [TG=16]
// Prints one JSON line: {pp, pp_tok_s, tg, tg_tok_s, ms_per_token, threads}.
// Prefill: one batch of PP random ordinary tokens; decode: TG greedy steps after it.
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const [modelPath, threadsArg, ppArg, tgArg] = process.argv.slice(2);
if (!modelPath) {
  console.error("usage: node bench/llama_cpu_bench.mjs MODEL.gguf [THREADS] [PP] [TG]");
  process.exit(2);
}
const threads = Number(threadsArg || 2), pp = Number(ppArg || 512), tg = Number(tgArg || 16);
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
const context = await model.createContext({contextSize: pp + tg + 16, batchSize: pp, threads});
const seq = context.getSequence();
const prompt = Array.from({length: pp}, (_, i) => 1000 + ((i * 7919) % 150000));

let t0 = performance.now();
const first = await seq.controlledEvaluate(prompt.map((t, i) => i === pp - 1 ? [t, {generateNext: {token: true}}] : t));
const ppMs = performance.now() - t0;
let next = first[pp - 1]?.next?.token ?? 1;
t0 = performance.now();
for (let i = 0; i < tg; i++) {
  const r = await seq.controlledEvaluate([[next, {generateNext: {token: true}}]]);
  next = r[0]?.next?.token ?? 1;
}
const tgMs = performance.now() - t0;
console.log(JSON.stringify({engine: "llama.cpp (node-llama-cpp 3.22.1, prebuilt CPU)", model: modelPath, threads,
  pp, pp_tok_s: +(pp / (ppMs / 1000)).toFixed(2), tg, tg_tok_s: +(tg / (tgMs / 1000)).toFixed(2),
  ms_per_token: +(tgMs / tg).toFixed(1)}));
await context.dispose();
await model.dispose();

// brass serve through the official OpenAI client (npm `openai`), on the built-in tiny
// model (random weights). Where a test needs known Harmony structure (reasoning, tool
// calls), the request carries the TEST-ONLY `brass_test_force` field (server started
// with --test-hooks): the engine still runs the real model every step, but the
// constraint hook masks all logits except the forced token, so the tokens go through
// the real engine -> parser -> OpenAI mapping -> JSON/SSE path. Everything else
// (seeds, stop strings, logprobs, constrained tool calls, errors) is free generation.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import OpenAI from "openai";
import { startServer, metrics, postJson } from "./lib.mjs";

let srv, client;
before(async () => {
  srv = await startServer(["--test-hooks", "--ctx", "1024", "--parallel", "4"]);
  client = new OpenAI({ baseURL: srv.base + "/v1", apiKey: "unused", maxRetries: 0 });
});
after(async () => { assert.equal(await srv.stop(), 0, "server exits cleanly on SIGTERM"); });

const user = (content) => [{ role: "user", content }];
const REASON_FINAL = "<|channel|>analysis<|message|>Let me think about it.<|end|><|start|>assistant<|channel|>final<|message|>Hello there!<|return|>";
const TOOL_CALL = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>';
const TOOLS = [{ type: "function", function: { name: "get_weather", description: "Current weather", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];

async function rendered(body) {
  const r = await postJson(srv.base, "/tokenize", body);
  assert.equal(r.status, 200, r.text);
  return r.json;
}

test("models and health", async () => {
  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].id, "builtin-tiny");
  assert.equal((await fetch(srv.base + "/health")).status, 200);
});

test("chat without streaming: usage matches the rendered prompt", async () => {
  const r = await client.chat.completions.create({ model: "builtin-tiny", messages: user("Hi"), max_tokens: 8, seed: 1 });
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices.length, 1);
  assert.equal(typeof r.choices[0].message.content, "string");
  assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 8);
  const tk = await rendered({ messages: user("Hi") });
  assert.equal(r.usage.prompt_tokens, tk.tokens.length);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

test("chat streaming with include_usage", async () => {
  const stream = await client.chat.completions.create({ messages: user("Hi"), max_tokens: 6, seed: 2, stream: true, stream_options: { include_usage: true }, brass_test_force: "<|channel|>final<|message|>" });
  let content = "", finish = null, usage = null, n = 0;
  for await (const chunk of stream) {
    n++;
    if (chunk.usage) usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    if (c.delta.content) content += c.delta.content;
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert.ok(n >= 3);
  assert.equal(finish, "length");
  assert.equal(usage.completion_tokens, 6);
  // Same seed, no streaming: the same text.
  const r = await client.chat.completions.create({ messages: user("Hi"), max_tokens: 6, seed: 2, brass_test_force: "<|channel|>final<|message|>" });
  assert.equal(r.choices[0].message.content, content);
});

test("reasoning goes to reasoning_content, not content (plain and streamed)", async () => {
  const r = await client.chat.completions.create({ messages: user("Hi"), max_tokens: 64, brass_test_force: REASON_FINAL });
  const m = r.choices[0].message;
  assert.equal(m.reasoning_content, "Let me think about it.");
  assert.equal(m.reasoning, "Let me think about it.");
  assert.equal(m.content, "Hello there!");
  assert.equal(r.choices[0].finish_reason, "stop");
  const stream = await client.chat.completions.create({ messages: user("Hi"), max_tokens: 64, stream: true, brass_test_force: REASON_FINAL });
  let reasoning = "", content = "";
  for await (const ch of stream) {
    const d = ch.choices[0]?.delta ?? {};
    reasoning += d.reasoning_content ?? "";
    content += d.content ?? "";
    assert.ok(!(d.content ?? "").includes("think"));
  }
  assert.equal(reasoning, "Let me think about it.");
  assert.equal(content, "Hello there!");
  // Without analysis there is no reasoning field.
  const plain = await client.chat.completions.create({ messages: user("Hi"), max_tokens: 16, brass_test_force: "<|channel|>final<|message|>Ok.<|return|>" });
  assert.equal(plain.choices[0].message.reasoning_content, undefined);
  assert.equal(plain.choices[0].message.content, "Ok.");
});

test("tool call round trip", async () => {
  const messages = user("Weather in Paris?");
  const r = await client.chat.completions.create({ messages, tools: TOOLS, max_tokens: 64, brass_test_force: TOOL_CALL });
  const c = r.choices[0];
  assert.equal(c.finish_reason, "tool_calls");
  assert.equal(c.message.content, null);
  assert.equal(c.message.tool_calls.length, 1);
  const call = c.message.tool_calls[0];
  assert.equal(call.type, "function");
  assert.equal(call.function.name, "get_weather");
  assert.deepEqual(JSON.parse(call.function.arguments), { city: "Paris" });
  assert.match(call.id, /^call_/);
  // Streamed: id + name first, then argument deltas.
  const stream = await client.chat.completions.create({ messages, tools: TOOLS, max_tokens: 64, stream: true, brass_test_force: TOOL_CALL });
  let name = "", args = "", id = "", finish = "";
  for await (const ch of stream) {
    const ch0 = ch.choices[0];
    if (!ch0) continue;
    for (const tc of ch0.delta.tool_calls ?? []) { if (tc.id) id = tc.id; if (tc.function?.name) name = tc.function.name; args += tc.function?.arguments ?? ""; }
    if (ch0.finish_reason) finish = ch0.finish_reason;
  }
  assert.equal(name, "get_weather");
  assert.equal(args, '{"city":"Paris"}');
  assert.match(id, /^call_/);
  assert.equal(finish, "tool_calls");
  // Send the result back: the next prompt holds the call and the result under the tool's name.
  const next = [...messages, c.message, { role: "tool", tool_call_id: call.id, content: "18C and sunny" }];
  const tk = await rendered({ messages: next, tools: TOOLS });
  assert.ok(tk.prompt.includes("<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>18C and sunny<|end|>"), tk.prompt);
  assert.ok(tk.prompt.includes('{"city":"Paris"}<|call|>'), tk.prompt);
  assert.ok(tk.prompt.includes("type get_weather"), tk.prompt);
  const r2 = await client.chat.completions.create({ messages: next, tools: TOOLS, max_tokens: 4 });
  assert.equal(r2.usage.prompt_tokens, tk.tokens.length);
  // Unknown tool_call_id: 400.
  await assert.rejects(client.chat.completions.create({ messages: [...messages, c.message, { role: "tool", tool_call_id: "call_nope", content: "x" }], tools: TOOLS }),
    (e) => e.status === 400 && /call_nope/.test(e.message));
});

test("tool_choice named: the real model is constrained to a call with JSON arguments", async () => {
  const r = await client.chat.completions.create({ messages: user("Weather?"), tools: TOOLS, tool_choice: { type: "function", function: { name: "get_weather" } }, max_tokens: 48, seed: 5 });
  const c = r.choices[0];
  assert.equal(c.message.tool_calls.length, 1);
  assert.equal(c.message.tool_calls[0].function.name, "get_weather");
  const args = c.message.tool_calls[0].function.arguments;
  assert.ok(args.trimStart().startsWith("{"), args);
  if (c.finish_reason === "tool_calls") assert.equal(typeof JSON.parse(args), "object");
  else assert.equal(c.finish_reason, "length");
});

test("reasoning effort is rendered into the system message", async () => {
  for (const effort of ["low", "medium", "high"]) {
    const tk = await rendered({ messages: user("Hi"), reasoning_effort: effort });
    assert.ok(tk.prompt.includes(`Reasoning: ${effort}`), tk.prompt);
    const r = await client.chat.completions.create({ messages: user("Hi"), reasoning_effort: effort, max_tokens: 2 });
    assert.equal(r.usage.prompt_tokens, tk.tokens.length);
  }
  const sys = await rendered({ messages: [{ role: "system", content: "Answer in French." }, ...user("Hi")] });
  assert.ok(sys.prompt.includes("<|start|>developer<|message|># Instructions\n\nAnswer in French."), sys.prompt);
});

test("seeds reproduce output; n uses seed + i", async () => {
  const a = await client.completions.create({ model: "m", prompt: "Once upon a time", max_tokens: 12, seed: 42 });
  const b = await client.completions.create({ model: "m", prompt: "Once upon a time", max_tokens: 12, seed: 42 });
  const c = await client.completions.create({ model: "m", prompt: "Once upon a time", max_tokens: 12, seed: 43 });
  assert.equal(a.choices[0].text, b.choices[0].text);
  assert.notEqual(a.choices[0].text, c.choices[0].text);
  const two = await client.completions.create({ model: "m", prompt: "Once upon a time", max_tokens: 12, seed: 42, n: 2 });
  assert.equal(two.choices.length, 2);
  assert.equal(two.choices[0].text, a.choices[0].text);
  assert.equal(two.choices[1].text, c.choices[0].text);
});

test("completions: text, logprobs, streaming", async () => {
  const r = await client.completions.create({ model: "m", prompt: "The sky is", max_tokens: 5, seed: 3, logprobs: 3 });
  assert.equal(r.object, "text_completion");
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, r.usage.completion_tokens - (r.choices[0].finish_reason === "stop" ? 1 : 0));
  assert.equal(lp.tokens.join(""), r.choices[0].text);
  for (let i = 0; i < lp.tokens.length; i++) {
    assert.ok(lp.token_logprobs[i] <= 0);
    const tops = Object.values(lp.top_logprobs[i]);
    assert.ok(tops.length >= 1 && tops.length <= 3);
    assert.ok(Math.max(...tops) >= lp.token_logprobs[i] - 1e-6);
  }
  const stream = await client.completions.create({ model: "m", prompt: "The sky is", max_tokens: 5, seed: 3, stream: true });
  let text = "";
  for await (const ch of stream) text += ch.choices[0]?.text ?? "";
  assert.equal(text, r.choices[0].text);
});

test("chat logprobs: entries with top alternatives, best first", async () => {
  const r = await client.chat.completions.create({ messages: user("Hi"), max_tokens: 10, seed: 9, logprobs: true, top_logprobs: 3, brass_test_force: "<|channel|>final<|message|>" });
  const entries = r.choices[0].logprobs.content;
  assert.ok(entries.length >= 1);
  assert.equal(entries.map((e) => e.token).join(""), r.choices[0].message.content);
  for (const e of entries) {
    assert.ok(e.logprob <= 0);
    assert.equal(e.top_logprobs.length, 3);
    for (let i = 1; i < 3; i++) assert.ok(e.top_logprobs[i - 1].logprob >= e.top_logprobs[i].logprob);
    // bytes are the token's raw bytes: they decode to the token text unless a UTF-8
    // character is split across tokens (then the text shows U+FFFD).
    const decoded = Buffer.from(e.bytes).toString("utf8");
    if (!decoded.includes("\ufffd")) assert.equal(decoded, e.token);
  }
});

test("stop strings cut the output where the free generation had them", async () => {
  const full = await client.completions.create({ model: "m", prompt: "Numbers:", max_tokens: 24, seed: 11 });
  const text = full.choices[0].text;
  assert.ok(text.length >= 6, "need some text: " + JSON.stringify(text));
  // A stop string taken from the middle of the seeded output.
  const at = Math.floor(text.length / 2);
  const stop = text.slice(at, at + 2);
  const cut = await client.completions.create({ model: "m", prompt: "Numbers:", max_tokens: 24, seed: 11, stop: [stop] });
  assert.equal(cut.choices[0].text, text.slice(0, text.indexOf(stop)));
  assert.equal(cut.choices[0].finish_reason, "stop");
  // Chat: the final channel text is cut and trimmed.
  const chat = await client.chat.completions.create({ messages: user("Hi"), max_tokens: 64, stop: ["STOP"], brass_test_force: "<|channel|>final<|message|>alpha beta STOP gamma<|return|>" });
  assert.equal(chat.choices[0].message.content, "alpha beta ");
  assert.equal(chat.choices[0].finish_reason, "stop");
});

test("response_format json_object: the final channel is valid JSON (prefix)", async () => {
  const r = await client.chat.completions.create({ messages: user("JSON please"), max_tokens: 40, seed: 4, response_format: { type: "json_object" }, brass_test_force: "<|channel|>final<|message|>" });
  const content = r.choices[0].message.content;
  assert.ok(content.trimStart().startsWith("{"), content);
  if (r.choices[0].finish_reason === "stop") assert.equal(typeof JSON.parse(content), "object");
  else assert.throws(() => JSON.parse(content), /Unexpected end|Unterminated|Expected/);
});

test("responses API: items, events, function calls", async () => {
  const r = await client.responses.create({ model: "m", input: "Hi", instructions: "Be brief.", reasoning: { effort: "low" }, max_output_tokens: 64, brass_test_force: REASON_FINAL });
  assert.equal(r.object, "response");
  assert.equal(r.status, "completed");
  assert.equal(r.output[0].type, "reasoning");
  assert.equal(r.output[0].content[0].text, "Let me think about it.");
  assert.equal(r.output[1].type, "message");
  assert.equal(r.output[1].content[0].text, "Hello there!");
  assert.equal(r.output_text, "Hello there!");
  const stream = await client.responses.create({ model: "m", input: "Hi", stream: true, max_output_tokens: 64, brass_test_force: REASON_FINAL });
  const types = [];
  let text = "", reasoning = "", seq = -1;
  for await (const ev of stream) {
    types.push(ev.type);
    assert.equal(ev.sequence_number, seq + 1);
    seq = ev.sequence_number;
    if (ev.type === "response.output_text.delta") text += ev.delta;
    if (ev.type === "response.reasoning_text.delta") reasoning += ev.delta;
  }
  assert.equal(types[0], "response.created");
  assert.equal(types.at(-1), "response.completed");
  assert.ok(types.includes("response.output_item.added") && types.includes("response.output_item.done"));
  assert.equal(text, "Hello there!");
  assert.equal(reasoning, "Let me think about it.");
  // Function call, then its output sent back as items.
  const tools = [{ type: "function", name: "get_weather", parameters: TOOLS[0].function.parameters }];
  const fc = await client.responses.create({ model: "m", input: "Weather?", tools, max_output_tokens: 64, brass_test_force: TOOL_CALL });
  const item = fc.output.find((o) => o.type === "function_call");
  assert.equal(item.name, "get_weather");
  assert.equal(item.arguments, '{"city":"Paris"}');
  const fstream = await client.responses.create({ model: "m", input: "Weather?", tools, stream: true, max_output_tokens: 64, brass_test_force: TOOL_CALL });
  let args = "";
  for await (const ev of fstream) if (ev.type === "response.function_call_arguments.delta") args += ev.delta;
  assert.equal(args, '{"city":"Paris"}');
  const back = await client.responses.create({ model: "m", tools, max_output_tokens: 4,
    input: [{ role: "user", content: "Weather?" }, { type: "function_call", call_id: item.call_id, name: "get_weather", arguments: item.arguments },
            { type: "function_call_output", call_id: item.call_id, output: "18C" }] });
  assert.ok(["completed", "incomplete"].includes(back.status));
  assert.ok(back.usage.input_tokens > fc.usage.input_tokens);
});

test("tokenize / detokenize round trip", async () => {
  const t = await postJson(srv.base, "/tokenize", { content: "Hello, world! <|start|>", special: true });
  assert.equal(t.status, 200);
  assert.ok(t.json.tokens.includes(200006));
  const d = await postJson(srv.base, "/detokenize", { tokens: t.json.tokens });
  assert.equal(d.json.content, "Hello, world! <|start|>");
  assert.equal((await postJson(srv.base, "/detokenize", { tokens: [-1] })).status, 400);
});

test("errors are OpenAI-shaped with the right status", async () => {
  const shape = (r, status) => {
    assert.equal(r.status, status, r.text);
    assert.equal(typeof r.json.error.message, "string");
    assert.ok("type" in r.json.error && "param" in r.json.error && "code" in r.json.error);
  };
  shape(await postJson(srv.base, "/v1/chat/completions", "{not json"), 400);
  shape(await postJson(srv.base, "/v1/chat/completions", { messages: "hi" }), 400);
  shape(await postJson(srv.base, "/v1/chat/completions", { messages: [{ role: "wizard", content: "x" }] }), 400);
  shape(await postJson(srv.base, "/v1/chat/completions", { messages: user("x"), temperature: 9 }), 400);
  shape(await postJson(srv.base, "/v1/chat/completions", { messages: user("x"), n: "two" }), 400);
  shape(await postJson(srv.base, "/v1/completions", { prompt: [1, 999999999] }), 400);
  const long = await postJson(srv.base, "/v1/chat/completions", { messages: user("word ".repeat(2000)) });
  shape(long, 400);
  assert.equal(long.json.error.code, "context_length_exceeded");
  const nf = await fetch(srv.base + "/v1/nothing");
  assert.equal(nf.status, 404);
  assert.equal(typeof (await nf.json()).error.message, "string");
  await assert.rejects(client.chat.completions.create({ messages: [{ role: "user", content: 5 }] }), (e) => e.status === 400 && e.param === "messages[0].content");
  // 413: announce a body over the 8 MiB limit; the server answers before reading it.
  const reply = await new Promise((resolve, reject) => {
    const sock = net.connect(srv.port, "127.0.0.1", () => {
      sock.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${9 << 20}\r\n\r\n{"messages":`);
    });
    let data = "";
    sock.on("data", (d) => { data += d; if (data.includes("}}")) { sock.destroy(); resolve(data); } });
    sock.on("error", reject);
    sock.on("close", () => resolve(data));
  });
  assert.match(reply, /^HTTP\/1\.1 413/);
  assert.match(reply, /"error"/);
  // The server is still fine.
  assert.equal((await fetch(srv.base + "/health")).status, 200);
});

test("metrics: Prometheus text from the engine", async () => {
  const m = await metrics(srv.base);
  assert.ok(m["brass_requests_total"] > 0);
  assert.ok("brass_sequences_running" in m);
  assert.ok(m["brass_server_http_requests_total"] > 0);
});

test("401 with --api-key; 503 while loading and when the queue is full", async () => {
  const locked = await startServer(["--api-key", "sekret", "--test-load-delay-ms", "1500", "--test-hooks", "--parallel", "1", "--max-queue", "1"], { waitReady: false });
  try {
    const h = await fetch(locked.base + "/health");
    assert.equal(h.status, 503);
    assert.equal(h.headers.get("retry-after"), "1");
    const loading = await postJson(locked.base, "/v1/chat/completions", { messages: user("x") }, { Authorization: "Bearer sekret" });
    assert.equal(loading.status, 503);
    assert.equal(loading.json.error.code, "model_loading");
    const { waitHealthy } = await import("./lib.mjs");
    await waitHealthy(locked.base);
    const noKey = await postJson(locked.base, "/v1/chat/completions", { messages: user("x") });
    assert.equal(noKey.status, 401);
    assert.equal(noKey.json.error.code, "invalid_api_key");
    assert.equal((await postJson(locked.base, "/v1/chat/completions", { messages: user("x") }, { Authorization: "Bearer wrong" })).status, 401);
    const keyed = new OpenAI({ baseURL: locked.base + "/v1", apiKey: "sekret", maxRetries: 0 });
    assert.equal((await keyed.chat.completions.create({ messages: user("x"), max_tokens: 2 })).object, "chat.completion");
    // parallel 1, queue 1: of 6 long requests at once, some must be turned away with 503,
    // by chat and by the responses API alike (one mapping of the engine's refusals).
    const auth = { Authorization: "Bearer sekret" };
    const reqs = Array.from({ length: 6 }, (_, i) => i % 2
      ? postJson(locked.base, "/v1/responses", { input: "x", max_output_tokens: 200 }, auth)
      : postJson(locked.base, "/v1/chat/completions", { messages: user("x"), max_tokens: 200 }, auth));
    const res = await Promise.all(reqs);
    const busy = res.filter((r) => r.status === 503);
    assert.ok(busy.length >= 1, res.map((r) => r.status).join(","));
    for (const b of busy) {
      assert.equal(b.json.error.code, "queue_full");
      assert.equal(b.json.error.type, "server_error");
      assert.match(b.json.error.message, /queue full/);
      assert.equal(b.headers.get("retry-after"), "1");
    }
    assert.ok(res.filter((r) => r.status === 200).length >= 2, res.map((r) => r.status).join(","));
  } finally {
    await locked.stop();
  }
});

test("response_format json_schema: keys and types follow the schema while decoding", async () => {
  const schema = { type: "object", properties: { city: { type: "string" }, temp: { type: "integer" }, sunny: { type: "boolean" } },
                   required: ["city", "temp"], additionalProperties: false };
  for (const seed of [1, 2, 3]) {
    const r = await client.chat.completions.create({ messages: user("JSON please"), max_tokens: 60, seed, temperature: 0.7,
      response_format: { type: "json_schema", json_schema: { name: "w", schema } }, brass_test_force: "<|channel|>final<|message|>" });
    const content = r.choices[0].message.content;
    // Every key that was opened is a declared one (the decoder cannot spell others).
    const keys = [...content.matchAll(/"((?:[^"\\]|\\.)*)"\s*:/g)].map((m) => m[1]);
    for (const k of keys) assert.ok(["city", "temp", "sunny"].includes(k), `undeclared key ${k} in ${content}`);
    assert.equal(new Set(keys).size, keys.length, "each key at most once: " + content);
    if (r.choices[0].finish_reason === "stop") {
      const v = JSON.parse(content);
      assert.equal(typeof v.city, "string");
      assert.ok(Number.isInteger(v.temp));
      if ("sunny" in v) assert.equal(typeof v.sunny, "boolean");
    }
  }
});

// tiktoken oracle for brass's tokenizer tests: js-tiktoken (a JS port of tiktoken with
// its own BPE and V8's regex engine) loaded offline from a .tiktoken rank file, with the
// o200k_harmony special tokens of tiktoken_ext/openai_public.py.
//
// Usage: node tiktoken_oracle.mjs <records.bin> <out.json> <o200k_base.tiktoken>
//
// records.bin: "BTOK1" then records of [u8 kind][u32 LE length][payload]:
//   kind 0: encode ordinary (specials are plain text)  payload: UTF-8 bytes (may be invalid)
//   kind 1: encode with every special allowed          payload: UTF-8 bytes
//   kind 2: decode                                     payload: int32 LE token ids
// Bytes are turned into a JS string with TextDecoder (invalid sequences -> U+FFFD,
// byte-order mark kept), which is the behaviour brass documents for invalid input.
// out.json: {"results": [ids | decoded string, ...]} in record order.
//
// The pattern: tiktoken's o200k pat_str runs on Rust regex engines, where \s is the
// Unicode White_Space property and (?i:'s) also matches U+017F (long s, by case
// folding). js-tiktoken's bundled copy of the pattern uses JS's \s (adds U+FEFF, lacks
// U+0085) and spells out ASCII case variants. The pattern below is the same o200k
// pattern with those two points written out explicitly so V8 matches what tiktoken
// matches; everything else (the regex engine, BPE, special handling) is js-tiktoken's.
import fs from "node:fs";
import { createRequire } from "node:module";

const [recordsPath, outPath, rankPath] = process.argv.slice(2);
if (!recordsPath || !outPath || !rankPath) {
  console.error("usage: node tiktoken_oracle.mjs <records.bin> <out.json> <o200k_base.tiktoken>");
  process.exit(2);
}
let Tiktoken;
try {
  const require = createRequire(import.meta.url);
  ({ Tiktoken } = require("js-tiktoken/lite"));
} catch (e) {
  console.error(`tiktoken_oracle: cannot load js-tiktoken (run scripts/setup.sh to install node_modules): ${e.message}`);
  process.exit(3);
}

const WS = "\\t-\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
const C = "(?:'(?:[sS\\u017f]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]))?";
const patStr = [
  `[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+${C}`,
  `[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*${C}`,
  `\\p{N}{1,3}`,
  ` ?[^${WS}\\p{L}\\p{N}]+[\\r\\n/]*`,
  `[${WS}]*[\\r\\n]+`,
  `[${WS}]+(?![^${WS}])`,
  `[${WS}]+`,
].join("|");

// o200k_harmony: o200k_base's specials, the Harmony names, reserved 200013..201087.
const specials = { "<|endoftext|>": 199999, "<|endofprompt|>": 200018 };
Object.assign(specials, {
  "<|startoftext|>": 199998, "<|endoftext|>": 199999,
  "<|reserved_200000|>": 200000, "<|reserved_200001|>": 200001,
  "<|return|>": 200002, "<|constrain|>": 200003, "<|reserved_200004|>": 200004,
  "<|channel|>": 200005, "<|start|>": 200006, "<|end|>": 200007, "<|message|>": 200008,
  "<|reserved_200009|>": 200009, "<|reserved_200010|>": 200010, "<|reserved_200011|>": 200011,
  "<|call|>": 200012,
});
for (let i = 200013; i < 201088; i++) specials[`<|reserved_${i}|>`] = i;

// js-tiktoken's compressed rank format: lines "<ignored> <first rank> <b64> <b64> ...".
const rankLines = fs.readFileSync(rankPath, "utf8").split("\n").filter(Boolean)
  .map((l) => { const [b64, rank] = l.split(" "); return `! ${rank} ${b64}`; });
const enc = new Tiktoken({ pat_str: patStr, special_tokens: specials, bpe_ranks: rankLines.join("\n") });
// Decode with the name tiktoken and HF give 200018.
const decoder = new TextDecoder("utf-8", { ignoreBOM: true });
// js-tiktoken's decode() runs its own TextDecoder, which drops a leading U+FEFF (a decoded
// token run that starts with EF BB BF); tiktoken's bytes.decode keeps it, as brass does.
enc.textDecoder = decoder;

const buf = fs.readFileSync(recordsPath);
if (buf.subarray(0, 5).toString("latin1") !== "BTOK1") {
  console.error("tiktoken_oracle: records file does not start with BTOK1");
  process.exit(2);
}
const results = [];
let off = 5;
while (off < buf.length) {
  const kind = buf[off];
  const len = buf.readUInt32LE(off + 1);
  const payload = buf.subarray(off + 5, off + 5 + len);
  off += 5 + len;
  if (kind === 0 || kind === 1) {
    const text = decoder.decode(payload);
    results.push(kind === 1 ? enc.encode(text, "all") : enc.encode(text, [], []));
  } else if (kind === 2) {
    const ids = [];
    for (let i = 0; i + 4 <= payload.length; i += 4) ids.push(payload.readInt32LE(i));
    results.push(enc.decode(ids));
  } else {
    console.error(`tiktoken_oracle: unknown record kind ${kind}`);
    process.exit(2);
  }
}
fs.writeFileSync(outPath, JSON.stringify({ results }));

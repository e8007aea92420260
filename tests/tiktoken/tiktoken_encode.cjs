// Encodes each line of a JSONL file (one JSON string per line) with tiktoken's gpt2 encoding and
// prints one JSON array of ids per line. The oracle side of test_tiktoken_differential.py.
//   node tiktoken_encode.cjs MODULES_DIR wasm|wasm-ordinary|wasm-default|native INPUT.jsonl
// wasm: npm `tiktoken` (OpenAI's Rust core compiled to WebAssembly), encode(text, "all")
// wasm-ordinary: the same, encode_ordinary(text)
// wasm-default: the same, encode(text) with tiktoken's defaults (every special token disallowed);
//   a text it refuses prints the JSON string "disallowed" instead of ids
// native: npm `tiktoken-node` (tiktoken-rs through N-API), encode(text) (special tokens allowed)
"use strict";
const fs = require("fs");
const path = require("path");
const readline = require("readline");

const [modules, backend, input] = process.argv.slice(2);
const need = (name) => require(path.join(modules, "node_modules", name));
let encode;
if (backend === "native") {
  const enc = need("tiktoken-node").getEncoding("gpt2");
  encode = (t) => enc.encode(t);
} else {
  const enc = need("tiktoken").get_encoding("gpt2");
  if (backend === "wasm-ordinary") encode = (t) => enc.encode_ordinary(t);
  else if (backend === "wasm-default") {
    encode = (t) => {
      try {
        return enc.encode(t);
      } catch (e) {
        return "disallowed";
      }
    };
  } else encode = (t) => enc.encode(t, "all");
}
const out = [];
const rl = readline.createInterface({ input: fs.createReadStream(input), crlfDelay: Infinity });
rl.on("line", (line) => {
  const r = encode(JSON.parse(line));
  out.push(JSON.stringify(typeof r === "string" ? r : Array.from(r)));
});
rl.on("close", () => fs.writeSync(1, out.join("\n") + (out.length ? "\n" : "")));

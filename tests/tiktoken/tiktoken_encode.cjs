// Encodes each line of a JSONL file (one JSON string per line) with tiktoken's gpt2 encoding and
// prints one JSON array of ids per line. The oracle side of test_tiktoken_differential.py.
//   node tiktoken_encode.cjs MODULES_DIR wasm|wasm-ordinary|native INPUT.jsonl
// wasm: npm `tiktoken` (OpenAI's Rust core compiled to WebAssembly), encode(text, "all")
// wasm-ordinary: the same, encode_ordinary(text)
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
  encode = backend === "wasm-ordinary" ? (t) => enc.encode_ordinary(t) : (t) => enc.encode(t, "all");
}
const out = [];
const rl = readline.createInterface({ input: fs.createReadStream(input), crlfDelay: Infinity });
rl.on("line", (line) => out.push(JSON.stringify(Array.from(encode(JSON.parse(line))))));
rl.on("close", () => fs.writeSync(1, out.join("\n") + (out.length ? "\n" : "")));

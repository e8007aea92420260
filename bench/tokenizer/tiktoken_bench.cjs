// Times tiktoken's gpt2 encoding over the strings of a JSONL file, single-threaded: each run
// encodes every string once; prints one JSON object with the seconds of every run.
//   node tiktoken_bench.cjs MODULES_DIR native|wasm INPUT.jsonl RUNS
"use strict";
const fs = require("fs");
const path = require("path");
const [modules, backend, input, runsArg] = process.argv.slice(2);
const need = (name) => require(path.join(modules, "node_modules", name));
const docs = fs.readFileSync(input, "utf8").split("\n").filter((l) => l.length).map((l) => JSON.parse(l));
let encode;
if (backend === "native") {
  const enc = need("tiktoken-node").getEncoding("gpt2");
  encode = (t) => enc.encode(t);
} else {
  const enc = need("tiktoken").get_encoding("gpt2");
  encode = (t) => enc.encode(t, "all");
}
const seconds = [];
let tokens = 0;
for (let r = 0; r < Number(runsArg); r++) {
  const t0 = process.hrtime.bigint();
  tokens = 0;
  for (const d of docs) tokens += encode(d).length;
  seconds.push(Number(process.hrtime.bigint() - t0) / 1e9);
}
console.log(JSON.stringify({ backend, seconds, tokens }));

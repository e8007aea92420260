// The oracle for test_tiktoken_format_differential.py: npm `tiktoken` (OpenAI's Rust core in
// WebAssembly) with a rank file in tiktoken's format (Meta's original/tokenizer.model for Llama 3:
// "base64(token bytes) rank" per line), its special tokens and pattern. Reads one JSON string per
// line; for each mode (comma-separated) writes OUT_PREFIX-MODE.jsonl, one JSON line per input: the
// ids, or the string "disallowed" when tiktoken refuses. One process for every mode: building the
// encoder from a rank file takes seconds.
//   node tiktoken_ranks_encode.cjs NPM_DIR RANKS SPECIALS.json PATTERN_FILE all,none,default IN.jsonl OUT_PREFIX
// all: encode(text, "all"); none: encode_ordinary(text) (special tokens as text); default: encode(text)
// (every special token disallowed: a text holding one is refused).
"use strict";
const fs = require("fs");
const path = require("path");
const [npmDir, ranks, specials, patternFile, modes, input, outPrefix] = process.argv.slice(2);
const { Tiktoken } = require(path.join(npmDir, "node_modules", "tiktoken"));
const enc = new Tiktoken(fs.readFileSync(ranks, "utf8"), JSON.parse(fs.readFileSync(specials, "utf8")),
                         fs.readFileSync(patternFile, "utf8"));
const texts = fs.readFileSync(input, "utf8").split("\n").filter((line) => line !== "").map((line) => JSON.parse(line));
for (const mode of modes.split(",")) {
  if (!["all", "none", "default"].includes(mode)) throw new Error(`unknown mode ${mode}`);
  const out = [];
  for (const text of texts) {
    let ids;
    try {
      ids = mode === "all" ? enc.encode(text, "all") : mode === "none" ? enc.encode_ordinary(text) : enc.encode(text);
      ids = Array.from(ids);
    } catch (e) {
      ids = "disallowed";
    }
    out.push(JSON.stringify(ids));
  }
  fs.writeFileSync(`${outPrefix}-${mode}.jsonl`, out.join("\n") + "\n");
}
enc.free();

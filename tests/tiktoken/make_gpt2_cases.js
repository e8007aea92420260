#!/usr/bin/env node
// Writes tests/data/gpt2_cases.json: texts and the ids tiktoken's gpt2 encoding gives them, for
// tests/text/bpe_test.cc. tiktoken (npm, OpenAI's Rust core as WebAssembly) is the oracle.
//
//   npm install --prefix /tmp/tk tiktoken
//   NODE_PATH=/tmp/tk/node_modules node tests/tiktoken/make_gpt2_cases.js > tests/data/gpt2_cases.json
//
// Each case: {why, text, ids} (encode_ordinary), or with "allowed"/"disallowed" (encode with those
// arguments). "bytes_hex" cases are byte strings that are not valid UTF-8: their ids are those of
// TextDecoder's (= Python's errors="replace") reading of them, which is what qkv promises.
const { get_encoding } = require("tiktoken");
const path = require("path");
const fs = require("fs");
const version = JSON.parse(fs.readFileSync(path.join(path.dirname(require.resolve("tiktoken")), "package.json"))).version;
const gpt2 = get_encoding("gpt2");
const ordinary = (text) => Array.from(gpt2.encode_ordinary(text));

const cases = [];
const add = (why, text) => cases.push({ why, text, ids: ordinary(text) });
add("the book's sentence", "Your journey starts with one step.");
add("emoji split across tokens", "Hello 🤗 wörld\n");
add("contractions, odd case", "I'm   you'RE they'll  we've  it's'd 'S ''s");
add("spaces at both ends", "   leading and trailing   ");
add("mixed whitespace", "tab\tnew\nline\r\n  \n\n  x\u000b\u000cy");
add("numbers of many scripts", "数字123４５６ ٣٤٥ Ⅻ ½ 𝟘𝟙");
add("ZWJ sequences", "👨‍👩‍👧‍👦 family, 🏳️‍🌈 flag");
add("combining marks", "e\u0301te\u0301 cafe\u0301 Z\u0351\u0352a\u0353lgo");
add("right-to-left scripts", "שלום עולם مرحبا بالعالم");
add("unusual whitespace and format characters", "a\u00a0b\u3000c\u2028d\u0085e\u200bf\ufeffg \u180e\u1680h");
add("long digit runs", "1234567890123456789012345 3.14159");
add("punctuation runs", "!!!???...,,,;;; --> <<<>>> ```code```");
add("long whitespace runs", "x" + " ".repeat(40) + "y\n\n\n\n" + "\t ".repeat(9) + "z   ");
add("fullwidth and ligatures", "Ｆｕｌｌｗｉｄｔｈ ｔｅｘｔ and ﬁ ligature");
add("rare scripts outside the BMP", "𐍈𐌰𐌿𐍃 ꯃꯤꯇꯩ 𑀓𑀸𑀮");
add("a long piece of letters (heap merge)", "a".repeat(500));
add("a long piece of digits (heap merge)", "1234567890".repeat(30));
add("code", "for (int i = 0; i < n; ++i) {\n    x[i] += y[i] * 2;  // axpy\n}\n");
add("replacement characters", "\ufffd\ufffdabc\ufffd x\ufffd");
add("special token text, encoded as plain text", "a<|endoftext|>b");

const special = (why, text, allowed, disallowed) =>
  cases.push({ why, text, allowed, disallowed, ids: Array.from(gpt2.encode(text, allowed, disallowed)) });
special("specials allowed", "a<|endoftext|>b<|endoftext|><|endoftext|> c", "all", "all");
special("allowed by name", "Hello, do you like tea? <|endoftext|> In the sunlit terraces", ["<|endoftext|>"], "all");
special("no look-ahead across a special token", "x  <|endoftext|>  y", "all", "all");
special("neither allowed nor disallowed: plain text", "a<|endoftext|>b", [], []);

const invalid = (why, hex) => {
  const bytes = Buffer.from(hex, "hex");
  const text = new TextDecoder("utf-8").decode(bytes);
  cases.push({ why, bytes_hex: hex, ids: ordinary(text) });
};
invalid("stray bytes", "fffe616263e282");
invalid("truncated 4-byte sequence", "61f09f9862");
invalid("overlong and surrogate forms", "c0afe0808065eda080");
invalid("above U+10FFFF", "f4908080f5");
invalid("lone continuation bytes", "2080bf41");

// Random strings from a fixed seed: letters, digits, marks, spaces, symbols of many scripts.
let seed = 12345;
const rnd = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
const pool = [..."aZ09 '\n\t.,!?-_", "'s", "'ll", "'RE", "  ", "\u00a0", "\u3000", "\u0301", "é", "ß", "Ω", "ж",
              "中", "文", "ア", "한", "ع", "ש", "ह", "ก", "𝔘", "😀", "👍🏽", "\u200d", "\ufe0f", "١", "Ⅳ", "½",
              "¼", "€", "©", "\u2028", "\u0085", "<|endoftext|>", "\r\n", "‐", "…", "“", "”"];
for (let i = 0; i < 400; ++i) {
  let s = "";
  for (let n = 1 + rnd(24); n > 0; --n) s += pool[rnd(pool.length)];
  cases.push({ why: "random " + i, text: s, ids: ordinary(s) });
}

process.stdout.write(JSON.stringify({
  about: `tiktoken ${version} (npm) gpt2 encoding, made by tests/tiktoken/make_gpt2_cases.js`,
  n_vocab: gpt2.n_vocab !== undefined ? gpt2.n_vocab : 50257,
  cases,
}, null, 0).replace(/\},\{/g, "},\n{") + "\n");

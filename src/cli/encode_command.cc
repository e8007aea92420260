// qkv encode [--text T | --file F | --jsonl F] [--allowed-special S] [--disallowed-special S]
//            [--threads N] [--vocab-dir D | --ranks F --pattern P --special T=ID | --tokenizer J]
//
// Prints the ids as one JSON array, or with --jsonl one array per input line, in order.
#include <charconv>
#include <cstdio>

#include "commands.h"
#include "flags.h"
#include "standard_output.h"
#include "qkv/core/error.h"
#include "qkv/io/atomic_file.h"
#include "qkv/text/json_string.h"
#include "tokenizer_flags.h"

namespace qkv::cli {
namespace {

struct EncodeFlags {
  std::string text, file, jsonl;
  SpecialFlags special;
  VocabFlags vocab;
  int threads = 0;
};

// "[7120, 7002, 13]\n", written straight into out's buffer (this is half the work of --jsonl).
void append_ids(std::string& out, const std::vector<TokenId>& ids) {
  const size_t start = out.size();
  out.resize(start + 3 + ids.size() * 22);
  char* p = out.data() + start;
  char* const end = out.data() + out.size();
  *p++ = '[';
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) {
      *p++ = ',';
      *p++ = ' ';
    }
    p = std::to_chars(p, end, ids[i]).ptr;
  }
  *p++ = ']';
  *p++ = '\n';
  out.resize(static_cast<size_t>(p - out.data()));
}

int run_encode(const EncodeFlags& f, const CLI::App& sub) {
  QKV_CHECK(f.threads >= 0, "--threads must be >= 0 (0: one per hardware thread), not ", f.threads);
  check_threads(f.threads);
  const Vocabulary tok = vocabulary_of(f.vocab, sub);
  if (!f.jsonl.empty()) {
    const std::string what = f.jsonl == "-" ? "standard input" : f.jsonl;
    const std::string contents = f.jsonl == "-" ? read_stdin() : read_file(f.jsonl);
    const std::vector<std::string> texts = parse_json_string_lines(contents, "--jsonl " + what);
    std::vector<std::vector<TokenId>> ids;
    try {
      ids = tok.encode_batch(texts, f.threads, f.special.allowed, f.special.disallowed);
    } catch (const Error& e) {
      fail("--jsonl ", what, ": ", e.what(), "\n(text N of the batch is line N of the file)");
    }
    std::string out;
    out.reserve(contents.size() * 2 + 16);
    for (const std::vector<TokenId>& one : ids) append_ids(out, one);
    write_stdout(out);
    return 0;
  }
  const std::string text = read_text_input(sub, f.text, f.file);
  std::string out;
  append_ids(out, tok.encode(text, f.special.allowed, f.special.disallowed));
  write_stdout(out);
  return 0;
}

}  // namespace

Command add_encode(CLI::App& app) {
  auto f = std::make_shared<EncodeFlags>();
  CLI::App* sub = app.add_subcommand("encode", "Text to token ids as a JSON array: GPT-2's (tiktoken's gpt2), a tiktoken rank file, or a tokenizer.json");
  auto* text = sub->add_option("--text", f->text, "The text to encode");
  auto* file = sub->add_option("--file", f->file, "Encode the bytes of this file ('-': standard input)");
  auto* jsonl = sub->add_option("--jsonl", f->jsonl,
                                "A file with one JSON string per line ('-': standard input); prints one JSON "
                                "array per line, in order, encoding the lines on --threads threads");
  text->excludes(file)->excludes(jsonl);
  file->excludes(jsonl);
  add_special_flags(sub, f->special);
  add_number_with_default(sub, "--threads", f->threads, "Threads for --jsonl (0: one per hardware thread)",
                          non_negative<int>());
  add_vocab_flags(sub, f->vocab);
  sub->footer(
      "With none of --text, --file, --jsonl the text comes from standard input, taken as it is (a final\n"
      "newline is part of it). Empty text gives [].\n"
      "Text that is not valid UTF-8 is first decoded as Python's bytes.decode('utf-8', 'replace') does:\n"
      "each ill-formed sequence (its maximal subpart) becomes U+FFFD; the ids are tiktoken's for that text.\n"
      "Special tokens follow tiktoken: by default text spelling one (<|endoftext|>) is an error;\n"
      "--allowed-special all encodes it as its id (50256), --disallowed-special none as plain text.");
  return {sub, [f, sub]() { return run_encode(*f, *sub); }};
}

}  // namespace qkv::cli

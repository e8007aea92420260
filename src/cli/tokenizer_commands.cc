// qkv encode | decode | tokens: text to token ids, ids back to text, and a table of a text's tokens,
// with any vocabulary qkv reads (text/vocabulary.h): GPT-2's, a tiktoken rank file, a tokenizer.json.
//
//   qkv encode [--text T | --file F | --jsonl F] [--allowed-special S] [--disallowed-special S]
//              [--threads N] [--vocab-dir D | --ranks F --pattern P --special T=ID | --tokenizer J]
//     prints the ids as one JSON array, or with --jsonl one array per input line, in order
//   qkv decode [IDS...] [--bytes] [vocab flags]
//     reads ids (a JSON array, or numbers separated by spaces or commas) from the arguments or
//     standard input and prints the text they decode to
//   qkv tokens [--text T | --file F] [--allowed-special S] [--disallowed-special S] [vocab flags]
//     a table of the tokens of a text: position, id, and the token's bytes, quoted and escaped
#include <unistd.h>

#include <iomanip>
#include <sstream>

#include "commands.h"
#include "flags.h"
#include "qkv/core/error.h"
#include "qkv/core/read_file.h"
#include "qkv/io/standard_output.h"
#include "qkv/io/token_ids.h"
#include "qkv/text/json_string.h"
#include "qkv/text/vocabulary.h"

namespace qkv::cli {
namespace {

// --tokenizer, --vocab-dir, --ranks, --pattern, --special: a vocabulary's source (text/vocabulary.h).
using VocabFlags = VocabularySource;

struct SpecialFlags {
  std::string allowed = "none", disallowed = "all";
};

void add_vocab_flags(CLI::App* sub, VocabFlags& f) {
  sub->add_option("--tokenizer", f.tokenizer,
                  "A Hugging Face tokenizer.json (or the model folder holding it: Qwen3's, Llama 3's) instead of "
                  "GPT-2's; its added tokens are matched in the text, as Hugging Face's tokenizers do");
  sub->add_option("--vocab-dir", f.vocab_dir,
                  "Directory holding GPT-2's encoder.json and vocab.bpe (default: the first of $QKV_VOCAB_DIR, "
                  "${XDG_DATA_HOME:-$HOME/.local/share}/qkv/gpt2, /usr/local/share/qkv/gpt2, /usr/share/qkv/gpt2 "
                  "that has them; bash scripts/setup.sh installs them)");
  sub->add_option("--ranks", f.ranks,
                  "Another vocabulary: a tiktoken rank file (one 'base64(token) rank' per line), used with "
                  "--pattern and --special instead of GPT-2's");
  sub->add_option("--pattern", f.pattern, "With --ranks: the pre-tokenisation regex (PCRE2; default GPT-2's)");
  sub->add_option("--special", f.special, "With --ranks: a special token, as TOKEN=ID (repeatable)");
}

Vocabulary vocabulary_of(const VocabFlags& f, const CLI::App& sub) {
  if (!f.tokenizer.empty())
    for (const char* flag : {"--vocab-dir", "--ranks", "--pattern", "--special", "--allowed-special", "--disallowed-special"})
      if (const CLI::Option* o = sub.get_option_no_throw(flag); o != nullptr && o->count() > 0)
        bad_flag(flag, "does not go with --tokenizer (the tokenizer.json holds its vocabulary, pattern and added "
                       "tokens, which are matched wherever the text spells them)");
  if (f.ranks.empty())
    for (const char* flag : {"--pattern", "--special"})
      if (sub.count(flag) > 0) bad_flag(flag, "goes with --ranks FILE; GPT-2's encoding has its own");
  if (!f.ranks.empty() && sub.count("--vocab-dir") > 0)
    bad_flag("--vocab-dir", "names GPT-2's vocabulary; --ranks names another: give one of them");
  return Vocabulary(f);
}

void add_special_flags(CLI::App* sub, SpecialFlags& f) {
  sub->add_option("--allowed-special", f.allowed,
                  "Special tokens encoded as such: all | none | TOKEN,TOKEN,... (tiktoken's allowed_special)")
      ->capture_default_str();
  sub->add_option("--disallowed-special", f.disallowed,
                  "Special tokens whose text is an error: all (every one not allowed) | none (encode them as "
                  "plain text) | TOKEN,... (tiktoken's disallowed_special)")
      ->capture_default_str();
}

std::string read_text_input(const CLI::App& sub, const std::string& text, const std::string& file) {
  if (sub.count("--text") > 0) return text;
  if (!file.empty()) return file == "-" ? read_stdin() : read_file(file);
  return read_stdin();
}

struct EncodeFlags {
  std::string text, file, jsonl;
  SpecialFlags special;
  VocabFlags vocab;
  int threads = 0;
};

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
    for (const std::vector<TokenId>& one : ids) append_token_ids(out, one);
    write_stdout(out);
    return 0;
  }
  const std::string text = read_text_input(sub, f.text, f.file);
  std::string out;
  append_token_ids(out, tok.encode(text, f.special.allowed, f.special.disallowed));
  write_stdout(out);
  return 0;
}

struct DecodeFlags {
  std::vector<std::string> ids;
  bool raw_bytes = false;
  VocabFlags vocab;
};

int run_decode(const DecodeFlags& f, const CLI::App& sub) {
  std::string input;
  for (const std::string& a : f.ids) input += a + " ";
  if (f.ids.empty()) input = read_stdin();
  const std::vector<TokenId> ids = parse_token_ids(input);
  const Vocabulary tok = vocabulary_of(f.vocab, sub);
  std::string text = tok.decode(ids, f.raw_bytes);
  if (::isatty(STDOUT_FILENO) && (text.empty() || text.back() != '\n')) text += '\n';
  write_stdout(text);
  return 0;
}

struct TokensFlags {
  std::string text, file;
  SpecialFlags special;
  VocabFlags vocab;
};

int run_tokens(const TokensFlags& f, const CLI::App& sub) {
  const std::string text = read_text_input(sub, f.text, f.file);
  const Vocabulary tok = vocabulary_of(f.vocab, sub);
  const std::vector<TokenId> ids = tok.encode(text, f.special.allowed, f.special.disallowed);
  std::ostringstream out;
  out << std::setw(5) << "#" << "  " << std::setw(6) << "id" << "  token\n";
  for (size_t i = 0; i < ids.size(); ++i) {
    out << std::setw(5) << i << "  " << std::setw(6) << ids[i] << "  "
        << quote_bytes(tok.token_bytes(ids[i]));
    if (tok.is_special(ids[i])) out << "  (special)";
    out << "\n";
  }
  out << ids.size() << (ids.size() == 1 ? " token, " : " tokens, ") << text.size()
      << (text.size() == 1 ? " byte" : " bytes") << " (" << tok.name() << ")\n";
  write_stdout(out.str());
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

Command add_decode(CLI::App& app) {
  auto f = std::make_shared<DecodeFlags>();
  CLI::App* sub = app.add_subcommand("decode", "Token ids back to text (GPT-2's, a rank file's or a tokenizer.json's)");
  sub->add_option("ids", f->ids,
                  "Token ids: a JSON array ('[7120, 7002]') or integers ('7120 7002'); default: read them from "
                  "standard input");
  sub->add_flag("--bytes", f->raw_bytes,
                "Write the tokens' bytes as they are (default: invalid UTF-8 replaced by U+FFFD, as Python's "
                "errors='replace')");
  add_vocab_flags(sub, f->vocab);
  sub->footer(
      "The text is written exactly, with no newline added, so `qkv encode --file F | qkv decode` gives F back\n"
      "(for valid UTF-8); on a terminal a final newline is added for readability.\n"
      "An id outside the vocabulary is an error that names it; with --tokenizer, an id the file does not hold is\n"
      "no text (as Hugging Face decodes the ids of a model's embedding rows beyond its tokenizer's).");
  return {sub, [f, sub]() { return run_decode(*f, *sub); }};
}

Command add_tokens(CLI::App& app) {
  auto f = std::make_shared<TokensFlags>();
  CLI::App* sub = app.add_subcommand("tokens", "Show each token of a text beside its id (GPT-2's, a rank file's or a tokenizer.json's)");
  auto* text = sub->add_option("--text", f->text, "The text");
  auto* file = sub->add_option("--file", f->file, "Read the text from this file ('-': standard input)");
  text->excludes(file);
  add_special_flags(sub, f->special);
  add_vocab_flags(sub, f->vocab);
  sub->footer(
      "Tokens are shown quoted, with \\n, \\t, \\r, \\\", \\\\ and \\xNN for control characters and for bytes\n"
      "that are not valid UTF-8 on their own (a character split across tokens). Without --text or --file\n"
      "the text comes from standard input.");
  return {sub, [f, sub]() { return run_tokens(*f, *sub); }};
}

}  // namespace qkv::cli

// qkv decode [IDS...] [--bytes] [--vocab-dir D | --ranks F ... | --tokenizer J]
//
// Reads token ids (a JSON array, or numbers separated by spaces or commas) from the arguments or,
// without any, from standard input, and prints the text they decode to.
#include <unistd.h>

#include <cstdio>

#include "commands.h"
#include "standard_output.h"
#include "qkv/core/error.h"
#include "qkv/io/token_ids.h"
#include "tokenizer_flags.h"

namespace qkv::cli {
namespace {

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

}  // namespace

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
      "An id outside the vocabulary is an error that names it.");
  return {sub, [f, sub]() { return run_decode(*f, *sub); }};
}

}  // namespace qkv::cli

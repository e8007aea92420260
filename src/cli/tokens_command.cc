// qkv tokens [--text T | --file F] [--allowed-special S] [--disallowed-special S] [vocab flags]
//
// A table of the tokens of a text: position, id, and the token's bytes, quoted and escaped.
#include <iomanip>
#include <iostream>
#include <sstream>

#include "commands.h"
#include "standard_output.h"
#include "qkv/core/error.h"
#include "tokenizer_flags.h"

namespace qkv::cli {
namespace {

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

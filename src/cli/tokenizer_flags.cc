// Flags and input shared by the tokenizer commands; see tokenizer_flags.h.
#include "tokenizer_flags.h"

#include <charconv>
#include <cstdio>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/limits.h"
#include "qkv/core/thread_pool.h"
#include "qkv/io/atomic_file.h"
#include "qkv/text/pretokenize.h"
#include "qkv/text/utf8.h"
#include "qkv/text/vocab_files.h"
#include "flags.h"

namespace qkv::cli {

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

std::string read_stdin() {
  std::string s;
  char buf[1 << 16];
  size_t n;
  const int64_t limit = limits().max_file_bytes;
  while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) {
    s.append(buf, n);
    QKV_CHECK(static_cast<int64_t>(s.size()) <= limit, "standard input is longer than the limit of ", limit,
              " bytes for an input read whole (max_file_bytes)");
  }
  QKV_CHECK(!std::ferror(stdin), "cannot read standard input");
  return s;
}

std::string read_text_input(const CLI::App& sub, const std::string& text, const std::string& file) {
  if (sub.count("--text") > 0) return text;
  if (!file.empty()) return file == "-" ? read_stdin() : read_file(file);
  return read_stdin();
}

}  // namespace qkv::cli

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

Encoding load_encoding(const VocabFlags& f) {
  if (f.ranks.empty()) {
    QKV_CHECK(f.pattern.empty() && f.special.empty(), "--pattern and --special go with --ranks FILE; GPT-2's ",
              "encoding has its own");
    try {
      return load_gpt2(f.vocab_dir);
    } catch (const Error& e) {  // the library's words, then the flag that says it
      fail(e.what(), f.vocab_dir.empty() ? "; on the command line, --vocab-dir DIR names the directory"
                                         : str(" (--vocab-dir ", f.vocab_dir, ")"));
    }
  }
  QKV_CHECK(f.vocab_dir.empty(), "give either --vocab-dir (GPT-2) or --ranks (a tiktoken rank file), not both");
  std::vector<std::pair<std::string, TokenId>> specials;
  for (const std::string& s : f.special) {
    const size_t eq = s.rfind('=');
    TokenId id = -1;
    const char* end = s.data() + s.size();
    const bool ok = eq != std::string::npos && eq > 0 &&
                    std::from_chars(s.data() + eq + 1, end, id).ptr == end && id >= 0;
    QKV_CHECK(ok, "--special ", excerpt(s), ": expected TOKEN=ID, like <|endoftext|>=100257");
    specials.emplace_back(s.substr(0, eq), id);
  }
  return load_tiktoken_encoding(f.ranks, f.pattern.empty() ? std::string(kGpt2Pattern) : f.pattern,
                                std::move(specials));
}

CliTokenizer::CliTokenizer(const VocabFlags& f, const CLI::App& sub) {
  if (f.tokenizer.empty()) {
    tiktoken_ = load_encoding(f);
    return;
  }
  for (const char* flag : {"--vocab-dir", "--ranks", "--pattern", "--special", "--allowed-special", "--disallowed-special"})
    if (const CLI::Option* o = sub.get_option_no_throw(flag); o != nullptr && o->count() > 0)
      bad_flag(flag, "does not go with --tokenizer (the tokenizer.json holds its vocabulary, pattern and added "
                     "tokens, which are matched wherever the text spells them)");
  hf_ = HfTokenizer::load(f.tokenizer);
  hf_path_ = f.tokenizer;
}

std::vector<TokenId> CliTokenizer::encode(const std::string& text, const SpecialFlags& s) const {
  if (hf_) return hf_->encode(text);
  return tiktoken_->encode(text, SpecialTokens::parse(s.allowed), SpecialTokens::parse(s.disallowed));
}

std::vector<std::vector<TokenId>> CliTokenizer::encode_batch(const std::vector<std::string>& texts, int threads,
                                                             const SpecialFlags& s) const {
  if (!hf_) return tiktoken_->encode_batch(texts, threads, SpecialTokens::parse(s.allowed), SpecialTokens::parse(s.disallowed));
  std::vector<std::vector<TokenId>> out(texts.size());
  std::optional<ThreadPool> own;  // --threads N; 0: the default pool
  if (threads > 0) own.emplace(threads);
  ThreadPool& pool = own ? *own : default_pool();
  pool.parallel_for(static_cast<int64_t>(texts.size()),
                    [&](int64_t i, int) { out[static_cast<size_t>(i)] = hf_->encode(texts[static_cast<size_t>(i)]); });
  return out;
}

std::string CliTokenizer::decode(const std::vector<TokenId>& ids, bool raw_bytes) const {
  if (hf_) return raw_bytes ? hf_->decode_bytes(ids) : hf_->decode(ids);
  return raw_bytes ? tiktoken_->decode_bytes(ids) : tiktoken_->decode(ids);
}

std::string CliTokenizer::token_bytes(TokenId id) const {
  if (hf_) return hf_->decode_bytes(std::vector<TokenId>{id});
  return tiktoken_->decode_single_token_bytes(id);
}

bool CliTokenizer::is_special(TokenId id) const {
  if (!hf_) return tiktoken_->is_special_token(id);
  for (const HfAddedToken& t : hf_->added_tokens())
    if (t.id == id) return t.special;
  return false;
}

std::string CliTokenizer::name() const { return hf_ ? hf_path_ : tiktoken_->name(); }

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

std::string quote_bytes(std::string_view bytes) {
  static const char* hex = "0123456789abcdef";
  std::string out = "\"";
  for (size_t i = 0; i < bytes.size();) {
    const auto b = static_cast<unsigned char>(bytes[i]);
    size_t next = i;
    const uint32_t cp = utf8::next(bytes, next);
    const bool valid = b < 0x80 || !(cp == 0xFFFD && bytes.substr(i, next - i) != utf8::kReplacementCharacter);
    if (!valid || cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0)) {
      switch (cp) {
        case '\n': out += "\\n"; break;
        case '\t': out += "\\t"; break;
        case '\r': out += "\\r"; break;
        default:
          for (size_t k = i; k < next; ++k) {
            const auto c = static_cast<unsigned char>(bytes[k]);
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 15];
          }
      }
    } else if (cp == '"' || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else {
      out.append(bytes.substr(i, next - i));
    }
    i = next;
  }
  return out + "\"";
}

}  // namespace qkv::cli

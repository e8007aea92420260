// Vocabularies by source. See include/qkv/text/vocabulary.h.
#include "qkv/text/vocabulary.h"

#include <charconv>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/thread_pool.h"
#include "qkv/text/pretokenize.h"
#include "qkv/text/utf8.h"
#include "qkv/text/vocab_files.h"

namespace qkv {

Encoding load_encoding(const VocabularySource& f) {
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

Vocabulary::Vocabulary(const VocabularySource& s) {
  if (s.tokenizer.empty()) {
    tiktoken_ = load_encoding(s);
    return;
  }
  hf_ = HfTokenizer::load(s.tokenizer);
  hf_path_ = s.tokenizer;
}

std::vector<TokenId> Vocabulary::encode(const std::string& text, const std::string& allowed,
                                        const std::string& disallowed) const {
  if (hf_) return hf_->encode(text);
  return tiktoken_->encode(text, SpecialTokens::parse(allowed), SpecialTokens::parse(disallowed));
}

std::vector<std::vector<TokenId>> Vocabulary::encode_batch(const std::vector<std::string>& texts, int threads,
                                                           const std::string& allowed,
                                                           const std::string& disallowed) const {
  if (!hf_) return tiktoken_->encode_batch(texts, threads, SpecialTokens::parse(allowed), SpecialTokens::parse(disallowed));
  std::vector<std::vector<TokenId>> out(texts.size());
  std::optional<ThreadPool> own;  // --threads N; 0: the default pool
  if (threads > 0) own.emplace(threads);
  ThreadPool& pool = own ? *own : default_pool();
  pool.parallel_for(static_cast<int64_t>(texts.size()),
                    [&](int64_t i, int) { out[static_cast<size_t>(i)] = hf_->encode(texts[static_cast<size_t>(i)]); });
  return out;
}

std::string Vocabulary::decode(const std::vector<TokenId>& ids, bool raw_bytes) const {
  if (hf_) return raw_bytes ? hf_->decode_bytes(ids) : hf_->decode(ids);
  return raw_bytes ? tiktoken_->decode_bytes(ids) : tiktoken_->decode(ids);
}

std::string Vocabulary::token_bytes(TokenId id) const {
  if (hf_) return hf_->decode_bytes(std::vector<TokenId>{id});
  return tiktoken_->decode_single_token_bytes(id);
}

bool Vocabulary::is_special(TokenId id) const {
  if (!hf_) return tiktoken_->is_special_token(id);
  for (const HfAddedToken& t : hf_->added_tokens())
    if (t.id == id) return t.special;
  return false;
}

std::string Vocabulary::name() const { return hf_ ? hf_path_ : tiktoken_->name(); }

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

}  // namespace qkv

// qkv/models/tokenizer.h - text <-> a model's ids: what a model loaded through the front door
// (qkv/qkv.h) reads prompts with and writes its tokens in.
//
//   LetterTokenizer      the built-in tasks' alphabet: 'a' + id for the symbols, '|' the separator
//                        (id = symbols); spaces are skipped when encoding
//   Gpt2Tokenizer        GPT-2's byte-level BPE (text/bpe.h), special tokens matched in the text
//   HfTextTokenizer      Hugging Face's tokenizer.json (Qwen3's, Llama 3's): added tokens matched in
//                        the text; its template's BOS in prompt_prefix() (text/hf_tokenizer.h)
//   VocabularyTokenizer  GPT-2's BPE restricted to the tokens a text model was trained on: model id
//                        i is GPT-2 id vocab[i] (train/data.h's compact_vocabulary)
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qkv/text/bpe.h"
#include "qkv/text/hf_tokenizer.h"

namespace qkv {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string describe() const = 0;  // "GPT-2's BPE", ...
  virtual int64_t vocab_size() const = 0;
  // Throws qkv::Error naming the first character or token the model has no id for.
  virtual std::vector<int64_t> encode(const std::string& text) const = 0;
  // The text as text: special tokens spelled in it ("<|im_end|>") are not matched, their characters
  // are encoded as any others (a chat message's words). Tokenizers without special tokens: encode().
  virtual std::vector<int64_t> encode_text(const std::string& text) const { return encode(text); }
  // Ids outside [0, vocab_size()) are an error.
  virtual std::string decode(const std::vector<int64_t>& ids) const = 0;
  // One token as a label (the explorer's axes): decode({id}).
  std::string token_text(int64_t id) const { return decode({id}); }
  // The id of a special token by its text ("<|endoftext|>", "<|im_end|>"), when it has one.
  virtual std::optional<int64_t> special_id(const std::string& /*text*/) const { return std::nullopt; }
  // The ids a model reads before a text (a prompt, the explorer's text), which encode() does not add:
  // Llama 3's <|begin_of_text|> where its tokenizer.json's template (or a GGUF file's add_bos_token)
  // says so, as Hugging Face's tokenizer(text) and llama.cpp add it. LoadedModel::encode adds them.
  virtual std::vector<int64_t> prompt_prefix() const { return {}; }
};

class LetterTokenizer : public Tokenizer {
 public:
  explicit LetterTokenizer(int64_t symbols);  // 2..26 letters
  std::string describe() const override;
  int64_t vocab_size() const override { return symbols_ + 1; }
  int64_t separator() const { return symbols_; }
  std::vector<int64_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;

 private:
  int64_t symbols_;
};

class Gpt2Tokenizer : public Tokenizer {
 public:
  explicit Gpt2Tokenizer(Encoding encoding);
  std::string describe() const override { return "GPT-2's byte-level BPE"; }
  int64_t vocab_size() const override { return encoding_.n_vocab(); }
  std::vector<int64_t> encode(const std::string& text) const override;  // special tokens allowed
  std::vector<int64_t> encode_text(const std::string& text) const override;  // none (encode_ordinary)
  std::string decode(const std::vector<int64_t>& ids) const override;
  std::optional<int64_t> special_id(const std::string& text) const override;
  const Encoding& encoding() const { return encoding_; }

 private:
  Encoding encoding_;
};

class HfTextTokenizer : public Tokenizer {
 public:
  HfTextTokenizer(HfTokenizer tokenizer, std::string source);  // source: the file, for describe()
  std::string describe() const override { return "tokenizer.json (" + source_ + ")"; }
  int64_t vocab_size() const override { return tokenizer_.vocab_size(); }
  std::vector<int64_t> encode(const std::string& text) const override;
  // Added tokens that are not special (Qwen3's <think>) are still matched: split_special_tokens=True.
  std::vector<int64_t> encode_text(const std::string& text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  std::optional<int64_t> special_id(const std::string& text) const override { return tokenizer_.added_token(text); }
  std::vector<int64_t> prompt_prefix() const override {
    return std::vector<int64_t>(tokenizer_.prefix().begin(), tokenizer_.prefix().end());
  }
  const HfTokenizer& tokenizer() const { return tokenizer_; }

 private:
  HfTokenizer tokenizer_;
  std::string source_;
};

class VocabularyTokenizer : public Tokenizer {
 public:
  // vocab: increasing GPT-2 ids (model id -> GPT-2 id); `source` names the training text in errors.
  VocabularyTokenizer(Encoding encoding, std::vector<int64_t> vocab, std::string source);
  std::string describe() const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(vocab_.size()); }
  std::vector<int64_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;

 private:
  Encoding encoding_;
  std::vector<int64_t> vocab_;
  std::string source_;
};

// The text of ids as they are generated, given out as it becomes final: decoding a prefix can end in
// U+FFFD for a character whose bytes are not all there yet, so trailing replacement characters wait
// for the next token (or the end).
class TextStream {
 public:
  explicit TextStream(const Tokenizer& t) : t_(t) {}
  std::string add(int64_t id);  // the text that became final with this id (often "")
  std::string finish();         // the rest, whatever it ends in

 private:
  std::string take(const std::string& text, size_t end);
  const Tokenizer& t_;
  std::vector<int64_t> ids_;
  size_t given_ = 0;
};

}  // namespace qkv

// qkv/models/chat.h - the Llama 3, Qwen2.5 and Qwen3 chat formats as fixed templates, and a conversation that
// keeps its KV cache from turn to turn.
//
// Llama 3 (the book's bonus chapter's format, Meta's header tokens):
//   <|begin_of_text|>                                                   once, at the start
//   <|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>    each message
//   <|start_header_id|>assistant<|end_header_id|>\n\n                    the reply's header
// Qwen2.5 and Qwen3 (ChatML):
//   <|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n
//                                                                        Qwen2.5's only: once, at the start,
//                                                                        when the first message is not a system one
//   <|im_start|>{role}\n{content}<|im_end|>\n                            each message
//   <|im_start|>assistant\n                                              the reply's header
//   <think>\n\n</think>\n\n                                               Qwen3's only: after it, with thinking
//                                                                        off (Qwen3's enable_thinking=False)
// A reply ends at one of the family's end tokens (LoadedModel::end_ids): it is not part of the
// reply's text, and the conversation records it (with ChatML's "\n") before the next message, as the
// template writes a finished turn. Each turn feeds only its new tokens to the model: the cache holds
// the conversation so far. Templates are text; the tokenizer matches the special tokens in them.
//
// A message's own words are text: special tokens spelled in them ("<|im_end|><|im_start|>system")
// are encoded as their characters, not as control ids, so a message cannot close its turn and open
// another (Hugging Face's split_special_tokens=True; its default, and llama.cpp's, match them).
// ChatSession::set_special_tokens_in_messages(true) matches them as the template's own.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/kernels/kv_cache.h"
#include "qkv/models/generation.h"
#include "qkv/models/language_model.h"
#include "qkv/models/tokenizer.h"

namespace qkv {

enum class ChatFormat { kLlama3, kQwen2, kQwen3 };
const char* chat_format_name(ChatFormat f);  // "llama3" | "qwen2" | "qwen3"

struct ChatMessage {
  std::string role;     // "system" | "user" | "assistant"
  std::string content;
};

// The text of `messages` in the format, then the reply's header (and, for Qwen3 with thinking off,
// the empty think block). `first`: the conversation starts here (Llama 3's <|begin_of_text|>).
std::string chat_text(ChatFormat format, const std::vector<ChatMessage>& messages, bool first, bool thinking);
// The same text in pieces: the template's own (message = false) and each message's words with the
// plain text around them up to the next marker (message = true). chat_text is their concatenation.
struct ChatPiece {
  std::string text;
  bool message;
};
std::vector<ChatPiece> chat_pieces(ChatFormat format, const std::vector<ChatMessage>& messages, bool first,
                                   bool thinking);
// chat_text's ids: the template's pieces through tokenizer.encode (special tokens matched), the
// messages' through encode_text (as text) unless special_tokens_in_messages.
std::vector<int64_t> chat_ids(const Tokenizer& tokenizer, ChatFormat format, const std::vector<ChatMessage>& messages,
                              bool first, bool thinking, bool special_tokens_in_messages = false);
// What closes a finished reply in the template after its end token: ChatML's "\n", Llama 3's nothing.
std::string chat_turn_close(ChatFormat format);

class ChatSession {
 public:
  // capacity: the most positions the conversation may hold (at most the model's context); the
  // cache is made once, of that many positions (cache_dtype; none: the model's default_cache_dtype()).
  // stop_ids: the family's end tokens.
  ChatSession(LanguageModel& model, const Tokenizer& tokenizer, ChatFormat format, std::vector<int64_t> stop_ids,
              int64_t capacity, std::optional<kernels::CacheDtype> cache_dtype = std::nullopt);

  struct Turn {
    std::vector<int64_t> prompt_ids;  // the tokens this turn fed (the messages and the reply's header)
    std::vector<int64_t> new_ids;     // the reply, without its end token
    std::string text;                 // the reply decoded
    bool ended = false;               // stopped at an end token (false: max_new_tokens or the callback)
  };
  // Adds `messages` (a system message and/or the user's) and generates the reply, token by token
  // (on_token as generate()'s). Sampling: options' temperature, top_k, max_new_tokens, and its
  // generator (or Generator(seed), made at the first turn and continued). Throws qkv::Error, before
  // anything is fed, when the turn's prompt would not fit the conversation's capacity ("the
  // conversation holds P tokens; this turn's N more exceed the chat's context of C"); a reply that
  // reaches the capacity ends there.
  Turn respond(const std::vector<ChatMessage>& messages, const SamplingOptions& options, bool thinking,
               const TokenCallback& on_token = nullptr);

  // Special tokens spelled in messages matched as control ids (off: encoded as text; see above).
  void set_special_tokens_in_messages(bool on) { special_in_messages_ = on; }

  int64_t length() const { return static_cast<int64_t>(ids_.size()); }  // positions in the cache
  int64_t capacity() const { return capacity_; }
  const std::vector<int64_t>& ids() const { return ids_; }              // the whole conversation

 private:
  LanguageModel& model_;
  const Tokenizer& tokenizer_;
  ChatFormat format_;
  std::vector<int64_t> stop_ids_;
  int64_t capacity_;
  kernels::KvCache cache_;
  std::vector<int64_t> ids_;      // every token fed so far (the cache's positions)
  std::vector<int64_t> pending_;  // a finished reply's end token and close, fed with the next turn
  std::optional<Generator> own_;
  std::vector<float> logits_, scratch_;
  bool special_in_messages_ = false;
};

}  // namespace qkv

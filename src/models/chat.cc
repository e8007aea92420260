// Chat formats and conversations. See include/qkv/models/chat.h.
#include "qkv/models/chat.h"

#include <algorithm>

#include "qkv/core/error.h"

namespace qkv {

const char* chat_format_name(ChatFormat f) {
  switch (f) {
    case ChatFormat::kLlama3: return "llama3";
    case ChatFormat::kQwen2: return "qwen2";
    case ChatFormat::kQwen3: return "qwen3";
  }
  return "?";
}

const char* const kQwen2DefaultSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

std::vector<ChatPiece> chat_pieces(ChatFormat format, const std::vector<ChatMessage>& messages, bool first,
                                   bool thinking) {
  for (const ChatMessage& m : messages)
    QKV_CHECK(m.role == "system" || m.role == "user" || m.role == "assistant", "chat: the role ", m.role,
              " is not system, user or assistant");
  // Each message's words are one piece, from the marker before them to the marker after: the text a
  // tokenizer encodes alone between special tokens, so the pieces' ids are the whole text's.
  std::vector<ChatPiece> p;
  if (format == ChatFormat::kLlama3) {
    if (first) p.push_back({"<|begin_of_text|>", false});
    for (const ChatMessage& m : messages) {
      p.push_back({"<|start_header_id|>" + m.role + "<|end_header_id|>", false});
      p.push_back({"\n\n" + m.content, true});
      p.push_back({"<|eot_id|>", false});
    }
    p.push_back({"<|start_header_id|>assistant<|end_header_id|>\n\n", false});
  } else {  // ChatML
    if (format == ChatFormat::kQwen2 && first && (messages.empty() || messages.front().role != "system")) {
      p.push_back({"<|im_start|>", false});
      p.push_back({std::string("system\n") + kQwen2DefaultSystem, true});
      p.push_back({"<|im_end|>\n", false});
    }
    for (const ChatMessage& m : messages) {
      p.push_back({"<|im_start|>", false});
      p.push_back({m.role + "\n" + m.content, true});
      p.push_back({"<|im_end|>\n", false});
    }
    p.push_back({"<|im_start|>assistant\n", false});
    if (format == ChatFormat::kQwen3 && !thinking) p.push_back({"<think>\n\n</think>\n\n", false});
  }
  return p;
}

std::string chat_text(ChatFormat format, const std::vector<ChatMessage>& messages, bool first, bool thinking) {
  std::string t;
  for (const ChatPiece& piece : chat_pieces(format, messages, first, thinking)) t += piece.text;
  return t;
}

namespace {
// The format's control tokens must each be one token of the tokenizer: a tokenizer without them (a
// base model's, or an edited tokenizer.json) would spell "<|im_start|>" out as text, and the reply
// could never end at its end token.
void check_control_tokens(const Tokenizer& tokenizer, ChatFormat format) {
  const std::vector<std::string> needed =
      format == ChatFormat::kLlama3
          ? std::vector<std::string>{"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}
          : std::vector<std::string>{"<|im_start|>", "<|im_end|>"};
  std::string all;
  for (const std::string& t : needed) all += (all.empty() ? "" : " ") + t;
  for (const std::string& t : needed)
    QKV_CHECK(tokenizer.encode(t).size() == 1, "chat: the tokenizer has no ", t, " token, which the ",
              chat_format_name(format), " chat format needs (", all,
              "): it would be spelled out as text; a base model's tokenizer may lack them");
}
}  // namespace

std::vector<int64_t> chat_ids(const Tokenizer& tokenizer, ChatFormat format, const std::vector<ChatMessage>& messages,
                              bool first, bool thinking, bool special_tokens_in_messages) {
  check_control_tokens(tokenizer, format);
  std::vector<int64_t> ids;
  for (const ChatPiece& piece : chat_pieces(format, messages, first, thinking)) {
    const std::vector<int64_t> more = piece.message && !special_tokens_in_messages ? tokenizer.encode_text(piece.text)
                                                                                   : tokenizer.encode(piece.text);
    ids.insert(ids.end(), more.begin(), more.end());
  }
  return ids;
}

std::string chat_turn_close(ChatFormat format) { return format == ChatFormat::kLlama3 ? "" : "\n"; }

namespace {
// The conversation's positions: `capacity`, at most the model's context; checked before the cache is made.
int64_t chat_capacity(int64_t capacity, const LanguageModel& model) {
  QKV_CHECK(capacity >= 1, "chat: the context (", capacity, " tokens) must be at least 1");
  return std::min(capacity, model.context_length());
}
}  // namespace

ChatSession::ChatSession(LanguageModel& model, const Tokenizer& tokenizer, ChatFormat format,
                         std::vector<int64_t> stop_ids, int64_t capacity, std::optional<kernels::CacheDtype> cache_dtype)
    : model_(model),
      tokenizer_(tokenizer),
      format_(format),
      stop_ids_(std::move(stop_ids)),
      capacity_(chat_capacity(capacity, model)),
      cache_(model.make_cache(1, cache_dtype.value_or(model.default_cache_dtype()), capacity_)) {
  QKV_CHECK(!stop_ids_.empty(), "chat: the tokenizer has none of the family's end tokens");
  check_control_tokens(tokenizer_, format_);  // before the first turn, not as each turn's error
  model_.eval();
}

ChatSession::Turn ChatSession::respond(const std::vector<ChatMessage>& messages, const SamplingOptions& o,
                                       bool thinking, const TokenCallback& on_token) {
  Turn turn;
  const bool first = ids_.empty() && pending_.empty();
  turn.prompt_ids = pending_;
  const std::vector<int64_t> text = chat_ids(tokenizer_, format_, messages, first, thinking, special_in_messages_);
  turn.prompt_ids.insert(turn.prompt_ids.end(), text.begin(), text.end());
  const auto n = static_cast<int64_t>(turn.prompt_ids.size());
  QKV_CHECK(length() + n <= capacity_, "chat: the conversation holds ", length(), " tokens; this turn's ", n,
            " more exceed the chat's context of ", capacity_, " tokens (start a new conversation, or give a ",
            "larger context)");
  check_sampling_options(o, model_.vocab_size(), "chat");
  if (!o.generator && !own_) own_.emplace(o.seed);
  Generator& gen = o.generator ? *o.generator : *own_;
  const int64_t V = model_.vocab_size();
  logits_.resize(static_cast<size_t>(V));
  // The turn's prompt in one step (a prefill), then one token at a time.
  model_.forward_cached_into(turn.prompt_ids, 1, n, cache_, logits_.data());
  ids_.insert(ids_.end(), turn.prompt_ids.begin(), turn.prompt_ids.end());
  pending_.clear();
  std::optional<int64_t> unfed;  // the last token picked and not yet fed
  int64_t end_id = stop_ids_.front();
  while (static_cast<int64_t>(turn.new_ids.size()) < o.max_new_tokens) {
    if (unfed) {
      if (length() >= capacity_) break;  // no position left for it
      model_.forward_cached_into({*unfed}, 1, 1, cache_, logits_.data());
      ids_.push_back(*unfed);
      unfed.reset();
    }
    const int64_t next = pick_next_token(logits_.data(), V, o, gen, scratch_);
    if (std::find(stop_ids_.begin(), stop_ids_.end(), next) != stop_ids_.end()) {
      turn.ended = true;
      end_id = next;
      break;
    }
    turn.new_ids.push_back(next);
    unfed = next;
    if (on_token && !on_token(next)) break;
  }
  // What the template writes after the reply, fed with the next turn: the reply's last token when
  // it was not fed, the end token, and the close.
  if (unfed) pending_.push_back(*unfed);
  pending_.push_back(end_id);
  const std::vector<int64_t> close = tokenizer_.encode(chat_turn_close(format_));
  pending_.insert(pending_.end(), close.begin(), close.end());
  turn.text = tokenizer_.decode(turn.new_ids);
  return turn;
}

}  // namespace qkv

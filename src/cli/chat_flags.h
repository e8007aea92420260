// The chat flags (--system, --thinking, --max-context), declared once for `qkv chat` and
// `qkv generate --chat` (chat_command.cc).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "qkv/qkv.h"

namespace qkv::cli {

inline constexpr int64_t kDefaultMaxContext = 4096;

struct ChatFlags {
  std::string system;
  bool thinking = true;       // Qwen3's thinking block
  // the conversation's KV cache, in positions; not given: kDefaultMaxContext, or the model's context
  // when smaller (given, more than the model's is refused)
  std::optional<int64_t> max_context;
  bool special_in_messages = false;  // special tokens spelled in messages matched as control ids
};

void add_chat_flags(CLI::App* sub, ChatFlags& f);
// A conversation with a loaded model; qkv::Error when it has no chat format.
ChatSession make_chat_session(const LoadedModel& m, const ChatFlags& f);
// One turn: [system,] user `prompt`, the reply streamed (or, with json, one object printed);
// returns the exit status (128 + the signal when Ctrl-C stopped it).
int run_chat_turn(LoadedModel& m, const ChatFlags& f, const std::string& prompt, const SamplingOptions& o, bool json);

}  // namespace qkv::cli

// qkv chat --weights DIR: a conversation with a Llama 3 or Qwen3 model, the KV cache kept from turn to
// turn (models/chat.h); and `qkv generate --chat`'s one turn (generate_command.cc calls run_chat_turn).
//
//   qkv chat --weights DIR [--system TEXT] [--thinking on|off] [--max-context N] [--temperature T]
//            [--top-k K] [--seed S] [--max-new-tokens N] [--json]
//
// Each line of standard input is the user's message; the reply streams as it is generated. An empty
// line is skipped; /exit or the end of input ends the conversation. Ctrl-C stops the reply in
// progress (the conversation goes on; a second Ctrl-C during the prompt ends it). --json prints one
// object per turn instead: {turn, prompt_ids, new_ids, reply, ended, tokens, context}.
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "chat_flags.h"
#include "commands.h"
#include "flags.h"
#include "qkv/core/error.h"
#include "qkv/core/limits.h"
#include "qkv/qkv.h"
#include "sampling_flags.h"
#include "stop_signals.h"

namespace qkv::cli {

void add_chat_flags(CLI::App* sub, ChatFlags& f) {
  sub->add_option("--system", f.system, "A system message before the first turn");
  sub->add_option_function<std::string>(
         "--thinking",
         [&f](const std::string& s) {
           if (s != "on" && s != "off")
             throw CLI::ValidationError("--thinking: " + s + " is not on or off");
           f.thinking = s == "on";
         },
         "Qwen3's thinking block (other families have none): on (the model may think first, as Qwen3's default) | off (an empty "
         "<think></think> after the reply's header)")
      ->type_name("on|off")
      ->default_str("on");
  add_number(sub, "--max-context", f.max_context,
             "The most tokens the conversation may hold (its KV cache's size; at most the model's context)",
             positive<int64_t>())
      ->default_str(std::to_string(kDefaultMaxContext));
  sub->add_flag("--special-tokens-in-messages", f.special_in_messages,
                "Match special tokens spelled in the messages (\"<|im_end|>\") as the control tokens they name, "
                "as Hugging Face's default does; without it they are encoded as their characters, so a message "
                "cannot end its turn or open another");
}

ChatSession make_chat_session(const LoadedModel& m, const ChatFlags& f) {
  QKV_CHECK(m.chat_format.has_value() && m.tokenizer, m.description,
            " has no chat format (chat is for the ", family_titles(has_chat), " families, with their tokenizer)");
  if (f.max_context && *f.max_context > m.model->context_length())
    bad_flag("--max-context", *f.max_context, " is more than the model's ", m.model->context_length(), " positions");
  ChatSession chat(*m.model, *m.tokenizer, *m.chat_format, m.end_ids, f.max_context.value_or(kDefaultMaxContext));
  chat.set_special_tokens_in_messages(f.special_in_messages);
  return chat;
}

int run_chat_turn(LoadedModel& m, const ChatFlags& f, const std::string& prompt, const SamplingOptions& o, bool json) {
  ChatSession chat = make_chat_session(m, f);
  std::vector<ChatMessage> messages;
  if (!f.system.empty()) messages.push_back({"system", f.system});
  messages.push_back({"user", prompt});
  StopSignals signals;
  const ChatSession::Turn t = chat.respond(messages, o, f.thinking, [&](int64_t id) {
    if (!json) std::cout << m.tokenizer->token_text(id) << std::flush;
    return *StopSignals::flag() == 0;
  });
  if (json) {
    std::vector<int64_t> ids = t.prompt_ids;  // the turn's whole text (the cache lacks the reply's last token)
    ids.insert(ids.end(), t.new_ids.begin(), t.new_ids.end());
    std::cout << nlohmann::json({{"prompt", prompt},
                                 {"completion", t.text},
                                 {"ids", ids},
                                 {"prompt_ids", t.prompt_ids},
                                 {"new_ids", t.new_ids},
                                 {"prompt_tokens", t.prompt_ids.size()},
                                 {"new_tokens", t.new_ids.size()},
                                 {"ended", t.ended},
                                 {"chat_format", chat_format_name(*m.chat_format)},
                                 {"model", m.description}})
                     .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)  // bad bytes: U+FFFD
              << "\n";
  } else {
    std::cout << "\n";
  }
  const int stopped = *StopSignals::flag();
  return stopped ? 128 + stopped : 0;
}

namespace {

struct ChatCommandFlags {
  std::string weights, model;
  ChatFlags chat;
  SamplingFlags pick;
  SamplingOptions sampling;
  std::optional<Dtype> dtype;
  std::string quantize;
  bool json = false;
};

int run_chat(ChatCommandFlags& f) {
  if (f.weights.empty() == f.model.empty()) bad_flag("--weights", "give one of --weights DIR or --model PRESET");
  if (!f.model.empty() && !has_chat(family_of_preset(f.model)))  // before building it (gpt2-xl: 6 GB, 35 s)
    bad_flag("--model", excerpt(f.model), " is a ", family_of_preset(f.model).title, " preset, which has no chat format; ",
             "chat's presets: ", preset_list(has_chat));
  LoadOptions load;
  load.dtype = f.dtype;
  load.quantize = f.quantize;
  LoadedModel m = !f.model.empty() ? make_model(f.model, f.sampling.seed, load) : load_model(f.weights, load);
  apply_sampling_flags(f.pick, m.model->vocab_size(), f.sampling);
  ChatSession chat = make_chat_session(m, f.chat);
  if (!f.json)
    std::cerr << "qkv chat: " << m.description << "\n  one message per line; /exit or end of input ends the chat\n";
  std::string line;
  bool first = true;
  int turn = 0, refused = 0;
  while (true) {
    if (!f.json) std::cout << "> " << std::flush;
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (line.empty()) continue;
    std::vector<ChatMessage> messages;
    if (first && !f.chat.system.empty()) messages.push_back({"system", f.chat.system});
    messages.push_back({"user", line});
    StopSignals signals;  // Ctrl-C ends this reply, not the chat
    ChatSession::Turn t;
    try {
      // a message is input read whole: no longer than a file may be (before it is encoded)
      const int64_t max_bytes = limits().max_file_bytes;
      QKV_CHECK(static_cast<int64_t>(line.size()) <= max_bytes, "chat: the message is ", line.size(),
                " bytes, more than the ", max_bytes, " of an input read whole (max_file_bytes)");
      t = chat.respond(messages, f.sampling, f.chat.thinking, [&](int64_t id) {
        if (!f.json) std::cout << m.tokenizer->token_text(id) << std::flush;
        return *StopSignals::flag() == 0;
      });
    } catch (const Error& e) {  // a turn that does not fit: say so, keep the conversation
      const std::string what = e.what();
      std::cerr << (what.rfind("chat: ", 0) == 0 ? "qkv " : "qkv chat: ") << what << limit_hint(what) << "\n";
      if (f.json)
        std::cout << nlohmann::json({{"error", e.what()}, {"context", chat.length()}, {"max_context", chat.capacity()}})
                         .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                  << std::endl;
      ++refused;
      continue;
    }
    first = false;  // the system message went with this turn (a refused turn keeps it for the next)
    ++turn;
    if (f.json) {
      std::cout << nlohmann::json({{"turn", turn},
                                   {"prompt_ids", t.prompt_ids},
                                   {"new_ids", t.new_ids},
                                   {"reply", t.text},
                                   {"ended", t.ended},
                                   {"context", chat.length()},
                                   {"max_context", chat.capacity()}})
                       .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                << std::endl;
    } else {
      std::cout << "\n";
    }
  }
  // The chat went on past a refused message; a script reading the replies learns of it here.
  QKV_CHECK(refused == 0, "chat: ", refused, refused == 1 ? " message" : " messages", " of ", refused + turn,
            " got no reply (the errors above)");
  return 0;
}

}  // namespace

Command add_chat(CLI::App& app) {
  auto f = std::make_shared<ChatCommandFlags>();
  CLI::App* sub = app.add_subcommand("chat", "Chat with a " + family_titles(has_chat, "or") + " model, a Hugging Face folder "
                                             "or a GGUF file (one message per line of input)");
  sub->add_option("--weights", f->weights,
                  "A " + family_titles(has_chat, "or") + " directory as Hugging Face ships it (config.json, model.safetensors "
                  "or shards, tokenizer.json), or its GGUF file (llama.cpp's)");
  add_quantize_flag(sub, f->quantize);
  add_preset_flag(sub, f->model, "An untrained preset instead (a family with a chat format)", has_chat);
  add_chat_flags(sub, f->chat);
  add_sampling_flags(sub, f->pick);
  add_number_with_default(sub, "--seed", f->sampling.seed, "Seed of the draws (continued from turn to turn)");
  f->sampling.max_new_tokens = 1024;  // a reply's default (generate's is 50), shown by --help as it is
  add_number_with_default(sub, "--max-new-tokens", f->sampling.max_new_tokens, "The longest reply, in tokens",
                          non_negative<int64_t>());
  add_dtype_flag(sub, "--dtype", [f](Dtype d) { f->dtype = d; },
                 "The products: f32 | bf16 (default: the weights' own precision)");
  sub->add_flag("--json", f->json,
                "One JSON object per turn: {turn, prompt_ids, new_ids, reply, ended, context, max_context}");
  return {sub, [f]() { return run_chat(*f); }};
}

}  // namespace qkv::cli

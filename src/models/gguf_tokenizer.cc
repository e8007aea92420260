// GGUF's tokenizer metadata as the tokenizer.json it came from. See include/qkv/models/gguf_model.h.
#include <set>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/json_read.h"
#include "qkv/models/gguf_model.h"

namespace qkv {

using json = nlohmann::json;

namespace {

// The pre-tokenizers' splits, as Llama 3's and Qwen's tokenizer.json spell them (Qwen's takes one
// digit at a time, Llama 3's up to three).
const char* const kLlama3Split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
const char* const kQwen2Split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";

json split_then_bytes(const char* pattern) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}}};
}

// GGUF's token types.
enum TokenType : int64_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

}  // namespace

json gguf_tokenizer_json(const GgufFile& f) {
  const std::string where = excerpt(f.path());
  const std::string model = f.string("tokenizer.ggml.model");
  QKV_CHECK(model == "gpt2", where, ": tokenizer.ggml.model is ", excerpt(model),
            "; qkv reads byte-level BPE (\"gpt2\": Llama 3's, Qwen's, GPT-2's)");
  const std::string pre = f.has("tokenizer.ggml.pre") ? f.string("tokenizer.ggml.pre") : "default";
  json j = {{"version", "1.0"}, {"normalizer", nullptr}, {"decoder", {{"type", "ByteLevel"}}}};
  bool ignore_merges = false;
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
    j["pre_tokenizer"] = split_then_bytes(kLlama3Split);
    ignore_merges = true;  // as Llama 3's tokenizer.json says
  } else if (pre == "qwen2") {
    j["pre_tokenizer"] = split_then_bytes(kQwen2Split);
    j["normalizer"] = {{"type", "NFC"}};  // Qwen's tokenizer.json normalizes (llama.cpp does not)
  } else if (pre == "gpt-2" || pre == "default") {
    j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", true}};
  } else {
    fail(where, ": tokenizer.ggml.pre is ", excerpt(pre), "; qkv reads \"llama-bpe\" (Llama 3), \"qwen2\" (Qwen) ",
         "and \"gpt-2\"");
  }
  const std::vector<std::string>& tokens = f.strings("tokenizer.ggml.tokens");
  std::vector<int64_t> types(tokens.size(), kNormal);
  if (f.has("tokenizer.ggml.token_type")) {
    types = f.ints("tokenizer.ggml.token_type");
    QKV_CHECK(types.size() == tokens.size(), where, ": tokenizer.ggml.token_type has ", types.size(),
              " entries; tokenizer.ggml.tokens has ", tokens.size());
  }
  json vocab = json::object();
  json added = json::array();
  std::set<std::string> seen;
  for (size_t id = 0; id < tokens.size(); ++id) {
    const int64_t type = types[id];
    if (type == kUnused) continue;  // padding rows: no text
    QKV_CHECK(type == kNormal || type == kControl || type == kUserDefined || type == kUnknown || type == kByte, where,
              ": tokenizer.ggml.token_type[", id, "] is ", type, "; expected 1 (normal), 2, 3 (control), ",
              "4 (user-defined), 5 (unused) or 6");
    QKV_CHECK(seen.insert(tokens[id]).second, where, ": tokenizer.ggml.tokens[", id, "] (", excerpt(tokens[id]),
              ") is another token's text too");
    if (type == kControl || type == kUserDefined)
      added.push_back({{"id", id}, {"content", tokens[id]}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", false}, {"normalized", false}, {"special", type == kControl}});
    else
      vocab[tokens[id]] = id;
  }
  json merges = json::array();
  if (f.has("tokenizer.ggml.merges"))
    for (const std::string& m : f.strings("tokenizer.ggml.merges")) merges.push_back(m);
  j["added_tokens"] = std::move(added);
  j["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"fuse_unk", false},
                {"byte_fallback", false}, {"ignore_merges", ignore_merges}, {"vocab", std::move(vocab)},
                {"merges", std::move(merges)}};
  return j;
}

std::vector<GgufMetadata> gguf_tokenizer_metadata(const json& t, int64_t vocab, const ModelFamily& family) {
  const std::string where = "the tokenizer.json";
  QKV_CHECK(t.is_object() && t.contains("model") && t["model"].is_object() && t["model"].value("type", "") == "BPE" &&
                t["model"].contains("vocab") && t["model"]["vocab"].is_object(),
            where, " is not byte-level BPE (model.type \"BPE\" with a vocab); GGUF's \"gpt2\" tokenizer is");
  // The split: the regex of a Split (alone or in a Sequence), or ByteLevel's own (GPT-2's).
  std::string pre;
  std::vector<json> parts = {t.value("pre_tokenizer", json())};
  if (parts[0].is_object() && parts[0].value("type", "") == "Sequence" && parts[0]["pretokenizers"].is_array())
    parts = parts[0]["pretokenizers"].get<std::vector<json>>();
  for (const json& p : parts) {
    if (!p.is_object()) continue;
    if (p.value("type", "") == "Split" && p.contains("pattern") && p["pattern"].is_object()) {
      const std::string regex = p["pattern"].value("Regex", "");
      pre = regex == kLlama3Split ? "llama-bpe" : regex == kQwen2Split ? "qwen2" : "?" + regex;
    } else if (p.value("type", "") == "ByteLevel" && p.value("use_regex", false) && pre.empty()) {
      pre = "gpt-2";
    }
  }
  QKV_CHECK(!pre.empty() && pre[0] != '?', where, "'s pre-tokenizer ",
            pre.empty() ? std::string("has no split") : "splits by " + excerpt(pre.substr(1)),
            "; GGUF names Llama 3's (llama-bpe), Qwen's (qwen2) and GPT-2's splits");
  std::vector<std::string> tokens(static_cast<size_t>(vocab));
  std::vector<int64_t> types(static_cast<size_t>(vocab), kUnused);
  auto place = [&](int64_t id, const std::string& text, int64_t type) {
    QKV_CHECK(id >= 0 && id < vocab, where, ": token ", excerpt(text), " has id ", id, "; the model's ids are 0..",
              vocab - 1);
    tokens[static_cast<size_t>(id)] = text;
    types[static_cast<size_t>(id)] = type;
  };
  for (const auto& [text, id] : t["model"]["vocab"].items()) {
    QKV_CHECK(id.is_number_integer(), where, ": the id of ", excerpt(text), " is ", json_excerpt(id));
    place(id.get<int64_t>(), text, kNormal);
  }
  if (t.contains("added_tokens") && t["added_tokens"].is_array())
    for (const json& a : t["added_tokens"]) {
      QKV_CHECK(a.is_object() && a.contains("id") && a["id"].is_number_integer() && a.contains("content") &&
                    a["content"].is_string(),
                where, ": an added token is ", json_excerpt(a), "; expected {\"id\", \"content\", ...}");
      place(a["id"].get<int64_t>(), a["content"].get<std::string>(), a.value("special", false) ? kControl : kUserDefined);
    }
  for (size_t id = 0; id < tokens.size(); ++id)
    if (types[id] == kUnused) tokens[id] = str("[PAD", id, "]");
  std::vector<std::string> merges;
  if (t["model"].contains("merges") && t["model"]["merges"].is_array())
    for (const json& m : t["model"]["merges"]) {
      if (m.is_string()) {
        merges.push_back(m.get<std::string>());
      } else {
        QKV_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), where, ": a merge is ",
                  json_excerpt(m), "; expected \"a b\" or [\"a\", \"b\"]");
        merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
      }
    }
  std::vector<GgufMetadata> out = {{"tokenizer.ggml.model", gguf_string("gpt2")},
                                   {"tokenizer.ggml.pre", gguf_string(pre)},
                                   {"tokenizer.ggml.tokens", gguf_strings(std::move(tokens))},
                                   {"tokenizer.ggml.token_type", gguf_i32s(std::move(types))},
                                   {"tokenizer.ggml.merges", gguf_strings(std::move(merges))}};
  // The special ids llama.cpp's converter writes for the family's published tokenizers: Llama 3's
  // text begins with <|begin_of_text|> (added), Qwen's does not; the end is the family's first end token.
  auto id_of = [&](const std::string& text) -> std::optional<int64_t> {
    if (t.contains("added_tokens") && t["added_tokens"].is_array())
      for (const json& a : t["added_tokens"])
        if (a["content"] == text) return a["id"].get<int64_t>();
    return std::nullopt;
  };
  const bool llama3 = family.name == "llama";
  if (const auto bos = id_of(llama3 ? "<|begin_of_text|>" : "<|endoftext|>"))
    out.push_back({"tokenizer.ggml.bos_token_id", gguf_u32(static_cast<uint64_t>(*bos))});
  for (const std::string& end : family.end_tokens)
    if (const auto eos = id_of(end)) {
      out.push_back({"tokenizer.ggml.eos_token_id", gguf_u32(static_cast<uint64_t>(*eos))});
      break;
    }
  if (!llama3)
    if (const auto pad = id_of("<|endoftext|>"))
      out.push_back({"tokenizer.ggml.padding_token_id", gguf_u32(static_cast<uint64_t>(*pad))});
  out.push_back({"tokenizer.ggml.add_bos_token", gguf_bool(llama3)});
  return out;
}

}  // namespace qkv

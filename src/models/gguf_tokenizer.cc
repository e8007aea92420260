// GGUF's tokenizer metadata as a byte-level BPE tokenizer's parts (and tokenizer.json as GGUF's
// metadata). See include/qkv/models/gguf_model.h.
#include <limits>
#include <string_view>
#include <unordered_set>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/json_read.h"
#include "qkv/models/gguf_model.h"
#include "qkv/text/hf_tokenizer_json.h"
#include "qkv/text/pretokenize.h"

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
// Qwen3.5's: letters' runs take their combining marks (\p{M}) too.
const char* const kQwen35Split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// GGUF's token types.
enum TokenType : int64_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

// The special id at `key`, checked against tokenizer.ggml.tokens.
int64_t token_id(const GgufFile& f, const char* key) {
  const uint64_t id = f.unsigned_int(key);
  const size_t tokens = f.strings("tokenizer.ggml.tokens").size();
  QKV_CHECK(id < tokens, excerpt(f.path()), ": ", key, " is ", id, "; tokenizer.ggml.tokens has ids 0 .. ",
            static_cast<int64_t>(tokens) - 1);
  return static_cast<int64_t>(id);
}

}  // namespace

HfTokenizerParts gguf_tokenizer_parts(const GgufFile& f) {
  const std::string where = excerpt(f.path());
  const std::string model = f.string("tokenizer.ggml.model");
  QKV_CHECK(model == "gpt2", where, ": tokenizer.ggml.model is ", excerpt(model),
            "; qkv reads byte-level BPE (\"gpt2\": Llama 3's, Qwen's, GPT-2's)");
  const std::string pre = f.has("tokenizer.ggml.pre") ? f.string("tokenizer.ggml.pre") : "default";
  HfTokenizerParts parts;
  parts.vocab_name = "tokenizer.ggml.tokens";
  parts.merges_name = "tokenizer.ggml.merges";
  parts.added_name = "tokenizer.ggml.tokens' added";
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
    parts.pattern = kLlama3Split;
    parts.ignore_merges = true;  // as Llama 3's tokenizer.json says
  } else if (pre == "qwen2" || pre == "qwen35") {
    parts.pattern = pre == "qwen2" ? kQwen2Split : kQwen35Split;
    parts.nfc = true;  // Qwen's tokenizer.json normalizes (llama.cpp does not)
  } else if (pre == "gpt-2" || pre == "default") {
    parts.pattern = std::string(kGpt2Pattern);
  } else {
    fail(where, ": tokenizer.ggml.pre is ", excerpt(pre), "; qkv reads \"llama-bpe\" (Llama 3), \"qwen2\" (Qwen), ",
         "\"qwen35\" (Qwen3.5) ",
         "and \"gpt-2\"");
  }
  const std::vector<std::string>& tokens = f.strings("tokenizer.ggml.tokens");
  QKV_CHECK(tokens.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()), where,
            ": tokenizer.ggml.tokens has ", tokens.size(), " entries; ids are whole numbers 0 .. 2^31 - 2");
  const std::vector<int64_t>* types = nullptr;
  if (f.has("tokenizer.ggml.token_type")) {
    types = &f.ints("tokenizer.ggml.token_type");
    QKV_CHECK(types->size() == tokens.size(), where, ": tokenizer.ggml.token_type has ", types->size(),
              " entries; tokenizer.ggml.tokens has ", tokens.size());
  }
  parts.vocab.reserve(tokens.size());
  std::unordered_set<std::string_view> seen;
  seen.reserve(tokens.size());
  for (size_t id = 0; id < tokens.size(); ++id) {
    const int64_t type = types ? (*types)[id] : kNormal;
    if (type == kUnused) continue;  // padding rows: no text
    QKV_CHECK(type == kNormal || type == kControl || type == kUserDefined || type == kUnknown || type == kByte, where,
              ": tokenizer.ggml.token_type[", id, "] is ", type, "; expected 1 (normal), 2, 3 (control), ",
              "4 (user-defined), 5 (unused) or 6");
    QKV_CHECK(seen.insert(tokens[id]).second, where, ": tokenizer.ggml.tokens[", id, "] (", excerpt(tokens[id]),
              ") is another token's text too");
    const auto tid = static_cast<TokenId>(id);
    if (type == kControl || type == kUserDefined) {
      HfAddedToken a;
      a.id = tid;
      a.content = tokens[id];
      a.special = type == kControl;
      parts.added.push_back(std::move(a));
    } else {
      parts.vocab.push_back({tokens[id], tid});
    }
  }
  if (f.has("tokenizer.ggml.merges")) {
    const std::vector<std::string>& merges = f.strings("tokenizer.ggml.merges");
    parts.merges.reserve(merges.size());
    for (size_t r = 0; r < merges.size(); ++r) {
      const std::string& m = merges[r];
      const size_t sp = m.find(' ');
      QKV_CHECK(sp != std::string::npos && m.find(' ', sp + 1) == std::string::npos, where,
                ": tokenizer.ggml.merges[", r, "] is ", excerpt(m), "; expected two tokens separated by one space");
      parts.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
    }
  }
  // A text begins with the BOS token where the file says so, as llama.cpp reads it (absent: not).
  if (f.has("tokenizer.ggml.add_bos_token") && f.boolean("tokenizer.ggml.add_bos_token")) {
    QKV_CHECK(f.has("tokenizer.ggml.bos_token_id"), where, ": tokenizer.ggml.add_bos_token is true but the file has ",
              "no tokenizer.ggml.bos_token_id");
    parts.prefix = {static_cast<TokenId>(token_id(f, "tokenizer.ggml.bos_token_id"))};
    parts.prefix_name = "tokenizer.ggml.bos_token_id (tokenizer.ggml.add_bos_token is true)";
  }
  return parts;
}

std::vector<int64_t> gguf_end_ids(const GgufFile& f) {
  std::vector<int64_t> ids;
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    if (f.has(key)) ids.push_back(token_id(f, key));
  }
  return ids;
}

json gguf_tokenizer_json(const GgufFile& f) { return hf_tokenizer_json(gguf_tokenizer_parts(f)); }

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
      pre = regex == kLlama3Split   ? "llama-bpe"
            : regex == kQwen2Split  ? "qwen2"
            : regex == kQwen35Split ? "qwen35"
                                    : "?" + regex;
    } else if (p.value("type", "") == "ByteLevel" && p.value("use_regex", false) && pre.empty()) {
      pre = "gpt-2";
    }
  }
  QKV_CHECK(!pre.empty() && pre[0] != '?', where, "'s pre-tokenizer ",
            pre.empty() ? std::string("has no split") : "splits by " + excerpt(pre.substr(1)),
            "; GGUF names Llama 3's (llama-bpe), Qwen's (qwen2), Qwen3.5's (qwen35) and GPT-2's splits");
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
  // The special ids llama.cpp's converter writes: the token the post-processor puts before a text
  // (Llama 3's published <|begin_of_text|>) as BOS, added to every text; else Llama 3's or Qwen's
  // first token's name as BOS, not added; the end is the family's first end token; Qwen's
  // <|endoftext|> pads.
  const std::vector<TokenId> prefix = hf_template_prefix(t, where);
  QKV_CHECK(prefix.size() <= 1, where, "'s post_processor puts ", prefix.size(), " tokens before a text; GGUF's ",
            "tokenizer.ggml.add_bos_token adds one");
  auto id_of = [&](const std::string& text) -> std::optional<int64_t> {
    if (t.contains("added_tokens") && t["added_tokens"].is_array())
      for (const json& a : t["added_tokens"])
        if (a["content"] == text) return a["id"].get<int64_t>();
    return std::nullopt;
  };
  std::optional<int64_t> bos = prefix.empty() ? id_of("<|begin_of_text|>") : std::optional<int64_t>(prefix[0]);
  if (!bos) bos = id_of("<|endoftext|>");
  if (bos) out.push_back({"tokenizer.ggml.bos_token_id", gguf_u32(static_cast<uint64_t>(*bos))});
  for (const std::string& end : family.end_tokens)
    if (const auto eos = id_of(end)) {
      out.push_back({"tokenizer.ggml.eos_token_id", gguf_u32(static_cast<uint64_t>(*eos))});
      break;
    }
  if (const auto pad = id_of("<|endoftext|>"))
    out.push_back({"tokenizer.ggml.padding_token_id", gguf_u32(static_cast<uint64_t>(*pad))});
  out.push_back({"tokenizer.ggml.add_bos_token", gguf_bool(!prefix.empty())});
  return out;
}

}  // namespace qkv

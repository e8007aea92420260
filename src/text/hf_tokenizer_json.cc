// tokenizer.json <-> a byte-level BPE tokenizer's parts. See include/qkv/text/hf_tokenizer_json.h.
#include "qkv/text/hf_tokenizer_json.h"

#include <filesystem>
#include <limits>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/core/json_read.h"
#include "qkv/core/read_file.h"
#include "qkv/text/pretokenize.h"
#include "qkv/text/vocab_files.h"

namespace qkv {

using json = nlohmann::json;

namespace {

constexpr int kMaxPreTokenizerNesting = 16;

// j[key], or nullptr when it is absent or null. j is an object (checked by the callers).
const json* member(const json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

// The typed members of an object, their errors naming "<where>: <field>.<key>".
bool flag(const json& j, const char* key, bool otherwise, const std::string& where, const std::string& field) {
  const json* v = member(j, key);
  if (!v) return otherwise;
  QKV_CHECK(v->is_boolean(), where, ": ", field, ".", key, " is ", json_excerpt(*v), "; expected true or false");
  return v->get<bool>();
}

std::string text_of(const json& j, const char* key, const std::string& where, const std::string& field,
                    const std::string& otherwise = "") {
  const json* v = member(j, key);
  if (!v) return otherwise;
  QKV_CHECK(v->is_string(), where, ": ", field, ".", key, " is ", json_excerpt(*v), "; expected a string");
  return v->get<std::string>();
}

const json& object_at(const json& j, const std::string& where, const std::string& field) {
  QKV_CHECK(j.is_object(), where, ": ", field, " is ", json_excerpt(j), "; expected an object");
  return j;
}

// An id: a whole number in 0 .. 2^31 - 2 (1.5, "3" and -1 are refused, not truncated).
TokenId id_of(const json& v, const std::string& where, const std::string& field) {
  QKV_CHECK(v.is_number_integer() && (v.is_number_unsigned() || v.get<int64_t>() >= 0) &&
                v.get<uint64_t>() < static_cast<uint64_t>(std::numeric_limits<int32_t>::max()),
            where, ": ", field, " is ", json_excerpt(v), "; ids are whole numbers 0 .. 2^31 - 2");
  return static_cast<TokenId>(v.get<int64_t>());
}

// A pre-tokenizer object: a byte-level one (with or without GPT-2's regex) or a regex Split.
struct PreTokenizer {
  std::string pattern;  // empty: none yet
  bool byte_level = false;
};

void read_pre_tokenizer(const json& j, const std::string& where, const std::string& field, int depth,
                        PreTokenizer& out) {
  QKV_CHECK(depth <= kMaxPreTokenizerNesting, where, ": ", field, " nests Sequences more than ",
            kMaxPreTokenizerNesting, " deep; qkv reads a Sequence of ByteLevel and Split steps");
  const json& p = object_at(j, where, field);
  const std::string type = text_of(p, "type", where, field);
  if (type == "Sequence") {
    const json* list = member(p, "pretokenizers");
    if (!list) return;
    QKV_CHECK(list->is_array(), where, ": ", field, ".pretokenizers is ", json_excerpt(*list), "; expected a list");
    for (size_t k = 0; k < list->size(); ++k)
      read_pre_tokenizer((*list)[k], where, field + ".pretokenizers[" + std::to_string(k) + "]", depth + 1, out);
    return;
  }
  if (type == "ByteLevel") {
    QKV_CHECK(!flag(p, "add_prefix_space", false, where, field), where, ": ", field,
              ".add_prefix_space is true; qkv reads byte-level pre-tokenizers without a prefix space");
    if (flag(p, "use_regex", true, where, field)) {
      QKV_CHECK(out.pattern.empty(), where, ": ", field, " splits by GPT-2's regex after another split");
      out.pattern = std::string(kGpt2Pattern);
    }
    out.byte_level = true;
    return;
  }
  if (type == "Split") {
    const json* pattern = member(p, "pattern");
    QKV_CHECK(pattern && pattern->is_object() && pattern->contains("Regex"), where, ": ", field,
              ".pattern is not a {\"Regex\": ...}; qkv splits by regular expressions");
    const std::string behavior = text_of(p, "behavior", where, field);
    QKV_CHECK(behavior == "Isolated", where, ": ", field, ".behavior is ", excerpt(behavior),
              "; qkv reads \"Isolated\" splits");
    QKV_CHECK(!flag(p, "invert", false, where, field), where, ": ", field,
              ".invert is true; qkv reads splits that keep the matches");
    QKV_CHECK(out.pattern.empty() && !out.byte_level, where, ": ", field,
              " splits again; qkv reads one regex split before the byte-level step");
    out.pattern = text_of(*pattern, "Regex", where, field + ".pattern");
    return;
  }
  fail(where, ": ", field, ".type is ", excerpt(type), "; qkv reads byte-level BPE tokenizers (pre-tokenizers "
       "ByteLevel, Split with a regex, or a Sequence of them)");
}

void read_vocab(const json& m, const std::string& where, HfTokenizerParts& parts) {
  const json* vocab = member(m, "vocab");
  QKV_CHECK(vocab && vocab->is_object(), where, ": model.vocab is not an object of token -> id");
  parts.vocab.reserve(vocab->size());
  for (auto it = vocab->begin(); it != vocab->end(); ++it)
    parts.vocab.push_back({it.key(), id_of(it.value(), where, "model.vocab[" + excerpt(it.key()) + "]")});
}

void read_merges(const json& m, const std::string& where, HfTokenizerParts& parts) {
  const json* merges = member(m, "merges");
  QKV_CHECK(merges && merges->is_array(), where, ": model.merges is not a list");
  parts.merges.reserve(merges->size());
  for (size_t r = 0; r < merges->size(); ++r) {
    const json& e = (*merges)[r];
    if (e.is_string()) {  // "left right"
      const std::string& s = e.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      QKV_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos, where, ": model.merges[", r,
                "] is ", excerpt(s), "; expected two tokens separated by one space");
      parts.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else {
      QKV_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(), where, ": model.merges[", r,
                "] is not a pair of tokens");
      parts.merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    }
  }
}

void read_normalizer(const json& j, const std::string& where, HfTokenizerParts& parts) {
  const json* n = member(j, "normalizer");
  if (!n) return;
  const std::string type = text_of(object_at(*n, where, "normalizer"), "type", where, "normalizer");
  std::vector<const json*> list_parts{n};
  if (type == "Sequence") {
    const json* list = member(*n, "normalizers");
    QKV_CHECK(!list || list->is_array(), where, ": normalizer.normalizers is ", json_excerpt(*list),
              "; expected a list");
    list_parts.clear();
    if (list)
      for (const json& x : *list) list_parts.push_back(&x);
  }
  for (size_t k = 0; k < list_parts.size(); ++k) {
    const std::string field = type == "Sequence" ? "normalizer.normalizers[" + std::to_string(k) + "]" : "normalizer";
    const std::string t = text_of(object_at(*list_parts[k], where, field), "type", where, field, "(none)");
    QKV_CHECK(t == "NFC", where, ": ", field, ".type is ", excerpt(t), "; qkv reads no normalizer, or NFC");
    parts.nfc = true;
  }
}

void read_added_tokens(const json& j, const std::string& where, HfTokenizerParts& parts) {
  const json* list = member(j, "added_tokens");
  if (!list) return;
  QKV_CHECK(list->is_array(), where, ": added_tokens is ", json_excerpt(*list), "; expected a list");
  for (size_t k = 0; k < list->size(); ++k) {
    const std::string field = "added_tokens[" + std::to_string(k) + "]";
    const json& a = object_at((*list)[k], where, field);
    HfAddedToken t;
    const json* id = member(a, "id");
    QKV_CHECK(id, where, ": ", field, " has no id");
    t.id = id_of(*id, where, field + ".id");
    t.content = text_of(a, "content", where, field);
    t.special = flag(a, "special", false, where, field);
    t.lstrip = flag(a, "lstrip", false, where, field);
    t.rstrip = flag(a, "rstrip", false, where, field);
    QKV_CHECK(!flag(a, "single_word", false, where, field), where, ": added token ", excerpt(t.content),
              " is single_word; qkv matches added tokens anywhere");
    parts.added.push_back(std::move(t));
  }
}

// The post-processor: the special tokens its template for one text puts before the text, into
// parts.prefix. TemplateProcessing (its `single` list: SpecialToken items, then the Sequence A,
// each SpecialToken's ids from `special_tokens`), ByteLevel (it adjusts offsets only), or a
// Sequence of them; `field` names the object in errors.
void read_post_processor(const json& p, const std::string& where, const std::string& field, bool nested,
                         HfTokenizerParts& parts) {
  const std::string type = text_of(object_at(p, where, field), "type", where, field, "(none)");
  if (type == "ByteLevel") return;
  if (type == "Sequence" && !nested) {
    const json* list = member(p, "processors");
    QKV_CHECK(list && list->is_array(), where, ": ", field, ".processors is ", list ? json_excerpt(*list) : "missing",
              "; expected a list of post-processors");
    for (size_t k = 0; k < list->size(); ++k)
      read_post_processor((*list)[k], where, field + ".processors[" + std::to_string(k) + "]", true, parts);
    return;
  }
  QKV_CHECK(type == "TemplateProcessing", where, ": ", field, ".type is ", excerpt(type), "; qkv reads ByteLevel and ",
            "TemplateProcessing post-processors", nested ? "" : " (alone or in a Sequence)");
  QKV_CHECK(parts.prefix.empty(), where, ": ", field, " is a second TemplateProcessing; expected one");
  const json* single = member(p, "single");
  QKV_CHECK(single && single->is_array(), where, ": ", field, ".single is ", single ? json_excerpt(*single) : "missing",
            "; expected the template for one text: a list of SpecialToken and Sequence items");
  const json* specials = member(p, "special_tokens");
  bool text = false;  // the Sequence A seen
  for (size_t k = 0; k < single->size(); ++k) {
    const std::string item = field + ".single[" + std::to_string(k) + "]";
    const json& e = object_at((*single)[k], where, item);
    QKV_CHECK(e.size() == 1 && (e.contains("SpecialToken") || e.contains("Sequence")), where, ": ", item, " is ",
              json_excerpt(e), "; expected {\"SpecialToken\": {...}} or {\"Sequence\": {...}}");
    if (e.contains("Sequence")) {
      const std::string id = text_of(object_at(e["Sequence"], where, item + ".Sequence"), "id", where,
                                     item + ".Sequence", "(none)");
      QKV_CHECK(id == "A" && !text, where, ": ", item, " is the sequence ", excerpt(id),
                "; a template for one text holds the sequence \"A\" once");
      text = true;
      continue;
    }
    const std::string name = text_of(object_at(e["SpecialToken"], where, item + ".SpecialToken"), "id", where,
                                     item + ".SpecialToken", "");
    QKV_CHECK(!text, where, ": ", item, " puts ", excerpt(name), " after the text; qkv reads templates that add ",
              "tokens before a text only");
    const json* entry = specials && specials->is_object() ? member(*specials, name.c_str()) : nullptr;
    QKV_CHECK(entry && entry->is_object(), where, ": ", item, " names the special token ", excerpt(name), ", which ",
              field, ".special_tokens does not hold");
    const json* ids = member(*entry, "ids");
    QKV_CHECK(ids && ids->is_array() && !ids->empty(), where, ": ", field, ".special_tokens[", excerpt(name),
              "].ids is ", ids ? json_excerpt(*ids) : "missing", "; expected a list of ids");
    for (size_t i = 0; i < ids->size(); ++i)
      parts.prefix.push_back(id_of((*ids)[i], where, field + ".special_tokens[" + excerpt(name) + "].ids[" +
                                                         std::to_string(i) + "]"));
  }
  QKV_CHECK(text, where, ": ", field, ".single has no sequence \"A\" (the text itself)");
}

}  // namespace

HfTokenizerParts hf_tokenizer_parts(const json& j, const std::string& where) {
  QKV_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(), where,
            " has no \"model\" object: not a Hugging Face tokenizer.json");
  HfTokenizerParts parts;
  const json& m = j["model"];
  const std::string type = text_of(m, "type", where, "model", "(none)");
  QKV_CHECK(type == "BPE", where, ": model.type is ", excerpt(type),
            "; qkv reads BPE tokenizers (not WordPiece, Unigram or WordLevel)");
  QKV_CHECK(!flag(m, "byte_fallback", false, where, "model"), where, ": model.byte_fallback is true; qkv reads byte-level BPE");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    QKV_CHECK(text_of(m, key, where, "model").empty(), where, ": model.", key,
              " is set; qkv reads byte-level BPE without word affixes");
  QKV_CHECK(!member(m, "dropout"), where, ": model.dropout is set; qkv encodes deterministically");
  parts.ignore_merges = flag(m, "ignore_merges", false, where, "model");
  read_vocab(m, where, parts);
  read_merges(m, where, parts);
  read_normalizer(j, where, parts);
  const json* pre_tokenizer = member(j, "pre_tokenizer");
  QKV_CHECK(pre_tokenizer, where, ": pre_tokenizer is missing; qkv reads byte-level BPE tokenizers");
  PreTokenizer pre;
  read_pre_tokenizer(*pre_tokenizer, where, "pre_tokenizer", 0, pre);
  QKV_CHECK(pre.byte_level, where, ": pre_tokenizer has no ByteLevel step; qkv reads byte-level BPE tokenizers");
  QKV_CHECK(!pre.pattern.empty(), where, ": pre_tokenizer has no regex (a Split, or ByteLevel with use_regex)");
  parts.pattern = std::move(pre.pattern);
  if (const json* decoder = member(j, "decoder")) {
    const std::string d = text_of(object_at(*decoder, where, "decoder"), "type", where, "decoder", "(none)");
    QKV_CHECK(d == "ByteLevel", where, ": decoder.type is ", excerpt(d), "; qkv reads ByteLevel decoders");
  }
  read_added_tokens(j, where, parts);
  parts.prefix = hf_template_prefix(j, where);
  return parts;
}

std::vector<TokenId> hf_template_prefix(const json& j, const std::string& where) {
  QKV_CHECK(j.is_object(), where, " is not a JSON object: not a Hugging Face tokenizer.json");
  HfTokenizerParts parts;
  if (const json* post = member(j, "post_processor")) read_post_processor(*post, where, "post_processor", false, parts);
  return parts.prefix;
}

json hf_tokenizer_json(const HfTokenizerParts& parts) {
  json j = {{"version", "1.0"}, {"normalizer", nullptr}, {"decoder", {{"type", "ByteLevel"}}}};
  if (parts.nfc) j["normalizer"] = {{"type", "NFC"}};
  if (parts.pattern == kGpt2Pattern) {
    j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", true}};
  } else {
    j["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", parts.pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}}};
  }
  json added = json::array();
  for (const HfAddedToken& a : parts.added)
    added.push_back({{"id", a.id}, {"content", a.content}, {"single_word", false}, {"lstrip", a.lstrip},
                     {"rstrip", a.rstrip}, {"normalized", false}, {"special", a.special}});
  json vocab = json::object();
  for (const HfTokenizerParts::Token& t : parts.vocab) vocab[t.text] = t.id;
  json merges = json::array();
  for (const auto& [left, right] : parts.merges) merges.push_back(left + " " + right);
  j["added_tokens"] = std::move(added);
  if (!parts.prefix.empty()) {  // Hugging Face's template for Llama 3's <|begin_of_text|>, one item a token
    auto content = [&](TokenId id) {
      for (const HfAddedToken& a : parts.added)
        if (a.id == id) return a.content;
      for (const HfTokenizerParts::Token& t : parts.vocab)
        if (t.id == id) return t.text;
      return std::to_string(id);
    };
    json single = json::array(), pair = json::array(), specials = json::object();
    for (TokenId id : parts.prefix) {
      const std::string name = content(id);
      single.push_back({{"SpecialToken", {{"id", name}, {"type_id", 0}}}});
      specials[name] = {{"id", name}, {"ids", {id}}, {"tokens", {name}}};
    }
    pair = single;  // a pair of texts: the tokens before each (type 0, then 1), as Llama 3's file has it
    pair.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
    for (TokenId id : parts.prefix) pair.push_back({{"SpecialToken", {{"id", content(id)}, {"type_id", 1}}}});
    pair.push_back({{"Sequence", {{"id", "B"}, {"type_id", 1}}}});
    single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
    j["post_processor"] = {{"type", "TemplateProcessing"}, {"single", single}, {"pair", pair},
                           {"special_tokens", specials}};
  }
  j["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"fuse_unk", false},
                {"byte_fallback", false}, {"ignore_merges", parts.ignore_merges}, {"vocab", std::move(vocab)},
                {"merges", std::move(merges)}};
  return j;
}

HfTokenizer::File HfTokenizer::read(const std::string& path) {
  // A vocabulary's name (qwen3, llama3) that is not a path here: the installed file, verified.
  if (!std::filesystem::exists(path))
    if (const std::optional<std::string> installed = find_hf_vocab(path)) {
      std::string text = read_file(*installed);
      QKV_CHECK(hf_vocab_verified(path, text), "refusing to load ", *installed, ": its SHA-256 is not the ", path,
                " vocabulary's; the file is damaged or another version: delete it and reinstall (", kVocabInstallHint,
                ")");
      return {std::move(text), *installed};
    }
  std::string file = path;
  if (std::filesystem::is_directory(path)) file = (std::filesystem::path(path) / "tokenizer.json").string();
  QKV_CHECK(std::filesystem::is_regular_file(file), excerpt(path), " is not a tokenizer.json (nor a folder holding one)");
  QKV_CHECK(!file_starts_with(file, "GGUF"), excerpt(file), " is a GGUF file (llama.cpp's format), not a tokenizer.json: ",
            "its tokenizer is read with its model (qkv generate --weights ", excerpt(file), ")");
  return {read_file(file), file};
}

HfTokenizer HfTokenizer::load(const std::string& path) {
  const File f = read(path);
  return parse(f.text, f.file);
}

HfTokenizer HfTokenizer::parse(std::string_view text, const std::string& where) {
  HfTokenizerParts parts;
  {
    const json j = parse_json(text, where);  // no recursion, linear, nesting bounded (json_max_depth)
    try {
      parts = hf_tokenizer_parts(j, where);
    } catch (const json::exception& e) {  // (every member is checked for its type before it is read)
      fail(where, ": unexpected JSON: ", e.what());
    }
  }  // the JSON given back before the tables are made
  return build(std::move(parts), where);
}

}  // namespace qkv

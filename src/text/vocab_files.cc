// Finding, verifying and loading vocabulary files; see qkv/text/vocab_files.h.
#include "qkv/text/vocab_files.h"

#include <cstdlib>
#include <filesystem>

#include "qkv/core/error.h"
#include "qkv/core/read_file.h"
#include "qkv/text/pretokenize.h"
#include "qkv/text/sha256.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

}  // namespace

std::vector<VocabPlace> gpt2_vocab_places(const std::string& vocab_dir) {
  if (!vocab_dir.empty()) return {{vocab_dir, "the given directory"}};
  std::vector<VocabPlace> places;
  if (const std::string d = env("QKV_VOCAB_DIR"); !d.empty()) places.push_back({d, "$QKV_VOCAB_DIR"});
  const std::string xdg = env("XDG_DATA_HOME"), home = env("HOME");
  if (!xdg.empty() && xdg[0] == '/') places.push_back({xdg + "/qkv/gpt2", "$XDG_DATA_HOME/qkv/gpt2"});
  else if (!home.empty()) places.push_back({home + "/.local/share/qkv/gpt2", "$HOME/.local/share/qkv/gpt2"});
  places.push_back({"/usr/local/share/qkv/gpt2", "system"});
  places.push_back({"/usr/share/qkv/gpt2", "system"});
  return places;
}

std::string find_gpt2_vocab(const std::vector<VocabPlace>& places) {
  std::string looked;
  for (const VocabPlace& p : places) {
    const bool encoder = is_file(fs::path(p.dir) / "encoder.json"), merges = is_file(fs::path(p.dir) / "vocab.bpe");
    if (encoder && merges) return p.dir;
    looked += str("\n  ", p.dir, " (", p.why, "): ",
                  encoder ? "no vocab.bpe" : merges ? "no encoder.json" : "neither file");
  }
  fail("GPT-2's vocabulary files (encoder.json and vocab.bpe) are not installed; looked in:", looked, "\n", kVocabInstallHint,
       " into ${XDG_DATA_HOME:-$HOME/.local/share}/qkv/gpt2; or give the directory that holds them "
       "(vocab_dir), or set QKV_VOCAB_DIR to it");
}

std::optional<std::string> find_hf_vocab(const std::string& name) {
  bool known = false;
  for (const HfVocab& v : kHfVocabs) known = known || name == v.name;
  if (!known) return std::nullopt;
  std::vector<VocabPlace> places;
  const std::string xdg = env("XDG_DATA_HOME"), home = env("HOME");
  if (!xdg.empty() && xdg[0] == '/') places.push_back({xdg + "/qkv/" + name, "$XDG_DATA_HOME/qkv/" + name});
  else if (!home.empty()) places.push_back({home + "/.local/share/qkv/" + name, "$HOME/.local/share/qkv/" + name});
  places.push_back({"/usr/local/share/qkv/" + name, "system"});
  places.push_back({"/usr/share/qkv/" + name, "system"});
  std::string looked;
  for (const VocabPlace& p : places) {
    const fs::path f = fs::path(p.dir) / "tokenizer.json";
    if (is_file(f)) return f.string();
    looked += str("\n  ", p.dir, " (", p.why, ")");
  }
  fail("the ", name, " vocabulary (tokenizer.json) is not installed; looked in:", looked, "\n", kVocabInstallHint,
       " into ${XDG_DATA_HOME:-$HOME/.local/share}/qkv/", name, "; or give the path of a tokenizer.json");
}

bool hf_vocab_verified(const std::string& name, std::string_view contents) {
  for (const HfVocab& v : kHfVocabs)
    if (name == v.name) return sha256_hex(contents) == v.sha256;
  return false;
}

std::string read_verified_file(const std::string& path, std::string_view expected_sha256) {
  std::string bytes = read_file(path);
  if (!expected_sha256.empty()) {
    const std::string actual = sha256_hex(bytes);
    QKV_CHECK(actual == expected_sha256, "refusing to load ", path, ": its SHA-256 is ", actual, ", not the expected ",
              expected_sha256, ". The file is damaged or not the one qkv expects; delete it and reinstall (",
              kVocabInstallHint, ")");
  }
  return bytes;
}

Encoding load_gpt2_from(const std::string& dir) {
  const std::string encoder = read_verified_file((fs::path(dir) / "encoder.json").string(), kGpt2EncoderJsonSha256);
  const std::string merges = read_verified_file((fs::path(dir) / "vocab.bpe").string(), kGpt2VocabBpeSha256);
  EncodingSpec spec;
  spec.name = "gpt2";
  spec.pattern = std::string(kGpt2Pattern);
  spec.mergeable_ranks = data_gym_to_mergeable_ranks(merges, encoder);
  spec.special_tokens = {{"<|endoftext|>", 50256}};
  spec.explicit_n_vocab = 50257;
  return Encoding(std::move(spec));
}

Encoding load_gpt2(const std::string& vocab_dir) { return load_gpt2_from(find_gpt2_vocab(gpt2_vocab_places(vocab_dir))); }

Encoding load_tiktoken_encoding(const std::string& ranks_path, const std::string& pattern,
                                std::vector<std::pair<std::string, TokenId>> special_tokens, const std::string& name,
                                std::string_view expected_sha256) {
  EncodingSpec spec;
  spec.name = name.empty() ? fs::path(ranks_path).stem().string() : name;
  spec.pattern = pattern;
  spec.mergeable_ranks = parse_tiktoken_ranks(read_verified_file(ranks_path, expected_sha256), ranks_path);
  spec.special_tokens = std::move(special_tokens);
  return Encoding(std::move(spec));
}

}  // namespace qkv

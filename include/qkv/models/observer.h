// qkv/models/observer.h - watching a language model's forward, layer by layer.
//
// Tools that show intermediates (the explorer's pages, the logit lens, qkv forward --attn-weights,
// the search for a first non-finite value) pass an observer to the model's one forward
// (LanguageModel::forward) instead of reaching into its layers: the model calls it as the values
// are made, for every family alike (gemma.cpp's layers_output / activations observer, llama.cpp's
// eval callback).
//
// Legend: B batch, T tokens, E width, H heads, G key/value heads, D head dim, V vocabulary.
//
//   embedded(x)      x (B, T, E): the residual stream before the first block (after dropout)
//   block(view)      per block, in order: what it read, computed and left (BlockView)
//   logits(y)        y (B, T, V): the model's output
// The tensors are the forward's own, valid during the call; copy what is kept.
#pragma once

#include <cstdint>

#include "qkv/core/tensor.h"
#include "qkv/modules/attention_core.h"

namespace qkv {

struct BlockView {
  int64_t layer = 0;
  const Tensor* input = nullptr;         // x (B, T, E): the residual stream into the block
  const Tensor* normed = nullptr;        // norm1(x) (B, T, E); null when the block has no norm
  const AttentionTrace* trace = nullptr; // when ForwardObserver::wants_trace(): queries, keys and
                                         // values per head after QK-norm and RoPE ((B, H, T, D),
                                         // (B, G, T, D)), scores, weights (B, H, T, T), context
  const Tensor* attention = nullptr;     // the attention's output (B, T, E), after its projection
  const Tensor* ff = nullptr;            // the feed-forward's output (B, T, E); null without one
  const Tensor* output = nullptr;        // the residual stream after the block (B, T, E)
};

class ForwardObserver {
 public:
  virtual ~ForwardObserver() = default;
  // Whether the blocks record their attention traces (the (B, H, T, T) weights cost memory).
  virtual bool wants_trace() const { return true; }
  virtual void embedded(const Tensor& /*x*/) {}
  virtual void block(const BlockView& /*view*/) {}
  virtual void logits(const Tensor& /*y*/) {}
};

}  // namespace qkv

// qkv/modules/token_embedding.h - text ids to the vectors attention works on (chapter 2's input
// pipeline): token embedding plus a learned positional embedding.
//
//   ids (B, T) -> token_emb.weight[ids] (B, T, C) + pos_emb.weight[0:T] (T, C) -> (B, T, C)
// State names: token_emb.weight (vocab_size, C), pos_emb.weight (context_length, C). Built from a
// generator it holds what torch.manual_seed(s); nn.Embedding(vocab_size, C);
// nn.Embedding(context_length, C) hold, drawn in that order.
#pragma once

#include "qkv/modules/layers.h"

namespace qkv {

class TokenPositionEmbedding : public Module {
 public:
  TokenPositionEmbedding(int64_t vocab_size, int64_t context_length, int64_t dim, Generator& gen);
  const char* type_name() const override { return "TokenPositionEmbedding"; }
  void collect_state(const std::string& prefix, std::vector<StateEntry>& out) override;
  // ids: (batch, tokens) row-major; tokens <= context_length, every id < vocab_size.
  Tensor forward(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens) const;
  // doutput (batch, tokens, C) of the last forward: adds into token_emb.dweight (the rows of the
  // ids used) and pos_emb's (rows 0..tokens-1, summed over the batch). Ids have no gradient.
  void backward(const Tensor& doutput);

  Embedding token_emb;
  PositionalEmbedding pos_emb;
};

}  // namespace qkv

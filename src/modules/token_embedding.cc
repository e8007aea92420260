// Token + positional embedding. See include/qkv/modules/token_embedding.h.
#include "qkv/modules/token_embedding.h"

#include "qkv/core/error.h"
#include "qkv/core/ops.h"

namespace qkv {

TokenPositionEmbedding::TokenPositionEmbedding(int64_t vocab_size, int64_t context_length, int64_t dim,
                                               Generator& gen)
    : token_emb(vocab_size, dim, gen), pos_emb(context_length, dim, gen) {}

void TokenPositionEmbedding::collect_state(const std::string& prefix, std::vector<StateEntry>& out) {
  token_emb.collect_state(prefix + "token_emb.", out);
  pos_emb.collect_state(prefix + "pos_emb.", out);
}

Tensor TokenPositionEmbedding::forward(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens) const {
  Tensor tok = token_emb.forward(ids, {batch, tokens});  // (B, T, C)
  return add(tok, pos_emb.forward(tokens));               // + (T, C), broadcast over B
}

void TokenPositionEmbedding::backward(const Tensor& doutput) {
  QKV_CHECK(doutput.dim() == 3, "TokenPositionEmbedding: the gradient ", doutput.describe(),
            " must be (batch, tokens, dim)");
  // return add(tok, pos_emb.forward(tokens)): both terms get doutput; pos was broadcast over B
  token_emb.backward(doutput);
  pos_emb.backward(sum_to(doutput, {doutput.size(1), doutput.size(2)}));
}

}  // namespace qkv

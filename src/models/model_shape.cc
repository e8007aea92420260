// The decoder's cached steps' checks and gathers. See src/models/model_shape.h.
#include "models/model_shape.h"

#include "qkv/core/error.h"

namespace qkv::models_detail {

int64_t check_cached_step(const char* model, const std::vector<int64_t>& ids, int64_t batch, int64_t tokens,
                          const kernels::KvCache& cache, int64_t layers, int64_t context_length) {
  QKV_CHECK(batch >= 1 && tokens >= 1 && static_cast<int64_t>(ids.size()) == batch * tokens, model, ": ",
            ids.size(), " ids for a (", batch, ", ", tokens, ") batch");
  QKV_CHECK(cache.layers() == layers, model, ": the cache has ", cache.layers(), " layers but the model has ", layers,
            " blocks");
  QKV_CHECK(cache.pending() == 0, model, ": the cache has a step of ", cache.pending(),
            " positions in progress (a forward_cached that failed, or appends by another caller): reset() it");
  const int64_t P = cache.length();
  QKV_CHECK(P + tokens <= context_length, model, ": ", tokens, " new tokens after the cache's ", P,
            " positions exceed context_length ", context_length);
  return P;
}

void embed_at(const char* model, const std::vector<int64_t>& ids, int64_t batch, int64_t tokens, int64_t P,
              const Tensor& tok, const Tensor& pos, float* x) {
  const int64_t V = tok.size(0), C = tok.size(1);
  for (int64_t i = 0; i < batch * tokens; ++i) {
    const int64_t id = ids[static_cast<size_t>(i)];
    QKV_CHECK(id >= 0 && id < V, model, ": id ", id, " at position ", i, " is outside the vocabulary of ", V);
  }
  for (int64_t i = 0; i < batch * tokens; ++i) {
    const float* t = tok.data() + ids[static_cast<size_t>(i)] * C;
    const float* p = pos.data() + (P + i % tokens) * C;
    float* out = x + i * C;
    for (int64_t c = 0; c < C; ++c) out[c] = t[c] + p[c];
  }
}

Tensor embed_at(const char* model, const std::vector<int64_t>& ids, int64_t batch, int64_t tokens, int64_t P,
                const Tensor& tok, const Tensor& pos) {
  Tensor x = Tensor::empty({batch, tokens, tok.size(1)});
  embed_at(model, ids, batch, tokens, P, tok, pos, x.data());
  return x;
}

}  // namespace qkv::models_detail

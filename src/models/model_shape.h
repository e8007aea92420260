// src/models/model_shape.h - what the decoder's cached steps check and gather: the step against
// the cache, the cache's capacity, the embeddings at the cache's next positions.
#pragma once

#include <cstdint>
#include <vector>

#include "qkv/core/tensor.h"
#include "qkv/kernels/kv_cache.h"

namespace qkv::models_detail {

// A cached forward's input: `batch` x `tokens` ids, a cache with one layer per block and no step
// in progress, and room for the tokens within the context. Returns the cache's length P.
int64_t check_cached_step(const char* model, const std::vector<int64_t>& ids, int64_t batch, int64_t tokens,
                          const kernels::KvCache& cache, int64_t layers, int64_t context_length);

// A cache's capacity: `capacity` positions, or the context's when 0 or more than it.
inline int64_t cache_capacity(int64_t capacity, int64_t context_length) {
  return capacity > 0 && capacity < context_length ? capacity : context_length;
}

// x = tok[ids] + pos[P : P + tokens], (batch, tokens, C), each id checked against the vocabulary
// (tok: (V, C), pos: (context, C), both contiguous). Nothing is recorded for a backward.
Tensor embed_at(const char* model, const std::vector<int64_t>& ids, int64_t batch, int64_t tokens, int64_t P,
                const Tensor& tok, const Tensor& pos);
// The same into x (batch * tokens * C floats); every id is checked before anything is written.
void embed_at(const char* model, const std::vector<int64_t>& ids, int64_t batch, int64_t tokens, int64_t P,
              const Tensor& tok, const Tensor& pos, float* x);

}  // namespace qkv::models_detail

// qkv/kernels/decode.h - attention of a few new queries over a KV cache (flash-decoding).
//
// Legend: B batch, H query heads, G key/value heads (G divides H), Tq new queries (few: 1 when
// decoding a token, a handful when verifying a speculative draft), S = cache.length(layer) keys,
// D key dim, Dv value dim.
//
//   q (B, H, Tq, D), cache layer `layer`: keys (B, G, S, D), values (B, G, S, Dv)
//     ->  o (B, H, Tq, Dv), lse (B, H, Tq, contiguous)
//
// Exactly attention.h's formula over the cache's first S keys, query i at position
// options.query_offset + i (decoding after append: query_offset = S - Tq, with a causal mask),
// with every variant of AttentionOptions: grouped-query heads, causal, window, ALiBi, softcap,
// additive and boolean (Tq, S) masks, and dropout with the same Philox mask as the references
// (keyed by (b, h, pos_i, j)).
//
// How (flash-decoding): the keys the causal mask and the window leave visible to some query are
// cut into chunks; one task per (b, g, chunk) runs all the group's H / G query heads and Tq
// queries against the chunk, so each key and value is read from memory once per group; its
// partial output and log-sum-exp are merged with the others by the log-sum-exp rule in chunk
// order. The chunk size depends on the problem only (never the thread count), so results are
// bit-identical whatever the pool. Keys before the window's first visible one are never read.
// bf16 caches are widened to fp32 in registers.
//
// Scratch: a DecodeWorkspace (per-worker scratch and the partial results), which grows to the
// largest problem seen and is then reused: steady-state decoding allocates nothing.
#pragma once

#include <cstdint>
#include <vector>

#include "qkv/kernels/attention.h"
#include "qkv/kernels/kv_cache.h"

namespace qkv::kernels {

// The partial outputs of the chunks, kept by the caller between calls.
struct DecodeWorkspace {
  std::vector<float> partials;  // (B, G, chunks, H / G * Tq, 2 + Dv): max, sum, output per chunk
  std::vector<float> scratch;   // (threads, ...) each worker's queries, outputs and blocks of scores
  std::vector<uint64_t> held;   // (threads, 2) which call's and group's queries a worker's scratch holds
};

// Throws qkv::Error naming the argument on a shape that does not match the cache (q's batch and
// D, o's shape, H not a multiple of G), a layer out of range or bad options (as attention_forward).
// workspace null: one kept per calling thread.
void decode_attention(ConstHeads q, const KvCache& cache, int64_t layer, MutableHeads o, float* lse,
                      const AttentionOptions& options, DecodeWorkspace* workspace = nullptr);

// The same over keys and values the caller holds as float rows: keys (B, G, capacity, D) and values
// (B, G, capacity, Dv), B = q.batch and D = q.dim, their first `length` rows the cached positions.
// keys and values may be one array (latent attention's absorbed decoding attends over its latents
// as keys and as values: G = 1, D = Dv = latent_dim). Sizes below 1, a length past the capacity or
// missing rows are errors naming them.
void decode_attention_rows(ConstHeads q, const float* keys, const float* values, int64_t G, int64_t capacity,
                           int64_t length, int64_t Dv, MutableHeads o, float* lse, const AttentionOptions& options,
                           DecodeWorkspace* workspace = nullptr);
// The chunk length (in keys) decode_attention cuts `visible_keys` keys into: a function of the
// count alone, so tests can make a cache span several chunks.
int64_t decode_chunk_keys(int64_t visible_keys);

}  // namespace qkv::kernels

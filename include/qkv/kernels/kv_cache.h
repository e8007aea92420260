// qkv/kernels/kv_cache.h - the keys and values of past positions, per layer, for decoding one
// token (or a few) at a time.
//
// Legend: L layers, B batch, G key/value heads, C capacity (positions), D key dim, Dv value dim,
// n new positions of one step.
//
//   per layer l:  keys (B, G, C, D), values (B, G, C, Dv), in fp32 or bf16
//   positions are absolute: the cache holds positions 0 .. length() - 1 of every sequence
//
// Everything is allocated up front (L * B * G * C * (D + Dv) elements, checked against the
// memory limit), so decoding allocates nothing per token. bf16 stores round to nearest even
// (NaN stays NaN); reads widen exactly to fp32 and all arithmetic is fp32.
//
// One decoding step appends the same n positions to every layer, in turn, then commits them:
//
//   for (l = 0; l < L; ++l) {
//     ... k_new, v_new (B, G, n, D), (B, G, n, Dv) from layer l's projections
//     cache.append(l, k_new, v_new);            // layer l now sees length() + n positions
//     decode_attention(q, cache, l, o, lse, options);   // over cache.length(l) keys
//   }
//   cache.commit();                             // length() += n
//
// Between append(l, ...) and commit(), layer l sees its n new positions (length(l) =
// length() + n) and the layers not yet appended see length(). A mix-up is a qkv::Error naming
// the values, never a silent corruption: a layer appended twice in a step, a step appending a
// different n than the layers before it, committing before every layer appended, appending past
// the capacity, truncating or resetting in the middle of a step.
//
// State layers (a hybrid model's linear-attention layers: Qwen3.5's Gated DeltaNet): a layer given
// a state size S > 0 holds S floats for the whole batch instead of keys and values - whatever the
// layer keeps of the past, fixed in size however long the sequence. Such a layer takes its part in
// a step by advance(layer, n) after updating its state(layer) in place; the step rules are the
// same. Its past cannot be taken back: truncating below length() is refused, reset() zeroes it.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "qkv/core/bf16.h"
#include "qkv/kernels/attention.h"

namespace qkv::kernels {

enum class CacheDtype { kF32, kBF16 };
const char* cache_dtype_name(CacheDtype dtype);  // "f32" | "bf16"
int64_t cache_dtype_bytes(CacheDtype dtype);     // 4 | 2

// bf16 <-> fp32 (qkv/core/bf16.h): round to nearest even, and the exact widening.
using qkv::bf16_to_float;
using qkv::float_to_bf16;

class KvCache {
 public:
  // All sizes >= 1 except capacity >= 0; throws qkv::Error naming the bad size, a product that
  // overflows, or a request beyond limits().max_memory_bytes.
  // state_sizes: empty, or one per layer: 0 for keys and values, S > 0 for a state of S floats.
  KvCache(int64_t layers, int64_t batch, int64_t kv_heads, int64_t capacity, int64_t head_dim, int64_t value_dim,
          CacheDtype dtype, std::vector<int64_t> state_sizes = {});

  int64_t layers() const { return layers_; }
  int64_t batch() const { return batch_; }
  int64_t kv_heads() const { return kv_heads_; }
  int64_t capacity() const { return capacity_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t value_dim() const { return value_dim_; }
  CacheDtype dtype() const { return dtype_; }
  int64_t bytes() const { return bytes_; }  // everything allocated

  int64_t length() const { return length_; }        // committed positions
  int64_t pending() const { return pending_; }      // n of the step in progress, 0 when none
  int64_t length(int64_t layer) const;              // positions layer `layer` sees now
  bool appended(int64_t layer) const;               // whether it appended in the step in progress

  // Writes k_new (B, G, n, D) and v_new (B, G, n, Dv) at positions [length(), length() + n) of
  // `layer` (any strides). n may be 0. See the step rules at the top.
  void append(int64_t layer, ConstHeads k_new, ConstHeads v_new);
  // A state layer's part in the step of n positions, its state already updated (the same rules).
  void advance(int64_t layer, int64_t n);
  bool holds_state(int64_t layer) const;  // whether `layer` is a state layer
  int64_t state_size(int64_t layer) const;  // its S floats (0: a layer of keys and values)
  float* state(int64_t layer);              // (S), zeros at the start and after reset()
  const float* state(int64_t layer) const;
  // Ends the step: length() += pending(). Every layer must have appended (a step of no layer
  // appended is an error too: nothing to commit).
  void commit();
  // Keeps the first n positions (n <= length()), for a rejected speculative step or a rewind; with
  // state layers only n = length().
  void truncate(int64_t n);
  // Empties the cache (a new sequence), discarding a step in progress; zeroes the states.
  void reset();

  // fp32 caches only: the positions layer `layer` sees now, as (B, G, length(layer), D) and
  // (B, G, length(layer), Dv) views (row stride D, head stride C * D) that the fused kernels read.
  ConstHeads keys(int64_t layer) const;
  ConstHeads values(int64_t layer) const;
  // Any dtype: the first `out.tokens` positions (<= length(layer)) of heads [first_head,
  // first_head + out.heads) widened exactly to fp32 into out (B, out.heads, N, D) / (B, out.heads,
  // N, Dv): every head by default, one head of every sequence with out.heads = 1.
  void copy_keys(int64_t layer, MutableHeads out, int64_t first_head = 0) const;
  void copy_values(int64_t layer, MutableHeads out, int64_t first_head = 0) const;

  // Raw storage of a layer, for the kernels: (B, G, C, D) and (B, G, C, Dv) contiguous arrays of
  // float (kF32) or bf16 bits as uint16_t (kBF16).
  const void* key_data(int64_t layer) const;
  const void* value_data(int64_t layer) const;

 private:
  struct Free {
    void operator()(void* p) const;
  };
  void check_layer(const char* what, int64_t layer) const;
  void check_kv_layer(const char* what, int64_t layer) const;  // and not a state layer
  void mark_appended(const char* what, int64_t layer, int64_t n);  // the step rules
  void copy_out(const char* what, int64_t layer, bool keys, MutableHeads out, int64_t first_head) const;
  void* layer_data(int64_t layer, bool keys) const;
  ConstHeads f32_view(const char* what, int64_t layer, bool keys) const;  // keys() / values()

  int64_t layers_, batch_, kv_heads_, capacity_, head_dim_, value_dim_;
  CacheDtype dtype_;
  int64_t key_elements_ = 0, value_elements_ = 0;  // per layer of keys and values
  std::vector<int64_t> state_sizes_;               // (L) 0, or a state layer's floats
  std::vector<int64_t> offsets_;                   // (L) each layer's first byte in storage_
  int64_t bytes_ = 0;
  std::unique_ptr<unsigned char, Free> storage_;
  int64_t length_ = 0, pending_ = 0;
  int64_t appended_count_ = 0;                     // layers appended in the step in progress
  std::vector<unsigned char> appended_;            // (L) 1 where appended in the step in progress
};

}  // namespace qkv::kernels

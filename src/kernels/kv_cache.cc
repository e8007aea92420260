// The KV cache's storage and its step rules. See include/qkv/kernels/kv_cache.h.
#include "qkv/kernels/kv_cache.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/core/huge_pages.h"
#include "qkv/core/limits.h"

namespace qkv::kernels {

const char* cache_dtype_name(CacheDtype dtype) { return dtype == CacheDtype::kBF16 ? "bf16" : "f32"; }
int64_t cache_dtype_bytes(CacheDtype dtype) { return dtype == CacheDtype::kBF16 ? 2 : 4; }

void KvCache::Free::operator()(void* p) const { std::free(p); }

KvCache::KvCache(int64_t layers, int64_t batch, int64_t kv_heads, int64_t capacity, int64_t head_dim,
                 int64_t value_dim, CacheDtype dtype, std::vector<int64_t> state_sizes)
    : layers_(layers),
      batch_(batch),
      kv_heads_(kv_heads),
      capacity_(capacity),
      head_dim_(head_dim),
      value_dim_(value_dim),
      dtype_(dtype),
      state_sizes_(std::move(state_sizes)) {
  QKV_CHECK(dtype == CacheDtype::kF32 || dtype == CacheDtype::kBF16, "KvCache: unknown dtype ",
            static_cast<int>(dtype), " (expected f32 or bf16)");
  QKV_CHECK(layers >= 1 && batch >= 1 && kv_heads >= 1 && head_dim >= 1 && value_dim >= 1 && capacity >= 0,
            "KvCache: sizes must be at least 1 (capacity at least 0), got layers ", layers, ", batch ", batch,
            ", kv_heads ", kv_heads, ", capacity ", capacity, ", head_dim ", head_dim, ", value_dim ", value_dim);
  QKV_CHECK(capacity < (int64_t{1} << 31), "KvCache: capacity ", capacity, " is more than 2^31 - 1 positions");
  if (state_sizes_.empty()) state_sizes_.assign(static_cast<size_t>(layers), 0);
  QKV_CHECK(static_cast<int64_t>(state_sizes_.size()) == layers, "KvCache: ", state_sizes_.size(),
            " state sizes for ", layers, " layers (one per layer, 0 for keys and values)");
  const char* what = "KvCache (layers x batch x kv_heads x capacity x (head_dim + value_dim))";
  key_elements_ = checked_product({batch, kv_heads, capacity, head_dim}, what);
  value_elements_ = checked_product({batch, kv_heads, capacity, value_dim}, what);
  const int64_t kv_bytes = checked_bytes(checked_add(key_elements_, value_elements_, what), cache_dtype_bytes(dtype), what);
  // Each layer starts on a 64-byte boundary when its rows keep it aligned; the block as a whole always does.
  offsets_.resize(static_cast<size_t>(layers));
  int64_t at = 0;
  for (int64_t l = 0; l < layers; ++l) {
    const int64_t S = state_sizes_[static_cast<size_t>(l)];
    QKV_CHECK(S >= 0, "KvCache: layer ", l, "'s state size (", S, ") must not be negative (0: keys and values)");
    offsets_[static_cast<size_t>(l)] = at;
    at = checked_add(at, S > 0 ? checked_add(checked_bytes(S, 4, what), 63, what) / 64 * 64 : kv_bytes, what);
  }
  bytes_ = at;
  check_memory_request(bytes_, "KvCache");
  // From 2 MiB on, on 2 MiB boundaries in 2 MiB pages where the kernel grants them: a generation
  // touches its cache's pages as it goes, and a fresh 4 KiB page costs ~15 us to touch on some VMs
  // (a Qwen3-0.6B cache grows by 229 KB per token: 56 pages).
  constexpr int64_t kHuge = int64_t{2} << 20;
  const int64_t align = bytes_ >= kHuge ? kHuge : 64;
  const int64_t rounded = checked_add(bytes_, align - 1, what) / align * align;
  void* p = std::aligned_alloc(static_cast<size_t>(align), static_cast<size_t>(rounded > 0 ? rounded : 64));
  QKV_CHECK(p != nullptr, "KvCache: could not allocate ", bytes_, " bytes");
  advise_huge_pages(p, static_cast<size_t>(rounded));
  storage_.reset(static_cast<unsigned char*>(p));
  appended_.assign(static_cast<size_t>(layers), 0);
  reset();  // the states' zeros
}

void KvCache::check_layer(const char* what, int64_t layer) const {
  QKV_CHECK(layer >= 0 && layer < layers_, what, ": layer ", layer, " is not in [0, ", layers_, ")");
}

void KvCache::check_kv_layer(const char* what, int64_t layer) const {
  check_layer(what, layer);
  QKV_CHECK(state_sizes_[static_cast<size_t>(layer)] == 0, what, ": layer ", layer, " holds a state of ",
            state_sizes_[static_cast<size_t>(layer)], " numbers, not keys and values");
}

bool KvCache::holds_state(int64_t layer) const { return state_size(layer) > 0; }

int64_t KvCache::state_size(int64_t layer) const {
  check_layer("KvCache::state_size", layer);
  return state_sizes_[static_cast<size_t>(layer)];
}

float* KvCache::state(int64_t layer) {
  QKV_CHECK(state_size(layer) > 0, "KvCache::state: layer ", layer, " holds keys and values, not a state");
  return reinterpret_cast<float*>(storage_.get() + offsets_[static_cast<size_t>(layer)]);
}

const float* KvCache::state(int64_t layer) const { return const_cast<KvCache*>(this)->state(layer); }

int64_t KvCache::length(int64_t layer) const {
  check_layer("KvCache::length", layer);
  return length_ + (appended_[static_cast<size_t>(layer)] ? pending_ : 0);
}

bool KvCache::appended(int64_t layer) const {
  check_layer("KvCache::appended", layer);
  return appended_[static_cast<size_t>(layer)] != 0;
}

void* KvCache::layer_data(int64_t layer, bool keys) const {
  return storage_.get() + offsets_[static_cast<size_t>(layer)] + (keys ? 0 : key_elements_ * cache_dtype_bytes(dtype_));
}

const void* KvCache::key_data(int64_t layer) const {
  check_kv_layer("KvCache::key_data", layer);
  return layer_data(layer, true);
}
const void* KvCache::value_data(int64_t layer) const {
  check_kv_layer("KvCache::value_data", layer);
  return layer_data(layer, false);
}

namespace {

// Rows [0, n) of x (B, G, n, dim) into rows [at, at + n) of a contiguous (B, G, C, dim) array.
template <typename T>
void store_rows(ConstHeads x, T* dst, int64_t C, int64_t at) {
  for (int64_t b = 0; b < x.batch; ++b)
    for (int64_t g = 0; g < x.heads; ++g)
      for (int64_t n = 0; n < x.tokens; ++n) {
        const float* src = x.row(b, g, n);
        T* out = dst + ((b * x.heads + g) * C + at + n) * x.dim;
        for (int64_t c = 0; c < x.dim; ++c) {
          if constexpr (sizeof(T) == 2) {
            out[c] = float_to_bf16(src[c * x.stride_d]);
          } else {
            out[c] = src[c * x.stride_d];
          }
        }
      }
}

}  // namespace

void KvCache::mark_appended(const char* what, int64_t layer, int64_t n) {
  QKV_CHECK(n >= 0, what, ": layer ", layer, " appends ", n, " positions");
  QKV_CHECK(!appended_[static_cast<size_t>(layer)], what, ": layer ", layer, " already appended ", pending_,
            " positions in this step (commit() before appending to it again)");
  if (appended_count_ > 0) {
    QKV_CHECK(n == pending_, what, ": layer ", layer, " appends ", n, " positions but this step's layers appended ",
              pending_, " (every layer appends the same positions)");
  } else {
    QKV_CHECK(n <= capacity_ - length_, what, ": appending ", n, " positions to the ", length_,
              " held would exceed the capacity of ", capacity_, " positions");
  }
}

void KvCache::append(int64_t layer, ConstHeads k_new, ConstHeads v_new) {
  const char* what = "KvCache::append";
  check_kv_layer(what, layer);
  const int64_t n = k_new.tokens;
  QKV_CHECK(k_new.batch == batch_ && k_new.heads == kv_heads_ && k_new.dim == head_dim_ && n >= 0, what,
            ": k_new (", k_new.batch, ", ", k_new.heads, ", ", k_new.tokens, ", ", k_new.dim, ") should be (",
            batch_, ", ", kv_heads_, ", n, ", head_dim_, ")");
  QKV_CHECK(v_new.batch == batch_ && v_new.heads == kv_heads_ && v_new.tokens == n && v_new.dim == value_dim_,
            what, ": v_new (", v_new.batch, ", ", v_new.heads, ", ", v_new.tokens, ", ", v_new.dim,
            ") should be (", batch_, ", ", kv_heads_, ", ", n, ", ", value_dim_, ") to match k_new");
  QKV_CHECK((k_new.data != nullptr && v_new.data != nullptr) || n == 0, what, ": k_new or v_new has no data");
  mark_appended(what, layer, n);
  if (dtype_ == CacheDtype::kBF16) {
    store_rows(k_new, static_cast<uint16_t*>(layer_data(layer, true)), capacity_, length_);
    store_rows(v_new, static_cast<uint16_t*>(layer_data(layer, false)), capacity_, length_);
  } else {
    store_rows(k_new, static_cast<float*>(layer_data(layer, true)), capacity_, length_);
    store_rows(v_new, static_cast<float*>(layer_data(layer, false)), capacity_, length_);
  }
  pending_ = n;
  appended_[static_cast<size_t>(layer)] = 1;
  ++appended_count_;
}

void KvCache::advance(int64_t layer, int64_t n) {
  const char* what = "KvCache::advance";
  QKV_CHECK(state_size(layer) > 0, what, ": layer ", layer, " holds keys and values (append them)");
  mark_appended(what, layer, n);
  pending_ = n;
  appended_[static_cast<size_t>(layer)] = 1;
  ++appended_count_;
}

void KvCache::commit() {
  QKV_CHECK(appended_count_ > 0, "KvCache::commit: no layer appended since the last commit (nothing to commit)");
  for (int64_t l = 0; l < layers_; ++l)
    QKV_CHECK(appended_[static_cast<size_t>(l)], "KvCache::commit: layer ", l, " of ", layers_,
              " has not appended this step's ", pending_, " positions (", appended_count_, " of ", layers_,
              " layers did)");
  length_ += pending_;
  pending_ = 0;
  appended_count_ = 0;
  std::fill(appended_.begin(), appended_.end(), 0);
}

void KvCache::truncate(int64_t n) {
  QKV_CHECK(appended_count_ == 0, "KvCache::truncate: a step is in progress (", appended_count_, " of ", layers_,
            " layers appended); commit() first");
  QKV_CHECK(n >= 0 && n <= length_, "KvCache::truncate: ", n, " positions is not in [0, length ", length_, "]");
  for (int64_t l = 0; l < layers_ && n < length_; ++l)
    QKV_CHECK(state_sizes_[static_cast<size_t>(l)] == 0, "KvCache::truncate: layer ", l,
              " keeps a state of the whole past, which cannot be taken back to ", n, " of its ", length_,
              " positions (reset() and run the kept positions again)");
  length_ = n;
}

void KvCache::reset() {
  for (int64_t l = 0; l < layers_; ++l)
    if (const int64_t S = state_sizes_[static_cast<size_t>(l)]; S > 0)
      std::fill_n(reinterpret_cast<float*>(storage_.get() + offsets_[static_cast<size_t>(l)]), S, 0.0f);
  length_ = 0;
  pending_ = 0;
  appended_count_ = 0;
  std::fill(appended_.begin(), appended_.end(), 0);
}

ConstHeads KvCache::f32_view(const char* what, int64_t layer, bool keys) const {
  check_kv_layer(what, layer);
  QKV_CHECK(dtype_ == CacheDtype::kF32, what, ": the cache holds ", cache_dtype_name(dtype_), ", not f32 (use ",
            keys ? "copy_keys" : "copy_values", ")");
  const int64_t dim = keys ? head_dim_ : value_dim_;
  return {static_cast<const float*>(layer_data(layer, keys)), batch_, kv_heads_, length(layer), dim,
          kv_heads_ * capacity_ * dim, capacity_ * dim, dim, 1};
}

ConstHeads KvCache::keys(int64_t layer) const { return f32_view("KvCache::keys", layer, true); }

ConstHeads KvCache::values(int64_t layer) const { return f32_view("KvCache::values", layer, false); }

void KvCache::copy_out(const char* what, int64_t layer, bool keys, MutableHeads out, int64_t first_head) const {
  check_kv_layer(what, layer);
  const int64_t dim = keys ? head_dim_ : value_dim_;
  QKV_CHECK(first_head >= 0 && first_head < kv_heads_, what, ": first_head ", first_head, " is outside the cache's ",
            kv_heads_, " key/value heads");
  QKV_CHECK(out.batch == batch_ && out.heads >= 1 && out.heads <= kv_heads_ - first_head && out.dim == dim &&
                out.tokens >= 0 && out.tokens <= length(layer),
            what, ": out (", out.batch, ", ", out.heads, ", ", out.tokens, ", ", out.dim, ") should be (", batch_,
            ", 1 .. ", kv_heads_ - first_head, " heads from head ", first_head, ", N <= ", length(layer), ", ", dim,
            ")");
  const void* base = layer_data(layer, keys);
  // rows next to each other in out as in the cache: each head's positions as one run of values
  const bool one_run = out.stride_d == 1 && out.stride_n == dim;
  const int64_t runs = one_run ? std::min<int64_t>(out.tokens, 1) : out.tokens;
  const int64_t run = one_run ? out.tokens * dim : dim;
  for (int64_t b = 0; b < batch_; ++b)
    for (int64_t h = 0; h < out.heads; ++h) {
      const int64_t head_at = (b * kv_heads_ + first_head + h) * capacity_ * dim;
      for (int64_t n = 0; n < runs; ++n) {
        const int64_t at = head_at + n * dim;
        float* dst = out.row(b, h, n);
        if (out.stride_d == 1 && dtype_ == CacheDtype::kBF16) {
          bf16_to_floats(static_cast<const uint16_t*>(base) + at, dst, static_cast<size_t>(run));
        } else if (out.stride_d == 1) {
          std::memcpy(dst, static_cast<const float*>(base) + at, static_cast<size_t>(run) * sizeof(float));
        } else {
          for (int64_t c = 0; c < dim; ++c)
            dst[c * out.stride_d] = dtype_ == CacheDtype::kBF16
                                        ? bf16_to_float(static_cast<const uint16_t*>(base)[at + c])
                                        : static_cast<const float*>(base)[at + c];
        }
      }
    }
}

void KvCache::copy_keys(int64_t layer, MutableHeads out, int64_t first_head) const {
  copy_out("KvCache::copy_keys", layer, true, out, first_head);
}
void KvCache::copy_values(int64_t layer, MutableHeads out, int64_t first_head) const {
  copy_out("KvCache::copy_values", layer, false, out, first_head);
}

}  // namespace qkv::kernels

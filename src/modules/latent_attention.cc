// MultiHeadLatentAttention. See include/qkv/modules/latent_attention.h.
#include "qkv/modules/latent_attention.h"

#include <algorithm>
#include <cmath>

#include "qkv/core/error.h"
#include "qkv/core/limits.h"
#include "qkv/core/ops.h"
#include "qkv/core/gemm.h"
#include "qkv/kernels/attention.h"
#include "qkv/kernels/decode.h"
#include "qkv/modules/fused_attention.h"

namespace qkv {
namespace {

constexpr const char* kMla = "MultiHeadLatentAttention";

const AttentionConfig& mla_config(const AttentionConfig& c) {
  validate(c, kMla);
  QKV_CHECK(c.latent_dim > 0, kMla, ": latent_dim (", c.latent_dim, ") must be positive");
  QKV_CHECK(!c.attention.has_variants(), kMla, " takes no variants (num_kv_heads, rope, window, alibi, softcap)");
  QKV_CHECK(c.attention.dtype == Dtype::kF32, kMla, " computes in f32 only");
  QKV_CHECK(c.out_dim == 0 && c.out_bias, kMla, ": out_proj is (d_out, d_out) with a bias, as the book's class has it");
  return c;
}

kernels::ConstHeads heads_of(const Tensor& t) {  // (B, H, T, D) contiguous
  return kernels::ConstHeads::contiguous(t.data(), t.size(0), t.size(1), t.size(2), t.size(3));
}

kernels::MutableHeads mutable_heads_of(Tensor& t) {
  return kernels::MutableHeads::contiguous(t.data(), t.size(0), t.size(1), t.size(2), t.size(3));
}

}  // namespace

int64_t mla_default_latent_dim(int64_t d_out) { return std::max<int64_t>(16, d_out / 8); }

MultiHeadLatentAttention::MultiHeadLatentAttention(const AttentionConfig& c, Generator& gen)
    : config(mla_config(c)),
      W_query(c.d_in, c.d_out(), c.qkv_bias, gen),
      W_DKV(c.d_in, c.latent_dim, c.qkv_bias, gen),
      W_UK(c.latent_dim, c.d_out(), c.qkv_bias, gen),
      W_UV(c.latent_dim, c.d_out(), c.qkv_bias, gen),
      out_proj(c.d_out(), c.d_out(), true, gen),
      dropout(c.attention.dropout, gen) {}

void MultiHeadLatentAttention::collect_state(const std::string& prefix, std::vector<StateEntry>& out) {
  W_query.collect_state(prefix + "W_query.", out);
  W_DKV.collect_state(prefix + "W_DKV.", out);
  W_UK.collect_state(prefix + "W_UK.", out);
  W_UV.collect_state(prefix + "W_UV.", out);
  out_proj.collect_state(prefix + "out_proj.", out);
}

void MultiHeadLatentAttention::train(bool on) {
  Module::train(on);
  dropout.train(on);
}

Tensor MultiHeadLatentAttention::forward(const Tensor& x, AttentionTrace* trace) {
  check_batch_input(kMla, x, config.d_in, config.context_length);
  x_shape_ = x.shape();
  const int64_t B = x.size(0), T = x.size(1), H = config.attention.heads, D = config.attention.head_dim;
  auto split = [&](const Tensor& t) { return t.view({B, T, H, D}).transpose(1, 2); };  // (B, H, T, D)
  const Tensor queries = split(W_query.forward(x));
  const Tensor latent = W_DKV.forward(x);  // (B, T, L)
  const Tensor keys = split(W_UK.forward(latent));
  const Tensor values = split(W_UV.forward(latent));
  // The trace holds the textbook computation's intermediates: a traced call runs it.
  fused_last_ = runs_fused(config.path, dropout) && trace == nullptr;
  Tensor context;  // (B, H, T, D)
  if (fused_last_) {
    q_ = queries.contiguous();
    k_ = keys.contiguous();
    v_ = values.contiguous();
    o_ = Tensor::empty({B, H, T, D});
    lse_.assign(2 * static_cast<size_t>(B * H * T), 0.0f);  // lse, then its low parts
    kernels::AttentionOptions o;
    o.lse_low = lse_.data() + B * H * T;
    o.scale = 1.0f / std::sqrt(static_cast<float>(D));
    o.mask = kernels::AttentionMask::causal();
    dropout_p_ = 0.0f;
    if (dropout.active()) {  // --attention fused under dropout: the kernel's mask (Philox), not PyTorch's
      dropout_p_ = static_cast<float>(dropout.p());
      dropout_seed_ = dropout.draw_seed();
    }
    o.dropout_p = dropout_p_;
    o.dropout_seed = dropout_seed_;
    kernels::attention_forward(heads_of(q_), heads_of(k_), heads_of(v_), mutable_heads_of(o_), lse_.data(), o);
    context = o_;
  } else {
    const Tensor blocked = causal_mask(T);  // the class's q_position < k_position
    context = attend(queries, keys, values, &blocked, &dropout, trace, &saved_);
  }
  return out_proj.forward(context.transpose(1, 2).reshape({B, T, config.d_out()}));
}

LatentCache MultiHeadLatentAttention::new_cache(int64_t batch, int64_t capacity) const {
  QKV_CHECK(batch >= 1 && capacity >= 1, kMla, ": a latent cache needs batch and capacity of at least 1, got ", batch,
            " and ", capacity);
  check_memory_request(batch * capacity * config.latent_dim * static_cast<int64_t>(sizeof(float)), "the latent cache");
  LatentCache c;
  c.batch = batch;
  c.capacity = capacity;
  c.latent_dim = config.latent_dim;
  c.latents.assign(static_cast<size_t>(batch * capacity * config.latent_dim), 0.0f);
  return c;
}

Tensor MultiHeadLatentAttention::forward_cached(const Tensor& x, LatentCache& cache) {
  const int64_t L = config.latent_dim, H = config.attention.heads, D = config.attention.head_dim;
  QKV_CHECK(x.dim() == 3 && x.size(0) == cache.batch && x.size(2) == config.d_in, kMla, ": forward_cached takes (",
            cache.batch, ", T, ", config.d_in, ") for this cache, got ", shape_str(x.shape()));
  QKV_CHECK(cache.latent_dim == L && static_cast<int64_t>(cache.latents.size()) == cache.batch * cache.capacity * L,
            kMla, ": the cache holds latents of ", cache.latent_dim, " numbers; this module's are ", L);
  const int64_t B = x.size(0), T = x.size(1), past = cache.length;
  QKV_CHECK(past + T <= cache.capacity, kMla, ": ", T, " new tokens after ", past, " exceed the cache's capacity of ",
            cache.capacity);
  QKV_CHECK(!dropout.active(), kMla, ": forward_cached is for inference; call train(false) first (dropout is on)");
  x_shape_.clear();  // the Linears' inputs below are not a training forward's: no backward after this
  const Tensor q = W_query.forward(x).contiguous();       // (B, T, H D)
  const Tensor latent = W_DKV.forward(x).contiguous();    // (B, T, L)
  for (int64_t b = 0; b < B; ++b)
    std::copy(latent.data() + b * T * L, latent.data() + (b + 1) * T * L,
              cache.latents.begin() + (b * cache.capacity + past) * L);
  const float* uk = W_UK.weight.data();  // (H D, L): head h's rows [h D, (h + 1) D)
  const float* uv = W_UV.weight.data();
  const int64_t N = B * T;
  // qa (B, T, H, L): each head's W_UK_h^T q_h, for every row at once
  std::vector<float> qa(static_cast<size_t>(N * H * L)), z(qa.size()), lse(static_cast<size_t>(B * H * T));
  for (int64_t h = 0; h < H; ++h)
    sgemm(gemm_args(false, false, N, L, D, q.data() + h * D, H * D, uk + h * D * L, L, qa.data() + h * L, H * L));
  // z_h (B, T, H, L) = softmax(qa_h . c / sqrt(D)) c over the cached latents, causal: one
  // key/value head whose keys and values are both the latents (kernels/decode.h)
  kernels::AttentionOptions o;
  o.scale = 1.0f / std::sqrt(static_cast<float>(D));
  o.mask = kernels::AttentionMask::causal();
  o.query_offset = past;
  kernels::decode_attention_rows(kernels::ConstHeads::interleaved(qa.data(), B, H, T, L, H * L), cache.latents.data(),
                                 cache.latents.data(), 1, cache.capacity, past + T, L,
                                 kernels::MutableHeads::interleaved(z.data(), B, H, T, L, H * L), lse.data(), o);
  // context_h = W_UV_h z_h + b_UV_h (the weights of a row sum to 1)
  Tensor context = Tensor::empty({B, T, H * D});
  for (int64_t h = 0; h < H; ++h) {
    GemmArgs g = gemm_args(false, true, N, D, L, z.data() + h * L, H * L, uv + h * D * L, L, context.data() + h * D,
                           H * D);
    g.bias = W_UV.has_bias ? W_UV.bias.data() + h * D : nullptr;
    sgemm(g);
  }
  cache.length += T;
  return out_proj.forward(context);
}

Tensor MultiHeadLatentAttention::forward_token_by_token(const Tensor& x) {
  check_token_input(x, config.d_in);
  LatentCache cache = new_cache(x.size(0), x.size(1));
  return each_token(x, [&](const Tensor& row) { return forward_cached(row, cache); });
}

Tensor MultiHeadLatentAttention::backward(const Tensor& doutput) {
  QKV_CHECK(x_shape_.size() == 3, kMla, ": backward before forward");
  const int64_t B = x_shape_[0], T = x_shape_[1], H = config.attention.heads, D = config.attention.head_dim;
  const Tensor dmerged = out_proj.backward(doutput);               // (B, T, d_out)
  const Tensor dcontext = dmerged.view({B, T, H, D}).transpose(1, 2);  // (B, H, T, D)
  AttentionGrads g;
  if (fused_last_) {
    const Tensor d_o = dcontext.contiguous();
    g.dq = Tensor::empty({B, H, T, D});
    g.dk = Tensor::empty({B, H, T, D});
    g.dv = Tensor::empty({B, H, T, D});
    kernels::AttentionOptions o;
    o.scale = 1.0f / std::sqrt(static_cast<float>(D));
    o.mask = kernels::AttentionMask::causal();
    o.dropout_p = dropout_p_;  // the forward's mask, recomputed from its seed
    o.dropout_seed = dropout_seed_;
    o.lse_low = lse_.data() + B * H * T;  // read only
    kernels::attention_backward(heads_of(q_), heads_of(k_), heads_of(v_), heads_of(o_), heads_of(d_o), lse_.data(),
                                mutable_heads_of(g.dq), mutable_heads_of(g.dk), mutable_heads_of(g.dv), o);
  } else {
    g = attend_backward(dcontext, saved_, &dropout);
  }
  auto merge = [&](const Tensor& t) { return t.transpose(1, 2).reshape({B, T, config.d_out()}); };
  // keys = W_UK(latent), values = W_UV(latent): both reach latent
  const Tensor dlatent = add(W_UK.backward(merge(g.dk)), W_UV.backward(merge(g.dv)));  // (B, T, L)
  return add(W_query.backward(merge(g.dq)), W_DKV.backward(dlatent));                   // (B, T, d_in)
}

}  // namespace qkv

// A cached decoding step of the attention pipeline (kernels::mha_forward_cached: QKV GEMM of the
// new row, append, decode_attention, out_proj) allocates nothing in steady state: every global
// operator new in this binary is counted (counting_new.h, in the alloc tests' own binary). The
// module and LM steps return Tensors (an allocation each), so the kernel step is what is held to
// zero. (With RoPE the step builds its (1, D/2) rotation table, so the model here has none.)
#include <gtest/gtest.h>

#include "counting_new.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <new>
#include <vector>

#include "qkv/core/bf16.h"
#include "qkv/core/thread_pool.h"
#include "qkv/kernels/mha.h"

namespace qkv::kernels {
namespace {

TEST(GenerationAllocations, SteadyStateCachedMhaStepAllocatesNothing) {
  // f32 cache, bf16 cache, and bf16 mode with the weights kept in bf16 (a GPT model loaded with
  // --dtype bf16): its one-row products round x into per-thread buffers kept between steps.
  for (int run = 0; run < 3; ++run) {
    const CacheDtype dtype = run == 0 ? CacheDtype::kF32 : CacheDtype::kBF16;
    const bool bf16_weights = run == 2;
    const int64_t L = 2, B = 1, C = 64, H = 4, G = 2, D = C / H, cap = 600, prefill = 100;
    ThreadPool pool(2);
    MhaShape s;
    s.batch = B;
    s.tokens = prefill;
    s.d_in = C;
    s.attention.heads = H;
    s.attention.kv_heads = G;
    s.attention.head_dim = D;
    if (bf16_weights) s.attention.dtype = Dtype::kBF16;
    std::vector<float> w_qkv(static_cast<size_t>(s.qkv_width() * C)), w_out(static_cast<size_t>(C * C)),
        b_out(static_cast<size_t>(C), 0.01f);
    for (size_t i = 0; i < w_qkv.size(); ++i) w_qkv[i] = 0.05f * std::sin(0.37f * static_cast<float>(i));
    for (size_t i = 0; i < w_out.size(); ++i) w_out[i] = 0.05f * std::cos(0.23f * static_cast<float>(i));
    std::vector<uint16_t> w_qkv16(w_qkv.size()), w_out16(w_out.size());
    floats_to_bf16(w_qkv.data(), w_qkv16.data(), w_qkv.size());
    floats_to_bf16(w_out.data(), w_out16.data(), w_out.size());
    MhaWeights w{w_qkv.data(), nullptr, w_out.data(), b_out.data()};
    if (bf16_weights) {
      w.w_qkv16 = w_qkv16.data();
      w.w_out16 = w_out16.data();
    }
    std::vector<float> x(static_cast<size_t>(B * prefill * C)), y(x.size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.11f * static_cast<float>(i));
    KvCache cache(L, B, G, cap, D, D, dtype);
    std::vector<MhaSaved> scratch(static_cast<size_t>(L));
    std::vector<MhaWorkspace> ws(static_cast<size_t>(L));
    MhaCall call;
    call.pool = &pool;
    auto step = [&](int64_t tokens) {  // every layer appends, then the step commits
      s.tokens = tokens;
      for (int64_t l = 0; l < L; ++l)
        mha_forward_cached(s, w, x.data(), y.data(), cache, l, scratch[static_cast<size_t>(l)], ws[static_cast<size_t>(l)],
                           call);
      cache.commit();
    };
    step(prefill);
    step(1);  // grows the decode scratch to a one-token step
    const long before = allocations();
    for (int t = 0; t < 20; ++t) step(1);
    EXPECT_EQ(allocations() - before, 0) << cache_dtype_name(dtype) << (bf16_weights ? ", bf16 weights" : "");
    EXPECT_EQ(cache.length(), prefill + 21);
    EXPECT_TRUE(std::isfinite(y[0]));
  }
}

}  // namespace
}  // namespace qkv::kernels

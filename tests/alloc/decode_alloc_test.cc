// Decoding allocates nothing per token in steady state: every global operator new in this binary
// is counted (a replaced global operator new; counting_new.h, in the alloc tests' own binary),
// and after a first call has grown the pool's per-worker scratch and the DecodeWorkspace, further
// decode_attention calls - and KvCache appends and commits - must leave the count unchanged.
#include <gtest/gtest.h>

#include "counting_new.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <new>
#include <vector>

#include "qkv/core/thread_pool.h"
#include "qkv/kernels/decode.h"
#include "qkv/kernels/kv_cache.h"

namespace qkv::kernels {
namespace {

TEST(DecodeAllocations, SteadyStateDecodingAllocatesNothing) {
  for (CacheDtype dtype : {CacheDtype::kF32, CacheDtype::kBF16}) {
    const int64_t L = 2, B = 1, H = 6, G = 2, D = 64, C = 3000;
    ThreadPool pool(2);
    KvCache cache(L, B, G, C, D, D, dtype);
    std::vector<float> k(static_cast<size_t>(B * G * 2000 * D), 0.5f), q(static_cast<size_t>(B * H * D), 0.25f);
    std::vector<float> o(q.size()), lse(static_cast<size_t>(B * H));
    for (int64_t l = 0; l < L; ++l)
      cache.append(l, ConstHeads::contiguous(k.data(), B, G, 2000, D), ConstHeads::contiguous(k.data(), B, G, 2000, D));
    cache.commit();
    DecodeWorkspace ws;
    AttentionOptions opt;
    opt.scale = 0.125f;
    opt.mask = AttentionMask::causal();
    opt.pool = &pool;
    auto step = [&] {  // one token: every layer appends, then attends over its cache
      for (int64_t l = 0; l < L; ++l) {
        cache.append(l, ConstHeads::contiguous(k.data(), B, G, 1, D), ConstHeads::contiguous(k.data(), B, G, 1, D));
        opt.query_offset = cache.length(l) - 1;
        decode_attention(ConstHeads::contiguous(q.data(), B, H, 1, D), cache, l,
                         MutableHeads::contiguous(o.data(), B, H, 1, D), lse.data(), opt, &ws);
      }
      cache.commit();
    };
    step();  // grows the scratch to this size
    const long before = allocations();
    for (int t = 0; t < 20; ++t) step();
    EXPECT_EQ(allocations() - before, 0) << cache_dtype_name(dtype);
    EXPECT_EQ(cache.length(), 2021);
    EXPECT_NEAR(o[0], 0.5f, 1e-6) << "equal keys: the mean of equal values";
  }
}

}  // namespace
}  // namespace qkv::kernels

// A GPT model's decoding step allocates nothing in steady state (issue 28): every global operator
// new in this binary is counted (counting_new.h). Held to zero: DecoderModel::forward_cached_into after
// its working rows have grown (fp32 weights, and bf16 weights with a bf16 cache), and the whole
// generate() loop between its second and last token (sampling with temperature and top-k too).
#include <gtest/gtest.h>

#include "counting_new.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "qkv/core/generator.h"
#include "qkv/models/generation.h"
#include "qkv/models/decoder.h"
#include "qkv/models/gpt.h"

namespace qkv {
namespace {

DecoderSpec small_config(bool bf16) {
  DecoderSpec c = gpt_spec(97, 64, 32, 4, 2, 0.0, /*qkv_bias=*/true);
  if (bf16) c.attention.dtype = Dtype::kBF16;
  return c;
}

TEST(GptDecodeAllocations, SteadyStateStepAllocatesNothing) {
  for (bool bf16 : {false, true}) {
    Generator gen(5);
    DecoderModel model(small_config(bf16), gen);
    model.eval();
    if (bf16) model.keep_bf16_weights();
    kernels::KvCache cache = model.make_cache(2, bf16 ? kernels::CacheDtype::kBF16 : kernels::CacheDtype::kF32);
    std::vector<float> logits(2 * 97);
    std::vector<int64_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, next = {11, 12};
    model.forward_cached_into(prompt, 2, 5, cache, logits.data());  // the prefill grows the working rows
    model.forward_cached_into(next, 2, 1, cache, logits.data());
    const long before = allocations();
    for (int t = 0; t < 20; ++t) {
      next[0] = (next[0] * 7 + 3) % 97;
      next[1] = (next[1] * 5 + 1) % 97;
      model.forward_cached_into(next, 2, 1, cache, logits.data());
    }
    EXPECT_EQ(allocations() - before, 0) << (bf16 ? "bf16 weights and cache" : "fp32");
    EXPECT_EQ(cache.length(), 5 + 21);
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  }
}

TEST(GptDecodeAllocations, GenerateAllocatesNothingPerToken) {
  for (double temperature : {0.0, 0.8}) {
    Generator gen(7);
    DecoderModel model(small_config(false), gen);
    SamplingOptions o;
    o.max_new_tokens = 30;
    o.temperature = temperature;
    o.top_k = temperature > 0 ? 10 : 0;
    std::vector<long> counts;  // allocations() as each token arrives
    counts.reserve(64);
    const std::vector<int64_t> ids = generate(model, {3, 1, 4, 1, 5}, o, [&](int64_t) {
      counts.push_back(allocations());
      return true;
    });
    ASSERT_EQ(ids.size(), 30u);
    ASSERT_EQ(counts.size(), 30u);
    // The first step runs the prefill and grows the buffers; from the second token on, none.
    EXPECT_EQ(counts.back() - counts[1], 0) << "temperature " << temperature;
  }
}

}  // namespace
}  // namespace qkv

// The KV cache's state layers (a hybrid model's linear-attention layers): a layer given a state
// size holds that many doubles, zeros at the start and after reset(), instead of keys and values
// (the cache's bytes say so); it takes part in a step by advance() under the same rules as
// append(); its past cannot be taken back (truncate below the length is refused); and a state
// layer asked for keys, or a keys layer for a state, is an error naming the layer.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "qkv/kernels/kv_cache.h"
#include "test_support.h"

namespace qkv::kernels {
namespace {

using testing_support::error_of;

TEST(KvCacheState, StateLayersHoldTheirFloatsInsteadOfKeysAndValues) {
  // 4 layers, batch 2, 2 kv heads, capacity 8, D 4: layers 1 and 2 keep states of 10 and 3 floats
  KvCache plain(4, 2, 2, 8, 4, 4, CacheDtype::kF32);
  KvCache hybrid(4, 2, 2, 8, 4, 4, CacheDtype::kF32, {0, 10, 3, 0});
  const int64_t kv_layer = 2 * 2 * 8 * (4 + 4) * 4;  // bytes
  EXPECT_EQ(plain.bytes(), 4 * kv_layer);
  EXPECT_EQ(hybrid.bytes(), 2 * kv_layer + 64 + 64);  // each state rounded up to 64 bytes
  EXPECT_FALSE(hybrid.holds_state(0));
  EXPECT_TRUE(hybrid.holds_state(1));
  EXPECT_EQ(hybrid.state_size(2), 3);
  for (float v : std::vector<float>(hybrid.state(1), hybrid.state(1) + 10)) EXPECT_EQ(v, 0.0f);
  // a step: the keys layers append, the state layers advance, by the same n
  std::vector<float> k(2 * 2 * 3 * 4, 1.0f);
  const ConstHeads kn = ConstHeads::contiguous(k.data(), 2, 2, 3, 4);
  hybrid.append(0, kn, kn);
  hybrid.state(1)[9] = 7.0;
  hybrid.advance(1, 3);
  EXPECT_NE(error_of([&] { hybrid.advance(2, 2); }).find("layer 2 appends 2 positions but this step's layers appended 3"),
            std::string::npos);
  EXPECT_NE(error_of([&] { hybrid.advance(1, 3); }).find("layer 1 already appended"), std::string::npos);
  EXPECT_NE(error_of([&] { hybrid.commit(); }).find("layer 2 of 4 has not appended"), std::string::npos);
  hybrid.advance(2, 3);
  hybrid.append(3, kn, kn);
  hybrid.commit();
  EXPECT_EQ(hybrid.length(), 3);
  EXPECT_EQ(hybrid.state(1)[9], 7.0);  // kept between steps
  // no rewinding a state; reset zeroes it
  EXPECT_NE(error_of([&] { hybrid.truncate(2); }).find("layer 1 keeps a state of the whole past"), std::string::npos);
  hybrid.truncate(3);  // (the whole past: nothing taken back)
  hybrid.reset();
  EXPECT_EQ(hybrid.state(1)[9], 0.0);
  EXPECT_EQ(hybrid.length(), 0);
  // keys of a state layer, a state of a keys layer, a bad size list
  EXPECT_NE(error_of([&] { hybrid.append(1, kn, kn); }).find("layer 1 holds a state of 10 numbers, not keys and values"),
            std::string::npos);
  EXPECT_NE(error_of([&] { hybrid.keys(2); }).find("layer 2 holds a state of 3 numbers"), std::string::npos);
  EXPECT_NE(error_of([&] { hybrid.state(0); }).find("layer 0 holds keys and values, not a state"), std::string::npos);
  EXPECT_NE(error_of([&] { hybrid.advance(3, 1); }).find("layer 3 holds keys and values (append them)"),
            std::string::npos);
  EXPECT_NE(error_of([] { KvCache(3, 1, 1, 4, 2, 2, CacheDtype::kF32, {0, 5}); }).find("2 state sizes for 3 layers"),
            std::string::npos);
  EXPECT_NE(error_of([] { KvCache(2, 1, 1, 4, 2, 2, CacheDtype::kF32, {0, -5}); }).find("layer 1's state size (-5)"),
            std::string::npos);
}

}  // namespace
}  // namespace qkv::kernels

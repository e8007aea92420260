// The one place for size arithmetic from outside (checked.h) and for quoting outside text in
// messages (quote.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/core/limits.h"
#include "qkv/core/excerpt.h"

namespace qkv {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST(Checked, ProductsThatWouldWrapAreRefusedNamingWhat) {
  EXPECT_EQ(checked_product({2, 3, 4}, "t"), 24);
  EXPECT_EQ(checked_product({kMax, 0}, "t"), 0);  // empty whatever the other sizes
  EXPECT_EQ(checked_product({}, "t"), 1);
  // 2^32 x 2^32 wraps to 0 in int64_t arithmetic
  EXPECT_THROW(checked_product({int64_t{1} << 32, int64_t{1} << 32}, "t"), Error);
  EXPECT_THROW(checked_mul(int64_t{3037000500}, int64_t{3037000500}, "t"), Error);
  EXPECT_EQ(checked_mul(int64_t{3037000499}, int64_t{3037000499}, "t"), int64_t{9223372030926249001});
  try {
    checked_product({int64_t{1} << 62, 4}, "tensor 'x'");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'x'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(checked_add(kMax, 1, "t"), Error);
  EXPECT_THROW(checked_product({-1, 2}, "t"), Error);
  EXPECT_THROW(checked_bytes(kMax / 2, 4, "t"), Error);
}

TEST(Excerpt, ControlCharactersAreEscapedAndLongTextIsCounted) {
  EXPECT_EQ(excerpt("abc"), "'abc'");
  EXPECT_EQ(excerpt(std::string("a\0b", 3)), "'a\\x00b'");
  EXPECT_EQ(excerpt("\x1b[31mred"), "'\\x1B[31mred'");
  EXPECT_EQ(excerpt("it's\\n\n"), "'it\\'s\\\\n\\n'");
  EXPECT_EQ(excerpt("caf\xc3\xa9"), "'caf\xc3\xa9'");   // valid UTF-8 stays
  EXPECT_EQ(excerpt("\xc3("), "'\\xC3('");             // a broken sequence does not
  EXPECT_EQ(excerpt("\xc2\x9b"), "'\\xC2\\x9B'");       // C1 control (CSI) escaped
  const std::string big(40'000'000, 'x');
  const std::string q = excerpt(big, 10);
  EXPECT_EQ(q, "'xxxxxxxxxx' (+ 39999990 more bytes)");
  EXPECT_EQ(excerpt("ab\xc3\xa9", 3), "'ab' (+ 2 more bytes)");  // never half a character
}

TEST(Limits, AMemoryRequestBeyondTheLimitNamesTheLimit) {
  const Limits saved = limits();
  Limits l = saved;
  l.max_memory_bytes = 1000;
  set_limits(l);
  EXPECT_NO_THROW(check_memory_request(1000, "x"));
  try {
    check_memory_request(1001, "model from checkpoint");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_memory_bytes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("model from checkpoint"), std::string::npos) << e.what();
  }
  set_limits(saved);
  EXPECT_THROW(set_limits(Limits{0, 1, 1}), Error);
}

}  // namespace
}  // namespace qkv

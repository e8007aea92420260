// UTF-8 validation and repair: replace_invalid gives valid UTF-8, leaves valid text as it is, is
// idempotent, and next() walks any bytes without reading past them.
#include "fuzz_target.h"
#include "qkv/text/utf8.h"

QKV_FUZZ_TARGET(data) {
  namespace utf8 = qkv::utf8;
  const bool valid = utf8::is_valid(data);
  const std::string repaired = utf8::replace_invalid(data);
  QKV_FUZZ_EXPECT(utf8::is_valid(repaired));
  QKV_FUZZ_EXPECT(!valid || repaired == data);
  QKV_FUZZ_EXPECT(utf8::replace_invalid(repaired) == repaired);
  // Each ill-formed byte becomes at most one U+FFFD (3 bytes).
  QKV_FUZZ_EXPECT(repaired.size() <= 3 * data.size());
  // Walking the repaired text with next() and writing it back with append() gives it back.
  std::string rebuilt;
  for (size_t i = 0; i < repaired.size();) {
    const size_t before = i;
    const uint32_t cp = utf8::next(repaired, i);
    QKV_FUZZ_EXPECT(i > before && i <= repaired.size());
    utf8::append(rebuilt, cp);
  }
  QKV_FUZZ_EXPECT(rebuilt == repaired);
  // On raw bytes next() still advances and stays in bounds.
  for (size_t i = 0; i < data.size();) {
    const size_t before = i;
    (void)utf8::next(data, i);
    QKV_FUZZ_EXPECT(i > before && i <= data.size());
  }
}

// Numbers read exactly from text. See include/qkv/core/numbers.h.
#include "qkv/core/numbers.h"

namespace qkv {

std::optional<int64_t> parse_byte_count(std::string_view text) {
  int shift = 0;
  if (!text.empty()) {
    switch (text.back()) {
      case 'K': case 'k': shift = 10; break;
      case 'M': case 'm': shift = 20; break;
      case 'G': case 'g': shift = 30; break;
      case 'T': case 't': shift = 40; break;
      default: break;
    }
    if (shift > 0) text.remove_suffix(1);
  }
  const std::optional<int64_t> n = parse_number<int64_t>(text, {1, std::numeric_limits<int64_t>::max() >> shift});
  if (!n) return std::nullopt;
  return *n << shift;
}

}  // namespace qkv

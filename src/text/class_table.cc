// The two-level code point -> CharClass table behind the GPT-2 scanner; see unicode_classes.h.
#include <map>
#include <string>

#include "unicode_classes.h"

namespace qkv::unicode {

ClassTable::ClassTable() {
  std::vector<uint8_t> all(0x110000, kOther);
  auto mark = [&](const CodePointRange* r, size_t n, CharClass c) {
    for (size_t i = 0; i < n; ++i)
      for (uint32_t cp = r[i].first; cp <= r[i].last; ++cp) all[cp] = c;
  };
  mark(kLetters, kLetters_count, kLetter);
  mark(kNumbers, kNumbers_count, kNumber);
  mark(kWhiteSpace, kWhiteSpace_count, kSpace);
  block_of_.resize(0x1100);
  std::map<std::string, uint16_t> seen;
  for (size_t b = 0; b < 0x1100; ++b) {
    std::string key(reinterpret_cast<const char*>(all.data() + (b << 8)), 256);
    auto [it, fresh] = seen.emplace(key, static_cast<uint16_t>(seen.size()));
    if (fresh) blocks_.insert(blocks_.end(), key.begin(), key.end());
    block_of_[b] = it->second;
  }
}

const ClassTable& class_table() {
  static const ClassTable table;
  return table;
}

}  // namespace qkv::unicode

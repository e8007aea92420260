// The character classes of GPT-2's pre-tokenisation pattern, as tiktoken's regex engine has them:
// \p{L} letters, \p{N} numbers, \s White_Space, and everything else. The ranges are generated
// (unicode_classes.cc, scripts/gen_unicode_classes.js); char_class() looks a code point up in a
// two-level table built from them once: 4352 blocks of 256 code points, identical blocks shared.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace qkv::unicode {

struct CodePointRange {
  uint32_t first, last;  // inclusive
};

extern const CodePointRange kLetters[];
extern const size_t kLetters_count;
extern const CodePointRange kNumbers[];
extern const size_t kNumbers_count;
extern const CodePointRange kWhiteSpace[];
extern const size_t kWhiteSpace_count;

enum CharClass : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

class ClassTable {
 public:
  ClassTable();
  CharClass operator()(uint32_t cp) const {
    if (cp > 0x10FFFF) return kOther;
    return static_cast<CharClass>(blocks_[(static_cast<size_t>(block_of_[cp >> 8]) << 8) | (cp & 0xFF)]);
  }

 private:
  std::vector<uint16_t> block_of_;  // (0x1100) index of each 256-code-point block in blocks_
  std::vector<uint8_t> blocks_;     // (distinct blocks, 256) CharClass
};

const ClassTable& class_table();  // built on first use, thread-safe

}  // namespace qkv::unicode

// The fast paths of tokenizer.json's encoding against their references: merge_piece (a heap for
// long pieces) against the rescan of every pair, on random merge tables and pieces long enough for
// the heap; nfc() (a stable sort of each run of marks) against utf8proc_map, on random text rich in
// combining marks, Hangul and precomposed letters.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "text/hf_merges.h"
#include "text/nfc.h"
#include "qkv/text/utf8.h"

namespace qkv {
namespace {

using bpe_detail::Rank;
using hf_detail::HfMerges;

TEST(HfMerges, LongPiecesMergeAsTheReferenceRescan) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    // Tokens 0..3 are "bytes"; each merge joins two known tokens into a new one, ranks in order.
    HfMerges merges;
    Rank next = 4;
    for (Rank r = 0; r < 60; ++r) {
      const Rank left = static_cast<Rank>(rng() % next), right = static_cast<Rank>(rng() % next);
      if (merges.add(left, right, r, next)) ++next;
    }
    for (size_t len : {2u, 7u, 96u, 97u, 300u, 2000u}) {
      std::vector<Rank> piece(len);
      for (Rank& t : piece) t = static_cast<Rank>(rng() % 4);
      std::vector<Rank> fast = piece, reference = piece;
      hf_detail::merge_piece(merges, fast);
      hf_detail::merge_piece_reference(merges, reference);
      EXPECT_EQ(fast, reference) << "trial " << trial << ", length " << len;
      if (len >= 96) {
        EXPECT_LT(fast.size(), len) << "no merge applied: the case tests nothing";
      }
    }
  }
}

TEST(HfMerges, EqualRanksMergeLeftmostFirst) {
  HfMerges merges;
  merges.add(0, 0, 0, 1);  // "a a" -> aa
  std::vector<Rank> three = {0, 0, 0};
  hf_detail::merge_piece(merges, three);
  EXPECT_EQ(three, (std::vector<Rank>{1, 0}));
  std::vector<Rank> long_run(201, 0);  // the heap: 100 aa and one a at the end
  hf_detail::merge_piece(merges, long_run);
  ASSERT_EQ(long_run.size(), 101u);
  EXPECT_EQ(long_run.back(), 0u);
  EXPECT_EQ(long_run.front(), 1u);
}

TEST(Nfc, SameAsUtf8procOnTextRichInMarks) {
  // starters, combining marks of several classes, letters with precomposed forms, Hangul jamo
  const uint32_t pool[] = {'a', 'e', 'o', 'A', ' ', 0x0301, 0x0300, 0x0316, 0x0327, 0x0308, 0x0323, 0x031B,
                           0x05B0, 0x0670, 0x1100, 0x1161, 0x11A8, 0xAC00, 0x00E9, 0x212B, 0x1E0A, 0x0344};
  std::mt19937 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    const size_t len = 1 + rng() % 40;
    for (size_t k = 0; k < len; ++k) utf8::append(text, pool[rng() % std::size(pool)]);
    EXPECT_EQ(text_detail::nfc(text), text_detail::nfc_reference(text)) << "trial " << trial;
  }
  // a long run of alternating classes (the reference's quadratic case, still small here)
  std::string marks = "a";
  for (int k = 0; k < 300; ++k) marks += "\xCC\x81\xCC\x96";
  EXPECT_EQ(text_detail::nfc(marks), text_detail::nfc_reference(marks));
  EXPECT_EQ(text_detail::nfc("plain ASCII"), "plain ASCII");
  EXPECT_EQ(text_detail::nfc("e\xCC\x81"), "\xC3\xA9");
}

}  // namespace
}  // namespace qkv

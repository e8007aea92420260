// The attention spec's one validator (qkv/kernels/attention_spec.h): every field's rule, the
// field each error names, and the names a caller gives the fields.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "qkv/kernels/attention_spec.h"

namespace qkv::kernels {
namespace {

AttentionSpec good() {
  AttentionSpec s;
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = 8;
  s.rope = RopeLayout::kHalf;
  s.window = 3;
  s.alibi = true;
  s.softcap = 30.0;
  s.dropout = 0.1;
  return s;
}

struct Refusal {
  SpecField field;
  std::string message;
};

// The error validate_attention_spec throws for good() edited by `edit` (names by `namer`).
Refusal refusal(const std::function<void(AttentionSpec&)>& edit, SpecNamer namer = spec_field_name) {
  AttentionSpec s = good();
  edit(s);
  try {
    validate_attention_spec(s, "who", namer);
  } catch (const AttentionSpecError& e) {
    return {e.field, e.what()};
  }
  ADD_FAILURE() << "no error";
  return {SpecField::kHeads, ""};
}

TEST(AttentionSpec, AGoodSpecPasses) {
  EXPECT_NO_THROW(validate_attention_spec(good(), "who"));
  AttentionSpec book;  // the book's MultiHeadAttention: G = H, no variants
  book.heads = 12;
  book.head_dim = 64;
  EXPECT_NO_THROW(validate_attention_spec(book, "who"));
  EXPECT_FALSE(book.has_variants());
  EXPECT_EQ(book.groups(), 12);
  EXPECT_TRUE(good().has_variants());
  EXPECT_EQ(good().groups(), 2);
  EXPECT_EQ(good().width(), 32);
  EXPECT_EQ(good().kv_width(), 16);
}

TEST(AttentionSpec, EveryFieldsErrorNamesItAndItsValue) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const struct {
    std::function<void(AttentionSpec&)> edit;
    SpecField field;
    std::string message;
  } cases[] = {
      {[](AttentionSpec& s) { s.heads = 0; }, SpecField::kHeads, "who: heads (0) must be at least 1"},
      {[](AttentionSpec& s) { s.kv_heads = 3; }, SpecField::kKvHeads,
       "who: kv_heads (3) must divide heads (4) (or be 0 for as many as heads)"},
      {[](AttentionSpec& s) { s.kv_heads = -1; }, SpecField::kKvHeads, "kv_heads (-1) must divide heads (4)"},
      {[](AttentionSpec& s) { s.kv_heads = 8; }, SpecField::kKvHeads, "kv_heads (8) must divide heads (4)"},
      {[](AttentionSpec& s) { s.head_dim = 0; }, SpecField::kHeadDim, "who: head_dim (0) must be at least 1"},
      {[](AttentionSpec& s) { s.head_dim = 7; }, SpecField::kRope, "who: rope (half) needs an even head_dim, got 7"},
      {[](AttentionSpec& s) { s.rope_base = 0.0; }, SpecField::kRopeBase,
       "who: rope_base (0) must be a positive finite number"},
      {[](AttentionSpec& s) { s.rope_base = INFINITY; }, SpecField::kRopeBase, "rope_base (inf)"},
      {[](AttentionSpec& s) { s.window = -1; }, SpecField::kWindow, "who: window (-1) must be positive (or 0 for none)"},
      {[](AttentionSpec& s) { s.alibi_slopes = {0.5f}; }, SpecField::kAlibiSlopes,
       "who: alibi_slopes has 1 slopes for heads (4)"},
      {[nan](AttentionSpec& s) { s.alibi_slopes = {0.5f, 0.25f, nan, 0.1f}; }, SpecField::kAlibiSlopes,
       "who: alibi_slopes[2] (nan) must be finite"},
      {[](AttentionSpec& s) { s.softcap = -1.0; }, SpecField::kSoftcap,
       "who: softcap (-1) must be positive and at most 1e+30 (or 0 for none)"},
      {[](AttentionSpec& s) { s.softcap = 3.4e38; }, SpecField::kSoftcap, "softcap (3.4e+38)"},
      {[](AttentionSpec& s) { s.softcap = NAN; }, SpecField::kSoftcap, "softcap (nan)"},
      {[](AttentionSpec& s) { s.dropout = 1.0; }, SpecField::kDropout, "who: dropout (1) must be in [0, 1)"},
      {[](AttentionSpec& s) { s.dropout = -0.1; }, SpecField::kDropout, "dropout (-0.1) must be in [0, 1)"},
  };
  for (const auto& c : cases) {
    const Refusal r = refusal(c.edit);
    EXPECT_EQ(r.field, c.field) << c.message;
    EXPECT_NE(r.message.find(c.message), std::string::npos) << r.message;
  }
}

TEST(AttentionSpec, ACallerNamesTheFieldsItsOwnWay) {
  const SpecNamer flags = [](SpecField f) -> std::string {
    return f == SpecField::kKvHeads ? "--num-kv-heads" : f == SpecField::kHeads ? "--num-heads" : spec_field_name(f);
  };
  const Refusal r = refusal([](AttentionSpec& s) { s.kv_heads = 3; }, flags);
  EXPECT_EQ(r.message, "who: --num-kv-heads (3) must divide --num-heads (4) (or be 0 for as many as --num-heads)");
  // An empty who: the message alone.
  AttentionSpec s = good();
  s.window = -2;
  try {
    validate_attention_spec(s, "", flags);
    ADD_FAILURE() << "no error";
  } catch (const AttentionSpecError& e) {
    EXPECT_EQ(std::string(e.what()), "window (-2) must be positive (or 0 for none)");
  }
}

TEST(AttentionSpec, KernelOptionsCarryTheSpec) {
  AttentionSpec s = good();
  s.causal = false;
  const std::vector<float> slopes = spec_alibi_slopes(s);
  ASSERT_EQ(slopes.size(), 4u);
  EXPECT_FLOAT_EQ(slopes[0], 0.25f);  // 2^(-8/4): the paper's first slope for 4 heads
  const AttentionOptions o = kernel_options(s, slopes);
  EXPECT_EQ(o.scale, static_cast<float>(1.0 / std::sqrt(8.0)));
  EXPECT_EQ(o.mask.kind, MaskKind::kNone);
  EXPECT_EQ(o.window, 3);
  EXPECT_EQ(o.softcap, 30.0f);
  EXPECT_EQ(o.dropout_p, 0.1f);
  EXPECT_EQ(o.alibi_slopes, slopes.data());
  s.causal = true;
  s.alibi = false;
  EXPECT_TRUE(spec_alibi_slopes(s).empty());
  EXPECT_EQ(kernel_options(s, {}).mask.kind, MaskKind::kCausal);
  s.alibi_slopes = {1, 2, 3, 4};  // given slopes win
  EXPECT_EQ(spec_alibi_slopes(s), (std::vector<float>{1, 2, 3, 4}));
}

}  // namespace
}  // namespace qkv::kernels

// qkv forward's attention-variant flags: bad values exit 2 naming the flag, the value and what was
// expected; a grouped-query run saves W_key and W_value with num_kv_heads * head_dim rows.
#include <gtest/gtest.h>

#include <string>

#include "cli_runner.h"
#include "qkv/core/random_tensor.h"
#include "qkv/io/safetensors.h"

namespace qkv {
namespace {

class CliVariants : public CliTest {};

const std::string kBase = "forward --module mha --d-in 4 --d-out 8 --context-length 6 --num-heads 4 --seed 3 ";

TEST_F(CliVariants, BadValuesExitWith2NamingTheFlag) {
  struct Case {
    std::string args, message;
  };
  const Case cases[] = {
      {"--num-kv-heads 3", "--num-kv-heads (3) must divide --num-heads (4)"},
      {"--num-kv-heads 0", "--num-kv-heads"},
      {"--window 0", "--window: '0' is not an integer in [1, "},
      {"--window -2", "--window"},
      {"--softcap 0", "--softcap: 0 must be positive"},
      {"--softcap -1.5", "--softcap: -1.5 must be positive"},
      {"--rope neox", "--rope: 'neox' is not a RoPE layout; expected half or interleaved"},
      {"--rope-base 500", "--rope-base: needs --rope half or --rope interleaved"},
      {"--rope-base -1 --rope half", "--rope-base"},
  };
  for (const Case& c : cases) {
    const Result r = run(kBase + c.args + " --input x.safetensors");
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
  }
  // RoPE with an odd head dim (d_out 12 / 4 heads = 3)
  const Result odd = run("forward --module mha --d-in 4 --d-out 12 --context-length 6 --num-heads 4 --seed 3 "
                         "--rope interleaved --input x.safetensors");
  EXPECT_EQ(odd.status, 2) << odd.err;
  EXPECT_NE(odd.err.find("--rope (interleaved) needs an even head dim, got 3"),
            std::string::npos)
      << odd.err;
  // the variants are MultiHeadAttention's only
  const Result other = run("forward --module causal-attention --d-in 4 --d-out 8 --context-length 6 --seed 3 "
                           "--alibi --input x.safetensors");
  EXPECT_EQ(other.status, 2) << other.err;
  EXPECT_NE(other.err.find("--alibi: only --module mha, gated-mha take the attention variants"), std::string::npos) << other.err;
}

TEST_F(CliVariants, GroupedQueryRunWritesGroupedWeightsAndGradients) {
  Generator gen(1);
  write("x.safetensors", serialize_safetensors({{"input", randn({2, 5, 4}, gen)}}));
  write("g.safetensors", serialize_safetensors({{"grad_output", randn({2, 5, 8}, gen)}}));
  for (const char* attention : {"textbook", "fused"}) {
    const Result r = run(kBase + "--num-kv-heads 2 --rope half --attention " + attention +
                         " --input x.safetensors --output y.safetensors --save-weights w.safetensors "
                         "--grad-output g.safetensors --grads-out d.safetensors");
    ASSERT_EQ(r.status, 0) << attention << "\n" << r.err;
    const TensorFile w = load_safetensors(path("w.safetensors"));
    EXPECT_EQ(w.get("W_key.weight").shape(), Shape({4, 4}));  // G D = 2 * 2 rows
    EXPECT_EQ(w.get("W_value.weight").shape(), Shape({4, 4}));
    EXPECT_EQ(w.get("W_query.weight").shape(), Shape({8, 4}));
    const TensorFile d = load_safetensors(path("d.safetensors"));
    EXPECT_EQ(d.get("W_key.weight").shape(), Shape({4, 4}));
    // and the saved weights load back with the same flags
    const Result again = run(kBase.substr(0, kBase.find("--seed")) + "--num-kv-heads 2 --rope half --weights "
                             "w.safetensors --input x.safetensors --output y2.safetensors --attention " + attention);
    ASSERT_EQ(again.status, 0) << again.err;
    EXPECT_EQ(slurp(path("y.safetensors")), slurp(path("y2.safetensors")));
  }
}

}  // namespace
}  // namespace qkv

// qkv/core/torch_math.h - element functions with PyTorch's float32 results, for values PyTorch's
// constructors compute (so that qkv's seeded weights equal the class's bit for bit).
//
// torch.log on a float32 CPU tensor is SLEEF's logf_u10 (1-ulp accurate, not correctly rounded) on
// CPUs with AVX2 and FMA, std::log otherwise (PyTorch's DEFAULT capability); torch_log is the same
// on the CPU at hand (checked against torch.log on a million values).
#pragma once

#include <cstdint>

namespace qkv {

void torch_log(const float* x, float* y, int64_t n);  // y may be x

// torch.exp on a float32 CPU tensor: SLEEF's expf_u10 on CPUs with AVX2 and FMA (as torch.log),
// std::exp otherwise. Checked against torch.exp on 2 million values in [-40, 0] (2026-12-06):
// every one equal, where glibc's expf differs from it in 9.5% of them.
void torch_exp(const float* x, float* y, int64_t n);  // y may be x

// torch.softmax over one float32 row of n >= 1 values, in place, as PyTorch's CPU kernel computes
// it (Debian's PyTorch 1.13 at its AVX2 capability), to the bit:
//   m = the largest value; e_i = exp(x_i - m) (torch_exp);
//   s = the e_i summed in float in PyTorch's vectorised order: for n >= 8, eight running sums, sum
//       l taking e_l, e_{8+l}, e_{16+l}, ... over the whole groups of eight, then the last partial
//       group's values added into sums 0, 1, ...; the eight then as ((s0 + s4) + (s2 + s6)) +
//       ((s1 + s5) + (s3 + s7)). For n < 8: ((e_0 + e_1) + e_2) + ... in order.
//   x_i = e_i * (1 / s).
// (tests/pytorch/test_torch_softmax.py checks this rule against torch.softmax.) Where PyTorch's exp
// is std::exp (no AVX2) the order is kept, not claimed to be PyTorch's. A row that holds NaN, or
// whose largest value is +inf or -inf, comes out NaN, as torch.softmax's.
void torch_softmax(float* x, int64_t n);

}  // namespace qkv

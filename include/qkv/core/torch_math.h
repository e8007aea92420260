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

}  // namespace qkv

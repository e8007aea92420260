// FlushSubnormals: while one lives, x86 cores flush subnormal results to zero and read subnormal
// inputs as zero (MXCSR FTZ and DAZ); the previous mode is restored when it dies. Every subnormal
// an Intel core produces or consumes costs a microcode assist of ~100 cycles; attention weights
// below 2^-126 are immaterial next to a row's largest weight (1), and Exp2 already returns 0
// there. The fused and the decoding kernels hold one per task. Not installed.
#pragma once

#include "hwy/base.h"
#if HWY_ARCH_X86
#include <xmmintrin.h>  // _mm_getcsr, _mm_setcsr
#endif

namespace qkv::kernels {

class FlushSubnormals {
 public:
#if HWY_ARCH_X86
  FlushSubnormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040u); }
  ~FlushSubnormals() { _mm_setcsr(saved_); }
  FlushSubnormals(const FlushSubnormals&) = delete;
  FlushSubnormals& operator=(const FlushSubnormals&) = delete;

 private:
  unsigned saved_;
#endif
};

}  // namespace qkv::kernels

// FlushSubnormals: while one lives, the core flushes subnormal results to zero and reads subnormal
// inputs as zero (x86: MXCSR FTZ and DAZ; aarch64: FPCR.FZ), so that both compute the same numbers;
// the previous mode is restored when it dies. Every subnormal
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
#elif HWY_ARCH_ARM_A64
  // FPCR.FZ (bit 24): subnormal inputs and results are zero, as MXCSR's FTZ and DAZ together.
  FlushSubnormals() {
    asm volatile("mrs %0, fpcr" : "=r"(saved_));
    const uint64_t flush = saved_ | (uint64_t{1} << 24);
    asm volatile("msr fpcr, %0" : : "r"(flush));
  }
  ~FlushSubnormals() { asm volatile("msr fpcr, %0" : : "r"(saved_)); }
  FlushSubnormals(const FlushSubnormals&) = delete;
  FlushSubnormals& operator=(const FlushSubnormals&) = delete;

 private:
  uint64_t saved_;
#endif
};

}  // namespace qkv::kernels

// qkv/core/avx512bf16_region.h - a region of a Highway AVX-512 target's code that may also use
// AVX512_BF16's instructions (vdpbf16ps, vcvtne2ps2bf16), under GCC and clang alike.
//
//   HWY_BEFORE_NAMESPACE(); namespace ... {      Highway's target (HWY_TARGET_STR) for the file
//   #if HWY_TARGET == HWY_AVX3
//   QKV_AVX512BF16_BEGIN                          ... and avx512bf16: functions with internal
//   ...                                           linkage, called after bf16_dot_allowed() only
//   QKV_AVX512BF16_END                            back to Highway's target
//   #endif
//
// GCC stacks a `#pragma GCC target` on Highway's; clang keeps the first target attribute pushed,
// so there Highway's is popped and one naming both pushed in its place, then the other way back.
#pragma once

#if defined(__clang__)
#define QKV_AVX512BF16_BEGIN HWY_POP_ATTRIBUTES HWY_PUSH_ATTRIBUTES(HWY_TARGET_STR ",avx512bf16")
#define QKV_AVX512BF16_END HWY_POP_ATTRIBUTES HWY_PUSH_ATTRIBUTES(HWY_TARGET_STR)
#else
#define QKV_AVX512BF16_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"avx512bf16\")")
#define QKV_AVX512BF16_END _Pragma("GCC pop_options")
#endif

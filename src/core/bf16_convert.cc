// floats_to_bf16 (qkv/core/bf16.h) at the CPU's vector width: compiled once per SIMD target by
// Highway and dispatched at run time. The library's baseline flags give the compiler 4-lane SSE2
// only, and bf16 mode converts every activation it hands to a product (x, q, k, v as the heads
// are split, ctx): at GPT-2's size that was 10% of the bf16 forward.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/bf16_convert.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"
#include "qkv/core/bf16.h"

HWY_BEFORE_NAMESPACE();
namespace qkv::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// float_to_bf16 lane by lane: round to nearest even on the bits, a NaN made quiet.
void FloatsToBF16Impl(const float* HWY_RESTRICT src, uint16_t* HWY_RESTRICT dst, size_t n) {
  const hn::ScalableTag<uint32_t> du;
  const hn::RebindToSigned<decltype(du)> di;
  const hn::RebindToFloat<decltype(du)> df;
  const hn::Rebind<uint16_t, decltype(du)> d16;
  const size_t N = hn::Lanes(du);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto u = hn::BitCast(du, hn::LoadU(df, src + i));
    const auto high = hn::ShiftRight<16>(u);
    const auto rounded = hn::ShiftRight<16>(hn::Add(u, hn::Add(hn::Set(du, 0x7fffu), hn::And(high, hn::Set(du, 1u)))));
    // |x| above infinity's bits: a NaN (signed compare: both sides are below 2^31)
    const auto nan = hn::RebindMask(du, hn::Gt(hn::BitCast(di, hn::And(u, hn::Set(du, 0x7fffffffu))),
                                               hn::Set(di, 0x7f800000)));
    hn::StoreU(hn::TruncateTo(d16, hn::IfThenElse(nan, hn::Or(high, hn::Set(du, 0x40u)), rounded)), d16, dst + i);
  }
  for (; i < n; ++i) dst[i] = float_to_bf16(src[i]);
}

}  // namespace qkv::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qkv {

HWY_EXPORT(FloatsToBF16Impl);

void floats_to_bf16(const float* src, uint16_t* dst, size_t n) { HWY_DYNAMIC_DISPATCH(FloatsToBF16Impl)(src, dst, n); }

}  // namespace qkv
#endif  // HWY_ONCE

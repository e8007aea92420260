// ggml's tensor types and their dequantization. See include/qkv/core/quant_blocks.h.
#include "qkv/core/quant_blocks.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cstring>

#include "qkv/core/bf16.h"
#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"

namespace qkv {
namespace {

// ggml's types by number (ggml.h's enum ggml_type; the numbers GGUF files store). Numbers ggml
// retired (4, 5, 31-33, 36-38) are absent.
constexpr std::array<QuantType, 32> kTypes = {{
    {0, "F32", 1, 4, true},        {1, "F16", 1, 2, true},        {2, "Q4_0", 32, 18, true},
    {3, "Q4_1", 32, 20, true},     {6, "Q5_0", 32, 22, true},     {7, "Q5_1", 32, 24, true},
    {8, "Q8_0", 32, 34, true},     {9, "Q8_1", 32, 36, false},    {10, "Q2_K", 256, 84, false},
    {11, "Q3_K", 256, 110, false}, {12, "Q4_K", 256, 144, true},  {13, "Q5_K", 256, 176, true},
    {14, "Q6_K", 256, 210, true},  {15, "Q8_K", 256, 292, false}, {16, "IQ2_XXS", 256, 66, false},
    {17, "IQ2_XS", 256, 74, false}, {18, "IQ3_XXS", 256, 98, false}, {19, "IQ1_S", 256, 50, false},
    {20, "IQ4_NL", 32, 18, false}, {21, "IQ3_S", 256, 110, false}, {22, "IQ2_S", 256, 82, false},
    {23, "IQ4_XS", 256, 136, false}, {24, "I8", 1, 1, false},     {25, "I16", 1, 2, false},
    {26, "I32", 1, 4, false},      {27, "I64", 1, 8, false},      {28, "F64", 1, 8, false},
    {29, "IQ1_M", 256, 56, false}, {30, "BF16", 1, 2, true},      {34, "TQ1_0", 256, 54, false},
    {35, "TQ2_0", 256, 66, false}, {39, "MXFP4", 32, 17, false},
}};

uint16_t u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}
float half(const uint8_t* p) { return f16_to_float(u16(p)); }

// One block of 32: f16 d [, f16 m] [, u32 qh], u8 qs[16]; bits 5 when qh, an offset when no m.
template <bool kMin, bool kFifthBit>
void small_block(const uint8_t* b, float* y) {
  const float d = half(b);
  const float m = kMin ? half(b + 2) : 0.0f;
  const uint8_t* p = b + (kMin ? 4 : 2);
  const uint32_t qh = kFifthBit ? u32(p) : 0;
  const uint8_t* qs = p + (kFifthBit ? 4 : 0);
  const int offset = kMin ? 0 : kFifthBit ? 16 : 8;
  for (int j = 0; j < 16; ++j) {
    const int high0 = kFifthBit ? static_cast<int>((qh >> j) & 1u) << 4 : 0;
    const int high1 = kFifthBit ? static_cast<int>((qh >> (j + 16)) & 1u) << 4 : 0;
    const int q0 = ((qs[j] & 0xF) | high0) - offset, q1 = ((qs[j] >> 4) | high1) - offset;
    if constexpr (kMin) {
      y[j] = static_cast<float>(q0) * d + m;
      y[j + 16] = static_cast<float>(q1) * d + m;
    } else {
      y[j] = static_cast<float>(q0) * d;
      y[j + 16] = static_cast<float>(q1) * d;
    }
  }
}

// One Q4_K (kFifthBit false) or Q5_K super-block of 256.
template <bool kFifthBit>
void k_block(const uint8_t* b, float* y) {
  const float d = half(b), dmin = half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + (kFifthBit ? 48 : 16);
  for (int pair = 0; pair < 4; ++pair) {
    int s0 = 0, m0 = 0, s1 = 0, m1 = 0;
    k_scale_min(2 * pair, scales, s0, m0);
    k_scale_min(2 * pair + 1, scales, s1, m1);
    const float d0 = d * static_cast<float>(s0), min0 = dmin * static_cast<float>(m0);
    const float d1 = d * static_cast<float>(s1), min1 = dmin * static_cast<float>(m1);
    const uint8_t* q = qs + 32 * pair;
    for (int l = 0; l < 32; ++l) {
      const int high0 = kFifthBit ? ((qh[l] >> (2 * pair)) & 1) << 4 : 0;
      const int high1 = kFifthBit ? ((qh[l] >> (2 * pair + 1)) & 1) << 4 : 0;
      y[64 * pair + l] = d0 * static_cast<float>((q[l] & 0xF) + high0) - min0;
      y[64 * pair + 32 + l] = d1 * static_cast<float>((q[l] >> 4) + high1) - min1;
    }
  }
}

void q6_k_block(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = half(b + 208);
  for (int half128 = 0; half128 < 2; ++half128) {
    for (int l = 0; l < 32; ++l) {
      const int s = l / 16;
      const int q0 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32;
      const int q1 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[s]) * static_cast<float>(q0);
      y[l + 32] = d * static_cast<float>(sc[s + 2]) * static_cast<float>(q1);
      y[l + 64] = d * static_cast<float>(sc[s + 4]) * static_cast<float>(q2);
      y[l + 96] = d * static_cast<float>(sc[s + 6]) * static_cast<float>(q3);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

}  // namespace

const QuantType& quant_type(uint32_t id) {
  for (const QuantType& t : kTypes)
    if (t.id == id) return t;
  fail("tensor type ", id, " is not one of ggml's types; qkv reads ", readable_quant_types());
}

const QuantType& quant_type_named(const std::string& name) {
  std::string upper = name;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const QuantType& t : kTypes)
    if (t.readable && upper == t.name) return t;
  fail("unknown tensor type ", excerpt(name), "; qkv reads ", readable_quant_types());
}

std::string readable_quant_types() {
  std::string s;
  for (const QuantType& t : kTypes)
    if (t.readable) s += (s.empty() ? "" : ", ") + std::string(t.name);
  return s;
}

int64_t quant_bytes(const QuantType& t, int64_t n, const std::string& what) {
  QKV_CHECK(n >= 0 && n % t.block == 0, what, ": ", n, " values of ", t.name, " are not a whole number of its blocks of ",
            t.block);
  return checked_mul(n / t.block, t.block_bytes, what.c_str());
}

void dequantize(const QuantType& t, const uint8_t* src, int64_t n, float* out) {
  QKV_CHECK(t.readable, "dequantize: qkv does not read ", t.name, " tensors; it reads ", readable_quant_types());
  QKV_CHECK(n >= 0 && n % t.block == 0, "dequantize: ", n, " values of ", t.name, " are not whole blocks of ", t.block);
  const int64_t blocks = n / t.block;
  for (int64_t i = 0; i < blocks; ++i) {
    const uint8_t* b = src + i * t.block_bytes;
    float* y = out + i * t.block;
    switch (t.id) {
      case 0: y[0] = std::bit_cast<float>(u32(b)); break;
      case 1: y[0] = half(b); break;
      case 30: y[0] = bf16_to_float(u16(b)); break;
      case 2: small_block<false, false>(b, y); break;
      case 3: small_block<true, false>(b, y); break;
      case 6: small_block<false, true>(b, y); break;
      case 7: small_block<true, true>(b, y); break;
      case 8: {
        const float d = half(b);
        for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
        break;
      }
      case 12: k_block<false>(b, y); break;
      case 13: k_block<true>(b, y); break;
      case 14: q6_k_block(b, y); break;
      default: fail("dequantize: internal error: no reader for ", t.name);
    }
  }
}

}  // namespace qkv

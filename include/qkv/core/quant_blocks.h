// qkv/core/quant_blocks.h - the tensor types of llama.cpp's GGUF files (ggml's types) and their
// dequantization, written from the formats' published block layouts (scalar: the reference every
// fast kernel is tested against).
//
//   const QuantType& t = quant_type(12);                 // Q4_K: 256 values in 144 bytes
//   dequantize(t, bytes, n, out);                        // n values (a multiple of t.block) to floats
//
// Every block starts where the last ended; multi-byte fields are little-endian; "f16" is an IEEE
// half. With q the stored integers:
//   F32, F16, BF16   one value per 4, 2, 2 bytes
//   Q8_0   32 values: f16 d, int8 q[32]                          x = d q
//   Q4_0   32 values: f16 d, u8 qs[16]                           x[j] = d (lo(qs[j]) - 8), x[j+16] = d (hi(qs[j]) - 8)
//   Q4_1   32 values: f16 d, f16 m, u8 qs[16]                    x[j] = d lo(qs[j]) + m, x[j+16] = d hi(qs[j]) + m
//   Q5_0   32 values: f16 d, u32 qh, u8 qs[16]                   the fifth bit of x[j] is bit j of qh,
//                                                                of x[j+16] bit j+16; x = d (q - 16)
//   Q5_1   32 values: f16 d, f16 m, u32 qh, u8 qs[16]            as Q5_0, x = d q + m
//   Q4_K   256 values: f16 d, f16 dmin, u8 scales[12], u8 qs[128]: 8 sub-blocks of 32 with 6-bit
//          scale s and min m (scales: s0..3 and m0..3 in the low 6 bits of bytes 0..3 and 4..7;
//          s4..7 = lo(bytes 8..11) | (top 2 bits of bytes 0..3) << 4, m4..7 = hi(bytes 8..11) |
//          (top 2 bits of bytes 4..7) << 4); each 64 values share 32 bytes of qs, the low nibbles
//          the first 32, the high nibbles the next: x = d s q - dmin m
//   Q5_K   256 values: f16 d, f16 dmin, u8 scales[12], u8 qh[32], u8 qs[128]: as Q4_K, with the
//          fifth bit of value l of the pair of sub-blocks p (0..3) in bits 2p and 2p+1 of qh[l]
//   Q6_K   256 values: u8 ql[128], u8 qh[64], int8 scales[16], f16 d: per 128 values, 64 bytes of
//          ql (low nibbles, then high nibbles, of two halves) and 32 of qh (2 bits each for 4
//          quarters); q in 0..63, x = d scale (q - 32), one scale per 16 values
// Other ggml types are known by name and refused ("qkv reads ...").
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "qkv/core/weight_memory.h"

namespace qkv {

struct QuantType {
  uint32_t id;          // ggml's type number, as GGUF stores it
  const char* name;     // "Q4_K"
  int64_t block;        // values per block
  int64_t block_bytes;  // bytes per block
  bool readable;        // qkv dequantizes it
};

// The type with ggml's number `id`; qkv::Error naming the number for one ggml does not define.
const QuantType& quant_type(uint32_t id);
// The type named `name` ("q8_0" or "Q8_0"); qkv::Error listing the readable ones otherwise.
const QuantType& quant_type_named(const std::string& name);
// "F32, F16, BF16, Q8_0, ..." - the types dequantize() reads.
std::string readable_quant_types();

// Bytes of n values of type t: n must be a whole number of blocks (qkv::Error otherwise, naming
// `what`); overflow is an error.
int64_t quant_bytes(const QuantType& t, int64_t n, const std::string& what);

// Sub-block j's (0..7) 6-bit scale and min of a Q4_K / Q5_K super-block's 12 scale bytes (the
// layout above): the decoder's and the integer products' one reading of them.
inline void k_scale_min(int j, const uint8_t* q, int& scale, int& min) {
  if (j < 4) {
    scale = q[j] & 63;
    min = q[j + 4] & 63;
  } else {
    scale = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// n values of type t from `src` (quant_bytes(t, n) bytes) into out[0..n). The scalar reference.
void dequantize(const QuantType& t, const uint8_t* src, int64_t n, float* out);

// A matrix in a ggml type, as a product reads it: N rows of K values, each row quant_bytes(type, K)
// bytes of blocks, one after another (a GGUF tensor's layout), or with `panels` the same bytes
// reordered into panels of 16 rows (qkv/core/quant_panels.h). Null blocks: none.
struct QuantView {
  const QuantType* type = nullptr;
  const uint8_t* blocks = nullptr;
  bool panels = false;
  explicit operator bool() const { return blocks != nullptr; }
};
// The same, owning its blocks.
struct QuantMatrix {
  const QuantType* type = nullptr;
  WeightVector<uint8_t> blocks;  // written whole as it is loaded or quantized
  bool panels = false;
  QuantView view() const { return {type, blocks.empty() ? nullptr : blocks.data(), panels}; }
  bool empty() const { return blocks.empty(); }
};

// The types quantize() writes: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K.
const std::vector<std::string>& writable_quant_types();
// n finite values (whole blocks) into quant_bytes(t, n) bytes at `out` (src/core/quant_encode.cc):
// each block's scale from its largest magnitude (Q4_K: from its range, with a min), each value the
// nearest integer of it; F16 and BF16 rounded to nearest even. A value that is not finite, or a
// type it does not write, is a qkv::Error (naming `what`, the values' tensor, and the value's index).
void quantize(const QuantType& t, const float* x, int64_t n, uint8_t* out, const std::string& what = "the tensor");
// The type a load's quantize option names ("q8_0", ..., case as given), checked to be one the
// integer products read (Q8_0, Q4_0, Q4_K, Q6_K): qkv::Error naming it otherwise.
const QuantType& product_quant_type(const std::string& name);
// Those types' names as the quantize option takes them, most bits first: q8_0, q6_k, q4_k, q4_0.
const std::vector<std::string>& product_quant_names();
// The type rows of `cols` values are written in when `want` is asked: `want`, or where the rows are
// not whole blocks of it the nearest that fits - Q8_0, then F16 - as llama.cpp's quantizer falls back.
const QuantType& fitting_quant_type(const QuantType& want, int64_t cols);
// A (rows, cols) matrix in type t (cols whole blocks of it), each row's floats given by
// row(r, out[cols]) and quantized in turn: never more than one row in floats.
// `what` names the matrix in the error a value that is not finite gets ("tensor 'x.weight'"), with
// the value's row and column.
QuantMatrix quantize_matrix(const QuantType& t, int64_t rows, int64_t cols,
                            const std::function<void(int64_t, float*)>& row, const std::string& what = "the matrix");

}  // namespace qkv

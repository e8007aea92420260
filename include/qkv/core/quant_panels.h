// qkv/core/quant_panels.h - Q8_0, Q4_0, Q4_K and Q6_K matrices stored for the integer products: rows in
// panels of 16, so that decoding reads a matrix as one stream and one vector instruction
// multiplies 16 rows at once (llama.cpp's "repack" of the same formats, in a layout of qkv's own).
//
//   QuantMatrix m = ...;            // N rows of K values, a GGUF tensor's layout
//   to_panels(m, K);                // in place: the same bytes, reordered (m.panels set)
//   quant_matvec(m.view(), N, K, x, M, y);  // as before; a row of y has the same bits
//
// The layout (bs = the block's bytes: Q4_0 18, Q8_0 34, Q4_K 144, Q6_K 210; h = its header's bytes,
// its scales: Q4_0 and Q8_0 2, Q4_K 16, Q6_K 18; nb = K / block values, blocks per row): rows
// [0, 16 P), P = N / 16, in panels; panel p is the 16 rows' bytes (16 nb bs, where the rows were),
// block after block; its block b, 16 bs bytes:
//   the header's columns, each the 16 rows' values side by side (row j at w j in a column of w-byte
//   values): Q4_0 and Q8_0 f16 d[16]; Q4_K f16 d[16], f16 dmin[16], then the 12 bytes of packed
//   scales and mins (k_scale_min's) as three 4-byte columns; Q6_K f16 d[16] (a row's bytes 208,
//   209), then its 16 int8 scales (bytes 192 .. 207) as four 4-byte columns
//   u8  q[S][16][4]                  at 16 h: step s (S = (bs - h) / 4: Q4_0 4, Q8_0 8, Q4_K 32,
//                                    Q6_K 48): row j's quant bytes 4s .. 4s + 3 (counted from the
//                                    first after the header; Q6_K's from byte 0: ql[128], then
//                                    qh[64]) at 16 h + 64 s + 4 j (Q4_0: the byte holding values
//                                    4s + i (low nibble) and 16 + 4s + i (high); Q8_0: values 4s +
//                                    i; Q4_K: qs bytes 4s + i, the low nibble value 64 (s / 8) + 4
//                                    (s % 8) + i, the high one 32 more)
// and rows [16 P, N) as they were (a GGUF tensor's rows). Nothing is converted: every block keeps
// its bits, only their places change, so the products' results are those of the rows' layout.
#pragma once

#include <cstdint>

#include "qkv/core/quant_blocks.h"

namespace qkv {

constexpr int64_t kQuantPanelRows = 16;

// True for the types stored in panels (Q8_0, Q4_0, Q4_K, Q6_K: those the products read); the others
// keep the rows' layout.
bool panel_type(const QuantType& t);

// True where the products read panels as stored (the packed integer kernels: x86 with AVX2 and up,
// under $QKV_SIMD's cap). Elsewhere (ARM, older x86) a product reads a matrix in panels back row
// by row, slower than the rows' layout: a model keeps its rows there.
bool panels_pay();

// m (N rows of K values in m.type, the rows' layout) reordered into panels in place, no other
// memory than one panel's; a type without panels, or m already in panels, is left as it is.
// K must be whole blocks of the type and m.blocks N whole rows (qkv::Error naming them).
void to_panels(QuantMatrix& m, int64_t K);

// Row n (< N) of W (N rows of K values) in the rows' layout (quant_bytes(type, K) bytes into
// `row`), whichever layout W is in: the embedding's lookup in a tied head, and the products'
// scalar fallback.
void quant_row(const QuantView& W, int64_t N, int64_t K, int64_t n, uint8_t* row);

}  // namespace qkv

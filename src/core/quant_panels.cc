// Q8_0, Q4_0 and Q4_K rows in panels of 16. See include/qkv/core/quant_panels.h.
#include "qkv/core/quant_panels.h"

#include <array>
#include <cstring>
#include <vector>

#include "core/quant_gemm.h"
#include "qkv/core/error.h"

namespace qkv {
namespace {

// Where row j's block b lives in a panel (relative to the panel's start). A block's header (the
// bytes before its quants) is a few columns (Q4_0, Q8_0: the f16 d; Q4_K: d, dmin and the three
// words of packed scales and mins), each stored as the 16 rows' values side by side, then its
// quant bytes in steps of 4 of each row.
struct PanelBlock {
  int64_t block_bytes;  // bs
  int64_t header;       // h: the header's bytes in a row's block
  std::array<int64_t, 5> widths{};  // the header's columns, in order (summing to h; 0: none)
  explicit PanelBlock(const QuantType& t) : block_bytes(t.block_bytes), header(t.id == 12 ? 16 : 2) {
    if (t.id == 12)
      widths = {2, 2, 4, 4, 4};  // Q4_K: f16 d, f16 dmin, scales and mins (12 bytes, k_scale_min's packing)
    else
      widths = {2};
  }
  int64_t steps() const { return (block_bytes - header) / 4; }
  int64_t at(int64_t b) const { return b * kQuantPanelRows * block_bytes; }
  int64_t step(int64_t b, int64_t s, int64_t j) const { return at(b) + kQuantPanelRows * header + 64 * s + 4 * j; }
  // fn(in the row's block, in the panel, bytes) for each piece of row j's block b: its header's
  // columns, then its steps (offsets from the block's start and the panel's).
  template <typename Fn>
  void for_each_piece(int64_t b, int64_t j, const Fn& fn) const {
    int64_t off = 0;
    for (const int64_t w : widths) {
      if (w == 0) break;
      fn(off, at(b) + kQuantPanelRows * off + w * j, w);
      off += w;
    }
    for (int64_t s = 0; s < steps(); ++s) fn(header + 4 * s, step(b, s, j), int64_t{4});
  }
};

}  // namespace

bool panel_type(const QuantType& t) { return t.id == 2 || t.id == 8 || t.id == 12; }  // Q4_0, Q8_0, Q4_K

bool panels_pay() { return quant_detail::quant_gemm_available(); }

void to_panels(QuantMatrix& m, int64_t K) {
  if (m.type == nullptr || !panel_type(*m.type) || m.panels) return;
  const QuantType& t = *m.type;
  const int64_t row_bytes = quant_bytes(t, K, "to_panels: a row");
  const auto total = static_cast<int64_t>(m.blocks.size());
  QKV_CHECK(total % row_bytes == 0, "to_panels: ", total, " bytes are not whole rows of ", row_bytes, " (", K,
            " values of ", t.name, ")");
  const int64_t N = total / row_bytes, nb = K / t.block;
  const PanelBlock pb(t);
  std::vector<uint8_t> rows(static_cast<size_t>(kQuantPanelRows * row_bytes));  // one panel's rows
  for (int64_t p = 0; p + kQuantPanelRows <= N; p += kQuantPanelRows) {
    uint8_t* panel = m.blocks.data() + p * row_bytes;
    std::memcpy(rows.data(), panel, rows.size());
    for (int64_t j = 0; j < kQuantPanelRows; ++j)
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = rows.data() + j * row_bytes + b * t.block_bytes;
        pb.for_each_piece(b, j, [&](int64_t in_block, int64_t in_panel, int64_t w) {
          std::memcpy(panel + in_panel, blk + in_block, static_cast<size_t>(w));
        });
      }
  }
  m.panels = true;
}

void quant_row(const QuantView& W, int64_t N, int64_t K, int64_t n, uint8_t* row) {
  QKV_CHECK(W.type != nullptr && W.blocks != nullptr && n >= 0 && n < N, "quant_row: row ", n,
            " of a matrix of ", N, " rows (or no matrix)");
  const QuantType& t = *W.type;
  const int64_t row_bytes = quant_bytes(t, K, "quant_row: a row");
  if (!W.panels || n >= N / kQuantPanelRows * kQuantPanelRows) {  // the rows' layout, or a row after the panels
    std::memcpy(row, W.blocks + n * row_bytes, static_cast<size_t>(row_bytes));
    return;
  }
  const int64_t nb = K / t.block, j = n % kQuantPanelRows;
  const uint8_t* panel = W.blocks + (n - j) * row_bytes;
  const PanelBlock pb(t);
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* blk = row + b * t.block_bytes;
    pb.for_each_piece(b, j, [&](int64_t in_block, int64_t in_panel, int64_t w) {
      std::memcpy(blk + in_block, panel + in_panel, static_cast<size_t>(w));
    });
  }
}

}  // namespace qkv

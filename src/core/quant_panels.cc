// Q8_0, Q4_0, Q4_K and Q6_K rows in panels of 16. See include/qkv/core/quant_panels.h.
#include "qkv/core/quant_panels.h"

#include <array>
#include <cstring>
#include <vector>

#include "core/quant_gemm.h"
#include "qkv/core/error.h"

namespace qkv {
namespace {

// Where row j's block b lives in a panel (relative to the panel's start). A block is a few header
// columns (its scales: Q4_0, Q8_0 the f16 d; Q4_K d, dmin and the three words of packed scales and
// mins; Q6_K d and the four words of its 16 int8 scales), each stored as the 16 rows' values side
// by side, then its quant bytes in steps of 4 of each row (Q6_K: ql's 32, then qh's 16).
struct PanelBlock {
  struct Column {
    int64_t at = 0, width = 0;  // in a row's block
  };
  int64_t block_bytes;              // bs
  std::array<Column, 5> columns{};  // in the panel's order (width 0: none)
  int64_t header = 0;               // the columns' bytes in a row's block
  int64_t quants_at = 0;            // where the quant bytes start in a row's block
  explicit PanelBlock(const QuantType& t) : block_bytes(t.block_bytes) {
    if (t.id == 12)  // Q4_K: f16 d, f16 dmin, 12 bytes of scales and mins (k_scale_min's packing), qs[128]
      columns = {{{0, 2}, {2, 2}, {4, 4}, {8, 4}, {12, 4}}};
    else if (t.id == 14)  // Q6_K: ql[128], qh[64], int8 scales[16], f16 d
      columns = {{{208, 2}, {192, 4}, {196, 4}, {200, 4}, {204, 4}}};
    else  // Q4_0, Q8_0: f16 d, quants
      columns = {{{0, 2}}};
    for (const Column& c : columns) header += c.width;
    quants_at = t.id == 14 ? 0 : header;
  }
  int64_t steps() const { return (block_bytes - header) / 4; }
  int64_t at(int64_t b) const { return b * kQuantPanelRows * block_bytes; }
  int64_t step(int64_t b, int64_t s, int64_t j) const { return at(b) + kQuantPanelRows * header + 64 * s + 4 * j; }
  // fn(in the row's block, in the panel, bytes) for each piece of row j's block b: its header's
  // columns, then its steps (offsets from the block's start and the panel's).
  template <typename Fn>
  void for_each_piece(int64_t b, int64_t j, const Fn& fn) const {
    int64_t off = 0;
    for (const Column& c : columns) {
      if (c.width == 0) break;
      fn(c.at, at(b) + kQuantPanelRows * off + c.width * j, c.width);
      off += c.width;
    }
    for (int64_t s = 0; s < steps(); ++s) fn(quants_at + 4 * s, step(b, s, j), int64_t{4});
  }
};

}  // namespace

bool panel_type(const QuantType& t) { return t.id == 2 || t.id == 8 || t.id == 12 || t.id == 14; }  // Q4_0, Q8_0, Q4_K, Q6_K

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

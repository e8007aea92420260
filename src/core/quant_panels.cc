// Q8_0 and Q4_0 rows in panels of 16. See include/qkv/core/quant_panels.h.
#include "qkv/core/quant_panels.h"

#include <cstring>
#include <vector>

#include "core/quant_gemm.h"
#include "qkv/core/error.h"

namespace qkv {
namespace {

constexpr int64_t kScaleBytes = 2 * kQuantPanelRows;  // a panel block's f16 d[16]

// Where row j's block b lives in a panel (relative to the panel's start): its scale's two bytes,
// and its step s's four quant bytes.
struct PanelBlock {
  int64_t block_bytes;  // bs
  int64_t at(int64_t b) const { return b * kQuantPanelRows * block_bytes; }
  int64_t scale(int64_t b, int64_t j) const { return at(b) + 2 * j; }
  int64_t step(int64_t b, int64_t s, int64_t j) const { return at(b) + kScaleBytes + 64 * s + 4 * j; }
};

}  // namespace

bool panel_type(const QuantType& t) { return t.id == 2 || t.id == 8; }  // Q4_0, Q8_0

bool panels_pay() { return quant_detail::quant_gemm_available(); }

void to_panels(QuantMatrix& m, int64_t K) {
  if (m.type == nullptr || !panel_type(*m.type) || m.panels) return;
  const QuantType& t = *m.type;
  const int64_t row_bytes = quant_bytes(t, K, "to_panels: a row");
  const auto total = static_cast<int64_t>(m.blocks.size());
  QKV_CHECK(total % row_bytes == 0, "to_panels: ", total, " bytes are not whole rows of ", row_bytes, " (", K,
            " values of ", t.name, ")");
  const int64_t N = total / row_bytes, nb = K / t.block, steps = (t.block_bytes - 2) / 4;
  const PanelBlock pb{t.block_bytes};
  std::vector<uint8_t> rows(static_cast<size_t>(kQuantPanelRows * row_bytes));  // one panel's rows
  for (int64_t p = 0; p + kQuantPanelRows <= N; p += kQuantPanelRows) {
    uint8_t* panel = m.blocks.data() + p * row_bytes;
    std::memcpy(rows.data(), panel, rows.size());
    for (int64_t j = 0; j < kQuantPanelRows; ++j)
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = rows.data() + j * row_bytes + b * t.block_bytes;
        std::memcpy(panel + pb.scale(b, j), blk, 2);
        for (int64_t s = 0; s < steps; ++s) std::memcpy(panel + pb.step(b, s, j), blk + 2 + 4 * s, 4);
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
  const int64_t nb = K / t.block, steps = (t.block_bytes - 2) / 4, j = n % kQuantPanelRows;
  const uint8_t* panel = W.blocks + (n - j) * row_bytes;
  const PanelBlock pb{t.block_bytes};
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* blk = row + b * t.block_bytes;
    std::memcpy(blk, panel + pb.scale(b, j), 2);
    for (int64_t s = 0; s < steps; ++s) std::memcpy(blk + 2 + 4 * s, panel + pb.step(b, s, j), 4);
  }
}

}  // namespace qkv

// Q8_0, Q4_0, Q4_K and Q6_K matrices stored in panels (qkv/core/quant_panels.h): the products on
// every SIMD target this CPU runs give the bits of the same matrix in the rows' layout, for a
// decoding step's few rows (the stored-panel kernel, every count of rows below a group, each way of
// prefetching) and a prompt's (the panels unpacked per call); N in whole panels, past them and
// below one; every row reads back; the layout is the one the header documents (checked byte by
// byte against it); errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "qkv/core/bf16.h"
#include "qkv/core/error.h"
#include "qkv/core/machine.h"
#include "qkv/core/quant_blocks.h"
#include "qkv/core/quant_matvec.h"
#include "qkv/core/quant_panels.h"
#include "qkv/kernels/simd.h"
#include "test_support.h"

namespace qkv {
namespace {

using testing::HasSubstr;
using testing_support::error_of;
using testing_support::for_each_quant_target;
using testing_support::normal_vector;

// N rows of K values of type t: every quant byte random (the K-quants' packed or int8 scales too),
// each block's f16 scale in [0.01, 0.05] (Q4_K: and its dmin).
QuantMatrix random_matrix(const QuantType& t, int64_t N, int64_t K, std::mt19937& rng) {
  QuantMatrix m{&t, WeightVector<uint8_t>(static_cast<size_t>(N * quant_bytes(t, K, "W")))};
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.01f, 0.05f);
  for (uint8_t& b : m.blocks) b = static_cast<uint8_t>(byte(rng));
  for (size_t b = 0; b < m.blocks.size(); b += static_cast<size_t>(t.block_bytes)) {
    const uint16_t h = float_to_f16(scale(rng));
    const size_t d = t.id == 14 ? 208 : 0;  // Q6_K's d is last
    m.blocks[b + d] = static_cast<uint8_t>(h);
    m.blocks[b + d + 1] = static_cast<uint8_t>(h >> 8);
    if (t.id == 12) {
      const uint16_t dmin = float_to_f16(scale(rng));
      m.blocks[b + 2] = static_cast<uint8_t>(dmin);
      m.blocks[b + 3] = static_cast<uint8_t>(dmin >> 8);
    }
  }
  return m;
}

TEST(QuantPanels, ProductsGiveTheRowsLayoutsBitsOnEveryTarget) {
  ThreadPool pool(2);
  for_each_quant_target([&](const std::string& target) {
    for (const char* name : {"Q8_0", "Q4_0", "Q4_K", "Q6_K"}) {
      const QuantType& t = quant_type_named(name);
      std::mt19937 rng(31);
      for (int64_t K : t.block == 256 ? std::vector<int64_t>{256, 768, 1024} : std::vector<int64_t>{32, 96, 1024})
        for (int64_t N : {5, 16, 37, 160}) {
          const QuantMatrix rows = random_matrix(t, N, K, rng);
          QuantMatrix panels = rows;
          to_panels(panels, K);
          ASSERT_TRUE(panels.panels);
          if (N >= 16) {
            ASSERT_NE(panels.blocks, rows.blocks) << "nothing was reordered";
          }
          // every count of rows the stored kernel takes (1 .. 7), a prompt's (8, 17), one past groups;
          // the stored kernel under each way of asking for the panels ahead (core/machine.h)
          for (int64_t M : {1, 2, 3, 4, 5, 6, 7, 8, 17}) {
            const auto x = normal_vector(static_cast<size_t>(M * K), rng);
            std::vector<float> want(static_cast<size_t>(M * N));
            quant_matvec(rows.view(), N, K, x.data(), M, want.data(), &pool);
            for (const BurstPrefetch ahead : {BurstPrefetch::kL1, BurstPrefetch::kL1Streamed, BurstPrefetch::kL2,
                                              BurstPrefetch::kL1AndL2}) {
              if (M >= 8 && ahead != BurstPrefetch::kL1) continue;
              const BurstPrefetch was = set_burst_prefetch(ahead);
              std::vector<float> got(want.size(), -1.0f);
              quant_matvec(panels.view(), N, K, x.data(), M, got.data(), &pool);
              set_burst_prefetch(was);
              ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
                  << target << " " << name << " K " << K << " N " << N << " M " << M << " "
                  << burst_prefetch_name(ahead);
            }
          }
        }
    }
  });
}

TEST(QuantPanels, EveryRowReadsBackAndTheLayoutIsTheDocumentedOne) {
  std::mt19937 rng(3);
  for (const char* name : {"Q8_0", "Q4_0", "Q4_K", "Q6_K"}) {
    const QuantType& t = quant_type_named(name);
    const bool k4 = t.id == 12, k6 = t.id == 14;
    const int64_t K = 2 * t.block, N = 37, nb = 2, row = quant_bytes(t, K, "row");
    const int64_t header = k4 ? 16 : k6 ? 18 : 2, quants_at = k6 ? 0 : header;  // Q6_K: quants first
    const int64_t steps = (t.block_bytes - header) / 4;
    const QuantMatrix rows = random_matrix(t, N, K, rng);
    QuantMatrix panels = rows;
    to_panels(panels, K);
    EXPECT_EQ(panels.blocks.size(), rows.blocks.size());
    std::vector<uint8_t> back(static_cast<size_t>(row));
    for (int64_t n = 0; n < N; ++n) {
      quant_row(panels.view(), N, K, n, back.data());
      EXPECT_EQ(std::memcmp(back.data(), rows.blocks.data() + n * row, back.size()), 0) << name << " row " << n;
    }
    // The header's layout, byte by byte: panel p, block b: the header's columns of the 16 rows
    // (Q4_0, Q8_0: f16 d[16]; Q4_K: f16 d[16], f16 dmin[16], then its 12 bytes of scales and mins
    // as three words w0[16] w1[16] w2[16]; Q6_K: f16 d[16], then its 16 int8 scales as four words),
    // then step s's 4 bytes of row j (the row's quant bytes 4 s .. 4 s + 3: Q6_K's ql then qh) at
    // 16 h + 64 s + 4 j (h: the header's bytes in a row's block); the rows after the last whole
    // panel as they were.
    using Columns = std::vector<std::pair<int64_t, int64_t>>;  // (offset in a row's block, bytes)
    const Columns columns = k4   ? Columns{{0, 2}, {2, 2}, {4, 4}, {8, 4}, {12, 4}}
                            : k6 ? Columns{{208, 2}, {192, 4}, {196, 4}, {200, 4}, {204, 4}}
                                 : Columns{{0, 2}};
    for (int64_t n = 0; n < N; ++n)
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* src = rows.blocks.data() + n * row + b * t.block_bytes;
        if (n >= 32) {
          EXPECT_EQ(std::memcmp(panels.blocks.data() + n * row + b * t.block_bytes, src, 2), 0);
          continue;
        }
        const uint8_t* blk = panels.blocks.data() + (n / 16) * 16 * row + b * 16 * t.block_bytes;
        const int64_t j = n % 16;
        int64_t column_at = 0;  // in the panel's block, / 16
        for (const auto& [off, w] : columns) {
          EXPECT_EQ(std::memcmp(blk + 16 * column_at + w * j, src + off, static_cast<size_t>(w)), 0)
              << name << " header bytes " << off << ".. of row " << n << " block " << b;
          column_at += w;
        }
        for (int64_t s = 0; s < steps; ++s)
          EXPECT_EQ(std::memcmp(blk + 16 * header + 64 * s + 4 * j, src + quants_at + 4 * s, 4), 0)
              << name << " row " << n << " block " << b << " step " << s;
      }
    // Twice is once; other types keep the rows' layout.
    QuantMatrix again = panels;
    to_panels(again, K);
    EXPECT_EQ(again.blocks, panels.blocks);
    QuantMatrix k_quant = random_matrix(quant_type_named("Q5_K"), 16, 256, rng);
    const WeightVector<uint8_t> before = k_quant.blocks;
    to_panels(k_quant, 256);
    EXPECT_FALSE(k_quant.panels);
    EXPECT_EQ(k_quant.blocks, before);
  }
}

TEST(QuantPanels, BadInputsAreErrorsNamingThem) {
  std::mt19937 rng(1);
  QuantMatrix m = random_matrix(quant_type_named("Q8_0"), 16, 64, rng);
  m.blocks.pop_back();
  EXPECT_THAT(error_of([&] { to_panels(m, 64); }), HasSubstr("1087 bytes are not whole rows of 68 (64 values of Q8_0)"));
  EXPECT_THAT(error_of([&] { to_panels(m, 48); }), HasSubstr("48"));
  QuantMatrix ok = random_matrix(quant_type_named("Q4_0"), 16, 64, rng);
  to_panels(ok, 64);
  std::vector<uint8_t> row(36);
  EXPECT_THAT(error_of([&] { quant_row(ok.view(), 16, 64, 16, row.data()); }), HasSubstr("row 16 of a matrix of 16 rows"));
  std::vector<float> x(256), y(16);
  QuantView k_view{&quant_type_named("Q5_K"), ok.blocks.data(), true};
  EXPECT_THAT(error_of([&] { quant_matvec(k_view, 1, 256, x.data(), 1, y.data()); }),
              HasSubstr("weights of type Q5_K are not supported"));
}

}  // namespace
}  // namespace qkv

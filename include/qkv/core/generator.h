// qkv/core/generator.h - PyTorch 1.13's CPU random generator, reproduced bit for bit.
//
// What it reproduces (Debian python3-torch 1.13.1, CPU build without MKL, which dispatches its
// CPU kernels at the AVX2 level), with the values PyTorch prints:
//
//   torch.manual_seed(123); torch.rand(3, 2)           Generator g(123); g.uniform(out, 6);
//     tensor([[0.2961, 0.5166],
//             [0.2517, 0.6886],
//             [0.0740, 0.8665]])
//   torch.manual_seed(123); torch.randn(3, 2)          g.normal(out, 6)        (serial path)
//     tensor([[-0.1115,  0.1204],
//             [-0.3696, -0.2404],
//             [-1.1969,  0.2093]])
//   torch.manual_seed(123); torch.randn(16)[:4]        g.normal(out, 16)       (vectorised path)
//     tensor([ 0.3374, -0.1778, -0.3035, -0.5880])
//   torch.manual_seed(123); torch.empty(8).bernoulli_(0.5)            g.bernoulli(out, 8, 0.5)
//     tensor([1., 1., 0., 1., 1., 0., 0., 0.])
//   torch.manual_seed(123); nn.Dropout(0.5)(torch.ones(8))   = the mask above / (1 - 0.5)
//     tensor([2., 2., 0., 2., 2., 0., 0., 0.])
//   torch.manual_seed(123); l = nn.Linear(3, 2)        g.linear_init(w, b, 2, 3)
//     weight tensor([[-0.2354,  0.0191, -0.2867],
//                    [ 0.2177, -0.4919,  0.4232]])   bias tensor([-0.4196, -0.4590])
//   torch.manual_seed(123); nn.Embedding(2, 3).weight  g.embedding_init(w, 2, 3)
//     tensor([[-0.1115,  0.1204, -0.3696],
//             [-0.2404, -1.1969,  0.2093]])          (6 < 16 elements: serial normal path)
//
// The engine is MT19937 seeded like at::mt19937: only the low 32 bits of the seed enter the
// state (initial_seed() still returns all 64). random64() = (first draw << 32) | second draw.
//
// The paths, and the precision of every step (tests/core/generator_test.cc checks all of them
// bit-exactly against tests/data/rng_fixtures.json, made by tests/pytorch/make_rng_fixtures.py):
//
//  * uniform (torch.rand, uniform_(from, to)): one 32-bit draw per element; its low 24 bits
//    times 2^-24 give a float x in [0, 1) (exact). from and to are rounded to float, w = to - from
//    in float, and the value is fmaf(x, w, from): a single rounding, because PyTorch's AVX2 kernel
//    is compiled with FMA contraction. For (0, 1) this is just x.
//  * double uniform (used by the serial normal and bernoulli): one random64(); its low 53 bits
//    times 2^-53, exact in double.
//  * normal, n < 16 elements (serial): Box-Muller in double. u1, u2 double uniforms;
//    r = sqrt(-2 log(1 - u2)) (log of 1-u2, not log1p: that is what 1.13 computes);
//    theta = 2 pi u1; the element is r cos(theta) and r sin(theta) is cached in the generator
//    for the next serial draw; the output is float(fma(value, std, mean)) in double. The cache
//    survives rand/bernoulli/vectorised normals and is cleared only by manual_seed.
//  * normal, n >= 16 elements (vectorised normal_fill, AVX2 variant): first n float uniforms
//    are written to the buffer; every whole block of 16 becomes 16 normals with u1 = 1 - d[j],
//    u2 = d[j+8] (j < 8): radius = sqrtf(-2 * log(u1)), theta = float(2 pi) * u2, d[j] =
//    fmaf(radius*cos(theta), std, mean), d[j+8] = fmaf(radius*sin(theta), std, mean), all float.
//    log, sin and cos are NOT libm's: they are the Cephes polynomials of avx_mathfun.h
//    (log256_ps, sincos256_ps) with the multiply-adds GCC fused into FMAs, emulated here per lane.
//    If n % 16 != 0, 16 fresh uniforms then overwrite the last 16 elements and that block is
//    recomputed (so n = 17 draws 33 numbers). The cache is neither read nor written.
//    (Debian's DEFAULT-capability kernel, used with ATEN_CPU_CAPABILITY=default, computes this
//    block with libm float log/cos/sin instead and differs in the last bits; we follow AVX2.)
//  * bernoulli(p) (bernoulli_(p) without MKL, what nn.Dropout(q) draws with p = 1 - q): one
//    double uniform per element; 1 where it is < p, else 0.
//
// C++ note: qkv compiles with -std=c++20, i.e. no FMA contraction, so every fused step above is
// an explicit std::fma / std::fmaf, and float arithmetic is written so nothing is promoted to
// double where PyTorch stays in float (and vice versa).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

namespace qkv {

class Generator {
 public:
  static constexpr uint64_t kDefaultSeed = 67280421310721ULL;  // PyTorch's default
  static constexpr int kStateWords = 624;                       // MT19937 state size

  explicit Generator(uint64_t seed = kDefaultSeed);

  void manual_seed(uint64_t seed);  // like torch.manual_seed: also clears the cached normal sample
  uint64_t initial_seed() const { return seed_; }

  uint32_t random();    // one MT19937 32-bit draw
  void random(uint32_t* out, int64_t n);  // the next n draws: n calls of random(), at once
  uint64_t random64();  // (random() << 32) | random(), as PyTorch combines two draws
  // Skips `draws` 32-bit draws: the state afterwards is the one `draws` calls of random() leave
  // (bernoulli of n elements takes 2n). For a rank that draws only its slice of a batch's mask.
  void discard(uint64_t draws);

  // Fill a contiguous float32 buffer of n elements exactly as PyTorch's CPU kernels fill a
  // contiguous float32 tensor of n elements.
  void uniform(float* out, int64_t n, double from = 0.0, double to = 1.0);  // rand / uniform_
  void normal(float* out, int64_t n, double mean = 0.0, double std = 1.0);  // randn / normal_
  void bernoulli(float* out, int64_t n, double p);                          // bernoulli_(p)

  // nn.Linear(in, out).reset_parameters(): kaiming_uniform_(weight, a=sqrt(5)), i.e.
  // uniform(-b, b) with b = sqrt(3) * sqrt(2 / (1 + a**2)) / sqrt(in) in Python's double
  // arithmetic, then (if bias is not null) bias uniform(-1/sqrt(in), 1/sqrt(in)).
  void linear_init(float* weight /*(out, in)*/, float* bias /*(out) or nullptr*/,
                   int64_t out_features, int64_t in_features);
  void embedding_init(float* weight, int64_t num, int64_t dim);  // nn.Embedding: normal_(0, 1)
  // While off, linear_init and embedding_init draw nothing and write nothing: a model about to load
  // every weight is built without spending the draws (seconds for GPT-2 XL's 1.5 billion) or
  // touching its weights' memory (a large tensor's pages stay unmapped until loaded; a model that
  // keeps its weights in bf16 only never maps its float copies). The values are undefined until
  // loaded. The other draws (dropout) are unaffected. On by default.
  void set_init_draws(bool on) { init_draws_ = on; }
  bool init_draws() const { return init_draws_; }

  // Full state, so a resumed run draws the same numbers. Byte layout (little-endian, 2528 bytes):
  //   [0, 4)      magic "QRNG"
  //   [4, 8)      uint32 layout version, 1
  //   [8, 16)     uint64 seed (initial_seed)
  //   [16, 20)    uint32 index: MT words already used from the current block, 0..624
  //                (624 = the next draw regenerates the block; a fresh seed starts there)
  //   [20, 24)    uint32 flags: bit 0 = a cached serial normal sample is present; others 0
  //   [24, 32)    float64 cached normal sample (its bits; 0 when absent)
  //   [32, 2528)  uint32 MT19937 state words [0, 624)
  static constexpr size_t kStateBytes = 32 + 4 * kStateWords;
  std::vector<uint8_t> get_state() const;
  void set_state(const std::vector<uint8_t>& state);  // validates; throws qkv::Error on bad input

  // Read-only view of the engine, for tests and debugging.
  const std::array<uint32_t, kStateWords>& mt_state() const { return mt_; }
  int mt_index() const { return index_; }
  std::optional<double> cached_normal() const { return cached_normal_; }

 private:
  void twist();
  // out[i] = fmaf((random() & 0xffffff) * 2^-24, width, from) for i in [0, n), a block of draws
  // at a time
  void uniform_fill(float* out, int64_t n, float width, float from);
  double uniform_double01();  // low 53 bits of random64() * 2^-53
  void normal_serial(float* out, int64_t n, double mean, double std);
  void normal_vectorised(float* out, int64_t n, float mean, float std);

  std::array<uint32_t, kStateWords> mt_{};
  int index_ = kStateWords;
  uint64_t seed_ = kDefaultSeed;
  std::optional<double> cached_normal_;
  bool init_draws_ = true;
};

}  // namespace qkv

// The quantized decoding product (qkv/core/quant_matvec.h) against the bf16 one (core/gemv.h, W16)
// on Qwen3-0.6B's weight shapes, M = 1: GB/s of W read (the weight's bytes / the median call time)
// next to the machine's read bandwidth measured in the same run (kernels/memory_bandwidth.h), on
// 1 and 2 threads. Decode streams every weight from memory, so each call reads a different copy of
// W from a ring of copies at least 4 x L3 (and 512 MiB) long: the weight is never in cache. The
// ring is where a loaded model keeps its weights (core/weight_memory.h: 2 MiB pages where granted).
// Q8_0p, Q6_Kp, Q4_Kp and Q4_0p: the same types stored in panels of 16 rows (core/quant_panels.h), as a loaded
// model keeps them.
// With --in-cache, one copy of W, read again and again: for a W that fits the cache (512x1024 fits
// a 1 MiB L2 in every type), the kernel's own ceiling, what its instructions allow without memory.
// With --rows M > 1 (a prompt's M rows: the packed kernel, src/core/quant_gemm.h), the figure is
// GOP/s instead: 2 M N K / the median call time (the integer products' multiply-adds as 2 ops),
// for the quantized types, in rows and in panels, on 1 and 2 threads.
//
//   build/bench/qkv_quant_matvec_bench [--target AVX2|AVX3|AVX3_DL] [--passes 3] [--shapes 2048x1024,...]
//                                      [--rows M] [--in-cache]
//
// Legend: N output rows (W's rows), K values per row.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/gemv.h"
#include "qkv/core/bf16.h"
#include "qkv/core/machine.h"
#include "qkv/core/quant_blocks.h"
#include "qkv/core/quant_matvec.h"
#include "qkv/core/quant_panels.h"
#include "qkv/core/thread_pool.h"
#include "qkv/core/weight_memory.h"
#include "qkv/kernels/memory_bandwidth.h"
#include "qkv/kernels/simd.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Shape {
  int64_t N, K;
};

std::string cpu_line(const char* key) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return line.substr(line.find(':') + 2);
  return "?";
}

// `copies` copies of one random W of `bytes` bytes (type t: random quants, f16 scales of 0.01; bf16:
// random normal-ish values), end to end; with K > 0, each stored in panels (core/quant_panels.h).
using Ring = qkv::WeightVector<uint8_t>;  // where a loaded model keeps its weights (2 MiB pages)

Ring weight_ring(const qkv::QuantType* t, int64_t bytes, int64_t copies, int64_t K = 0) {
  Ring ring(static_cast<size_t>(bytes * copies), uint8_t{0});
  std::mt19937_64 rng(1);
  for (int64_t i = 0; i + 8 <= bytes; i += 8) {
    const uint64_t r = rng();
    std::memcpy(ring.data() + i, &r, 8);
  }
  const uint16_t scale = qkv::float_to_f16(0.01f);
  if (t != nullptr) {
    const std::vector<int> offsets = t->id == 12 ? std::vector<int>{0, 2} : t->id == 14 ? std::vector<int>{208} : std::vector<int>{0};
    for (int64_t b = 0; b < bytes; b += t->block_bytes)
      for (int o : offsets) std::memcpy(ring.data() + b + o, &scale, 2);
  } else {  // bf16: keep the exponents sane (0.01-ish values with random mantissas and signs)
    for (int64_t i = 0; i + 2 <= bytes; i += 2) ring[static_cast<size_t>(i + 1)] = (ring[static_cast<size_t>(i + 1)] & 0x80) | 0x3c;
  }
  if (K > 0) {
    qkv::QuantMatrix m{t, qkv::WeightVector<uint8_t>(ring.begin(), ring.begin() + bytes)};
    qkv::to_panels(m, K);
    std::memcpy(ring.data(), m.blocks.data(), static_cast<size_t>(bytes));
  }
  for (int64_t c = 1; c < copies; ++c) std::memcpy(ring.data() + c * bytes, ring.data(), static_cast<size_t>(bytes));
  return ring;
}

// GB/s of W: bytes / median seconds of a call, over `passes` passes through the ring (after one
// warm-up pass).
template <typename Call>
double measure(int64_t bytes, int64_t copies, int passes, Call&& call) {
  std::vector<double> seconds;
  for (int pass = 0; pass <= passes; ++pass)
    for (int64_t c = 0; c < copies; ++c) {
      const auto t0 = Clock::now();
      call(c);
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (pass > 0) seconds.push_back(s);
    }
  std::nth_element(seconds.begin(), seconds.begin() + static_cast<long>(seconds.size() / 2), seconds.end());
  return static_cast<double>(bytes) / seconds[seconds.size() / 2] / 1e9;
}

std::vector<Shape> parse_shapes(const std::string& s) {
  std::vector<Shape> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t x = item.find('x');
    out.push_back({std::stoll(item.substr(0, x)), std::stoll(item.substr(x + 1))});
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string target_name, shapes_arg = "2048x1024,1024x2048,3072x1024,1024x3072,151936x1024";
  int passes = 3;
  int64_t rows = 1;
  bool in_cache = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--target" && i + 1 < argc) target_name = argv[++i];
    else if (a == "--passes" && i + 1 < argc) passes = std::stoi(argv[++i]);
    else if (a == "--shapes" && i + 1 < argc) shapes_arg = argv[++i];
    else if (a == "--rows" && i + 1 < argc) rows = std::max<int64_t>(1, std::stoll(argv[++i]));
    else if (a == "--in-cache") in_cache = true;
    else {
      std::printf("usage: %s [--target AVX2|AVX3|AVX3_DL] (default: the best) [--passes 3] [--shapes %s] [--rows 1] [--in-cache]\n",
                  argv[0], shapes_arg.c_str());
      return a == "--help" ? 0 : 2;
    }
  }
  std::string available;
  for (int64_t t : qkv::quant_matvec_simd_targets()) {
    const std::string name = qkv::kernels::simd_target_name(t);
    if (!available.empty()) available += ' ';  // (not "" or " " + name: g++ 12's -Wrestrict false positive at -O3)
    available += name;
    if (name == target_name) qkv::kernels::force_simd_target(t);
  }
  if (!target_name.empty() && available.find(target_name) == std::string::npos) {
    std::printf("target %s is not one this CPU runs (%s)\n", target_name.c_str(), available.c_str());
    return 2;
  }
  const std::string flags = cpu_line("flags");
  std::printf("CPU: %s; avx512_vnni %s, avx_vnni %s, avx512_bf16 %s\n", cpu_line("model name").c_str(),
              flags.find("avx512_vnni") != std::string::npos ? "yes" : "no",
              flags.find(" avx_vnni") != std::string::npos ? "yes" : "no",
              flags.find("avx512_bf16") != std::string::npos ? "yes" : "no");
  std::printf("quant_matvec targets: %s; running %s\n", available.c_str(),
              target_name.empty() ? "the best (Highway's choice)" : target_name.c_str());

  qkv::ThreadPool p1(1), p2(2);
  const double bw1 = qkv::kernels::measure_read_bandwidth(p1).gb_s, bw2 = qkv::kernels::measure_read_bandwidth(p2).gb_s;
  std::printf("read bandwidth (kernels/memory_bandwidth.h): %.1f GB/s on 1 thread, %.1f GB/s on 2\n\n", bw1, bw2);
  const int64_t ring_bytes = std::max<int64_t>(4 * qkv::cache_sizes().l3, int64_t{512} << 20);

  if (rows > 1) {  // a prompt: compute-bound, W in cache after the first call
    std::printf("M = %lld rows of x\n%-13s %-5s | %9s | %9s\n", static_cast<long long>(rows), "N x K", "W", "1T GOP/s",
                "2T GOP/s");
    for (const Shape& s : parse_shapes(shapes_arg)) {
      std::vector<float> x(static_cast<size_t>(rows * s.K)), y(static_cast<size_t>(rows * s.N));
      std::mt19937 rng(2);
      std::normal_distribution<float> normal;
      for (float& v : x) v = normal(rng);
      for (const char* name : {"Q8_0", "Q4_0", "Q4_K", "Q6_K", "Q8_0p", "Q4_0p", "Q4_Kp", "Q6_Kp"}) {
        const std::string type_name(name);
        const bool panels = type_name.back() == 'p';
        const qkv::QuantType& t = qkv::quant_type_named(panels ? type_name.substr(0, 4) : type_name);
        const int64_t bytes = s.N * qkv::quant_bytes(t, s.K, "W");
        const Ring W = weight_ring(&t, bytes, 1, panels ? s.K : 0);
        const double ops = 2.0 * static_cast<double>(rows) * static_cast<double>(s.N) * static_cast<double>(s.K);
        double gops[2];
        qkv::ThreadPool* pools[2] = {&p1, &p2};
        for (int p = 0; p < 2; ++p)  // measure() gives units per second of its first argument / 1e9
          gops[p] = measure(static_cast<int64_t>(ops), 1, passes + 2, [&](int64_t) {
            qkv::quant_matvec(qkv::QuantView{&t, W.data(), panels}, s.N, s.K, x.data(), rows, y.data(), pools[p]);
          });
        std::printf("%6lldx%-6lld %-5s | %9.1f | %9.1f\n", static_cast<long long>(s.N), static_cast<long long>(s.K),
                    name, gops[0], gops[1]);
        std::fflush(stdout);
      }
    }
    qkv::kernels::force_simd_target(0);
    return 0;
  }
  if (in_cache) std::printf("W in cache: one copy, read again and again (%%bw: of the read bandwidth from memory)\n");
  std::printf("%-13s %-5s %9s | %8s %6s | %8s %6s\n", "N x K", "W", "MB", "1T GB/s", "%bw", "2T GB/s", "%bw");
  // "Q8_0p", "Q6_Kp", "Q4_Kp", "Q4_0p": stored in panels (core/quant_panels.h), as a loaded model keeps them
  const char* types[] = {"bf16", "Q8_0", "Q8_0p", "Q6_K", "Q6_Kp", "Q4_K", "Q4_Kp", "Q4_0", "Q4_0p"};
  for (const Shape& s : parse_shapes(shapes_arg)) {
    std::vector<float> x(static_cast<size_t>(s.K)), y(static_cast<size_t>(s.N));
    std::mt19937 rng(2);
    std::normal_distribution<float> normal;
    for (float& v : x) v = normal(rng);
    for (const char* name : types) {
      const bool bf16 = std::strcmp(name, "bf16") == 0;
      const std::string type_name(name);
      const bool panels = type_name.back() == 'p';
      const qkv::QuantType* t = bf16 ? nullptr : &qkv::quant_type_named(panels ? type_name.substr(0, 4) : type_name);
      const int64_t bytes = bf16 ? s.N * s.K * 2 : s.N * qkv::quant_bytes(*t, s.K, "W");
      const int64_t copies = in_cache ? 1 : std::max<int64_t>(2, (ring_bytes + bytes - 1) / bytes);
      const Ring ring = weight_ring(t, bytes, copies, panels ? s.K : 0);
      double gb[2];
      qkv::ThreadPool* pools[2] = {&p1, &p2};
      for (int p = 0; p < 2; ++p)
        gb[p] = measure(bytes, copies, passes, [&](int64_t c) {
          const uint8_t* W = ring.data() + c * bytes;
          if (bf16)
            qkv::gemv_rows(x.data(), 1, s.K, nullptr, reinterpret_cast<const uint16_t*>(W), nullptr, s.N, y.data(),
                           pools[p]);
          else
            qkv::quant_matvec(qkv::QuantView{t, W, panels}, s.N, s.K, x.data(), 1, y.data(), pools[p]);
        });
      std::printf("%6lldx%-6lld %-5s %9.2f | %8.1f %5.0f%% | %8.1f %5.0f%%\n", static_cast<long long>(s.N),
                  static_cast<long long>(s.K), name, static_cast<double>(bytes) / 1e6, gb[0], 100 * gb[0] / bw1, gb[1],
                  100 * gb[1] / bw2);
      std::fflush(stdout);
    }
  }
  qkv::kernels::force_simd_target(0);
  return 0;
}

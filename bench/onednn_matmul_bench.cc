// oneDNN's matmul against qkv's packed product and OpenBLAS on the projections' shapes (issue 16,
// item 1), fp32 and bf16, in one binary. Built only when CMake finds oneDNN (Debian libdnnl-dev);
// not part of the main build's requirements.
//
//   QKV_NUM_THREADS=2 OMP_NUM_THREADS=2 build/bench/qkv_onednn_bench
//       --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// The shapes are BM_Sgemm's (bench/attention_microbench.cc), row-major:
//   op 0  y = x W^T      x (M, K), W (N, K)        forward (nn.Linear)
//   op 1  dx = dy W      dy (M, K), W (K, N)       backward, the input's gradient
//   op 2  dW = dy^T x    dy (K, M), x (K, N)       backward, the weight's gradient (K = B*T)
// oneDNN sees the same buffers: the transposes are the memory descriptors' strides (W^T is W
// with strides {1, K}, dy^T is dy with strides {1, M}), never a copy.
//
// BM_Qkv, product: 0 qkv float32, 1 OpenBLAS float32, 2 qkv bf16 with B (the weights) held in
//   bf16 and A rounded as it is packed (BM_Sgemm's product 2), 3 qkv bf16 with A and B both held
//   in bf16 (the same inputs oneDNN's bf16 gets); bias 1 (op 0): y = b + x W^T as qkv's Linear
//   does it (GemmArgs::bias: added as the product writes its tiles).
// BM_OneDnn, bf16: 0 src/weights/dst f32; 1 src and weights bf16, dst f32, f32 accumulation;
//   variant: 0 plain (the buffers above, through strides), 1 with the bias (f32, the matmul's
//   bias argument: op 0 only), 2 weights in the layout oneDNN prefers (format_tag::any,
//   reordered once outside the timed loop, as qkv's B16 weights are converted once: op 0, 1).
// Every case reports GFLOP/s (2 M N K), pct_peak (share of the fp32 FMA peak measured at start on
// qkv's pool), rel_err (||C - ref||_F / ||ref||_F over the first 64 rows of C against qkv's
// sgemm_reference on the same inputs: the float32 reference for float32 products, the bf16 one
// - operands rounded to bf16, double accumulation - for bf16 products), and for oneDNN create_ms
// (primitive descriptor + primitive creation; the primitive cache is off, so every repetition
// pays it), and first_ms, the first call's time (cold: buffers, any lazy set-up).
// The label names the implementation: gemm_description() for qkv and OpenBLAS, oneDNN's
// impl_info_str() (e.g. "brg:avx512_core_bf16") for oneDNN.
// pct_peak is against the float32 FMA peak: the bf16 dot product does twice the FLOPs per lane,
// so bf16 products can pass 100 (their own ceiling is about 200).
// Threads: qkv's pool takes QKV_NUM_THREADS; oneDNN's CPU runtime is its build's (Debian's
// libdnnl: OpenMP, so OMP_NUM_THREADS; main() prints it, DNNL_VERBOSE=1 shows nthr). The two
// pools are separate: oneDNN is called here from the main thread, never inside a qkv task.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "bench_support.h"
#include "projection_products.h"
#include "qkv/core/bf16.h"
#include "qkv/core/gemm.h"
#include "qkv/core/thread_pool.h"

namespace {

using qkv::Dtype;
using qkv::GemmArgs;

constexpr int64_t kCheckRows = 64;

using qkv::bench::random_vector;
using qkv::bench::report;

// The operands of one case, as BM_Sgemm makes them (same sizes, same seeds), plus bf16 copies.
struct Operands {
  int64_t op, M, N, K;
  std::vector<float> a, b, bias, c;
  std::vector<uint16_t> a16, b16;
  Operands(int64_t op_, int64_t M_, int64_t N_, int64_t K_) : op(op_), M(M_), N(N_), K(K_) {
    a = random_vector(static_cast<size_t>(M * K));
    b = random_vector(static_cast<size_t>(N * K) + 1);
    bias = random_vector(static_cast<size_t>(N) + 7);
    c.assign(static_cast<size_t>(M * N), 0.0f);
    a16.resize(a.size());
    b16.resize(b.size());
    qkv::floats_to_bf16(a.data(), a16.data(), a.size());
    qkv::floats_to_bf16(b.data(), b16.data(), b.size());
  }
  // The fp32 arguments of C = op(A) op(B) on these buffers (BM_Sgemm's).
  GemmArgs args(float* out) const {
    return qkv::bench::projection_product(op, M, N, K, a.data(), b.data(), out);
  }
};

// ||C - ref||_F / ||ref||_F over C's first kCheckRows rows; ref from sgemm_reference on the same
// fp32 operands (rounded to bf16 by the reference itself when bf16), plus the bias when given.
double check(const Operands& o, bool bf16, bool bias) {
  const int64_t rows = std::min(o.M, kCheckRows);
  std::vector<float> ref(static_cast<size_t>(rows * o.N));
  GemmArgs g = o.args(ref.data());
  g.M = rows;  // op(A)'s first rows: A's first rows, or (op 2, A transposed) A's first columns
  if (bias) g.bias = o.bias.data();
  if (bf16) g.precision = Dtype::kBF16;
  qkv::sgemm_reference(g);
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(o.c[i]) - static_cast<double>(ref[i]);
    num += d * d;
    den += static_cast<double>(ref[i]) * static_cast<double>(ref[i]);
  }
  return std::sqrt(num / den);
}

// The check runs once per case (the first repetition); the later ones report the same figure.
std::string case_key(const char* what, const benchmark::State& state) {
  std::string key = what;
  for (int i = 0; i < 6; ++i) {
    key += '/';
    key += std::to_string(state.range(i));
  }
  return key;
}

double cached_check(const std::string& name, const Operands& o, bool bf16, bool bias) {
  static std::map<std::string, double> done;
  auto it = done.find(name);
  if (it != done.end()) return it->second;
  const double e = check(o, bf16, bias);
  done.emplace(name, e);
  return e;
}

void BM_Qkv(benchmark::State& state) {
  const int64_t product = state.range(0), bias = state.range(1);
  Operands o(state.range(2), state.range(3), state.range(4), state.range(5));
  GemmArgs g = o.args(o.c.data());
  if (product >= 2) {
    g.precision = Dtype::kBF16;
    g.B = nullptr;
    g.B16 = o.b16.data();
    if (product == 3) {
      g.A = nullptr;
      g.A16 = o.a16.data();
    }
  }
  if (bias) g.bias = o.bias.data();
  const qkv::GemmBackend before = qkv::gemm_backend();
  qkv::set_gemm_backend(product == 1 ? qkv::GemmBackend::kOpenBlas : qkv::GemmBackend::kQkv);
  const auto step = [&] { qkv::sgemm(g); };
  const auto t1 = std::chrono::steady_clock::now();
  step();
  state.counters["first_ms"] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
  state.counters["rel_err"] = cached_check(case_key("qkv", state), o, product >= 2, bias != 0);
  state.SetLabel(product >= 2 ? qkv::gemm_bf16_description() : qkv::gemm_description());
  for (auto _ : state) step();
  qkv::set_gemm_backend(before);
  report(state, qkv::gemm_flops(o.M, o.N, o.K));
}

void BM_OneDnn(benchmark::State& state) {
  using dnnl::memory;
  using tag = memory::format_tag;
  const bool bf16 = state.range(0) != 0;
  const int64_t variant = state.range(1);
  Operands o(state.range(2), state.range(3), state.range(4), state.range(5));
  const int64_t M = o.M, N = o.N, K = o.K;
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  const memory::data_type in_dt = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  // src (M, K) and weights (K, N), logical; strides give the stored layouts.
  const memory::dims src_strides = o.op == 2 ? memory::dims{1, M} : memory::dims{K, 1};
  const memory::dims wei_strides = o.op == 0 ? memory::dims{1, K} : memory::dims{N, 1};
  const memory::desc src_md({M, K}, in_dt, src_strides);
  const memory::desc wei_plain_md({K, N}, in_dt, wei_strides);
  const memory::desc wei_md = variant == 2 ? memory::desc({K, N}, in_dt, tag::any) : wei_plain_md;
  const memory::desc dst_md({M, N}, memory::data_type::f32, memory::dims{N, 1});
  const memory::desc bias_md({1, N}, memory::data_type::f32, memory::dims{N, 1});

  const auto t0 = std::chrono::steady_clock::now();
#if DNNL_VERSION_MAJOR >= 3  // oneDNN 3 dropped op descriptors (written to its API, not built here: Debian 12 has 2.6.3)
  const dnnl::matmul::primitive_desc pd = variant == 1 ? dnnl::matmul::primitive_desc(eng, src_md, wei_md, bias_md, dst_md)
                                                       : dnnl::matmul::primitive_desc(eng, src_md, wei_md, dst_md);
#else
  const dnnl::matmul::desc desc =
      variant == 1 ? dnnl::matmul::desc(src_md, wei_md, bias_md, dst_md) : dnnl::matmul::desc(src_md, wei_md, dst_md);
  const dnnl::matmul::primitive_desc pd(desc, eng);
#endif
  const dnnl::matmul prim(pd);
  const double create_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  void* a_ptr = bf16 ? static_cast<void*>(o.a16.data()) : static_cast<void*>(o.a.data());
  void* b_ptr = bf16 ? static_cast<void*>(o.b16.data()) : static_cast<void*>(o.b.data());
  memory src_mem(src_md, eng, a_ptr), wei_plain_mem(wei_plain_md, eng, b_ptr);
  memory dst_mem(dst_md, eng, o.c.data()), bias_mem(bias_md, eng, o.bias.data());
  memory wei_mem = wei_plain_mem;
  if (variant == 2 && pd.weights_desc() != wei_plain_md) {  // once, outside the timed loop
    wei_mem = memory(pd.weights_desc(), eng);
    dnnl::reorder(wei_plain_mem, wei_mem).execute(strm, wei_plain_mem, wei_mem);
    strm.wait();
  }
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src_mem}, {DNNL_ARG_WEIGHTS, wei_mem}, {DNNL_ARG_DST, dst_mem}};
  if (variant == 1) args.emplace(DNNL_ARG_BIAS, bias_mem);
  const auto step = [&] {
    prim.execute(strm, args);
    strm.wait();
  };
  const auto t1 = std::chrono::steady_clock::now();
  step();
  state.counters["first_ms"] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
  state.counters["rel_err"] = cached_check(case_key("dnnl", state), o, bf16, variant == 1);
  state.counters["create_ms"] = create_ms;
  state.SetLabel(pd.impl_info_str());
  for (auto _ : state) step();
  report(state, qkv::gemm_flops(M, N, K));
}

// Shapes: (op, M, N, K).
const std::vector<std::vector<int64_t>> kShapes = {
    {0, 8192, 2304, 768}, {0, 8192, 768, 64},   {0, 8192, 768, 768}, {0, 8192, 768, 4096},
    {1, 8192, 768, 768},  {1, 8192, 768, 2304}, {2, 768, 768, 8192}, {2, 2304, 768, 8192},
};

void register_all() {
  for (const auto& s : kShapes) {
    const int64_t op = s[0], M = s[1], N = s[2], K = s[3];
    auto* q = benchmark::RegisterBenchmark("BM_Qkv", BM_Qkv);
    q->ArgNames({"product", "bias", "op", "M", "N", "K"});
    for (int64_t product : {0, 1, 2, 3}) q->Args({product, 0, op, M, N, K});
    if (op == 0)
      for (int64_t product : {0, 2}) q->Args({product, 1, op, M, N, K});
    q->Unit(benchmark::kMillisecond)->UseRealTime();
    auto* d = benchmark::RegisterBenchmark("BM_OneDnn", BM_OneDnn);
    d->ArgNames({"bf16", "variant", "op", "M", "N", "K"});
    for (int64_t bf16 : {0, 1}) {
      d->Args({bf16, 0, op, M, N, K});
      if (op == 0) d->Args({bf16, 1, op, M, N, K});
      if (op != 2) d->Args({bf16, 2, op, M, N, K});
    }
    d->Unit(benchmark::kMillisecond)->UseRealTime();
  }
}

const char* runtime_name(unsigned r) {
  switch (r) {
    case DNNL_RUNTIME_SEQ: return "sequential";
    case DNNL_RUNTIME_OMP: return "OpenMP";
    case DNNL_RUNTIME_TBB: return "TBB";
    case DNNL_RUNTIME_THREADPOOL: return "threadpool";
    default: return "other";
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  dnnl::set_primitive_cache_capacity(0);  // create_ms is the real creation cost every time
  const dnnl_version_t* v = dnnl_version();
  qkv::bench::measure_peak("qkv_onednn_bench");
  std::printf("oneDNN %d.%d.%d (%s), CPU runtime %s, effective ISA %d; %s\n", v->major, v->minor, v->patch,
              v->hash ? v->hash : "?", runtime_name(v->cpu_runtime), static_cast<int>(dnnl::get_effective_cpu_isa()),
              qkv::blas_description().c_str());
  benchmark::AddCustomContext("onednn_version",
                              std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch));
  benchmark::AddCustomContext("onednn_cpu_runtime", runtime_name(v->cpu_runtime));
  register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

// Matrix products: qkv's packed product or the BLAS, split over qkv's pool. See qkv/core/gemm.h.
#include "qkv/core/gemm.h"

#if QKV_HAVE_OPENBLAS
#include <cblas.h>
#endif

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "core/gemm_packed.h"
#include "qkv/core/bf16.h"
#include "qkv/core/error.h"

namespace qkv {
namespace {

#if QKV_HAVE_OPENBLAS
constexpr bool kHaveOpenBlas = true;
#else
constexpr bool kHaveOpenBlas = false;
#endif

// Rows (or columns) of C per task: an eighth of them, rounded to 64, between 64 and 1024. Each
// task's BLAS call packs the whole other operand again, so panels are kept large (at GPT-2's
// 8192 x 2304 x 768, packing is ~2% of a 1024-row panel's work and ~10% of a 256-row one's), and
// there are up to 8 of them for the threads to share. The split depends on the shape only.
int64_t panel_size(int64_t extent) {
  const int64_t eighth = (extent / 8 + 63) / 64 * 64;
  return std::clamp<int64_t>(eighth, 64, 1024);
}

void blas_single_threaded() {
#if QKV_HAVE_OPENBLAS
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
#endif
}

void check(const GemmArgs& g) {
  QKV_CHECK(g.M >= 0 && g.N >= 0 && g.K >= 0, "sgemm: negative size (M, N, K) = (", g.M, ", ", g.N, ", ", g.K, ")");
  const int64_t a_cols = g.trans_a ? g.M : g.K, b_cols = g.trans_b ? g.K : g.N;
  QKV_CHECK(g.lda >= std::max<int64_t>(1, a_cols), "sgemm: lda (", g.lda, ") < the columns of A (", a_cols, ")");
  QKV_CHECK(g.ldb >= std::max<int64_t>(1, b_cols), "sgemm: ldb (", g.ldb, ") < the columns of B (", b_cols, ")");
  QKV_CHECK(g.ldc >= std::max<int64_t>(1, g.N), "sgemm: ldc (", g.ldc, ") < the columns of C (", g.N, ")");
  const bool bf16 = g.precision == Dtype::kBF16;
  QKV_CHECK(bf16 || (g.A16 == nullptr && g.B16 == nullptr),
            "sgemm: a bf16 operand (A16 or B16) needs precision kBF16");
  const bool has_a = g.A != nullptr || (bf16 && g.A16 != nullptr), has_b = g.B != nullptr || (bf16 && g.B16 != nullptr);
  QKV_CHECK(g.M * g.N == 0 || (g.C != nullptr && (g.K == 0 || (has_a && has_b))), "sgemm: null matrix");
  QKV_CHECK(g.M < (int64_t{1} << 31) && g.N < (int64_t{1} << 31) && g.K < (int64_t{1} << 31),
            "sgemm: sizes beyond the BLAS's 32-bit integers");
}

// C = beta C + bias (each row), for the paths that do not add the bias themselves.
void add_bias_first(const GemmArgs& g, ThreadPool& pool) {
  const int64_t chunk = 256;
  pool.parallel_for((g.M + chunk - 1) / chunk, [&](int64_t t, int) {
    for (int64_t m = t * chunk; m < std::min(g.M, (t + 1) * chunk); ++m) {
      float* c = g.C + m * g.ldc;
      for (int64_t n = 0; n < g.N; ++n) c[n] = (g.beta == 0.0f ? 0.0f : g.beta * c[n]) + g.bias[n];
    }
  });
}

// C = beta C: a product with K = 0 (not left to the BLAS: some return early).
void scale_only(const GemmArgs& g) {
  for (int64_t m = 0; m < g.M; ++m)
    for (int64_t n = 0; n < g.N; ++n) g.C[m * g.ldc + n] = g.beta == 0.0f ? 0.0f : g.beta * g.C[m * g.ldc + n];
}

// One BLAS call (M, N, K > 0). OpenBLAS is made single-threaded only when qkv first calls it, so
// a process that never does (qkv's own product runs the projections) keeps its setting: PyTorch
// in the same Python process, say, keeps its multi-threaded OpenBLAS.
void blas_call(const GemmArgs& g) {
  blas_single_threaded();
#if !QKV_HAVE_OPENBLAS
  sgemm_reference(g);
#else
  if (g.M == 1) {  // one row (a decoding step's projections): a matrix-vector product; sgemm would
    // pack all of op(B) first, which costs more than the product (K N multiply-adds, one pass over B)
    const int incx = g.trans_a ? static_cast<int>(g.lda) : 1;  // row 0 of op(A)
    if (g.trans_b)  // C = a B^T: B (N, K) times a
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(g.N), static_cast<int>(g.K), g.alpha, g.B,
                  static_cast<int>(g.ldb), g.A, incx, g.beta, g.C, 1);
    else  // C = a B: B (K, N) transposed times a
      cblas_sgemv(CblasRowMajor, CblasTrans, static_cast<int>(g.K), static_cast<int>(g.N), g.alpha, g.B,
                  static_cast<int>(g.ldb), g.A, incx, g.beta, g.C, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans, g.trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(g.M), static_cast<int>(g.N), static_cast<int>(g.K), g.alpha, g.A,
              static_cast<int>(g.lda), g.B, static_cast<int>(g.ldb), g.beta, g.C, static_cast<int>(g.ldc));
#endif
}

// The backend, chosen once from $QKV_GEMM, then by set_gemm_backend.
std::atomic<int>& backend_state() {  // -1: not read yet
  static std::atomic<int> state{-1};
  return state;
}

// One product on the calling thread alone (M, N, K > 0).
void serial_product(const GemmArgs& g) {
  if (g.precision == Dtype::kBF16) return packed_sgemm(g, nullptr);  // bf16: always qkv's own
  if (gemm_backend() == GemmBackend::kOpenBlas || (kHaveOpenBlas && g.M == 1)) return blas_call(g);  // M = 1: sgemv
  packed_sgemm(g, nullptr);
}

// Column n of op(X) starts at X + n (not transposed) or X + n * ld (transposed); row m likewise.
const float* rows_of(const float* X, bool trans, int64_t ld, int64_t first) {
  return trans ? X + first : X + first * ld;
}
const float* cols_of(const float* X, bool trans, int64_t ld, int64_t first) {
  return trans ? X + first * ld : X + first;
}

// A weight gradient's shape: a long reduction (K = batch x tokens) into a small C, split in two
// halves of K (sgemm_k_split below) - for OpenBLAS, and for qkv's packed product at 512 bits. At
// 256 bits (AVX2) and below the packed product runs these shapes whole: it packs op(B) once for
// all its threads and each thread packs only its own rows of op(A), so the split's reason is
// OpenBLAS's alone; on a Zen 3, the two builds alternating in one process (2 threads, medians of
// 10-16 rounds), weight gradients of K = 8,192 ran 1.03-1.09x (one run of one shape 0.98x, 1.04x
// and 1.09x again) and GPT-2's proj (1,024 x 768 x 3,072) 1.05x without it. The AVX-512 path
// keeps it until it is measured there.
bool splits_k(const GemmArgs& g, bool packed) {
  if (g.K < 2048 || g.K < 2 * std::max(g.M, g.N)) return false;
  return !packed || packed_gemm_shape().vector_bits > 256;
}

// C = alpha op(A) op(B) + beta C as two products over the halves of K run side by side: C gets
// the first half (with beta), a scratch matrix the second, then C += scratch. A row or column
// split would make every task pack the whole (K, other) operand again - for a weight gradient
// that is tens of MB per task (measured: a tenth of the backward's time went to OpenBLAS's
// packing). The scratch (M, N) belongs to the call, so concurrent products share nothing; its
// allocation (M N floats, about 2.4 MB at d = 768) costs next to nothing beside the 2 M N K
// FLOPs of a K >= 2048 product.
void sgemm_k_split(const GemmArgs& g, ThreadPool& pool) {
  const int64_t half = (g.K / 2 + 63) / 64 * 64;
  const std::unique_ptr<float[]> scratch(new float[static_cast<size_t>(g.M * g.N)]);  // uninitialised
  float* partial = scratch.get();
  pool.parallel_for(2, [&](int64_t t, int) {
    GemmArgs part = g;
    const int64_t first = t == 0 ? 0 : half;
    part.K = t == 0 ? half : g.K - half;
    const int64_t a_off = g.trans_a ? first * g.lda : first;  // columns [first, ...) of op(A)
    const int64_t b_off = g.trans_b ? first : first * g.ldb;  // rows [first, ...) of op(B)
    if (g.A != nullptr) part.A = g.A + a_off;
    if (g.A16 != nullptr) part.A16 = g.A16 + a_off;
    if (g.B != nullptr) part.B = g.B + b_off;
    if (g.B16 != nullptr) part.B16 = g.B16 + b_off;
    if (t == 1) {
      part.beta = 0.0f;
      part.C = partial;
      part.ldc = g.N;
    }
    serial_product(part);
  });
  const int64_t chunk = 256;
  pool.parallel_for((g.M + chunk - 1) / chunk, [&](int64_t t, int) {
    for (int64_t m = t * chunk; m < std::min(g.M, (t + 1) * chunk); ++m) {
      float* c = g.C + m * g.ldc;
      const float* q = partial + m * g.N;
      for (int64_t n = 0; n < g.N; ++n) c[n] += q[n];
    }
  });
}

}  // namespace

std::string blas_core() {
#if QKV_HAVE_OPENBLAS
  const char* core = openblas_get_corename();
  return core == nullptr ? "" : core;
#else
  return "";
#endif
}

int blas_vector_bits() {
  std::string core = blas_core();
  for (char& c : core) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* name : {"skylakex", "cooperlake", "sapphirerapids"})
    if (core == name) return 512;
  for (const char* name : {"haswell", "zen", "sandybridge", "bulldozer", "piledriver", "steamroller", "excavator"})
    if (core == name) return 256;
  for (const char* name : {"prescott", "core2", "penryn", "dunnington", "nehalem", "atom", "barcelona", "bobcat",
                           "opteron", "opteron_sse3", "katmai", "coppermine", "northwood", "banias", "athlon"})
    if (core == name) return 128;
  return 0;
}

std::string blas_description() {
#if QKV_HAVE_OPENBLAS
  // openblas_get_config(): "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64"
  const char* config = openblas_get_config();
  std::string name = config == nullptr ? "OpenBLAS" : config;
  const size_t second_space = name.find(' ', name.find(' ') + 1);
  if (second_space != std::string::npos) name.resize(second_space);
  return name + ", " + blas_core() + " kernels";
#else
  return "none (reference loops)";
#endif
}

GemmBackend parse_gemm_backend(const std::string& name) {
  if (name == "qkv") return GemmBackend::kQkv;
  if (name == "openblas") return GemmBackend::kOpenBlas;
  throw Error("unknown matrix product '" + name + "': expected qkv or openblas");
}

const char* gemm_backend_name(GemmBackend backend) { return backend == GemmBackend::kQkv ? "qkv" : "openblas"; }

void set_gemm_backend(GemmBackend backend) {
#if !QKV_HAVE_OPENBLAS
  QKV_CHECK(backend != GemmBackend::kOpenBlas, "the matrix product openblas is not built in (cmake -DQKV_OPENBLAS=OFF, "
            "or OpenBLAS was not found): only qkv's own is");
#endif
  backend_state().store(static_cast<int>(backend));
}

GemmBackend gemm_backend() {
  int state = backend_state().load();
  if (state < 0) {
    const char* env = std::getenv("QKV_GEMM");
    GemmBackend chosen = GemmBackend::kQkv;
    if (env != nullptr && *env != '\0') {
      try {
        chosen = parse_gemm_backend(env);
      } catch (const Error& e) {
        throw Error(std::string("QKV_GEMM: ") + e.what());
      }
    }
    set_gemm_backend(chosen);
    state = static_cast<int>(chosen);
  }
  return static_cast<GemmBackend>(state);
}

std::string gemm_description() {
  if (gemm_backend() == GemmBackend::kOpenBlas) return blas_description();
  const PackedGemmShape s = packed_gemm_shape();
  return "qkv packed GEMM, " + s.target + ", " + std::to_string(s.vector_bits) + "-bit, " + std::to_string(s.mr) + "x" +
         std::to_string(s.nr) + " tiles, KC " + std::to_string(s.kc) + ", MC " + std::to_string(s.mc);
}

std::string gemm_bf16_description() {
  const PackedGemmShape s = packed_gemm_shape();
  return "qkv packed GEMM, " + s.target + ", " + std::to_string(s.vector_bits) + "-bit, " + std::to_string(s.mr) + "x" +
         std::to_string(s.nr) + " tiles, " +
         (s.bf16_dot ? "bf16 pairs by the AVX512_BF16 dot product, KC " + std::to_string(s.dot_kc) + ", MC " +
                           std::to_string(s.dot_mc)
                     : "bf16 widened to float32");
}

bool gemm_bf16_dot() { return packed_gemm_shape().bf16_dot; }

int gemm_vector_bits() {
  return gemm_backend() == GemmBackend::kOpenBlas ? blas_vector_bits() : packed_gemm_shape().vector_bits;
}

void sgemm(const GemmArgs& args, ThreadPool* pool_arg) {
  check(args);
  if (args.M == 0 || args.N == 0) return;
  GemmArgs g = args;
  ThreadPool& pool = pool_arg ? *pool_arg : default_pool();
  // Which path runs: qkv's packed product adds the bias as it writes C; for the others it goes
  // into C first (C = beta C + bias, then beta = 1).
  const bool small = gemm_flops(g.M, g.N, g.K) < 4e6;  // below about 4 MFLOP a split costs more than it saves
  const bool packed = g.precision == Dtype::kBF16 || (gemm_backend() == GemmBackend::kQkv && (g.M > 1 || !kHaveOpenBlas));
  if (g.bias != nullptr && (g.K == 0 || !packed || (!small && splits_k(g, packed)))) {
    add_bias_first(g, pool);
    g.bias = nullptr;
    g.beta = 1.0f;
  }
  if (g.K == 0) return scale_only(g);
  if (small) return serial_product(g);
  if (splits_k(g, packed)) return sgemm_k_split(g, pool);
  if (packed) return packed_sgemm(g, &pool);
  // Panels of a fixed size (not one per thread), so every element of C comes out of the same
  // BLAS call whatever the thread count: the result does not depend on it, bit for bit.
  const bool by_rows = g.M >= g.N;
  const int64_t extent = by_rows ? g.M : g.N;
  const int64_t panel = panel_size(extent);
  const int64_t panels = (extent + panel - 1) / panel;
  pool.parallel_for(panels, [&](int64_t t, int) {
    GemmArgs part = g;
    const int64_t first = t * panel, count = std::min(panel, extent - first);
    if (by_rows) {
      part.M = count;
      part.A = rows_of(g.A, g.trans_a, g.lda, first);
      part.C = g.C + first * g.ldc;
    } else {
      part.N = count;
      part.B = cols_of(g.B, g.trans_b, g.ldb, first);
      part.C = g.C + first;
    }
    blas_call(part);
  });
}

void sgemm_reference(const GemmArgs& g) {
  check(g);
  // An operand's element as the product multiplies it: float32, or rounded to (or read as) bf16.
  const bool bf16 = g.precision == Dtype::kBF16;
  auto element = [bf16](const float* x, const uint16_t* x16, int64_t i) {
    if (x16 != nullptr) return bf16_to_float(x16[i]);
    return bf16 ? bf16_to_float(float_to_bf16(x[i])) : x[i];
  };
  auto a = [&](int64_t m, int64_t k) { return element(g.A, g.A16, g.trans_a ? k * g.lda + m : m * g.lda + k); };
  auto b = [&](int64_t k, int64_t n) { return element(g.B, g.B16, g.trans_b ? n * g.ldb + k : k * g.ldb + n); };
  for (int64_t m = 0; m < g.M; ++m)
    for (int64_t n = 0; n < g.N; ++n) {
      double acc = 0.0;
      for (int64_t k = 0; k < g.K; ++k) acc += static_cast<double>(a(m, k)) * b(k, n);
      float& c = g.C[m * g.ldc + n];
      const double prior = g.beta == 0.0f ? 0.0 : static_cast<double>(g.beta) * c;
      c = static_cast<float>(static_cast<double>(g.alpha) * acc + prior + (g.bias ? g.bias[n] : 0.0f));
    }
}

void sum_rows(const float* X, int64_t M, int64_t N, int64_t ldx, float* out, ThreadPool* pool_arg) {
  ThreadPool& pool = pool_arg ? *pool_arg : default_pool();
  constexpr int64_t kChunk = 256;  // columns per task
  pool.parallel_for((N + kChunk - 1) / kChunk, [&](int64_t t, int) {
    const int64_t n0 = t * kChunk, n1 = std::min(N, n0 + kChunk);
    double acc[kChunk] = {};
    for (int64_t m = 0; m < M; ++m) {
      const float* x = X + m * ldx;
      for (int64_t n = n0; n < n1; ++n) acc[n - n0] += static_cast<double>(x[n]);
    }
    for (int64_t n = n0; n < n1; ++n) out[n] = static_cast<float>(acc[n - n0]);
  });
}


void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
          const float* B, int64_t ldb, float* C, int64_t ldc) {
  sgemm(gemm_args(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc));
}

void gemm_reference(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                    const float* B, int64_t ldb, float* C, int64_t ldc) {
  sgemm_reference(gemm_args(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc));
}

}  // namespace qkv

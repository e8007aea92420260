// What a generation's cache holds. See include/qkv/perf/cache_memory_bench.h.
#include "qkv/perf/cache_memory_bench.h"

#include <iomanip>
#include <sstream>

#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/models/decoder.h"
#include "qkv/models/family.h"

namespace qkv::perf {

CacheMemoryReport run_cache_memory_bench(const CacheMemoryShape& s) {
  const char* who = "cache-memory bench";
  QKV_CHECK(s.batch >= 1 && s.tokens >= 1, who, ": batch (", s.batch, ") and tokens (", s.tokens,
            ") must be at least 1");
  CacheMemoryReport r;
  r.shape = s;
  if (!s.preset.empty()) {
    DecoderSpec spec = family_of_preset(s.preset).preset(s.preset);
    spec.context_length = std::max(spec.context_length, s.tokens);  // the cache's capacity: T
    const kernels::KvCache cache = decoder_cache(spec, s.batch, s.dtype, s.tokens);
    r.linear_layers = spec.linear_layers();
    r.attention_layers = spec.layers - r.linear_layers;
    for (int64_t l = 0; l < spec.layers; ++l) r.state_bytes += cache.state_size(l) * static_cast<int64_t>(sizeof(float));
    r.total_bytes = cache.bytes();
    r.kv_bytes = r.total_bytes - r.state_bytes;
    return r;
  }
  QKV_CHECK(s.d_model >= 1 && s.heads >= 1 && s.layers >= 1 && s.latent_dim >= 1, who, ": d_model (", s.d_model,
            "), heads (", s.heads, "), layers (", s.layers, ") and latent_dim (", s.latent_dim, ") must be at least 1");
  QKV_CHECK(s.kv_heads >= 1 && s.heads % s.kv_heads == 0, who, ": kv_heads (", s.kv_heads,
            ") must divide heads (", s.heads, ")");
  r.head_dim = (s.d_model + s.heads - 1) / s.heads;
  const int64_t D = r.head_dim;
  r.mha_bytes = kernels::KvCache(s.layers, s.batch, s.heads, s.tokens, D, D, s.dtype).bytes();
  r.gqa_bytes = kernels::KvCache(s.layers, s.batch, s.kv_heads, s.tokens, D, D, s.dtype).bytes();
  const int64_t latents = checked_product({s.batch, s.tokens, s.layers, s.latent_dim}, who);
  r.mla_bytes = latents * kernels::cache_dtype_bytes(s.dtype);
  r.mla_f32_bytes = latents * 4;
  return r;
}

namespace {
std::string gb(int64_t bytes) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(2) << static_cast<double>(bytes) / 1e9 << " GB";
  return o.str();
}
}  // namespace

std::string report_text(const CacheMemoryReport& r) {
  const CacheMemoryShape& s = r.shape;
  std::ostringstream out;
  const char* dtype = kernels::cache_dtype_name(s.dtype);
  if (!s.preset.empty()) {
    out << "qkv bench: cache-memory, " << s.preset << ", B=" << s.batch << " T=" << s.tokens << ", " << dtype
        << " keys and values (qkv's KvCache as generation makes it)\n"
        << "  keys and values: " << r.attention_layers << " attention layers, " << gb(r.kv_bytes) << " ("
        << r.kv_bytes / (s.batch * s.tokens) << " bytes per token)\n"
        << "  states: " << r.linear_layers << " linear-attention layers, " << std::fixed << std::setprecision(1)
        << static_cast<double>(r.state_bytes) / 1e6 << " MB (floats; the same whatever T)\n"
        << "  total " << gb(r.total_bytes) << "\n";
    return out.str();
  }
  auto ratio = [](int64_t a, int64_t b) { return static_cast<double>(a) / static_cast<double>(b); };
  out << "qkv bench: cache-memory, MHA / GQA / MLA: B=" << s.batch << " T=" << s.tokens << " d_model=" << s.d_model
      << " heads=" << s.heads << " (head_dim " << r.head_dim << ") kv_heads=" << s.kv_heads << " layers=" << s.layers
      << " latent_dim=" << s.latent_dim << ", " << dtype << "\n"
      << "  MHA  " << gb(r.mha_bytes) << "  (qkv's KvCache, " << s.heads << " key/value heads)\n"
      << "  GQA  " << gb(r.gqa_bytes) << "  (qkv's KvCache, " << s.kv_heads << " key/value heads)\n"
      << "  MLA  " << gb(r.mla_bytes) << "  (latent_dim numbers per token and layer; qkv's LatentCache holds them in "
      << "f32: " << gb(r.mla_f32_bytes) << ")\n"
      << std::fixed << std::setprecision(2) << "  MHA / GQA " << ratio(r.mha_bytes, r.gqa_bytes) << "x (saves "
      << 100.0 * (1 - ratio(r.gqa_bytes, r.mha_bytes)) << "%), MHA / MLA " << ratio(r.mha_bytes, r.mla_bytes)
      << "x (saves " << 100.0 * (1 - ratio(r.mla_bytes, r.mha_bytes)) << "%)\n";
  return out.str();
}

nlohmann::json report_json(const CacheMemoryReport& r) {
  const CacheMemoryShape& s = r.shape;
  nlohmann::json j = {{"module", "cache-memory"}, {"batch", s.batch}, {"seq_len", s.tokens},
                      {"cache_dtype", kernels::cache_dtype_name(s.dtype)}};
  if (!s.preset.empty()) {
    j.update({{"preset", s.preset}, {"attention_layers", r.attention_layers}, {"linear_layers", r.linear_layers},
              {"kv_bytes", r.kv_bytes}, {"state_bytes", r.state_bytes}, {"total_bytes", r.total_bytes}});
    return j;
  }
  j.update({{"d_model", s.d_model}, {"num_heads", s.heads}, {"head_dim", r.head_dim}, {"num_kv_heads", s.kv_heads},
            {"num_layers", s.layers}, {"latent_dim", s.latent_dim}, {"mha_bytes", r.mha_bytes},
            {"gqa_bytes", r.gqa_bytes}, {"mla_bytes", r.mla_bytes}, {"mla_f32_bytes", r.mla_f32_bytes}});
  return j;
}

}  // namespace qkv::perf

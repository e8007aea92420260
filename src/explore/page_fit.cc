// A page within its size. See include/qkv/explore/page_fit.h.
#include "qkv/explore/page_fit.h"

#include <cstdio>

#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/core/limits.h"

namespace qkv {
namespace {

// Sizes in MB, or in bytes below a tenth of one (where "0.0 MB" says nothing).
std::string size_text(int64_t bytes) { return bytes < (1 << 20) / 10 ? str(bytes, " bytes") : megabytes(bytes); }

[[noreturn]] void too_large(const std::string& what, int64_t bytes, ExploreStorage st, int64_t max_bytes) {
  fail(what, size_text(bytes), " (", storage_name(st), "), more than --max-page-size ", size_text(max_bytes),
       ", beyond which a browser opens it slowly or not at all; make it smaller with ",
       st.values == ExplorePrecision::kU8 ? "" : "--precision u8 (8-bit values) or ",
       "a shorter --text, or raise --max-page-size");
}

}  // namespace

std::string storage_name(ExploreStorage st) {
  return str(explore_precision_name(st.values), st.computed ? ", attention weights computed in the page" : "");
}

std::string megabytes(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

void check_page_fits(int64_t layers, int64_t heads, int64_t head_dim, int64_t tokens, bool causal,
                     const ExploreLimits& l, int64_t square_steps) {
  const int64_t least =
      minimum_page_bytes(layers, heads, head_dim, tokens, causal, l.precision, l.weights, square_steps);
  if (least > l.max_bytes)
    too_large(str("the page's attention weights",
                  square_steps > 0 ? str(" and scores (", square_steps, " more per head)") : "",
                  " alone (", layers, " layer(s) x ", heads, " head(s) of ", tokens, " x ", tokens,
                  ") would be at least "),
              least,
              {l.precision == ExplorePrecision::kAuto ? ExplorePrecision::kU8 : l.precision,
               l.weights == ExploreWeights::kComputed},
              l.max_bytes);
}

std::string fit_page(ExplorePage& page, const ExploreLimits& l, ExploreStorage& st) {
  const int64_t layers = static_cast<int64_t>(page.layers.size());
  if (l.pipeline_layer) keep_pipeline_layer(page, *l.pipeline_layer);
  st = resolve_storage(page, l.precision, l.weights, l.max_bytes);
  // Too large with every layer's pipeline: the pipeline of the first layer only (--pipeline-layer picks another).
  if (!l.pipeline_layer && layers > 1 && estimate_page_bytes(page, st) > l.max_bytes) {
    keep_pipeline_layer(page, 0);
    st = resolve_storage(page, l.precision, l.weights, l.max_bytes);
  }
  const int64_t estimate = estimate_page_bytes(page, st);
  if (estimate > l.max_bytes) too_large("the page would be about ", estimate, st, l.max_bytes);
  std::string html = explore_html(page, st);
  if (static_cast<int64_t>(html.size()) > l.max_bytes)
    too_large("the page is ", static_cast<int64_t>(html.size()), st, l.max_bytes);
  return html;
}

namespace {

// The induction score's repeated random sequence: n tokens twice (ExploreHeadStats::induction).
constexpr int64_t kInductionTokens = 64;
constexpr uint64_t kInductionSeed = 0x51C0FFEE;
// The logit lens's tokens per layer and position.
constexpr int64_t kLensTop = 5;

}  // namespace

ExplorePage explore_text(LoadedModel& m, const std::string& text, const ExploreTextOptions& o) {
  const DecoderSpec& spec = m.model->spec();
  std::vector<int64_t> ids = m.encode(text);
  QKV_CHECK(!ids.empty(), "the text has no tokens: there is nothing to attend over");
  const int64_t prompt = static_cast<int64_t>(ids.size()), context = spec.context_length, T = prompt + o.generate;
  if (T > context)
    fail("the text is ", prompt, " tokens", o.generate ? str(" and --generate adds ", o.generate) : std::string(),
         " but the model's context length is ", context, "; the page shows one pass over all of them, so shorten the text",
         o.generate ? " or lower --generate" : "");
  check_page_fits(spec.layers, spec.attention.heads, spec.attention.head_dim, T, true, o.limits);
  const char* what = "the page's (T, T) weights per layer and head";
  check_memory_request(checked_bytes(checked_product({spec.layers, spec.attention.heads, T, T, 2}, what), 4, what), what);
  ExploreModelOptions options;
  if (o.generate) {
    SamplingOptions sampling = o.sampling;
    sampling.max_new_tokens = o.generate;
    const std::vector<int64_t> out = generate(*m.model, ids, sampling);
    options.generated_from = prompt;
    ids.insert(ids.end(), out.begin(), out.end());
  }
  std::vector<std::string> labels;
  for (int64_t id : ids) labels.push_back(m.tokenizer->token_text(id));
  const int64_t n = std::min(kInductionTokens, context / 2);
  options.induction_tokens = n >= 2 ? n : 0;
  options.induction_seed = kInductionSeed;
  options.lens_top = kLensTop;
  options.tokenizer = m.tokenizer.get();
  std::string title = str(m.description, " on \"", text, "\"");
  if (o.generate) title += str(" + ", ids.size() - static_cast<size_t>(prompt), " generated token(s)");
  return explore_model(*m.model, ids, std::move(labels), std::move(title), options);
}

}  // namespace qkv

// qkv/explore/explore.h - what `qkv explore` puts in its one offline HTML page, and the page.
//
// An ExplorePage is the data every view of the page draws from:
//   tokens     (T) the labels shown (escaped by the page: they are data, never markup)
//   layers     one per attention block (the chapter's modules have one): the softmax weights
//              (H, T, T), queries (H, T, D) and keys (H, T, D) per query head (grouped keys
//              repeated), for the head, model and neuron views; H is the layer's own (a Qwen3.5
//              model's Gated DeltaNet layers have their value heads, its attention layers their
//              query heads), and the page's data gives each layer's
//   stats      per layer and head, the head-patterns table's statistics (ExploreHeadStats)
//   lens       for a model, the logit lens: per layer and position the tokens the residual stream
//              would predict through the model's final norm and head
//   generated_from  with qkv explore --generate, the first generated token (the rest is the prompt)
//   rollout    (T, T) attention rollout across the layers (Abnar & Zuidema 2020: per layer the
//              head-mean weights plus the identity, rows normalised, multiplied layer by layer)
//   pipeline   the steps of the computation in order (inputs, W_query, ..., scores, mask, what
//              softmax reads as the module computes it (scaled; with a softcap capped, with ALiBi
//              biased; masked), softmax weights, row sums, dropout, context, out_proj), each
//              (rows, cols) or per head (H, rows, cols),
//              with links saying which cells of earlier steps each cell is computed from.
//
// explore_html() embeds it as JSON (tensors in base 85, float32, float16 or 8-bit) in the template
// src/explore/page.html (compiled in at build time): all script, style and data inline, nothing
// fetched, so the file opens from file://.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "qkv/chapter/walkthrough.h"
#include "qkv/core/tensor.h"
#include "qkv/modules/attention_module.h"
#include "qkv/models/language_model.h"
#include "qkv/models/tokenizer.h"

namespace qkv {

// Where a cell (i, j) of a step comes from: the cells of step `from` whose row and column are
// each "i" (this cell's row), "j" (this cell's column), "*" (every one), a number (that one), "hj"
// (h * cols + j: the head's rows of a weight that is split into heads) or "jd" (column j of heads
// concatenated: column j mod cols of head j / cols). `from` may say "{h}" for the head. Every
// step but the sources (inputs, parameters, masks, dropout's draw) has links.
struct ExploreLink {
  std::string from;
  std::string row, col;
};

struct ExploreStep {
  std::string name;     // "queries", "trainable.keys", "blocks.1.weights"
  std::string caption;  // what it is, in the book's terms
  Tensor value;         // (cols), (rows, cols), or per head (H, rows, cols) when per_head
  bool per_head = false;
  int64_t layer = -1;   // the layer it belongs to; -1: shown for every layer
  std::vector<ExploreLink> links;
  std::string index_prefix;  // indices before the shown ones, e.g. "[0]" for batch item 0
  bool parameter = false;    // a weight or bias: its rows are not the tokens (the page labels rows that are)
};

// One head's statistics over the page's query rows i (weights w = the layer's (T, T) for the head).
// A linear layer's A is no distribution: its entropy and distance are NaN (not shown).
struct ExploreHeadStats {
  double entropy = 0;   // mean over i of -sum_j w[i][j] ln w[i][j] (nats): 0 for one key, ln(i + 1) for uniform
  double distance = 0;  // mean over i of sum_j w[i][j] (i - j): how far back the head looks, in tokens
  double first = 0;     // mean over i >= 1 of w[i][0]: the share on the first token
  double previous = 0;  // mean over i >= 1 of w[i][i - 1]: the share on the token before
  // On a sequence of n random tokens repeated (r r, ExploreModelOptions::induction_tokens): mean over
  // the second copy's queries i of w[i][i - n + 1], the token after the query token's first
  // occurrence (Olsson et al. 2022's induction heads score ~1). NaN: not measured (not a model).
  double induction = std::numeric_limits<double>::quiet_NaN();
};

// The cells of a layer's computed weights (ExploreWeights::kComputed) that the page must store: where the page's softmax of
// its scores (from float16 queries and keys) differs from layer.weights by more than `tolerance`.
struct ExploreCorrections {
  std::vector<int32_t> index;      // head h's cell (i, j) at h per + (i (i + 1) / 2 + j causal, i T + j else)
  std::vector<float> value;        // qkv's weight there
  std::vector<int64_t> head_start; // (H + 1): head h's corrections are [head_start[h], head_start[h + 1])
  double largest_uncorrected = 0;  // the largest difference left (<= tolerance)
};

struct ExploreLayer {
  Tensor weights;  // (H, T, T) softmax weights, before dropout; H this layer's heads
  Tensor queries;  // (H, T, D)
  Tensor keys;     // (H, T, D), the key head each query head reads
  float scale = 1; // what the scores are divided by (sqrt(D))
  // MultiHeadAttention's variants that change what softmax reads (attention_variants.h), for the
  // neuron view: scaled = score / scale, softcap * tanh(scaled / softcap), - alibi[h] * (i - j),
  // -inf where j > i (causal) or j <= i - window.
  // The model view's thumbnails, computed when the page is made: (H + 2, n, n) for n =
  // min(T, kExploreThumbnail), each pixel the largest weight of its block of cells (i n / T, j n / T
  // rounded down): the heads, then the mean and the max over the heads.
  Tensor thumbnails;
  std::vector<ExploreHeadStats> stats;  // (H), from the weights (induction filled for models)
  float softcap = 0;          // 0: none
  std::vector<float> alibi;   // (H) slopes, or empty
  int64_t window = 0;         // 0: none
  // A linear-attention layer (Qwen3.5's Gated DeltaNet): weights is its exact map from values to
  // context (o = A v, lower-triangular; not a softmax of the scores), queries and keys its
  // normalised ones, H its value heads; a computed page (ExploreWeights::kComputed) stores its A.
  bool linear = false;
  // What the page calls each head (empty: "head h"): the book's GatedDeltaNet's maps are its (head,
  // value channel) pairs, "head 1 ch 3".
  std::vector<std::string> head_names;
  // A computed page's corrections (explore_layer_corrections), made once when first needed.
  mutable std::shared_ptr<const ExploreCorrections> corrections;
};

// The logit lens (nostalgebraist 2020): what each layer's residual stream would predict if the
// model ended there, x_l -> final_norm -> out_head -> softmax, for every position.
struct ExploreLens {
  std::vector<std::string> rows;  // "embeddings", "block 0", ..., "block L-1" (the model's own output)
  int64_t top = 0;                // tokens kept per row and position
  std::vector<int64_t> ids;       // (rows, T, top): the most probable ids, most probable first
  std::vector<float> probs;       // (rows, T, top): their probabilities
  std::map<int64_t, std::string> words;  // each id's label
};

struct ExplorePage {
  std::string title;   // "MultiHeadAttention (seed 123) on ..."
  std::string source;  // "walkthrough" | "module" | "checkpoint"
  std::vector<std::string> tokens;
  bool causal = true;
  double dropout = 0.0;  // active dropout probability (0: none)
  std::vector<ExploreLayer> layers;
  std::vector<int64_t> ids;     // the tokens' ids, for a model's page (empty otherwise)
  int64_t generated_from = -1;  // tokens from here on were generated (qkv explore --generate); -1: none
  ExploreLens lens;             // empty (no rows) unless the page is a model's
  Tensor rollout;  // (T, T)
  Tensor rollout_thumbnail;  // (n, n), pooled as the layers' thumbnails
  std::vector<ExploreStep> pipeline;
  int64_t pipeline_layer = -1;  // the one layer whose steps the pipeline holds (keep_pipeline_layer); -1: all
};

// Drops the pipeline's steps of every layer but `layer` (a page too large with all of them).
void keep_pipeline_layer(ExplorePage& page, int64_t layer);

// The model view's thumbnail size in pixels (page.html draws them at this size).
inline constexpr int64_t kExploreThumbnail = 110;

// (rows, T, T) -> (rows, n, n), n = min(T, kExploreThumbnail): each pixel the largest value of its
// block of cells (so that a thin diagonal stays visible).
Tensor explore_thumbnail(const Tensor& matrices);

// The chapter on a sentence as `qkv walkthrough` computes it: its named steps are the pipeline
// (the same numbers `qkv walkthrough --json` prints), its MultiHeadAttention the layer.
ExplorePage explore_walkthrough(const Walkthrough& w);

// One module's forward on x as `qkv forward` runs it: `trace` from module.forward(x, &trace),
// `output` its result, `inputs` (T, d_in) the first batch item's input.
ExplorePage explore_module(AttentionModule& module, const AttentionModuleInfo& info, const AttentionConfig& config,
                           const Tensor& inputs, const AttentionTrace& trace, const Tensor& output,
                           std::vector<std::string> tokens, std::string title);

// What a model's page adds to its forward on `ids`.
struct ExploreModelOptions {
  int64_t generated_from = -1;  // ids from here on were generated (the page marks them)
  // The induction score's sequence: n random ids (SplitMix64 from induction_seed, uniform over the
  // vocabulary) repeated once; 2 n <= the context length; 0: not measured.
  int64_t induction_tokens = 0;
  uint64_t induction_seed = 0;
  int64_t lens_top = 0;                 // the logit lens's tokens per position (0: no lens)
  const Tokenizer* tokenizer = nullptr; // the lens's labels (ids as numbers without one)
};

// Every block of a model of any family on `ids` (one sequence, eval mode, nothing drawn): one
// forward watched layer by layer (models/observer.h), each block's input, its norm, queries, keys
// and values per head (after QK-norm and RoPE; a grouped-query head's keys and values its group's),
// weights and context, the attention's and the feed-forward's outputs and the residual stream
// after it, named and captioned in the family's words (models/family.h: the attention-only LM's
// page holds its projection matrices too, larger models' would outweigh the page); with
// options.lens_top, the logit lens through the model's own end (LanguageModel::head_logits). Needs
// the float weights (not a bf16-only load).
ExplorePage explore_model(LanguageModel& model, const std::vector<int64_t>& ids, std::vector<std::string> tokens,
                          std::string title, const ExploreModelOptions& options = {});

// How the page stores tensors. kAuto: float32 (exact) when the page stays under
// kExploreExactBytes, else float16 when it fits max_bytes, else 8 bits.
enum class ExplorePrecision { kAuto, kF32, kF16, kU8 };
ExplorePrecision parse_explore_precision(const std::string& name);  // "auto" | "f32" | "f16" | "u8"
const char* explore_precision_name(ExplorePrecision p);
inline constexpr int64_t kExploreExactBytes = 24ll << 20;

// Where the layers' (H, T, T) weights come from: stored in the page, or computed by the page from
// the layer's queries and keys (stored as float16 whatever the values' precision), one head when
// it is first shown: the scores as the neuron view shows them (explore_page_scores), softmax, and
// the cells where that differs from qkv's weights by more than kExploreComputedTolerance replaced
// by qkv's float32 values (the page stores those). A layer then costs 2 T H D values, not H T^2.
// A linear layer's weights (ExploreLayer::linear) are no softmax: stored whatever this says.
enum class ExploreWeights { kAuto, kStored, kComputed };
ExploreWeights parse_explore_weights(const std::string& name);  // "auto" | "stored" | "computed"
inline constexpr double kExploreComputedTolerance = 5e-6;

struct ExploreStorage {
  ExplorePrecision values = ExplorePrecision::kF32;  // never kAuto once resolved
  bool computed = false;                             // ExploreWeights::kComputed
};

// The page's size in bytes with storage s (values resolved), before it is made: the template, the
// base 85 of every tensor (causal weights stored as their lower triangle) and the labels (computed
// weights' corrections not counted: they are known once the page is made).
int64_t estimate_page_bytes(const ExplorePage& page, ExploreStorage s);
// kAuto picks, in order, the first that fits: stored float32 (up to kExploreExactBytes), stored
// float16, computed with float16 values, computed with 8-bit values, stored 8-bit.
ExploreStorage resolve_storage(const ExplorePage& page, ExplorePrecision p, ExploreWeights w, int64_t max_bytes);
// A lower bound of the size of a page of `layers` x `heads` (T, T) attention weights of head
// dimension D, before anything is computed: the smaller of the weights stored (their lower
// triangles when causal) at p (kAuto: 8 bits) and queries and keys as float16 (w decides when not
// kAuto), plus `square_steps` more (T, T) matrices per head that the pipeline shows (a module's
// scores and scaled scores), stored at p (kAuto: 8 bits) whatever w says.
int64_t minimum_page_bytes(int64_t layers, int64_t heads, int64_t head_dim, int64_t tokens, bool causal,
                           ExplorePrecision p, ExploreWeights w, int64_t square_steps = 0);

// The queries and keys as the page holds them: float16, or float32 when one is beyond float16's range
// (encode_tensor's rule, fits_half).
ExploreCorrections explore_corrections(const ExploreLayer& layer, bool causal, double tolerance);
// The layer's corrections at kExploreComputedTolerance, made on the first call and kept in
// layer.corrections.
const ExploreCorrections& explore_layer_corrections(const ExploreLayer& layer, bool causal);

// What the page computes for head h, query i of a computed layer (page.html's computeHead, the
// same operations in the same order in double precision): per key j the softmax of
// scores(q16, k16) written as float32, q16 and k16 the queries and keys as the page holds them; `out` (T).
void explore_page_weights(const ExploreLayer& layer, bool causal, const std::vector<float>& q16,
                          const std::vector<float>& k16, int64_t h, int64_t i, float* out);

// The whole HTML file.
std::string explore_html(const ExplorePage& page, ExploreStorage s);

// The page template (src/explore/page.html) as compiled in.
const std::string& explore_template();

}  // namespace qkv

// qkv/models/gpt.h - the book's GPT model (chapter 4): GPT-2's architecture.
//
// Legend: B batch, T tokens, E emb_dim, V vocab_size, H heads, D = E / H, L n_layers.
//
//   ids (B, T) -> x = tok_emb.weight[ids] + pos_emb.weight[0:T]       (B, T, E)
//              -> x = drop_emb(x)
//              -> L x TransformerBlock:
//                   x = x + drop_shortcut(att(norm1(x)))             att: the book's MultiHeadAttention(E, E, ...)
//                   x = x + drop_shortcut(ff(norm2(x)))              ff: Linear(E, 4E) -> GELU -> Linear(4E, E)
//              -> final_norm(x) -> out_head: x @ out_head.weight.T   (B, T, V), no bias
//
// One dropout rate (the book's drop_rate) for the embeddings, the attention weights and the
// shortcuts. The head is the book's own Linear (untied), or tied to tok_emb.weight as GPT-2's files
// are (tied_head: one tensor, both gradients added into it). State names are the book's:
// tok_emb.weight, pos_emb.weight, trf_blocks.N.att.{W_query,W_key,W_value}.{weight,bias},
// trf_blocks.N.att.out_proj.{weight,bias}, trf_blocks.N.att.mask, trf_blocks.N.ff.layers.{0,2}.
// {weight,bias}, trf_blocks.N.norm{1,2}.{scale,shift}, final_norm.{scale,shift}, out_head.weight
// (not listed when tied). Built from Generator(s) it holds what torch.manual_seed(s) followed by
// the book's GPTModel(cfg) holds (tok_emb, pos_emb, the blocks in order - each att's W_query,
// W_key, W_value, out_proj, then ff's layers - and out_head), and in training mode its dropouts
// draw PyTorch's masks from that generator in the book's order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/generator.h"
#include "qkv/kernels/attention_spec.h"
#include "qkv/models/language_model.h"
#include "qkv/models/option_fields.h"
#include "qkv/modules/feed_forward.h"
#include "qkv/modules/layer_norm.h"
#include "qkv/modules/layers.h"
#include "qkv/modules/multi_head_attention.h"

namespace qkv {

struct GPTConfig {
  int64_t vocab_size = 50257;
  int64_t context_length = 1024;
  int64_t emb_dim = 768;
  int64_t n_layers = 12;
  bool qkv_bias = false;
  bool tied_head = false;  // out_head.weight is tok_emb.weight (GPT-2's files); false: the book's own head
  AttentionPath path = AttentionPath::kAuto;
  // The blocks' attention: heads (the book's n_heads), head_dim = emb_dim / heads (set_head_dim),
  // causal, dropout = the book's drop_rate (the embeddings' and the shortcuts' too), dtype (the
  // precision of every product of the model: the feed-forward's and the head's too).
  kernels::AttentionSpec attention = {.heads = 12, .head_dim = 64, .dropout = 0.1};
};

// GPT-2's sizes with the book's GPT_CONFIG_124M settings (drop_rate 0.1, qkv_bias false, untied):
// gpt2-small (E 768, L 12, H 12), gpt2-medium (1024, 24, 16), gpt2-large (1280, 36, 20),
// gpt2-xl (1600, 48, 25); vocabulary 50,257; context 1,024. Throws qkv::Error naming the known ones.
GPTConfig gpt_preset(const std::string& name);
const std::vector<std::string>& gpt_preset_names();

// head_dim = emb_dim / heads; throws qkv::Error "emb_dim (10) must be divisible by n_heads (4)".
void set_head_dim(GPTConfig& c);
// Throws qkv::Error naming the first field out of range (the attention's by the config's keys).
void validate_gpt_config(const GPTConfig& c);

// The fields as the book's cfg dict names them (JSON keys and qkv train's flags).
template <typename V, typename... C>
  requires(std::same_as<std::remove_const_t<C>, GPTConfig> && ...)
void visit_fields(V&& v, C&... c) {
  v(OptionField{"vocab_size", "--vocab-size", "Vocabulary size", true, true}, c.vocab_size...);
  v(OptionField{"context_length", "--context-length", "Positions the model has", true, true}, c.context_length...);
  v(OptionField{"emb_dim", "--d-model", "Embedding width E", true, true}, c.emb_dim...);
  v(OptionField{"n_heads", "--num-heads", "Attention heads per block (dividing E)", true, true}, c.attention.heads...);
  v(OptionField{"n_layers", "--num-layers", "Transformer blocks", true, true}, c.n_layers...);
  v(OptionField{"drop_rate", "--dropout", "Dropout on the embeddings, attention weights and shortcuts, in [0, 1)",
                true, true},
    c.attention.dropout...);
  v(OptionField{"qkv_bias", "--qkv-bias", "Give the query, key and value projections a bias", false, true},
    c.qkv_bias...);
  v(OptionField{"tied_head", "--tied-head", "The output head is the token embedding (GPT-2's files)", false, false},
    c.tied_head...);
  v(OptionField{"attention", "--attention",
                "auto (fused; textbook while dropout is on, for PyTorch's masks) | fused | textbook", true, false},
    c.path...);
  v(OptionField{"dtype", "--dtype", "The products: f32 | bf16 (bf16 mode: every product of the model, its operands rounded to bf16, float32 sums)", true, false}, c.attention.dtype...);
}

nlohmann::json to_json(const GPTConfig& c);
GPTConfig gpt_config_from_json(const nlohmann::json& j);  // set_head_dim applied; qkv::Error on bad keys

// One block: x = x + drop(att(norm1(x))); x = x + drop(ff(norm2(x))).
class TransformerBlock : public Module {
 public:
  TransformerBlock(const GPTConfig& c, Generator& gen);
  const char* type_name() const override { return "TransformerBlock"; }
  void collect_state(const std::string& prefix, std::vector<StateEntry>& out) override;
  void train(bool on = true) override;
  Tensor forward(const Tensor& x, AttentionTrace* trace = nullptr);  // (B, T, E) -> (B, T, E)
  Tensor backward(const Tensor& doutput);
  // x (B, Tn, E) at the cache's next positions, updated in place; records nothing for backward.
  // w16: the block's weights in bf16 (GPTModel::keep_bf16_weights), read in bf16 mode. Working
  // rows from the caller: h and a (B Tn, E), hidden (B Tn, 4E); allocates nothing.
  struct Weights16 {
    std::vector<uint16_t> qkv, out, fc, proj;  // att's fused (3E, E), out_proj (E, E), ff (4E, E), (E, 4E)
  };
  struct Scratch {
    float *h, *a, *hidden;
  };
  void forward_cached(float* x, int64_t B, int64_t Tn, kernels::KvCache& cache, int64_t layer, const Weights16* w16,
                      const Scratch& scratch);

  MultiHeadAttention att;
  FeedForward ff;
  LayerNorm norm1, norm2;
  Dropout drop_att, drop_ff;  // the book's one drop_shortcut module, applied twice: two records

};

class GPTModel : public LanguageModel {
 public:
  // gen: the weights' draws, then the dropouts' (it must outlive the model).
  GPTModel(const GPTConfig& config, Generator& gen);
  const char* type_name() const override { return "GPTModel"; }
  void collect_state(const std::string& prefix, std::vector<StateEntry>& out) override;
  void train(bool on = true) override;

  int64_t vocab_size() const override { return config.vocab_size; }
  int64_t context_length() const override { return config.context_length; }
  nlohmann::json config_json() const override { return to_json(config); }
  std::string describe() const override;

  Tensor forward(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens) override;  // (B, T, V)
  void backward(const Tensor& dlogits) override;
  kernels::KvCache make_cache(int64_t batch, kernels::CacheDtype dtype = kernels::CacheDtype::kF32,
                              int64_t capacity = 0) const override;
  using LanguageModel::forward_cached;  // (B, V) of the last new token, through forward_cached_into
  // The same into logits (B V floats): no allocation once the working rows have grown to the
  // step's size (every decoding step after the first).
  void forward_cached_into(const std::vector<int64_t>& ids, int64_t batch, int64_t tokens, kernels::KvCache& cache,
                           float* logits) override;
  bool has_cache() const override { return !blocks.empty(); }
  // Dropout as for sequences [begin, begin + B) of a batch of `total`: the masks the whole batch's
  // forward gives those sequences (a data-parallel rank's slice; Dropout::set_batch_slice).
  // (0, 0): whole batches.
  void set_batch_slice(int64_t begin, int64_t total);
  // Every block's attention trace of the last forward (set before it: record_traces(true)).
  void record_traces(bool on) { traces_.assign(on ? blocks.size() : 0, AttentionTrace{}); }
  const std::vector<AttentionTrace>& traces() const { return traces_; }
  // Inference with bf16 weights: every block's projections and the head rounded to bf16 now and
  // kept beside the floats; forward_cached then reads them when config.attention.dtype is bf16
  // (half the bytes per decoded token: bf16 storage, float32 sums). A snapshot: train(true)
  // drops it, and a caller that changes the weights otherwise (load_state_dict, an optimizer
  // step) calls this again. false: drops it.
  void keep_bf16_weights(bool on = true);
  bool has_bf16_weights() const { return !blocks16_.empty(); }

  GPTConfig config;
  Embedding tok_emb;   // weight (V, E)
  Embedding pos_emb;   // weight (context_length, E)
  Dropout drop_emb;
  std::vector<TransformerBlock> blocks;  // trf_blocks.N
  LayerNorm final_norm;
  Linear out_head;     // weight (V, E), no bias; its weight and dweight are tok_emb's when tied

 private:
  Shape x_shape_;  // (B, T, E) of the last forward
  std::vector<AttentionTrace> traces_;
  std::vector<TransformerBlock::Weights16> blocks16_;  // keep_bf16_weights, one per block, or empty
  std::vector<uint16_t> head16_;                       // (V, E)
  // forward_cached's working rows, grown to the largest step: x, h, a (B Tn, E), hidden (B Tn, 4E),
  // the last positions' rows (B, E).
  std::vector<float> step_x_, step_h_, step_a_, step_hidden_, step_last_;
};

}  // namespace qkv

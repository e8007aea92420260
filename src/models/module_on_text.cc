// An attention module on text. See include/qkv/models/module_on_text.h.
#include "qkv/models/module_on_text.h"

#include <optional>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"

namespace qkv {
namespace {

bool is_embedding_name(const std::string& name) { return name == "token_emb.weight" || name == "pos_emb.weight"; }

}  // namespace

ModuleOnText::ModuleOnText(const std::string& module, const AttentionConfig& config, int64_t vocab_size,
                           uint64_t seed)
    : info_(attention_module_info(module)), config_(config), gen_(seed) {
  QKV_CHECK(config.context_length > 0, module, " on text needs context_length (", config.context_length,
            ") positive: the positional embedding's rows");
  // torch.manual_seed(S); embeddings = ...; module = Class(...)
  embedding_ = std::make_unique<TokenPositionEmbedding>(vocab_size, config.context_length, config.d_in, gen_);
  module_ = make_attention_module(module, config, gen_);
}

void ModuleOnText::load_state_dict(const std::map<std::string, Tensor>& state) {
  std::map<std::string, Tensor> module_state, embedding_state;
  for (const auto& [name, t] : state) (is_embedding_name(name) ? embedding_state : module_state)[name] = t;
  // The embeddings' shapes are checked before the module loads (which changes nothing unless
  // everything checks), so a bad file leaves both as they were.
  std::map<std::string, Tensor> embedding_full;
  for (const StateEntry& e : embedding_->state_dict()) {
    auto it = embedding_state.find(e.name);
    if (it == embedding_state.end()) continue;
    QKV_CHECK(it->second.shape() == e.shape(), "the tensor ", excerpt(e.name), " has shape ",
              shape_str(it->second.shape()), "; the embedding needs ", shape_str(e.shape()));
    embedding_full[e.name] = it->second;
  }
  module_->load_state_dict(module_state, /*strict=*/true);
  for (const StateEntry& e : embedding_->state_dict())
    if (embedding_full.count(e.name)) e.load(embedding_full.at(e.name));
}

std::vector<StateEntry> ModuleOnText::state_dict() {
  std::vector<StateEntry> out = module_->state_dict();
  for (const StateEntry& e : embedding_->state_dict()) out.push_back(e);
  return out;
}

Tensor ModuleOnText::embed(const std::vector<int64_t>& ids) {
  const int64_t T = static_cast<int64_t>(ids.size());
  QKV_CHECK(T >= 1, "the text has no tokens: there is nothing to attend over");
  QKV_CHECK(T <= config_.context_length, "the text is ", T, " tokens but context_length is ", config_.context_length,
            " (the positional table", info_.causal ? " and the causal mask cover" : " covers",
            " only that many); shorten the text or raise it");
  tokens_ = T;
  Tensor x = embedding_->forward(ids, 1, T);         // (1, T, d_in)
  if (module_->input_rank() == 2) x = x.select(0, 0);  // (T, d_in) for the v1/v2 classes
  x.set_name("input");
  return x;
}

Tensor ModuleOnText::forward(const std::vector<int64_t>& ids, AttentionTrace* trace) {
  return module_->forward(embed(ids), trace);
}

Tensor ModuleOnText::backward(const Tensor& doutput) {
  QKV_CHECK(tokens_ > 0, "ModuleOnText: backward before forward");
  const Tensor dx = module_->backward(doutput);
  // x = embedding.forward(ids, 1, T): on through the embeddings to their tables
  embedding_->backward(dx.dim() == 2 ? dx.unsqueeze(0) : dx);
  return dx;
}

ModuleResult run_module(const ModuleRun& r) {
  const AttentionConfig& c = r.config;
  std::optional<ModuleOnText> text_model;
  std::unique_ptr<AttentionModule> own;
  Generator gen(r.seed);
  if (r.ids) {
    text_model.emplace(r.module, c, r.vocab_size, r.seed);
    if (r.state) text_model->load_state_dict(*r.state);
  } else {
    own = make_attention_module(r.module, c, gen);
    if (r.state) own->load_state_dict(*r.state, /*strict=*/true);
  }
  AttentionModule& m = text_model ? text_model->module() : *own;
  m.train(r.train);
  const Tensor x = text_model ? text_model->embed(*r.ids) : *r.input;
  const std::string expected = m.input_rank() == 2 ? str("(num_tokens, d_in = ", c.d_in, ")")
                                                   : str("(batch, num_tokens, d_in = ", c.d_in, ")");
  QKV_CHECK(x.dim() == m.input_rank() && x.size(-1) == c.d_in, r.module, ": ", r.input_name, " has shape ",
            shape_str(x.shape()), "; expected ", expected);
  if (attention_module_info(r.module).causal && !text_model)  // (text is checked against the table by embed)
    QKV_CHECK(x.size(1) <= c.context_length, r.module, ": ", r.input_name, " has ", x.size(1),
              " tokens but context_length is ", c.context_length,
              " (the causal mask covers only that many); use a larger --context-length or a shorter input");
  AttentionTrace trace;
  ModuleResult out;
  QKV_CHECK(!r.cached || (!r.attention_weights && !r.doutput && !r.train), r.module,
            ": the cached form is inference only (no attention weights, backward or training mode)");
  out.output = r.cached ? m.forward_token_by_token(x) : m.forward(x, r.attention_weights ? &trace : nullptr);
  if (r.attention_weights) {
    out.attention_weights = {{"attn_weights", trace.weights}};
    if (trace.dropped_weights.numel() > 0) out.attention_weights.push_back({"attn_weights_dropped", trace.dropped_weights});
  }
  const std::vector<StateEntry> entries = text_model ? text_model->state_dict() : m.state_dict();
  for (const StateEntry& e : entries) out.state.push_back({e.name, e.value()});
  if (r.doutput) {
    QKV_CHECK(r.doutput->shape() == out.output.shape(), r.doutput_name, " has shape ", shape_str(r.doutput->shape()),
              "; it must have the output's shape ", shape_str(out.output.shape()));
    out.gradients = {{"input", text_model ? text_model->backward(*r.doutput) : m.backward(*r.doutput)}};
    for (const StateEntry& e : text_model ? text_model->state_dict() : m.state_dict())
      if (e.grad != nullptr) out.gradients.push_back({e.name, *e.grad});
  }
  return out;
}

}  // namespace qkv

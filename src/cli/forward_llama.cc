// qkv forward --module llama | qwen3: the Llama 3 and Qwen3 families (models/llama.h) on ids,
// forward and backward, from a Hugging Face directory.
//
//   qkv forward --module qwen3 --weights DIR (--input ids.safetensors | --text T) [--dtype bf16]
//               [--attention fused|textbook] [--output logits.safetensors] [--attn-weights w.safetensors]
//               [--save-weights state.safetensors] [--grad-output g.safetensors --grads-out grads.safetensors]
//
// DIR holds config.json (its model_type must be the module's), model.safetensors or its shards,
// and for --text tokenizer.json. --attn-weights writes model.layers.N.attn_weights (B, H, T, T).
#include "forward_gpt.h"
#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/models/llama_weights.h"
#include "qkv/text/hf_tokenizer.h"

namespace qkv::cli {

int run_forward_llama(const ModuleFlags& m, const ForwardOutputs& out, const CLI::App& sub) {
  for (const char* flag : {"--d-in", "--d-out", "--num-kv-heads", "--rope", "--rope-base", "--window", "--alibi",
                           "--softcap", "--vocab-size", "--d-model", "--num-layers", "--context-length", "--qkv-bias",
                           "--num-heads", "--dropout", "--train", "--seed"})
    if (sub.count(flag) > 0) bad_flag(flag, "is not a flag of --module ", m.module, " (its model is config.json's)");
  if (m.weights.empty()) bad_flag("--weights", "--module ", m.module, " needs --weights DIR (config.json and model.safetensors)");
  const LlamaWeights w = read_llama_weights(m.weights);
  QKV_CHECK(llama_family_name(w.config.family) == m.module, excerpt(m.weights), "'s config.json has model_type \"",
            llama_family_name(w.config.family), "\"; --module ", m.module, " reads \"", m.module, "\"");
  check_forward_outputs(out);
  Generator gen;
  std::unique_ptr<LlamaModel> model = llama_model_from(w, m.variants.dtype, m.path, gen);
  ModelForward run{*model, m.module};
  run.encode = [&](const std::string& text) {
    return HfTokenizer::load(m.weights + "/tokenizer.json").encode(text);
  };
  run.record_traces = [&](bool on) { model->record_traces(on); };
  run.traces = [&]() -> const std::vector<AttentionTrace>& { return model->traces(); };
  run.trace_prefix = "model.layers.";
  run.state = [&] {
    NamedTensors t;
    for (const StateEntry& e : model->state_dict()) t.push_back({e.name, e.value()});
    return t;
  };
  return run_model_forward(run, out, sub);
}

}  // namespace qkv::cli

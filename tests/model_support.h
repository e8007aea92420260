// tests/model_support.h - what the model tests share: a model's attention weights as its forward
// makes them, small models of the families (GPT, Llama / Qwen3, Qwen3.5), and GGUF files edited
// into broken ones.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/tensor.h"
#include "qkv/io/gguf.h"
#include "qkv/models/decoder.h"
#include "qkv/models/gpt.h"
#include "qkv/models/llama.h"
#include "qkv/models/model_forward.h"
#include "qkv/models/qwen3_5.h"

namespace qkv {

// Every block's (H, T, T) softmax weights of the model's forward on one sequence (eval mode).
inline std::vector<Tensor> forward_weights(LanguageModel& model, const std::vector<int64_t>& ids) {
  model.eval();
  const ModelForward r = run_model_forward(model, ids, 1, static_cast<int64_t>(ids.size()), true);
  std::vector<Tensor> out;
  for (const auto& [name, w] : r.attention_weights) out.push_back(w.select(0, 0).contiguous());
  return out;
}

// The book's GPT model of these sizes (qkv_bias on), drawn from Generator(seed).
inline DecoderModel tiny_gpt(int64_t vocab, int64_t context, int64_t emb_dim, int64_t heads, int64_t layers,
                             Generator& gen, double drop_rate = 0.0) {
  return DecoderModel(gpt_spec(vocab, context, emb_dim, heads, layers, drop_rate, /*qkv_bias=*/true), gen);
}

// A Llama 3 ("llama"), Qwen2.5 ("qwen2": biases on q, k, v) or Qwen3 ("qwen3") spec of these sizes, as config.json would say them.
inline DecoderSpec llama_sizes(const std::string& family, int64_t vocab, int64_t hidden, int64_t intermediate,
                               int64_t layers, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t context,
                               bool tied = false, double rope_theta = 10000.0, double eps = 1e-6) {
  return read_llama_config({{"model_type", family}, {"vocab_size", vocab}, {"hidden_size", hidden},
                            {"intermediate_size", intermediate}, {"num_hidden_layers", layers},
                            {"num_attention_heads", heads}, {"num_key_value_heads", kv_heads}, {"head_dim", head_dim},
                            {"max_position_embeddings", context}, {"tie_word_embeddings", tied},
                            {"rope_theta", rope_theta}, {"rms_norm_eps", eps}},
                           "the test's config");
}

// A tiny Qwen3.5 spec (vocabulary 40, heads of 8 with rotary on half their dims) with these sizes and
// `layer_types` ("linear_attention" / "full_attention" each), its Gated DeltaNet layers 4 value heads
// of 6 over 2 key heads of 4 with a convolution of 3, as a config.json's text_config would say them.
inline DecoderSpec qwen3_5_sizes(int64_t hidden, int64_t intermediate, int64_t heads, int64_t kv_heads,
                                 int64_t context, const std::vector<std::string>& layer_types, bool tied = false) {
  const nlohmann::json text = {{"vocab_size", 40}, {"hidden_size", hidden}, {"intermediate_size", intermediate},
                               {"num_hidden_layers", layer_types.size()}, {"num_attention_heads", heads},
                               {"num_key_value_heads", kv_heads}, {"head_dim", 8}, {"max_position_embeddings", context},
                               {"rope_parameters", {{"rope_theta", 10000.0}, {"partial_rotary_factor", 0.5}}},
                               {"layer_types", layer_types}, {"linear_num_value_heads", 4}, {"linear_num_key_heads", 2},
                               {"linear_key_head_dim", 4}, {"linear_value_head_dim", 6}, {"linear_conv_kernel_dim", 3}};
  return read_qwen3_5_config({{"model_type", "qwen3_5"}, {"tie_word_embeddings", tied}, {"text_config", text}});
}

// The GGUF file `bytes` with its metadata and tensors edited by `meta` and `tensors`, re-serialized.
inline std::string edited(const std::string& bytes, const std::function<void(std::vector<GgufMetadata>&)>& meta,
                          const std::function<void(std::vector<GgufTensorSource>&)>& tensors = nullptr) {
  const GgufFile f = GgufFile::parse(bytes, "model.gguf");
  std::vector<GgufMetadata> m;
  for (const auto& [key, value] : f.metadata()) m.push_back({key, value});
  std::vector<GgufTensorSource> t;
  for (const GgufTensor& x : f.tensors())
    t.push_back({x.name, x.shape, x.type, [&x](uint8_t* out) { std::memcpy(out, x.data, static_cast<size_t>(x.bytes)); }});
  meta(m);
  if (tensors) tensors(t);
  return serialize_gguf(m, t);  // (the tensors' bytes copied out of f here)
}

}  // namespace qkv

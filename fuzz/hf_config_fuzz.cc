// A Llama 3 / Qwen3 config.json (read_llama_config after parse_json), then the model's size from
// it: any input either gives a description that validates and whose parameter count is computed
// without overflow, or is a qkv::Error naming the key. Nothing is allocated for the model.
#include "fuzz_target.h"
#include "qkv/core/json_read.h"
#include "qkv/models/decoder_spec.h"
#include "qkv/models/llama.h"

QKV_FUZZ_TARGET(data) {
  const nlohmann::json j = qkv::parse_json(data, "fuzz config.json");
  const qkv::DecoderSpec s = qkv::read_llama_config(j, "fuzz config.json");
  QKV_FUZZ_EXPECT(s.layers >= 0 && s.width > 0 && s.vocab_size > 0);
  QKV_FUZZ_EXPECT(qkv::decoder_parameters(s) > 0);
}

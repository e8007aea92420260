// A model from llama.cpp's GGUF file, as `qkv generate --weights FILE.gguf` loads and runs it
// (models/gguf_model.h: the family from general.architecture, its description from the metadata,
// the tokenizer from tokenizer.ggml.*, the tensors checked against the model, quantized weights
// kept as their blocks), through a temporary file. Then the file's tokenizer on a text with the
// chat's special tokens (every id inside its vocabulary, decoded back), and two tokens generated
// greedily through the KV cache from ids inside the model's vocabulary (each new id inside it).
#include <string>
#include <vector>

#include "fuzz_target.h"
#include "qkv/models/family.h"
#include "qkv/models/generation.h"
#include "temp_files.h"

namespace {
qkv_fuzz::TempFiles g_files("gguf-model");
}  // namespace

QKV_FUZZ_TARGET(data) {
  qkv::LoadedModel m = qkv::load_model(g_files.write("model.gguf", data));
  qkv::LanguageModel& model = *m.model;
  const int64_t vocab = model.vocab_size();
  QKV_FUZZ_EXPECT(vocab > 0);
  std::vector<int64_t> prompt = {0, vocab - 1};
  if (m.tokenizer) {
    const std::vector<int64_t> ids = m.tokenizer->encode("Hi <|im_start|>user\nHello, world!<|im_end|> 12 ab");
    for (const int64_t id : ids) QKV_FUZZ_EXPECT(id >= 0 && id < m.tokenizer->vocab_size());
    (void)m.tokenizer->decode(ids);
    for (const int64_t id : ids)
      if (id < vocab) prompt.push_back(id);
  }
  qkv::SamplingOptions o;
  o.max_new_tokens = 2;
  o.temperature = 0;
  for (const int64_t id : qkv::generate(model, prompt, o)) QKV_FUZZ_EXPECT(id >= 0 && id < vocab);
}

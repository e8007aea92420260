// GPT-2's weights (qkv/models/gpt_weights.h): a Hugging Face folder's config.json and
// model.safetensors, or a book-layout file, read, mapped to the book's names and loaded into a
// model. The input is config.json, then "\n=====\n", then the safetensors bytes (no separator: no
// config.json, the bytes a lone file). Both go through a temporary folder, read_gpt_weights taking
// a path; the loaded model then runs one token forward, which must give finite-or-not logits of
// the model's vocabulary without a crash.
#include <string>

#include "fuzz_target.h"
#include "qkv/models/gpt_weights.h"
#include "temp_files.h"

namespace {
qkv_fuzz::TempFiles g_files("gpt");
}  // namespace

QKV_FUZZ_TARGET(data) {
  constexpr std::string_view kSeparator = "\n=====\n";
  const size_t cut = data.find(kSeparator);
  g_files.remove("config.json");
  std::string path;
  if (cut == std::string_view::npos) {
    path = g_files.write("model.safetensors", data);
  } else {
    g_files.write("config.json", data.substr(0, cut));
    g_files.write("model.safetensors", data.substr(cut + kSeparator.size()));
    path = g_files.dir();
  }
  const qkv::GptWeights w = qkv::read_gpt_weights(path);
  qkv::Generator gen;
  const std::unique_ptr<qkv::LanguageModel> m = qkv::gpt_model_from(w, gen);
  QKV_FUZZ_EXPECT(m->vocab_size() == w.spec.vocab_size);
  const qkv::Tensor logits = m->forward({0}, 1, 1);
  QKV_FUZZ_EXPECT(logits.numel() == w.spec.vocab_size);
}

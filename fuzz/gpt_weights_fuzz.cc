// GPT-2's weights (qkv/models/gpt_weights.h): a Hugging Face folder's config.json and
// model.safetensors, or a book-layout file, read, mapped to the book's names and loaded into a
// model. The input is config.json, then "\n=====\n", then the safetensors bytes (no separator: no
// config.json, the bytes a lone file). Both go through a temporary folder, read_gpt_weights taking
// a path; the loaded model then runs one token forward, which must give finite-or-not logits of
// the model's vocabulary without a crash.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "fuzz_target.h"
#include "qkv/models/gpt_weights.h"

namespace {

// One folder per process, its files rewritten for every input. A global made before RemoveAtExit's
// (same file: constructed in order, destroyed in reverse), so that it outlives the clean-up.
std::string make_temp_dir() {
  const char* t = std::getenv("TMPDIR");
  std::string d = std::string(t && *t ? t : "/tmp") + "/qkv-fuzz-gpt-" + std::to_string(getpid());
  ::mkdir(d.c_str(), 0700);
  return d;
}
const std::string g_temp_dir = make_temp_dir();
const std::string& temp_dir() { return g_temp_dir; }

void write(const std::string& path, std::string_view bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  QKV_FUZZ_EXPECT(f != nullptr);
  QKV_FUZZ_EXPECT(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
  QKV_FUZZ_EXPECT(std::fclose(f) == 0);
}

struct RemoveAtExit {
  ~RemoveAtExit() {
    std::remove((temp_dir() + "/config.json").c_str());
    std::remove((temp_dir() + "/model.safetensors").c_str());
    ::rmdir(temp_dir().c_str());
  }
} remove_at_exit;

}  // namespace

QKV_FUZZ_TARGET(data) {
  constexpr std::string_view kSeparator = "\n=====\n";
  const size_t cut = data.find(kSeparator);
  const std::string model = temp_dir() + "/model.safetensors", config = temp_dir() + "/config.json";
  std::remove(config.c_str());
  if (cut == std::string_view::npos) {
    write(model, data);
  } else {
    write(config, data.substr(0, cut));
    write(model, data.substr(cut + kSeparator.size()));
  }
  const qkv::GptWeights w = qkv::read_gpt_weights(cut == std::string_view::npos ? model : temp_dir());
  qkv::Generator gen;
  const std::unique_ptr<qkv::LanguageModel> m = qkv::gpt_model_from(w, gen);
  QKV_FUZZ_EXPECT(m->vocab_size() == w.spec.vocab_size);
  const qkv::Tensor logits = m->forward({0}, 1, 1);
  QKV_FUZZ_EXPECT(logits.numel() == w.spec.vocab_size);
}

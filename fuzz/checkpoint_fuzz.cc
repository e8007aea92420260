// The checkpoint loader (load_checkpoint takes a path, so the input goes through a temporary
// file), then, for the built-in tasks, what `qkv train --resume` does with it: a Trainer from the
// checkpoint's options, restored from its tensors. Tasks that read files named by the options
// (text, data) stop after loading: a fuzzed path must not make the fuzzer read the machine's files.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "fuzz_target.h"
#include "qkv/train/checkpoint.h"

namespace {

// One file per process, rewritten for every input. A global made before RemoveAtExit's (same
// file: constructed in order, destroyed in reverse), so that it outlives the clean-up; a
// function-local static would be made later and destroyed first, and read after its end.
std::string make_temp_path() {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/qkv-fuzz-checkpoint-" + std::to_string(getpid()) + ".safetensors";
}
const std::string g_temp_path = make_temp_path();
const std::string& temp_path() { return g_temp_path; }

struct RemoveAtExit {
  ~RemoveAtExit() { std::remove(temp_path().c_str()); }
} remove_at_exit;

}  // namespace

QKV_FUZZ_TARGET(data) {
  std::FILE* f = std::fopen(temp_path().c_str(), "wb");
  QKV_FUZZ_EXPECT(f != nullptr);
  QKV_FUZZ_EXPECT(std::fwrite(data.data(), 1, data.size(), f) == data.size());
  QKV_FUZZ_EXPECT(std::fclose(f) == 0);
  const qkv::Checkpoint c = qkv::load_checkpoint(temp_path());
  if (!qkv::is_builtin_task(c.options.task)) return;
  qkv::Trainer trainer(c.options);
  trainer.restore(c);
  QKV_FUZZ_EXPECT(trainer.steps_done() == c.step);
}

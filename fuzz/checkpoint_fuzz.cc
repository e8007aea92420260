// The checkpoint loader (load_checkpoint takes a path, so the input goes through a temporary
// file), then, for the built-in tasks, what `qkv train --resume` does with it: a Trainer from the
// checkpoint's options, restored from its tensors. Tasks that read files named by the options
// (text, data) stop after loading: a fuzzed path must not make the fuzzer read the machine's files.
#include <string>

#include "fuzz_target.h"
#include "qkv/train/checkpoint.h"
#include "temp_files.h"

namespace {
qkv_fuzz::TempFiles g_files("checkpoint");
}  // namespace

QKV_FUZZ_TARGET(data) {
  const qkv::Checkpoint c = qkv::load_checkpoint(g_files.write("checkpoint.safetensors", data));
  if (!qkv::is_builtin_task(c.options.task)) return;
  qkv::Trainer trainer(c.options);
  trainer.restore(c);
  QKV_FUZZ_EXPECT(trainer.steps_done() == c.step);
}

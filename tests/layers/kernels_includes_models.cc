// Built only by the test layers.an_upward_include_does_not_compile (tests/CMakeLists.txt): a source
// of the kernels layer that includes a header of the models layer above it. It must not compile:
// the kernels' include path holds only the kernels' headers and core's.
#include "qkv/kernels/attention_spec.h"
#include "qkv/models/gpt.h"

int kernels_probe() { return 0; }

// Built only by the test layers.a_downward_include_compiles (tests/CMakeLists.txt): the control for
// kernels_includes_models.cc, a kernels source including its own header and core's, which compiles.
#include "qkv/core/tensor.h"
#include "qkv/kernels/attention_spec.h"

int kernels_probe() { return qkv::Tensor::zeros({2}).numel() == 2 ? 0 : 1; }

// src/kernels/mha_testing.h - a switch for tests, not part of the library's interface.
#pragma once

namespace qkv::kernels {

// Runs the naive references (attention_forward_reference / _backward_reference) in place of the
// fused kernel inside mha_forward / mha_backward, process-wide, e.g. to test the pipeline's
// variants (grouped-query heads, RoPE, windows, ALiBi, softcap) on their own. Off by default;
// returns the previous setting.
bool mha_use_reference_attention(bool on);

}  // namespace qkv::kernels

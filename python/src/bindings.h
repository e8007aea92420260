// python/src/bindings.h - what the parts of the extension module `qkv._qkv` share.
//
// The module is a thin layer over the C++ library: it converts arguments (numpy arrays, Python
// strings and sets) to the library's views and options, releases the GIL while the library works,
// and turns the library's errors into Python exceptions. Nothing here computes attention,
// logits or tokens; every number comes from include/qkv.
//
//   encoding.cc            Encoding (tiktoken's interface over qkv::Encoding), get_encoding("gpt2")
//   arrays.cc              numpy arrays and keywords as the library's views and options
//   attention_bindings.cc  attention, attention_backward, attention_weights on (B, H, T, D) float32 arrays
//   mha_bindings.cc        mha_forward, mha_backward: the book's MultiHeadAttention in qkv's pipeline
//   model_bindings.cc      load, make_model: language models through the front door (qkv/qkv.h)
//   gpt_bindings.cc        GptCore: the book's GPTModel in C++ for qkv.torch.GPTModel's autograd Function
//   delta_rule_bindings.cc delta_rule, delta_rule_backward: the Gated DeltaNets' recurrence
//   extension_module.cc    the module itself: errors, threads
#pragma once

#include <pybind11/pybind11.h>


namespace qkv::python {

namespace py = pybind11;

// After a long call with the GIL released: a Ctrl-C that arrived meanwhile raises now
// (KeyboardInterrupt) instead of the call returning its result.
void raise_pending_signals();

void bind_encoding(py::module_& m);
void bind_attention(py::module_& m);
void bind_mha(py::module_& m);
void bind_models(py::module_& m);
void bind_gpt(py::module_& m);
void bind_delta_rule(py::module_& m);

}  // namespace qkv::python

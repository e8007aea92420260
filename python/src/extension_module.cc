// python/src/extension_module.cc - the extension module qkv._qkv: its exceptions and thread control.
//
// Errors: qkv::Error (the library's one exception type: bad arguments, shapes, missing or altered
// vocabulary files) becomes qkv.Error, a ValueError carrying the library's message. The tokenizer
// maps its own cases to tiktoken's exceptions (encoding.cc). No C++ exception reaches Python
// untranslated and none aborts the interpreter.
#include <mutex>

#include <nlohmann/json.hpp>

#include "bindings.h"
#include "qkv/core/error.h"
#include "qkv/core/machine.h"
#include "qkv/core/thread_pool.h"
#include "qkv/kernels/simd.h"

namespace qkv::python {

void raise_pending_signals() {
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

namespace {

void set_num_threads(int n) {
  if (n < 1) throw py::value_error("set_num_threads: the thread count must be >= 1, not " + std::to_string(n));
  py::gil_scoped_release release;  // a pool's threads are started and joined without the GIL
  set_default_thread_count(n);      // calls running now keep their pool (DefaultPoolPin) to their end
}

int get_num_threads() {
  return default_pool_threads();  // set_num_threads' count, also inside a running call's callback
}

}  // namespace
}  // namespace qkv::python

PYBIND11_MODULE(_qkv, m) {
  namespace py = pybind11;
  using namespace qkv::python;
  m.doc() = "qkv's C++ library for Python: GPT-2's tokenizer (tiktoken's interface), the fused attention kernels, GPT models";

  static py::exception<qkv::Error> error(m, "Error", PyExc_ValueError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const qkv::Error& e) {
      PyErr_SetString(error.ptr(), e.what());
    } catch (const nlohmann::json::exception& e) {  // a file's JSON that a reader did not type-check first
      PyErr_SetString(error.ptr(), e.what());
    }
  });

  qkv::kernels::apply_simd_environment();  // $QKV_SIMD before any kernel runs (a bad one: qkv.Error on import)
  qkv::burst_prefetch();                    // and $QKV_PREFETCH

  m.def("set_num_threads", &set_num_threads, py::arg("n"),
        "Threads the kernels use in the calls that start from now on (running calls keep theirs; replaces "
        "QKV_NUM_THREADS, whose value, else the cores, is the default).");
  m.def("get_num_threads", &get_num_threads, "Threads the kernels use.");

  bind_encoding(m);
  bind_attention(m);
  bind_mha(m);
  bind_models(m);
  bind_gpt(m);
  bind_delta_rule(m);
}

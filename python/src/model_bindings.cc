// python/src/model_bindings.cc - language models through qkv's front door (qkv/qkv.h) for Python:
// what qkv.load and qkv.make_model (python/qkv/__init__.py) wrap.
//
//   m = _qkv.load(path, dtype=None, vocab_dir="", num_heads=None, quantize=None, dequantize=False)   # GPT-2's weights, a Llama 3 / Qwen3 folder, a qkv checkpoint
//   m = _qkv.make_model("gpt2-small", seed=123, dtype=None)         # untrained, as torch.manual_seed(S); GPTModel(cfg)
//   m.generate(prompt_ids, max_new_tokens, temperature, top_k, seed, stop_at_eos, on_token) -> new ids
//   m.logits(ids (T) or (B, T) integers) -> float32 (T, V) or (B, T, V)
//   m.state_dict() -> {name: float32 array}, the model's own names and order (the book's for GPT)
//
// One call runs at a time on a model (its mutex), with the GIL released and the default pool pinned
// (set_num_threads meanwhile applies to the calls after it); generation takes the GIL back only
// between tokens, to honour Ctrl-C and to hand each id to on_token. Every number comes from the
// library: this file converts and checks arguments.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cxxabi.h>

#include <atomic>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bindings.h"
#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/core/limits.h"
#include "qkv/core/thread_pool.h"
#include "qkv/qkv.h"

namespace qkv::python {
namespace {

struct Model {
  LoadedModel loaded;
  bool preset = false;  // drawn from a seed: generation continues its generator, as `qkv generate --model`
  std::mutex mutex;     // one call at a time (the model keeps per-call state: caches, traces)
  std::atomic<std::thread::id> owner{};  // the thread holding `mutex`
};

// One call at a time on a model, other threads waiting their turn. A call made from inside another
// on the same thread (an on_token that calls the model's generate, logits or state_dict) would wait
// for itself: it is a qkv.Error instead. Made with the GIL held; waits without it.
class ModelLock {
 public:
  ModelLock(Model& m, const char* fn) : m_(m), lock_(m.mutex, std::defer_lock) {
    if (m.owner.load() == std::this_thread::get_id())
      throw Error(str(fn, ": the model is in the middle of a generate() on this thread (its on_token called back into ",
                      "the model); call it after generate() returns"));
    if (!lock_.try_lock()) {
      py::gil_scoped_release release;  // the holder may need the GIL (on_token) to finish
      lock_.lock();
    }
    m.owner = std::this_thread::get_id();
  }
  ~ModelLock() { m_.owner = std::thread::id(); }
  ModelLock(const ModelLock&) = delete;
  ModelLock& operator=(const ModelLock&) = delete;

 private:
  Model& m_;
  std::unique_lock<std::mutex> lock_;
};

std::optional<Dtype> dtype_of_name(const std::optional<std::string>& name) {
  if (!name) return std::nullopt;
  return parse_dtype(*name);  // qkv.Error naming it
}

// `obj` as (B, T) ids of at most `max_tokens` a row, checked before they are copied.
std::vector<int64_t> ids_of(const char* fn, py::handle obj, int64_t max_tokens, int64_t vocab,
                            int64_t& batch, int64_t& tokens, bool& one_row) {
  // Integers only: a float array is a TypeError rather than ids rounded without a word.
  const py::array a = py::array::ensure(obj);
  if (!a) throw py::type_error(std::string(fn) + ": ids must be a sequence or array of integers");
  if (a.size() > 0 && a.dtype().kind() != 'i' && a.dtype().kind() != 'u')
    throw py::type_error(std::string(fn) + ": ids must be integers, not " + std::string(py::str(a.dtype())));
  if (a.ndim() != 1 && a.ndim() != 2)
    throw py::value_error(std::string(fn) + ": ids must be (T) or (B, T), got " + std::to_string(a.ndim()) +
                          " dimensions");
  one_row = a.ndim() == 1;
  batch = one_row ? 1 : a.shape(0);
  tokens = one_row ? a.shape(0) : a.shape(1);
  if (batch < 1 || tokens < 1)
    throw py::value_error(std::string(fn) + ": ids must hold at least one token in each of at least one row");
  if (tokens > max_tokens)
    throw Error(str(fn, ": ids hold ", tokens, " tokens a row, more than the model's context_length of ", max_tokens));
  const int64_t n = checked_product({batch, tokens}, "ids");
  check_memory_request(checked_bytes(n, 8, "ids"), "the ids as int64");
  // Unsigned 64-bit ids above 2^63 - 1 would wrap to negative ones in the cast below.
  if (a.dtype().kind() == 'u' && a.dtype().itemsize() == 8) {
    const auto largest = a.attr("max")().cast<uint64_t>();
    if (largest > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw Error(str(fn, ": id ", largest, " is outside the vocabulary of ", vocab));
  }
  const auto v = converted<py::array_t<int64_t, py::array::c_style | py::array::forcecast>>(a);  // or MemoryError
  return std::vector<int64_t>(v.data(), v.data() + v.size());
}

std::vector<int64_t> generate_ids(Model& self, const std::vector<int64_t>& prompt, std::optional<int64_t> max_new_tokens,
                                  double temperature, std::optional<int64_t> top_k, std::optional<uint64_t> seed,
                                  bool stop_at_eos, py::object on_token) {
  LoadedModel& m = self.loaded;
  SamplingOptions o;
  o.max_new_tokens = max_new_tokens.value_or(m.default_new_tokens);
  o.temperature = temperature;
  const int64_t V = m.model->vocab_size();
  if (top_k && (*top_k < 1 || *top_k > V))
    throw Error(str("generate: top_k (", *top_k, ") must be in [1, ", V, "] (the model's vocabulary) or None"));
  o.top_k = top_k.value_or(0);
  if (stop_at_eos) {
    if (!m.eos_id) throw Error("generate: stop_at_eos, but the model's tokenizer has no end-of-text token");
    o.eos_id = m.eos_id;
    o.stop_ids = m.end_ids;  // Qwen3's and Llama 3's end-of-turn tokens too
  }
  // The command line's draws: a given seed starts Generator(seed); without one, a preset continues
  // the generator its weights came from and a loaded model starts from the default seed.
  if (seed) o.seed = *seed;
  else if (self.preset) o.generator = m.generator.get();
  std::exception_ptr failed;  // on_token's exception, or a KeyboardInterrupt, raised after the loop
  std::vector<int64_t> out;
  {
    ModelLock model_lock(self, "generate");
    py::gil_scoped_release release;
    DefaultPoolPin pool_pin;
    out = generate(*m.model, prompt, o, [&](int64_t id) {
      py::gil_scoped_acquire acquire;
      try {
        if (PyErr_CheckSignals() != 0) throw py::error_already_set();
        if (!on_token.is_none()) {
          const py::object keep = on_token(id);
          if (!keep.is_none() && !keep.cast<bool>()) return false;  // on_token returned False: stop here
        }
        return true;
      } catch (abi::__forced_unwind&) {  // the thread ended by the interpreter's exit: let it unwind
        throw;
      } catch (...) {
        failed = std::current_exception();
        return false;
      }
    });
  }
  if (failed) std::rethrow_exception(failed);
  return out;
}

py::array logits_of(Model& self, py::handle ids_obj) {
  int64_t B = 0, T = 0;
  bool one_row = false;
  LoadedModel& m = self.loaded;
  const std::vector<int64_t> ids =
      ids_of("logits", ids_obj, m.model->context_length(), m.model->vocab_size(), B, T, one_row);
  const int64_t V = m.model->vocab_size();
  // The (B, T, V) output, the largest thing the call makes, against the memory limit before any work.
  check_memory_request(checked_bytes(checked_product({B, T, V}, "logits: B x T x V"), 4, "logits: B x T x V"),
                       "logits: the (B, T, V) output");
  Tensor y;
  {
    ModelLock model_lock(self, "logits");
    py::gil_scoped_release release;
    DefaultPoolPin pool_pin;
    m.model->eval();
    y = m.model->forward(ids, B, T).contiguous();  // (B, T, V)
  }
  raise_pending_signals();
  std::vector<py::ssize_t> shape = one_row ? std::vector<py::ssize_t>{T, V} : std::vector<py::ssize_t>{B, T, V};
  py::array_t<float> out(shape);
  std::memcpy(out.mutable_data(), y.data(), static_cast<size_t>(y.numel()) * sizeof(float));
  return out;
}

py::dict state_dict_of(Model& self) {
  py::dict d;
  ModelLock model_lock(self, "state_dict");
  for (const StateEntry& e : self.loaded.model->state_dict()) {
    const Tensor t = e.value().contiguous();
    std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
    py::array_t<float> a(shape);
    std::memcpy(a.mutable_data(), t.data(), static_cast<size_t>(t.numel()) * sizeof(float));
    d[py::str(e.name)] = std::move(a);
  }
  return d;
}

std::shared_ptr<Model> load(const std::string& path, const std::optional<std::string>& dtype,
                            const std::string& vocab_dir, std::optional<int64_t> num_heads,
                            const std::optional<std::string>& quantize, bool dequantize) {
  LoadOptions o;
  o.vocab_dir = vocab_dir;
  o.dtype = dtype_of_name(dtype);
  o.num_heads = num_heads;
  o.quantize = quantize.value_or("");
  o.dequantize = dequantize;
  auto model = std::make_shared<Model>();
  py::gil_scoped_release release;
  DefaultPoolPin pool_pin;
  model->loaded = load_model(path, o);
  return model;
}

std::shared_ptr<Model> make(const std::string& preset, uint64_t seed, const std::optional<std::string>& dtype,
                            const std::string& vocab_dir) {
  LoadOptions o;
  o.vocab_dir = vocab_dir;
  o.dtype = dtype_of_name(dtype);
  auto model = std::make_shared<Model>();
  model->preset = true;
  py::gil_scoped_release release;
  DefaultPoolPin pool_pin;
  model->loaded = make_model(preset, seed, o);
  return model;
}

}  // namespace

void bind_models(py::module_& m) {
  py::class_<Model, std::shared_ptr<Model>>(m, "_Model")
      .def("generate", &generate_ids, py::arg("prompt_ids"), py::arg("max_new_tokens") = py::none(),
           py::arg("temperature") = 0.0, py::arg("top_k") = py::none(), py::arg("seed") = py::none(),
           py::arg("stop_at_eos") = false, py::arg("on_token") = py::none())
      .def("logits", &logits_of, py::arg("ids"))
      .def("state_dict", &state_dict_of)
      .def("encode", [](Model& self, const std::string& text) { return self.loaded.encode(text); }, py::arg("text"))
      .def("decode", [](Model& self, const std::vector<int64_t>& ids) { return self.loaded.decode(ids); },
           py::arg("ids"))  // every tokenizer refuses an id outside its vocabulary, naming it
      .def_property_readonly("config_json", [](const Model& self) { return self.loaded.model->config_json().dump(); })
      .def_property_readonly("description", [](const Model& self) { return self.loaded.description; })
      .def_property_readonly("vocab_size", [](const Model& self) { return self.loaded.model->vocab_size(); })
      .def_property_readonly("context_length", [](const Model& self) { return self.loaded.model->context_length(); })
      .def_property_readonly("default_new_tokens", [](const Model& self) { return self.loaded.default_new_tokens; })
      .def_property_readonly("eos_id", [](const Model& self) { return self.loaded.eos_id; })
      .def_property_readonly("end_ids", [](const Model& self) { return self.loaded.end_ids; })
      .def_property_readonly("has_tokenizer", [](const Model& self) { return self.loaded.tokenizer != nullptr; });
  m.def("load", &load, py::arg("path"), py::arg("dtype") = py::none(), py::arg("vocab_dir") = "",
        py::arg("num_heads") = py::none(), py::arg("quantize") = py::none(), py::arg("dequantize") = false);
  m.def("make_model", &make, py::arg("preset"), py::arg("seed") = 123, py::arg("dtype") = py::none(),
        py::arg("vocab_dir") = "");
}

}  // namespace qkv::python

// python/src/gpt_bindings.cc - the book's GPTModel computed by qkv's C++ (models/gpt.h) for
// qkv.torch.GPTModel's autograd Function: the parameters stay PyTorch's, and each call copies
// them in and the gradients out.
//
//   core = _qkv.GptCore(cfg_json, names)   # the book's cfg (dropout 0: the core never drops) and
//                                          # the torch module's parameter names, checked against its own
//   logits = core.forward(ids, params)      # ids (B, T) int64, params: float32 arrays in `names` order
//   grads = core.backward(dlogits, forward_id)   # (B, T, V) -> a float32 array per parameter
//   core.forward_id                          # counts forwards: a backward must follow its own
//
// Legend: B batch, T tokens, V vocabulary. One call at a time (a mutex); the GIL released and the
// default pool pinned (DefaultPoolPin) while the model computes and the copies run (over the pool).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bindings.h"
#include "qkv/core/error.h"
#include "qkv/core/generator.h"
#include "qkv/core/thread_pool.h"
#include "qkv/models/decoder.h"
#include "qkv/models/gpt.h"

namespace qkv::python {
namespace {

using F32 = py::array_t<float, py::array::c_style | py::array::forcecast>;

// A float32 array of `shape` for a result: one of slots' arrays again when nothing but the slot
// holds it any more (the caller dropped the tensor it became), else a new one kept in a free slot
// (or the last). Fresh memory costs a page fault per 4 KiB: for GPT-2 small's gradients, 0.9 s of a
// 3 s step. Two slots for the logits: `logits = model(ids)` holds the last step's logits while the
// next forward runs.
py::array_t<float> recycled(std::span<py::object> slots, const std::vector<py::ssize_t>& shape) {
  for (py::object& slot : slots) {
    if (!slot || slot.ref_count() != 1) continue;
    auto a = py::reinterpret_borrow<py::array_t<float>>(slot);
    if (std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim()) == shape) return a;
  }
  py::object* slot = &slots.back();
  for (py::object& s : slots)
    if (!s || s.ref_count() == 1) slot = &s;
  py::array_t<float> a(shape);
  *slot = a;
  return a;
}

// Copies of float runs, split in chunks of 256 Ki floats over the default pool (the caller pins
// it): one thread's memcpy leaves part of the memory bandwidth idle, and GPT-2
// small's parameters, gradients and logits are 1.2 GB a step.
struct CopyRun {
  float* dst;
  const float* src;
  int64_t n;
};
void copy_runs(const std::vector<CopyRun>& runs) {
  constexpr int64_t kChunk = int64_t{1} << 18;
  std::vector<CopyRun> chunks;  // runs cut to at most kChunk floats
  for (const CopyRun& r : runs)
    for (int64_t at = 0; at < r.n; at += kChunk) chunks.push_back({r.dst + at, r.src + at, std::min(kChunk, r.n - at)});
  default_pool().parallel_for(static_cast<int64_t>(chunks.size()), [&](int64_t c, int) {
    const CopyRun& r = chunks[static_cast<size_t>(c)];
    std::memcpy(r.dst, r.src, static_cast<size_t>(r.n) * sizeof(float));
  });
}

class GptCore {
 public:
  GptCore(const std::string& cfg_json, const std::vector<std::string>& names) {
    DecoderSpec c = gpt_spec_from_cfg(nlohmann::json::parse(cfg_json));
    c.attention.dropout = 0.0;  // the torch module runs dropout itself (PyTorch's masks)
    model_ = build_model(c, gen_);
    model_->train(true);  // every forward keeps what its backward needs
    for (const StateEntry& e : model_->state_dict())
      if (e.is_parameter) params_.push_back(e);
    std::vector<std::string> own;
    for (const StateEntry& e : params_) own.push_back(e.name);
    QKV_CHECK(own == names, "GptCore: the module's parameters (", names.size(), ") are not the book's GPTModel's (",
              own.size(), ") in its order");
    grad_slots_.resize(params_.size());
  }

  py::array forward(py::handle ids_obj, const std::vector<py::handle>& params) {
    const auto ids_array = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(ids_obj);
    if (!ids_array || ids_array.ndim() != 2) throw py::value_error("GptCore.forward: ids must be a (B, T) int64 array");
    const int64_t B = ids_array.shape(0), T = ids_array.shape(1);
    const std::vector<int64_t> ids(ids_array.data(), ids_array.data() + ids_array.size());
    QKV_CHECK(params.size() == params_.size(), "GptCore.forward: ", params.size(), " parameters for ", params_.size());
    std::vector<F32> arrays;  // held until the copies are done
    std::vector<CopyRun> params_in;
    arrays.reserve(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      arrays.push_back(F32::ensure(params[i]));
      Tensor& t = *params_[i].tensor;
      QKV_CHECK(arrays.back() && arrays.back().size() == t.numel(), "GptCore.forward: parameter ", params_[i].name,
                " does not have ", t.numel(), " float32 values");
      params_in.push_back({t.data(), arrays.back().data(), t.numel()});
    }
    py::array_t<float> out = recycled(logits_slots_, {B, T, model_->vocab_size()});
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mutex_);
      DefaultPoolPin pool_pin;
      copy_runs(params_in);
      const Tensor y = model_->forward(ids, B, T);  // (B, T, V), contiguous
      QKV_CHECK(y.numel() == out.size(), "GptCore.forward: logits of ", y.numel(), " values for ", out.size());
      copy_runs({{out.mutable_data(), y.data(), y.numel()}});
      ++forward_id_;
    }
    raise_pending_signals();
    return out;
  }

  std::vector<py::array> backward(py::handle dlogits_obj, int64_t forward_id) {
    QKV_CHECK(forward_id == forward_id_, "GptCore.backward: the forward ", forward_id, " was followed by another (",
              forward_id_, "); run each backward before the next forward, or keep separate modules");
    const F32 d = F32::ensure(dlogits_obj);
    QKV_CHECK(d && d.ndim() == 3, "GptCore.backward: dlogits must be a (B, T, V) float32 array");
    std::vector<py::array_t<float>> grads;  // allocated with the GIL, filled without it
    std::vector<CopyRun> grads_out;        // their sources once the backward has run
    grads.reserve(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) {
      const Shape& shape = params_[i].tensor->shape();
      grads.push_back(recycled({&grad_slots_[i], 1}, std::vector<py::ssize_t>(shape.begin(), shape.end())));
      grads_out.push_back({grads.back().mutable_data(), nullptr, grads.back().size()});
    }
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mutex_);
      DefaultPoolPin pool_pin;
      Tensor dlogits = Tensor::empty({d.shape(0), d.shape(1), d.shape(2)});
      copy_runs({{dlogits.data(), d.data(), dlogits.numel()}});
      model_->zero_grad();
      model_->backward(dlogits);  // shape checked against the last forward's
      for (size_t i = 0; i < params_.size(); ++i) grads_out[i].src = params_[i].grad->data();
      copy_runs(grads_out);
    }
    raise_pending_signals();
    return {grads.begin(), grads.end()};
  }

  int64_t forward_id() const { return forward_id_; }

 private:
  Generator gen_{0};  // the model's construction draws (overwritten by every forward's parameters)
  std::unique_ptr<LanguageModel> model_;
  std::vector<StateEntry> params_;  // the parameters, in state_dict order
  std::mutex mutex_;
  int64_t forward_id_ = 0;
  py::object logits_slots_[2];           // the last two logits arrays handed out (recycled)
  std::vector<py::object> grad_slots_;   // the last gradient arrays handed out, one per parameter
};

}  // namespace

void bind_gpt(py::module_& m) {
  py::class_<GptCore>(m, "GptCore")
      .def(py::init<const std::string&, const std::vector<std::string>&>(), py::arg("cfg_json"), py::arg("names"))
      .def("forward", &GptCore::forward, py::arg("ids"), py::arg("params"))
      .def("backward", &GptCore::backward, py::arg("dlogits"), py::arg("forward_id"))
      .def_property_readonly("forward_id", &GptCore::forward_id);
}

}  // namespace qkv::python

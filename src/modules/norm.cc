// A block's normalisation by kind. See include/qkv/modules/norm.h.
#include "qkv/modules/norm.h"

#include <cstring>

#include "qkv/core/error.h"
#include "qkv/kernels/norm_rows.h"

namespace qkv {

const char* norm_kind_name(NormKind k) {
  return k == NormKind::kLayerNorm ? "layernorm" : k == NormKind::kRMSNorm ? "rmsnorm" : "none";
}

Norm::Norm(NormKind kind, int64_t emb_dim, double eps, bool unit_offset) {
  if (kind == NormKind::kLayerNorm) n_.emplace<LayerNorm>(emb_dim, eps);
  if (kind == NormKind::kRMSNorm) n_.emplace<RMSNorm>(emb_dim, eps, unit_offset);
}

NormKind Norm::kind() const {
  return std::holds_alternative<LayerNorm>(n_) ? NormKind::kLayerNorm
         : std::holds_alternative<RMSNorm>(n_) ? NormKind::kRMSNorm
                                                 : NormKind::kNone;
}

void Norm::collect_state(const std::string& prefix, std::vector<StateEntry>& out) {
  if (auto* l = std::get_if<LayerNorm>(&n_)) l->collect_state(prefix, out);
  if (auto* r = std::get_if<RMSNorm>(&n_)) r->collect_state(prefix, out);
}

Tensor Norm::forward(const Tensor& x) {
  if (auto* l = std::get_if<LayerNorm>(&n_)) return l->forward(x);
  if (auto* r = std::get_if<RMSNorm>(&n_)) return r->forward(x);
  return x;
}

Tensor Norm::backward(const Tensor& doutput) {
  if (auto* l = std::get_if<LayerNorm>(&n_)) return l->backward(doutput);
  if (auto* r = std::get_if<RMSNorm>(&n_)) return r->backward(doutput);
  return doutput;
}

void Norm::rows(const float* x, int64_t N, float* y) const {
  if (const auto* l = std::get_if<LayerNorm>(&n_)) {
    kernels::layer_norm_rows(x, N, l->scale.size(0), l->scale.data(), l->shift.data(), l->eps, y);
  } else if (const auto* r = std::get_if<RMSNorm>(&n_)) {
    kernels::rms_norm_rows(x, N, r->weight.size(0), r->scale(), r->eps, y);
  } else {
    QKV_CHECK(false, "Norm::rows: a block without a norm has no row width here; copy the rows instead");
  }
}

LayerNorm& Norm::layer_norm() {
  auto* l = std::get_if<LayerNorm>(&n_);
  QKV_CHECK(l != nullptr, "Norm: this is ", norm_kind_name(kind()), ", not a LayerNorm");
  return *l;
}

RMSNorm& Norm::rms_norm() {
  auto* r = std::get_if<RMSNorm>(&n_);
  QKV_CHECK(r != nullptr, "Norm: this is ", norm_kind_name(kind()), ", not an RMSNorm");
  return *r;
}

}  // namespace qkv

// GELU and FeedForward, and the SwiGLU feed-forward. See include/qkv/modules/feed_forward.h.
#include "qkv/modules/feed_forward.h"

#include <cmath>

#include "qkv/core/error.h"
#include "qkv/core/ops.h"
#include "qkv/core/pointwise.h"

namespace qkv {

Tensor gelu(const Tensor& x) {
  const Tensor c = x.contiguous();
  Tensor y = Tensor::empty(c.shape());
  gelu_tanh(c.data(), y.data(), c.numel());
  return y;
}

Tensor gelu_backward(const Tensor& x, const Tensor& dy) {
  QKV_CHECK(x.shape() == dy.shape(), "gelu_backward: x ", x.describe(), " and dy ", dy.describe(), " differ");
  const Tensor xc = x.contiguous(), dc = dy.contiguous();
  Tensor dx = Tensor::empty(xc.shape());
  gelu_tanh_backward(xc.data(), dc.data(), dx.data(), xc.numel());
  return dx;
}

FeedForward::FeedForward(int64_t emb_dim, int64_t hidden_dim, Generator& gen)
    : fc(emb_dim, hidden_dim, true, gen), proj(hidden_dim, emb_dim, true, gen) {}

void FeedForward::collect_state(const std::string& prefix, std::vector<StateEntry>& out) {
  fc.collect_state(prefix + "layers.0.", out);
  proj.collect_state(prefix + "layers.2.", out);
}

Tensor FeedForward::forward(const Tensor& x) {
  hidden_ = fc.forward(x);          // (..., 4E)
  return proj.forward(gelu(hidden_));  // (..., E)
}

Tensor FeedForward::backward(const Tensor& doutput) {
  QKV_CHECK(hidden_.defined(), "FeedForward: backward before forward");
  // return proj.forward(gelu(hidden_))
  const Tensor dgelu = proj.backward(doutput);
  // hidden_ = fc.forward(x)
  return fc.backward(gelu_backward(hidden_, dgelu));
}

SwiGLUFeedForward::SwiGLUFeedForward(int64_t emb_dim, int64_t hidden_dim, Generator& gen)
    : gate_proj(emb_dim, hidden_dim, false, gen), up_proj(emb_dim, hidden_dim, false, gen),
      down_proj(hidden_dim, emb_dim, false, gen) {}

void SwiGLUFeedForward::collect_state(const std::string& prefix, std::vector<StateEntry>& out) {
  gate_proj.collect_state(prefix + "gate_proj.", out);
  up_proj.collect_state(prefix + "up_proj.", out);
  down_proj.collect_state(prefix + "down_proj.", out);
}

Tensor SwiGLUFeedForward::forward(const Tensor& x) {
  gate_ = gate_proj.forward(x).contiguous();  // (..., F)
  up_ = up_proj.forward(x).contiguous();
  Tensor h = Tensor::empty(gate_.shape());
  swiglu(gate_.data(), up_.data(), h.data(), h.numel());  // silu(gate) * up
  return down_proj.forward(h);  // (..., E)
}

Tensor SwiGLUFeedForward::backward(const Tensor& doutput) {
  QKV_CHECK(gate_.defined(), "SwiGLUFeedForward: backward before forward");
  const Tensor dh = down_proj.backward(doutput).contiguous();  // (..., F)
  Tensor dg = Tensor::empty(gate_.shape()), du = Tensor::empty(up_.shape());
  swiglu_backward(gate_.data(), up_.data(), dh.data(), dg.data(), du.data(), dh.numel());
  return add(gate_proj.backward(dg), up_proj.backward(du));
}

}  // namespace qkv

namespace qkv {

const char* feed_forward_kind_name(FeedForwardKind k) {
  return k == FeedForwardKind::kGelu ? "gelu" : k == FeedForwardKind::kSwiGLU ? "swiglu" : "none";
}

FeedForwardNet::FeedForwardNet(FeedForwardKind kind, int64_t emb_dim, int64_t hidden_dim, Generator& gen) {
  if (kind == FeedForwardKind::kGelu) f_.emplace<FeedForward>(emb_dim, hidden_dim, gen);
  if (kind == FeedForwardKind::kSwiGLU) f_.emplace<SwiGLUFeedForward>(emb_dim, hidden_dim, gen);
}

FeedForwardKind FeedForwardNet::kind() const {
  return std::holds_alternative<FeedForward>(f_)         ? FeedForwardKind::kGelu
         : std::holds_alternative<SwiGLUFeedForward>(f_) ? FeedForwardKind::kSwiGLU
                                                          : FeedForwardKind::kNone;
}

void FeedForwardNet::collect_state(const std::string& prefix, std::vector<StateEntry>& out) {
  if (auto* g = std::get_if<FeedForward>(&f_)) g->collect_state(prefix, out);
  if (auto* s = std::get_if<SwiGLUFeedForward>(&f_)) s->collect_state(prefix, out);
}

Tensor FeedForwardNet::forward(const Tensor& x) {
  if (auto* g = std::get_if<FeedForward>(&f_)) return g->forward(x);
  if (auto* s = std::get_if<SwiGLUFeedForward>(&f_)) return s->forward(x);
  fail("FeedForwardNet: a block without a feed-forward has nothing to run");
}

Tensor FeedForwardNet::backward(const Tensor& doutput) {
  if (auto* g = std::get_if<FeedForward>(&f_)) return g->backward(doutput);
  if (auto* s = std::get_if<SwiGLUFeedForward>(&f_)) return s->backward(doutput);
  fail("FeedForwardNet: a block without a feed-forward has nothing to run");
}

std::vector<Linear*> FeedForwardNet::linears() {
  if (auto* g = std::get_if<FeedForward>(&f_)) return {&g->fc, &g->proj};
  if (auto* s = std::get_if<SwiGLUFeedForward>(&f_)) return {&s->gate_proj, &s->up_proj, &s->down_proj};
  return {};
}

std::vector<const Linear*> FeedForwardNet::linears() const {
  std::vector<const Linear*> out;
  for (Linear* l : const_cast<FeedForwardNet*>(this)->linears()) out.push_back(l);
  return out;
}

FeedForward& FeedForwardNet::gelu_net() {
  auto* g = std::get_if<FeedForward>(&f_);
  QKV_CHECK(g != nullptr, "FeedForwardNet: this is ", feed_forward_kind_name(kind()), ", not GELU's");
  return *g;
}

SwiGLUFeedForward& FeedForwardNet::swiglu_net() {
  auto* s = std::get_if<SwiGLUFeedForward>(&f_);
  QKV_CHECK(s != nullptr, "FeedForwardNet: this is ", feed_forward_kind_name(kind()), ", not SwiGLU's");
  return *s;
}

const FeedForward& FeedForwardNet::gelu_net() const { return const_cast<FeedForwardNet*>(this)->gelu_net(); }
const SwiGLUFeedForward& FeedForwardNet::swiglu_net() const { return const_cast<FeedForwardNet*>(this)->swiglu_net(); }

}  // namespace qkv

// explore_html's storage of a page's tensors (qkv/explore/explore.h): the dtype each tensor gets
// and its 8-bit bytes, read back from the JSON inside the written page.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "qkv/explore/explore.h"
#include "test_support.h"

namespace qkv {
namespace {

// A page of two tokens and one head with the given extra pipeline steps.
ExplorePage tiny_page(std::vector<ExploreStep> steps) {
  ExplorePage p;
  p.title = "t";
  p.source = "module";
  p.tokens = {"a", "b"};
  ExploreLayer l;
  l.weights = Tensor::zeros({1, 2, 2});
  l.weights.at({0, 0, 0}) = 1.0f;
  l.weights.at({0, 1, 0}) = 0.25f;
  l.weights.at({0, 1, 1}) = 0.75f;
  l.queries = Tensor::zeros({1, 2, 1});
  l.keys = Tensor::zeros({1, 2, 1});
  l.thumbnails = explore_thumbnail(l.weights);
  p.layers.push_back(l);
  p.rollout = l.weights.select(0, 0).contiguous();
  p.rollout_thumbnail = p.rollout;
  p.pipeline = std::move(steps);
  return p;
}

ExploreStep step_of(const std::string& name, std::initializer_list<float> values) {
  Tensor t = Tensor::zeros({static_cast<int64_t>(values.size())});
  int64_t n = 0;
  for (float v : values) t.data()[n++] = v;
  return {name, name, t, false, -1, {}, ""};
}

nlohmann::json page_data(const ExplorePage& p, ExplorePrecision precision) {
  const std::string html = explore_html(p, {precision});
  const std::string open = "<script id=\"qkv-data\" type=\"application/json\">";
  const size_t a = html.find(open) + open.size(), b = html.find("</script>", a);
  return nlohmann::json::parse(html.substr(a, b - a));
}


TEST(ExplorePage, AFloat16PageKeepsATensorBeyondFloat16AsFloat32) {
  const nlohmann::json d = page_data(tiny_page({step_of("big", {1e6f, 1.0f}), step_of("small", {65504.0f, -2.0f})}),
                                     ExplorePrecision::kF16);
  EXPECT_EQ(d["tensors"]["big"]["dtype"], "f32");    // 1e6 would read as inf
  EXPECT_EQ(d["tensors"]["small"]["dtype"], "f16");  // 65504 is float16's largest
  EXPECT_EQ(d["tensors"]["small"]["b85"], "_9B$Y");  // 0x7bff, 0xc000 little-endian: ff 7b 00 c0
  EXPECT_EQ(d["tensors"]["small"]["bytes"], 4);
}

TEST(ExplorePage, EightBitStorageGivesMinusInfinityACodeOfItsOwn) {
  const nlohmann::json d = page_data(tiny_page({step_of("masked", {-kInf, 0.5f, -1.0f, kInf})}), ExplorePrecision::kU8);
  const nlohmann::json& t = d["tensors"]["masked"];
  EXPECT_EQ(t["dtype"], "u8");
  EXPECT_EQ(t["lo"], -1.0);
  EXPECT_EQ(t["hi"], 0.5);
  EXPECT_EQ(t["b85"], "_nh;^");  // 255 (-inf), 252 (hi), 0 (lo), 254 (inf)
}

}  // namespace
}  // namespace qkv

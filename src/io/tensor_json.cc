// Tensors as JSON. See include/qkv/io/tensor_json.h.
#include "qkv/io/tensor_json.h"

#include <cmath>
#include <limits>

#include "qkv/core/error.h"

namespace qkv {

nlohmann::json tensor_to_json(const Tensor& t) {
  if (!t.defined()) return nullptr;
  nlohmann::json data = nlohmann::json::array();
  for (float v : t.to_vector()) {
    if (std::isnan(v)) data.push_back("nan");
    else if (std::isinf(v)) data.push_back(v > 0 ? "inf" : "-inf");
    else data.push_back(static_cast<double>(v));
  }
  return {{"shape", t.shape()}, {"data", std::move(data)}};
}

Tensor tensor_from_json(const nlohmann::json& j) {
  if (j.is_null()) return Tensor();
  QKV_CHECK(j.is_object() && j.contains("shape") && j.contains("data") && j["shape"].is_array() &&
                j["data"].is_array(),
            "a tensor in JSON must be an object {\"shape\": [...], \"data\": [...]}");
  Shape shape;
  for (const auto& d : j["shape"]) {
    QKV_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0, "tensor JSON: bad dimension ", d.dump());
    shape.push_back(d.get<int64_t>());
  }
  std::vector<float> values;
  for (const auto& v : j["data"]) {
    if (v.is_number()) {
      values.push_back(v.get<float>());
    } else if (v.is_string() && (v == "inf" || v == "-inf" || v == "nan")) {
      const float inf = std::numeric_limits<float>::infinity();
      values.push_back(v == "inf" ? inf : v == "-inf" ? -inf : std::numeric_limits<float>::quiet_NaN());
    } else {
      fail("tensor JSON: unexpected value ", v.dump());
    }
  }
  return Tensor::from(shape, std::move(values));
}

}  // namespace qkv

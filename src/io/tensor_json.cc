// Tensors as JSON. See include/qkv/io/tensor_json.h.
#include "qkv/io/tensor_json.h"

#include <cmath>
#include <limits>
#include <span>

#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/core/json_read.h"

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
    // parsed text holds non-negative integers as unsigned; a value built in memory as signed
    const bool ok = d.is_number_unsigned()
                        ? d.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                        : d.is_number_integer() && d.get<int64_t>() >= 0;
    QKV_CHECK(ok, "tensor JSON: a dimension must be a non-negative integer, not ", json_excerpt(d));
    shape.push_back(d.get<int64_t>());
  }
  const int64_t numel = checked_product(std::span<const int64_t>(shape.data(), shape.size()), "tensor JSON: the shape");
  QKV_CHECK(static_cast<int64_t>(j["data"].size()) == numel, "tensor JSON: shape ", shape_str(shape), " holds ", numel,
            " values but data has ", j["data"].size());
  std::vector<float> values;
  for (const auto& v : j["data"]) {
    if (v.is_number()) {
      values.push_back(v.get<float>());
    } else if (v.is_string() && (v == "inf" || v == "-inf" || v == "nan")) {
      const float inf = std::numeric_limits<float>::infinity();
      values.push_back(v == "inf" ? inf : v == "-inf" ? -inf : std::numeric_limits<float>::quiet_NaN());
    } else {
      fail("tensor JSON: unexpected value ", json_excerpt(v));
    }
  }
  return Tensor::from(shape, std::move(values));
}

}  // namespace qkv

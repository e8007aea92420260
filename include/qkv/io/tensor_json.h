// qkv/io/tensor_json.h - tensors as JSON: {"shape": [2, 3], "data": [...row-major...]}.
// Infinities and NaN, which JSON cannot hold as numbers, are the strings "inf", "-inf", "nan"
// (the convention of tests/data/book.json). An undefined (absent) tensor is JSON null, both ways.
#pragma once

#include <nlohmann/json.hpp>

#include "qkv/core/tensor.h"

namespace qkv {

nlohmann::json tensor_to_json(const Tensor& t);
Tensor tensor_from_json(const nlohmann::json& j);  // throws qkv::Error on a malformed object

}  // namespace qkv

// Strictly typed JSON values of options. See include/qkv/models/option_fields.h.
#include "qkv/models/option_fields.h"

#include <limits>

#include "qkv/core/json_read.h"

namespace qkv {
namespace {

[[noreturn]] void wrong_type(const nlohmann::json& j, const std::string& key, const char* expected) {
  fail("'", key, "' must be ", expected, ", not ", json_excerpt(j));
}

}  // namespace

void read_option(const nlohmann::json& j, int64_t& out, const std::string& key) {
  if (!j.is_number_integer() ||
      (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())))
    wrong_type(j, key, "an integer");
  out = j.get<int64_t>();
}

void read_option(const nlohmann::json& j, uint64_t& out, const std::string& key) {
  if (!j.is_number_unsigned()) wrong_type(j, key, "a non-negative integer");
  out = j.get<uint64_t>();
}

void read_option(const nlohmann::json& j, double& out, const std::string& key) {
  if (!j.is_number()) wrong_type(j, key, "a number");
  out = j.get<double>();
}

void read_option(const nlohmann::json& j, bool& out, const std::string& key) {
  if (!j.is_boolean()) wrong_type(j, key, "true or false");
  out = j.get<bool>();
}

void read_option(const nlohmann::json& j, std::string& out, const std::string& key) {
  if (!j.is_string()) wrong_type(j, key, "a string");
  out = j.get<std::string>();
}

void read_option(const nlohmann::json& j, AttentionPath& out, const std::string& key) {
  if (!j.is_string()) wrong_type(j, key, "one of \"auto\", \"fused\", \"textbook\"");
  try {
    out = parse_attention_path(j.get<std::string>());
  } catch (const Error& e) {
    fail("'", key, "': ", e.what());
  }
}

void read_option(const nlohmann::json& j, Dtype& out, const std::string& key) {
  if (!j.is_string()) wrong_type(j, key, "one of \"f32\", \"bf16\"");
  try {
    out = parse_dtype(j.get<std::string>());
  } catch (const Error& e) {
    fail("'", key, "': ", e.what());
  }
}

void read_option(const nlohmann::json& j, kernels::RopeLayout& out, const std::string& key) {
  if (!j.is_string()) wrong_type(j, key, "one of \"none\", \"half\", \"interleaved\"");
  try {
    out = kernels::parse_rope_layout(j.get<std::string>());
  } catch (const Error& e) {
    fail("'", key, "': ", e.what());
  }
}

}  // namespace qkv

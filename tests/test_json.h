// Reading the JSON fixtures that Python wrote. Python's json module writes Infinity, -Infinity
// and NaN as bare words, which strict JSON (and nlohmann::json) rejects; they are turned into the
// strings "inf", "-inf", "nan" (what qkv::tensor_from_json reads) before parsing.
#pragma once

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace qkv::testing_support {

inline nlohmann::json load_python_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::stringstream buf;
  buf << in.rdbuf();
  std::string text = buf.str(), out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) out += text[++i];
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    if (text.compare(i, 9, "-Infinity") == 0) { out += "\"-inf\""; i += 8; continue; }
    if (text.compare(i, 8, "Infinity") == 0) { out += "\"inf\""; i += 7; continue; }
    if (text.compare(i, 3, "NaN") == 0) { out += "\"nan\""; i += 2; continue; }
    out += c;
  }
  return nlohmann::json::parse(out);
}

}  // namespace qkv::testing_support

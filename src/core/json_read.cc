// JSON from outside, read safely. See include/qkv/core/json_read.h.
#include "qkv/core/json_read.h"

#include <algorithm>
#include <set>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/limits.h"

namespace qkv {
namespace {

using nlohmann::json;

// nlohmann's DOM builder, with the nesting counted and (for JsonKeys::kUnique) the keys of every
// open object remembered. Returning false stops the parse at once.
class LimitedDomParser : public nlohmann::detail::json_sax_dom_parser<json> {
  using Base = nlohmann::detail::json_sax_dom_parser<json>;

 public:
  LimitedDomParser(json& result, int max_depth, bool unique_keys)
      : Base(result, /*allow_exceptions=*/true), max_depth_(max_depth), unique_keys_(unique_keys) {}

  bool start_object(std::size_t n) {
    if (!enter()) return false;
    if (unique_keys_) open_keys_.emplace_back();
    return Base::start_object(n);
  }
  bool end_object() {
    --depth_;
    if (unique_keys_) open_keys_.pop_back();
    return Base::end_object();
  }
  bool start_array(std::size_t n) { return enter() && Base::start_array(n); }
  bool end_array() {
    --depth_;
    return Base::end_array();
  }
  bool key(string_t& k) {
    if (unique_keys_ && !open_keys_.back().insert(k).second) {
      duplicate_ = k;
      return false;
    }
    return Base::key(k);
  }

  bool too_deep() const { return too_deep_; }
  const std::string& duplicate() const { return duplicate_; }

 private:
  bool enter() {
    if (++depth_ > max_depth_) too_deep_ = true;
    return !too_deep_;
  }

  int max_depth_;
  bool unique_keys_;
  int depth_ = 0;
  bool too_deep_ = false;
  std::vector<std::set<std::string>> open_keys_;
  std::string duplicate_;
};

// The byte offset of the bracket that opens nesting level max_depth + 1 (outside strings), or
// the text's size if there is none.
size_t deep_nesting_offset(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return text.size();
}

// The text around byte `at`, for a message.
std::string text_near(std::string_view text, size_t at) {
  at = std::min(at, text.size());
  return excerpt(text.substr(at - std::min<size_t>(at, 20)), 60);
}

// nlohmann's parse error without its "last read: '...'" (which can be the whole input), bounded.
std::string parse_error_reason(const json::parse_error& e) {
  std::string m = e.what();
  if (const size_t colon = m.find(": "); colon != std::string::npos) m = m.substr(colon + 2);  // after "line 1, column 2"
  if (const size_t last = m.find("; last read: "); last != std::string::npos) {
    const size_t expected = m.rfind("; expected ");
    m = m.substr(0, last) + (expected != std::string::npos && expected > last ? m.substr(expected) : "");
  }
  // Only nlohmann's own words are left; bound them and keep them printable all the same.
  if (m.size() > 200) m = m.substr(0, 200) + "...";
  for (char& c : m)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7F) c = '?';
  return m;
}

// Appends j's compact text to out while out is shorter than `budget`; false once cut.
bool append_brief(const json& j, std::string& out, size_t budget, int depth) {
  if (out.size() >= budget) return false;
  if (j.is_string()) {
    const std::string& s = j.get_ref<const std::string&>();
    const size_t room = budget - out.size();
    out += json(s.substr(0, room)).dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace);
    return s.size() <= room && out.size() <= budget;
  }
  if (!j.is_structured()) {
    out += j.dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace);
    return out.size() <= budget;
  }
  const bool object = j.is_object();
  out += object ? '{' : '[';
  if (depth >= 8 && !j.empty()) {
    out += "...";
    out += object ? '}' : ']';
    return out.size() <= budget;
  }
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!first) out += ',';
    first = false;
    if (object && !append_brief(json(it.key().substr(0, budget)), out, budget, depth + 1)) return false;
    if (object) out += ':';
    if (!append_brief(*it, out, budget, depth + 1)) return false;
  }
  out += object ? '}' : ']';
  return out.size() <= budget;
}

}  // namespace

json parse_json(std::string_view text, const std::string& what, JsonKeys keys) {
  const int max_depth = limits().json_max_depth;
  const int64_t max_bytes = limits().max_json_bytes;
  QKV_CHECK(static_cast<int64_t>(text.size()) <= max_bytes, what, " is ", text.size(),
            " bytes of JSON, more than the ", max_bytes, " qkv parses (max_json_bytes)");
  json result;
  LimitedDomParser sax(result, max_depth, keys == JsonKeys::kUnique);
  try {
    json::sax_parse(text.begin(), text.end(), &sax);
  } catch (const json::parse_error& e) {
    fail(what, ": not valid JSON at byte ", e.byte, ": ", parse_error_reason(e), ", near ",
         text_near(text, e.byte > 0 ? e.byte - 1 : 0));
  } catch (const json::exception& e) {  // a number out of range ("1e999"): nlohmann's words without its tag
    std::string m = e.what();
    if (m.rfind("[json.exception.", 0) == 0 && m.find("] ") != std::string::npos) m = m.substr(m.find("] ") + 2);
    fail(what, ": not valid JSON: ", excerpt(m, 200));
  }
  if (sax.too_deep()) {
    const size_t at = deep_nesting_offset(text, max_depth);
    fail(what, ": arrays and objects nest more than ", max_depth, " deep (json_max_depth), at byte ", at, ": ",
         excerpt(text.substr(std::min(at, text.size())), 40));
  }
  QKV_CHECK(sax.duplicate().empty(), what, ": the key ", excerpt(sax.duplicate()), " is in one object more than once");
  return result;
}

std::string json_excerpt(const json& j, size_t max_bytes) {
  std::string out;
  if (append_brief(j, out, max_bytes, 0)) return out;
  out.resize(std::min(out.size(), max_bytes));
  return out + "... (cut)";
}

}  // namespace qkv

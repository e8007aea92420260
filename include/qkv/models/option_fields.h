// qkv/models/option_fields.h - an options struct declared once: each field listed one time, with
// its JSON key, its command-line flag and its help, from which the JSON and the flags derive.
//
// A struct opts in with an overload found by argument-dependent lookup:
//
//   template <typename V, typename... O>  // O: the struct, const or not (one or more objects)
//   void visit_fields(V&& v, O&... o) {
//     v(OptionField{"steps", "--steps", "Optimisation steps in all"}, o.steps...);
//     ...
//   }
//
// The visitor sees each field's description and that field of every object given, so one listing
// serves writing JSON (one const object), reading it (one object), registering flags (one object)
// and copying the fields given on a command line from one object to another (two objects).
// Field types: int64_t, uint64_t, double, bool, std::string, and enums with
// option_to_json(E) / read_option(json, E&, key) overloads (AttentionPath and RopeLayout below, TrainTask,
// ...).
#pragma once

#include <cstdint>
#include <limits>
#include <set>
#include <type_traits>
#include <string>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/core/json_read.h"
#include "qkv/modules/attention_module.h"

namespace qkv {

struct OptionField {
  const char* key;                 // JSON key, inside `section` when there is one
  const char* flag;                // the command-line flag, "--steps"
  const char* help;                // the flag's help text
  bool show_default = true;        // --help shows the default value
  bool required = false;           // JSON: an absent key is an error (otherwise the default stays)
  const char* section = nullptr;   // the JSON sub-object holding it ("model"), or none
  // A number field's range, [min, max] (an open end with min_open, max_open), checked by
  // check_option_ranges; set with at_least / within: OptionField{"steps", "--steps", "..."}.at_least(0).
  double min = -std::numeric_limits<double>::infinity(), max = std::numeric_limits<double>::infinity();
  bool min_open = false, max_open = false;

  OptionField at_least(double lo) const {
    OptionField f = *this;
    f.min = lo;
    return f;
  }
  OptionField within(double lo, double hi, bool open = false) const {
    OptionField f = *this;
    f.min = lo;
    f.max = hi;
    f.max_open = open;
    return f;
  }
  OptionField between(double lo, double hi) const {  // (lo, hi), both ends open
    OptionField f = within(lo, hi, true);
    f.min_open = true;
    return f;
  }
};

// An option out of its range or in conflict with another, naming it by its flag (which a command
// line reports as a usage error).
class OptionError : public Error {
 public:
  OptionError(std::string option_flag, const std::string& message) : Error(message), flag(std::move(option_flag)) {}
  std::string flag;  // "--num-heads"
};

// JSON values, strictly typed: an integer field takes only an integer, a number field any number,
// a flag only true or false, a string only a string, an enum only one of its names. `key` names
// the field in the error.
inline nlohmann::json option_to_json(int64_t v) { return v; }
inline nlohmann::json option_to_json(uint64_t v) { return v; }
inline nlohmann::json option_to_json(double v) { return v; }
inline nlohmann::json option_to_json(bool v) { return v; }
inline nlohmann::json option_to_json(const std::string& v) { return v; }
inline nlohmann::json option_to_json(AttentionPath v) { return attention_path_name(v); }
inline nlohmann::json option_to_json(kernels::RopeLayout v) { return kernels::rope_layout_name(v); }
inline nlohmann::json option_to_json(Dtype v) { return dtype_name(v); }
void read_option(const nlohmann::json& j, int64_t& out, const std::string& key);
void read_option(const nlohmann::json& j, uint64_t& out, const std::string& key);
void read_option(const nlohmann::json& j, double& out, const std::string& key);
void read_option(const nlohmann::json& j, bool& out, const std::string& key);
void read_option(const nlohmann::json& j, std::string& out, const std::string& key);
void read_option(const nlohmann::json& j, AttentionPath& out, const std::string& key);
void read_option(const nlohmann::json& j, kernels::RopeLayout& out, const std::string& key);
void read_option(const nlohmann::json& j, Dtype& out, const std::string& key);

// An option's value as a flag takes it: 4, half, true.
template <typename T>
std::string option_text(const T& v) {
  const nlohmann::json j = option_to_json(v);
  return j.is_string() ? j.get<std::string>() : j.dump();
}

// Every field of `o` as a JSON object (fields with a section in that sub-object).
template <typename T>
nlohmann::json fields_to_json(const T& o) {
  nlohmann::json j = nlohmann::json::object();
  visit_fields([&](const OptionField& f, const auto& v) { (f.section ? j[f.section] : j)[f.key] = option_to_json(v); },
               o);
  return j;
}

// Every number field of `o` within its range (OptionField::min, max), else an OptionError naming
// the key and the flag: "steps (--steps) is -1; expected at least 0". A command line reports it
// as a usage error; fields_from_json's callers, as the file's error.
template <typename T>
void check_option_ranges(const T& o) {
  visit_fields(
      [&](const OptionField& f, const auto& v) {
        using V = std::remove_cvref_t<decltype(v)>;
        if constexpr (std::is_arithmetic_v<V> && !std::is_same_v<V, bool>) {
          const auto x = static_cast<double>(v);
          const bool low = f.min != -std::numeric_limits<double>::infinity();
          const bool high = f.max != std::numeric_limits<double>::infinity();
          if ((low && !(f.min_open ? x > f.min : x >= f.min)) || (high && !(f.max_open ? x < f.max : x <= f.max))) {
            const std::string name = f.section ? std::string(f.section) + "." + f.key : std::string(f.key);
            const std::string expected =
                !high ? (f.min_open ? "above " : "at least ") + option_text(static_cast<V>(f.min))
                      : (f.min_open ? "in (" : "in [") + option_text(static_cast<V>(f.min)) + ", " +
                            option_text(static_cast<V>(f.max)) + (f.max_open ? ")" : "]");
            throw OptionError(f.flag, name + (*f.flag ? std::string(" (") + f.flag + ")" : std::string()) + " is " +
                                          option_text(v) + "; expected " + expected);
          }
        }
      },
      o);
}

// Reads `j` onto `o` (whose fields keep their values where a key is absent and not required).
// A key that is not a field, a value of the wrong type, or a required key that is absent is a
// qkv::Error naming the key ("model.d_model") and starting with `what` ("the training options").
template <typename T>
void fields_from_json(const nlohmann::json& j, T& o, const std::string& what) {
  QKV_CHECK(j.is_object(), what, " must be a JSON object, not ", json_excerpt(j));
  std::set<std::string> known;  // "key", and "section.key" with the section's name as a key too
  visit_fields(
      [&](const OptionField& f, auto& v) {
        const nlohmann::json* in = &j;
        std::string name = f.key;
        if (f.section) {
          known.insert(f.section);
          name = std::string(f.section) + "." + f.key;
          auto s = j.find(f.section);
          QKV_CHECK(s == j.end() || s->is_object(), what, ": '", f.section, "' must be a JSON object, not ", json_excerpt(*s));
          in = s == j.end() ? nullptr : &*s;
        }
        known.insert(name);
        auto it = in ? in->find(f.key) : j.end();
        if (!in || it == in->end()) {
          QKV_CHECK(!f.required, what, ": '", name, "' is missing");
          return;
        }
        try {
          read_option(*it, v, name);
        } catch (const Error& e) {
          fail(what, ": ", e.what());
        }
      },
      o);
  auto check_keys = [&](const nlohmann::json& obj, const std::string& prefix) {
    for (const auto& [key, value] : obj.items())
      QKV_CHECK(known.count(prefix + key) > 0, what, ": unknown key ", excerpt(prefix + key));
  };
  check_keys(j, "");
  for (const auto& [key, value] : j.items())
    if (value.is_object()) check_keys(value, key + ".");
}

}  // namespace qkv

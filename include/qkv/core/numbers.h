// qkv/core/numbers.h - numbers read exactly from text: the whole text, in a range, finite; and byte
// counts with K, M, G, T suffixes. What flags and file metadata parse with ("3x", "", " 3", "+3",
// "1e999" are not numbers here).
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>

namespace qkv {

template <typename T>
struct Range {
  T lo = std::numeric_limits<T>::lowest();
  T hi = std::numeric_limits<T>::max();
};
template <typename T>
Range<T> any() { return {}; }
template <typename T>
Range<T> non_negative() { return {T(0), std::numeric_limits<T>::max()}; }
template <typename T>
Range<T> positive() { return {T(1), std::numeric_limits<T>::max()}; }

// A number as help texts and messages show it ("max" for a float's largest).
template <typename T>
std::string number_text(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    if (v == std::numeric_limits<T>::max()) return "max";
    if (v == std::numeric_limits<T>::lowest()) return "-max";
    std::ostringstream s;
    s << v;
    return s.str();
  } else {
    return std::to_string(v);
  }
}

// What T is, in messages: "a finite number", "an integer", "a non-negative integer".
template <typename T>
const char* number_kind() {
  return std::is_floating_point_v<T> ? "a finite number" : std::is_signed_v<T> ? "an integer" : "a non-negative integer";
}

// `text` whole as a T in `range` (finite for floats), or nothing.
template <typename T>
std::optional<T> parse_number(std::string_view text, Range<T> range = any<T>()) {
  static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>);
  T v{};
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(v)) return std::nullopt;
  }
  if (v < range.lo || v > range.hi) return std::nullopt;
  return v;
}

// Digits with an optional suffix K, M, G or T (powers of 1024), "512M", as a count in [1, int64's
// largest]; or nothing.
std::optional<int64_t> parse_byte_count(std::string_view text);

}  // namespace qkv

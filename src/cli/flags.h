// Numeric flags, parsed exactly: the one place the command line turns text into numbers.
//
//   add_number(sub, "--d-in", f.d_in, "Input features", positive<int64_t>());
//
// The whole value must be one number of the flag's type (std::from_chars: no "12abc", no "1e3"
// for an integer, no "-1" for an unsigned) within the flag's range; beyond it is refused, never
// saturated (CLI11 alone makes --seed 18446744073709551616 into 2^64 - 1). Floating-point values
// must be finite. A refusal is a CLI::ValidationError (a usage error, exit status 2) naming the
// flag, the value (excerpted) and the accepted range.
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>

#include "qkv/core/error.h"
#include "qkv/core/excerpt.h"
#include "qkv/modules/attention_module.h"

namespace qkv::cli {

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

// A number as --help and the messages show it.
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

// `text` whole as a T in `range`, or a CLI::ValidationError naming `flag`.
template <typename T>
T parse_number(const std::string& flag, const std::string& text, Range<T> range) {
  static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>);
  const char* kind = std::is_floating_point_v<T> ? "a finite number"
                     : std::is_signed_v<T>       ? "an integer"
                                                 : "a non-negative integer";
  auto refuse = [&]() -> T {
    throw CLI::ValidationError(flag + ": " + excerpt(text) + " is not " + kind + " in [" + number_text(range.lo) +
                               ", " + number_text(range.hi) + "]");
  };
  T v{};
  const char* first = text.data();
  const char* last = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(first, last, v);
  if (text.empty() || ec != std::errc() || ptr != last) return refuse();
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(v)) return refuse();
  }
  if (v < range.lo || v > range.hi) return refuse();
  return v;
}

template <typename T>
const char* number_type_name() {
  return std::is_floating_point_v<T> ? "FLOAT" : std::is_signed_v<T> ? "INT" : "UINT";
}

// Registers `flag` storing a T parsed within `range` into `value` (a T or a std::optional<T>; kept
// as it is unless the flag is given).
template <typename T, typename Target>
CLI::Option* add_number_into(CLI::App* sub, const std::string& flag, Target& value, const std::string& help,
                             Range<T> range) {
  return sub
      ->add_option_function<std::string>(
          flag, [&value, flag, range](const std::string& s) { value = parse_number<T>(flag, s, range); }, help)
      ->type_name(number_type_name<T>());
}
template <typename T>
CLI::Option* add_number(CLI::App* sub, const std::string& flag, T& value, const std::string& help,
                        Range<T> range = any<T>()) {
  return add_number_into<T>(sub, flag, value, help, range);
}
template <typename T>
CLI::Option* add_number(CLI::App* sub, const std::string& flag, std::optional<T>& value, const std::string& help,
                        Range<T> range = any<T>()) {
  return add_number_into<T>(sub, flag, value, help, range);
}

// The same, with --help showing the value it starts with as the default.
template <typename T>
CLI::Option* add_number_with_default(CLI::App* sub, const std::string& flag, T& value, const std::string& help,
                                     Range<T> range = any<T>()) {
  return add_number(sub, flag, value, help, range)->default_str(number_text(value));
}

// A byte count: digits with an optional suffix K, M, G or T (powers of 1024), e.g. "512M".
int64_t parse_bytes(const std::string& flag, const std::string& text);

// Throws qkv::Error unless `count` elements of `element_size` bytes, `count` the product of
// `sizes`, fit in int64_t and in limits().max_memory_bytes. For flags that multiply (d_in x d_out,
// batch x seq_len x d_model) before anything is allocated.
void check_sizes(std::initializer_list<int64_t> sizes, int64_t element_size, const char* what);

// --max-memory BYTES and --max-file-size BYTES, applied with set_limits once parsing is done;
// --threads N capped by limits().max_threads.
void add_limit_flags(CLI::App* sub);
void check_threads(int64_t threads, const char* flag = "--threads");

// The flag that raises the limit a library message names ("max_memory_bytes" -> "; raise it with
// --max-memory BYTES"), or "".
std::string limit_hint(const std::string& message);

// The flags that choose and build one attention module, shared by `qkv forward` and `qkv explore`:
// --module, --d-in, --d-out, --context-length, --num-heads, --dropout, --qkv-bias, --attention,
// MultiHeadAttention's variants (--num-kv-heads, --rope, --rope-base, --window, --alibi,
// --softcap), --dtype, --train, --seed and --weights. None is required here; a command marks its
// own. The book's constructor arguments are kept as given; module_config() makes the module's
// AttentionConfig from them.
struct ModuleFlags {
  std::string module;
  int64_t d_in = 0, d_out = 0, context_length = 0, num_heads = 1;
  double dropout = 0.0;
  bool qkv_bias = false;
  AttentionPath path = AttentionPath::kAuto;
  kernels::AttentionSpec variants;  // the variant flags and --dtype (heads and widths come from the flags above)
  std::optional<uint64_t> seed;
  std::string weights;
  bool train = false;
};
void add_module_flags(CLI::App* sub, ModuleFlags& f);
// Whether --module names a model family (models/family.h) rather than one of the chapter's modules.
bool is_model_family(const std::string& module);
// Every family's presets, "gpt2-small | ... | qwen3-1.7b", for help texts.
std::string preset_list();
// The module's config from the flags (attention_config with the variants), checked against each
// other before anything is built: a usage error naming the flag.
AttentionConfig module_config(const ModuleFlags& f, const CLI::App& sub);

// The flags' names for the attention spec's fields (--num-heads, --num-kv-heads, --window, ...),
// for messages of validate_attention_spec on a spec the flags made.
std::string attention_flag_name(kernels::SpecField field);
// The same, with --head-dim for the head dim (qkv bench, which has that flag).
std::string bench_flag_name(kernels::SpecField field);
// validate_attention_spec(spec) with the flags' names: a usage error (exit status 2).
void check_attention_flags(const kernels::AttentionSpec& spec, kernels::SpecNamer namer = attention_flag_name);

// A dtype flag (f32 | bf16): `set` receives the parsed value; anything else is a usage error
// "FLAG: 'x' is not a dtype; expected f32 or bf16".
CLI::Option* add_dtype_flag(CLI::App* sub, const std::string& flag, std::function<void(Dtype)> set,
                            const std::string& help);

// A flag whose value fails a check that needs other flags: exit status 2 (bad usage), as a value
// out of its range does.
template <typename... Args>
[[noreturn]] void bad_flag(const std::string& flag, const Args&... what) {
  throw CLI::ValidationError(flag + ": " + str(what...));
}

}  // namespace qkv::cli

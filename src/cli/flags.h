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
#include "qkv/core/numbers.h"
#include "qkv/modules/attention_module.h"
#include "qkv/train/train_options.h"

namespace qkv {
struct ModelFamily;  // qkv/models/family.h
}  // namespace qkv

namespace qkv::cli {

// `text` whole as a T in `range` (core/numbers.h), or a CLI::ValidationError naming `flag`.
template <typename T>
T parse_number(const std::string& flag, const std::string& text, Range<T> range) {
  if (const std::optional<T> v = qkv::parse_number<T>(text, range)) return *v;
  throw CLI::ValidationError(flag + ": " + excerpt(text) + " is not " + number_kind<T>() + " in [" +
                             number_text(range.lo) + ", " + number_text(range.hi) + "]");
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
  std::optional<int64_t> latent_dim;  // --latent-dim (mla)
  int64_t head_dim = 0, value_head_dim = 0, conv_kernel = 0;  // gated-deltanet's widths and kernel
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
std::string preset_list(bool (*has)(const ModelFamily&) = nullptr);  // of the families `has` holds for (all: null)
// --model PRESET: `help` followed by the presets' list; a name that is no preset is a usage error
// listing every preset (a command that takes only some families refuses the others by name).
void add_preset_flag(CLI::App* sub, std::string& preset, const std::string& help,
                     bool (*has)(const ModelFamily&) = nullptr);
// --quantize TYPE (LoadOptions::quantize): a float model's products quantized at load.
void add_quantize_flag(CLI::App* sub, std::string& value);
// The module's config from the flags (attention_config with the variants), checked against each
// other before anything is built: a usage error naming the flag.
AttentionConfig module_config(const ModuleFlags& f, const CLI::App& sub);
// The same with every rule of the module's flags first, for qkv forward and qkv explore alike
// (usage errors naming the flag): --d-in and --d-out given, --context-length for a causal module
// and on --text, none of --context-length, --dropout, --num-heads for the modules without a mask,
// one head for the one-head classes, no --qkv-bias without a bias, --seed or --weights; and the
// sizes the flags multiply within the memory limit.
AttentionConfig checked_module_config(const ModuleFlags& f, const CLI::App& sub, bool on_text);

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

// A check of flags against their ranges or each other, `what` naming them: exit status 2 (bad usage)
// when it fails, as bad_flag.
template <typename... Args>
void check_flags(bool ok, const Args&... what) {
  if (!ok) throw CLI::ValidationError(str(what...));
}

// --attention auto|fused|textbook, setting `path` (see AttentionPath).
inline CLI::Option* add_attention_flag(CLI::App* sub, AttentionPath& path, const std::string& help) {
  return sub
      ->add_option_function<std::string>(
          "--attention", [&path](const std::string& name) { path = parse_attention_path(name); }, help)
      ->check(CLI::IsMember({"auto", "fused", "textbook"}))
      ->type_name("PATH")
      ->default_str("auto");
}

// Registers a flag for each field of an option set declared once (visit_fields: models/option_fields.h),
// bound to that field, with the field's help and default: visit_fields(OptionFlags{sub, after}, options).
struct OptionFlags {
  CLI::App* sub;
  std::function<void(const OptionField&)> after = [](const OptionField&) {};  // after each flag is added

  template <typename T>
    requires std::is_arithmetic_v<T>
  void operator()(const OptionField& f, T& value) {  // exact, in the type's range (flags.h)
    CLI::Option* opt = add_number(sub, f.flag, value, f.help);
    if (f.show_default) opt->default_str(number_text(value));
    after(f);
  }
  void operator()(const OptionField& f, std::string& value) {
    CLI::Option* opt = sub->add_option(f.flag, value, f.help);
    if (f.show_default) opt->capture_default_str();
    after(f);
  }
  void operator()(const OptionField& f, bool& value) {
    sub->add_flag(f.flag, value, f.help);
    after(f);
  }
  void operator()(const OptionField& f, AttentionPath& value) {
    add_attention_flag(sub, value, f.help);
    after(f);
  }
  void operator()(const OptionField& f, Dtype& value) {
    add_dtype_flag(sub, f.flag, [&value](Dtype d) { value = d; }, f.help)->default_str(dtype_name(value));
    after(f);
  }
  void operator()(const OptionField& f, kernels::RopeLayout& value) {
    const std::string flag = f.flag;
    sub->add_option_function<std::string>(
           flag,
           [&value, flag](const std::string& s) {
             if (s != "none" && s != "half" && s != "interleaved")
               throw CLI::ValidationError(flag + ": " + excerpt(s) +
                                          " is not a RoPE layout; expected none, half or interleaved");
             value = kernels::parse_rope_layout(s);
           },
           f.help)
        ->type_name("LAYOUT")
        ->default_str(kernels::rope_layout_name(value));
    after(f);
  }
  void operator()(const OptionField& f, TrainTask& value) {
    add_enum(f, value, train_task_names(), parse_train_task, train_task_name);
  }
  void operator()(const OptionField& f, OptimizerKind& value) {
    add_enum(f, value, optimizer_kind_names(), parse_optimizer_kind, optimizer_kind_name);
  }

 private:
  template <typename E>
  void add_enum(const OptionField& f, E& value, const std::vector<std::string>& names,
                E (*parse)(const std::string&), const char* (*name)(E)) {
    sub->add_option_function<std::string>(
           f.flag, [&value, parse](const std::string& s) { value = parse(s); }, f.help)
        ->check(CLI::IsMember(names))
        ->default_str(name(value));
    after(f);
  }
};

}  // namespace qkv::cli

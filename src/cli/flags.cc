// Byte-count flags, the limit flags and the size checks of flags that multiply. See flags.h.
#include "flags.h"

#include "qkv/models/family.h"

#include "commands.h"

#include "qkv/core/checked.h"
#include "qkv/core/error.h"
#include "qkv/core/limits.h"
#include "qkv/core/quant_blocks.h"
#include "qkv/kernels/rope.h"

namespace qkv::cli {

int64_t parse_bytes(const std::string& flag, const std::string& text) {
  if (const std::optional<int64_t> n = parse_byte_count(text)) return *n;
  throw CLI::ValidationError(flag + ": " + excerpt(text) + " is not a byte count in [1, " +
                             std::to_string(std::numeric_limits<int64_t>::max()) +
                             "] (digits, optionally followed by K, M, G or T for powers of 1024)");
}

void check_sizes(std::initializer_list<int64_t> sizes, int64_t element_size, const char* what) {
  check_memory_request(checked_bytes(checked_product(sizes, what), element_size, what), what);
}

namespace {
// `flag` BYTES sets the process-wide limit `field` (qkv/core/limits.h).
void add_byte_limit_flag(CLI::App* sub, const std::string& flag, int64_t Limits::*field, const std::string& help,
                         const std::string& default_str) {
  sub->add_option_function<std::string>(
         flag,
         [flag, field](const std::string& s) {
           Limits l = limits();
           l.*field = parse_bytes(flag, s);
           set_limits(l);
         },
         help)
      ->type_name("BYTES")
      ->default_str(default_str);
}
}  // namespace

void add_limit_flags(CLI::App* sub) {
  const Limits d = limits();
  add_byte_limit_flag(sub, "--max-memory", &Limits::max_memory_bytes,
                      "The most memory one request (a tensor, a model, a file read) may ask for; suffixes K M G T",
                      std::to_string(d.max_memory_bytes) + " (half the physical memory)");
  add_byte_limit_flag(sub, "--max-file-size", &Limits::max_file_bytes,
                      "The largest input file read whole; suffixes K M G T", std::to_string(d.max_file_bytes));
  add_byte_limit_flag(sub, "--max-json-size", &Limits::max_json_bytes,
                      "The largest JSON text parsed (config.json, tokenizer.json, a safetensors header); "
                      "suffixes K M G T",
                      std::to_string(d.max_json_bytes));
}

void check_threads(int64_t threads, const char* flag) {
  const int max = limits().max_threads;
  if (threads > max) bad_flag(flag, threads, " is more than the ", max, " threads one command may start (8 per core, at least 64)");
}

std::string limit_hint(const std::string& message) {
  if (message.find("max_memory_bytes") != std::string::npos) return "; raise it with --max-memory BYTES";
  if (message.find("max_file_bytes") != std::string::npos) return "; raise it with --max-file-size BYTES";
  if (message.find("max_json_bytes") != std::string::npos) return "; raise it with --max-json-size BYTES";
  return "";
}

std::string attention_flag_name(kernels::SpecField field) {
  switch (field) {
    case kernels::SpecField::kHeads: return "--num-heads";
    case kernels::SpecField::kKvHeads: return "--num-kv-heads";
    case kernels::SpecField::kHeadDim: return "head dim";
    case kernels::SpecField::kWindow: return "--window";
    case kernels::SpecField::kRope: return "--rope";
    case kernels::SpecField::kRopeBase: return "--rope-base";
    case kernels::SpecField::kRopeScaling: return "rope scaling";
    case kernels::SpecField::kRopeDim: return "rope dim";
    case kernels::SpecField::kQkNorm: return "qk-norm eps";
    case kernels::SpecField::kAlibiSlopes: return "--alibi";
    case kernels::SpecField::kSoftcap: return "--softcap";
    case kernels::SpecField::kDropout: return "--dropout";
  }
  return "?";
}

std::string bench_flag_name(kernels::SpecField field) {
  return field == kernels::SpecField::kHeadDim ? "--head-dim" : attention_flag_name(field);
}

void check_attention_flags(const kernels::AttentionSpec& spec, kernels::SpecNamer namer) {
  try {
    kernels::validate_attention_spec(spec, "", namer);
  } catch (const kernels::AttentionSpecError& e) {
    throw CLI::ValidationError(e.what());  // a usage error: exit status 2
  }
}

AttentionConfig module_config(const ModuleFlags& f, const CLI::App& sub) {
  const AttentionModuleInfo& info = attention_module_info(f.module);
  const kernels::AttentionSpec& v = f.variants;
  if (v.dtype == Dtype::kBF16) {
    if (!info.causal)
      bad_flag("--dtype", "bf16 runs the fused path of causal-attention, mha-wrapper, mha and gated-mha; ", f.module,
               " computes in f32 only");
    if (f.path == AttentionPath::kTextbook)
      bad_flag("--dtype", "bf16 runs on the fused path; --attention textbook computes in f32 only");
    if (f.train && f.dropout > 0 && f.path == AttentionPath::kAuto)
      bad_flag("--dtype", "bf16 with --train and dropout needs --attention fused (auto runs the textbook path, "
               "for PyTorch's dropout masks, in f32)");
  }
  const char* variant_flags[] = {"--num-kv-heads", "--rope", "--rope-base", "--window", "--alibi", "--softcap"};
  if (!info.variants)
    for (const char* flag : variant_flags)
      if (sub.count(flag) > 0 && !(info.linear_sizes && std::string(flag) == "--num-kv-heads"))
        bad_flag(flag, "only --module ", attention_module_list(&AttentionModuleInfo::variants),
                 " take the attention variants, not ", f.module);
  for (const char* flag : {"--head-dim", "--value-head-dim", "--conv-kernel"})
    if (sub.count(flag) > 0 && !info.linear_sizes)
      bad_flag(flag, "only --module ", attention_module_list(&AttentionModuleInfo::linear_sizes), " takes it, not ",
               f.module);
  if (info.linear_sizes) {
    for (const char* flag : {"--d-out", "--dropout", "--latent-dim", "--qkv-bias"})
      if (sub.count(flag) > 0)
        bad_flag(flag, "--module ", f.module, " takes none of --d-out, --dropout, --latent-dim, --qkv-bias (it maps "
                 "--d-in back to --d-in through --head-dim and --value-head-dim wide heads, without dropout or biases)");
    for (const char* flag : {"--head-dim", "--value-head-dim", "--conv-kernel"})
      if (sub.count(flag) == 0) bad_flag(flag, "--module ", f.module, " needs it");
    const int64_t key_heads = sub.count("--num-kv-heads") > 0 ? v.kv_heads : f.num_heads;
    if (f.num_heads % key_heads != 0)
      bad_flag("--num-kv-heads", key_heads, " (key heads) must divide --num-heads (", f.num_heads, ", value heads)");
    AttentionConfig c = gated_deltanet_config(f.d_in, f.num_heads, key_heads, f.head_dim, f.value_head_dim,
                                              f.conv_kernel, f.context_length > 0 ? f.context_length : 1);
    c.path = f.path;
    c.attention.dtype = v.dtype;
    return c;
  }
  if (sub.count("--rope-base") > 0 && v.rope == kernels::RopeLayout::kNone)
    bad_flag("--rope-base", "needs --rope half or --rope interleaved");
  if (sub.count("--softcap") > 0 && !(v.softcap > 0.0))
    bad_flag("--softcap", v.softcap, " must be positive (leave the flag out for no softcap)");
  // (the book's constructor's own checks, as the class makes them: "d_out (10) must be divisible by ...")
  if (f.latent_dim && f.module != "mla") bad_flag("--latent-dim", "only --module mla has a latent, not ", f.module);
  AttentionConfig c;
  try {
    c = attention_config(f.module, f.d_in, f.d_out, f.context_length, f.dropout, f.num_heads, f.qkv_bias);
  } catch (const Error& e) {  // the sizes against each other (the flags' validators saw each alone)
    bad_flag(attention_module_info(f.module).multi_head ? "--num-heads" : "--d-out", e.what());
  }
  if (f.latent_dim) c.latent_dim = *f.latent_dim;
  c.path = f.path;
  kernels::AttentionSpec& a = c.attention;
  a.kv_heads = v.kv_heads;
  a.rope = v.rope;
  a.rope_base = v.rope_base;
  a.window = v.window;
  a.alibi = v.alibi;
  a.softcap = v.softcap;
  a.dtype = v.dtype;
  check_attention_flags(a);
  return c;
}

CLI::Option* add_dtype_flag(CLI::App* sub, const std::string& flag, std::function<void(Dtype)> set,
                            const std::string& help) {
  return sub
      ->add_option_function<std::string>(
          flag,
          [flag, set = std::move(set)](const std::string& s) {
            if (s != "f32" && s != "bf16")
              throw CLI::ValidationError(flag + ": " + excerpt(s) + " is not a dtype; expected f32 or bf16");
            set(parse_dtype(s));
          },
          help)
      ->type_name("DTYPE");
}

void add_quantize_flag(CLI::App* sub, std::string& value) {
  sub->add_option("--quantize", value, "q8_0 | q4_0 | q4_k | q6_k: a model's float weights (a Llama 3 or Qwen Hugging Face folder, "
                                       "an F32/F16/BF16 GGUF file of any family) quantized at load into that type's blocks, read "
                                       "by integer products as llama.cpp reads its files (docs/gguf.md)")
      ->check(CLI::IsMember(product_quant_names(), CLI::ignore_case));
}

std::string preset_list(bool (*has)(const ModelFamily&)) {
  std::string s;
  for (const std::string& p : model_preset_names())
    if (has == nullptr || has(family_of_preset(p))) s += (s.empty() ? "" : " | ") + p;
  return s;
}

void add_preset_flag(CLI::App* sub, std::string& preset, const std::string& help, bool (*has)(const ModelFamily&)) {
  sub->add_option("--model", preset, help + ": " + preset_list(has))
      ->check(
          [has](const std::string& name) {
            for (const std::string& p : model_preset_names())
              if (p == name) return std::string();
            return excerpt(name) + " is not a preset; expected one of: " + preset_list(has);
          },
          "");
}

AttentionConfig checked_module_config(const ModuleFlags& f, const CLI::App& sub, bool on_text) {
  const AttentionModuleInfo& info = attention_module_info(f.module);
  auto given = [&](const char* flag) { return sub.count(flag) > 0; };
  for (const char* flag : {"--d-in", "--d-out"})
    if (!given(flag) && !(info.linear_sizes && std::string(flag) == "--d-out")) bad_flag(flag, "--module ", f.module, " needs it");
  if (!info.causal)
    for (const char* flag : {"--context-length", "--dropout", "--num-heads"})
      if (given(flag) && !(on_text && std::string(flag) == "--context-length"))
        bad_flag(flag, "--module ", f.module, " takes no --context-length, --dropout or --num-heads (it has no mask, ",
                 "dropout or heads)");
  if (info.causal && !info.multi_head && given("--num-heads")) bad_flag("--num-heads", "--module ", f.module, " has one head");
  if (!info.bias && f.qkv_bias) bad_flag("--qkv-bias", f.module, " has no bias (its weights are plain matrices)");
  const AttentionConfig c = module_config(f, sub);  // the flags against each other
  if (!given("--context-length") && (info.causal || on_text))
    bad_flag("--context-length", "--module ", f.module, on_text ? " on --text" : "", " needs it (the size of ",
             on_text ? "the positional embedding table" : "", on_text && info.causal ? " and of " : "",
             info.causal ? "its causal mask buffer" : "", ")");
  if (!f.seed && f.weights.empty())
    bad_flag("--seed", "give --seed S (weights as torch.manual_seed(S) and the PyTorch constructor make them) or ",
             "--weights FILE (a safetensors state dict) for --module ", f.module);
  if (info.linear_sizes) {
    check_sizes({f.d_in, 2 * c.linear.key_heads * f.head_dim + f.num_heads * f.value_head_dim}, 4,
                "in_proj_qkv (--d-in x (2 --num-kv-heads --head-dim + --num-heads --value-head-dim))");
  } else {
    check_sizes({f.d_in, f.d_out}, 4, "the projection weights (--d-in x --d-out)");
  }
  if (info.multi_head && !info.linear_sizes) {
    check_sizes({f.num_heads, f.d_in, f.d_out}, 4, "the projection weights (--num-heads x --d-in x --d-out)");
    check_sizes({f.num_heads, f.d_out, f.d_out}, 4, "the output projection (--num-heads x --d-out x --d-out)");
  }
  if (on_text) check_sizes({c.context_length, c.d_in}, 4, "the positional embedding (--context-length x --d-in)");
  return c;
}

bool is_model_family(const std::string& module) {
  for (const ModelFamily* f : model_families())
    if (f->name == module) return true;
  return false;
}

void add_module_flags(CLI::App* sub, ModuleFlags& f) {
  std::vector<std::string> modules = attention_module_names();
  std::string classes, families;
  for (const AttentionModuleInfo& m : attention_modules()) classes += std::string(classes.empty() ? "" : " | ") + m.name;
  for (const ModelFamily* m : model_families()) {
    modules.push_back(m->name);
    families += " | " + m->name;
  }
  sub->add_option("--module", f.module,
                  classes + " (gated-mha, mla, deltanet: the book's bonus gated, latent and Gated DeltaNet attention; gated-deltanet: Qwen3.5's linear-attention layer); or a whole model (qkv forward only)" +
                      families + " (gpt with --seed: the book's GPT of the sizes given; any with --weights PATH: its "
                      "files)")
      ->check(CLI::IsMember(modules));
  add_number(sub, "--d-in", f.d_in, "Input features (the last dimension of 'input')", positive<int64_t>());
  add_number(sub, "--d-out", f.d_out, "Output features (per head for mha-wrapper)", positive<int64_t>());
  add_number(sub, "--context-length", f.context_length, "Size of the causal mask buffer (causal modules)",
             positive<int64_t>());
  const std::string variants = attention_module_list(&AttentionModuleInfo::variants) + ": ";  // the variants' help
  add_number_with_default(sub, "--num-heads", f.num_heads, "Heads (" + attention_module_list(&AttentionModuleInfo::multi_head) + ")", positive<int64_t>());
  const std::string linear = attention_module_list(&AttentionModuleInfo::linear_sizes) + " (Qwen3.5's linear attention; --num-heads: value heads, --num-kv-heads: key heads): ";
  add_number(sub, "--head-dim", f.head_dim, linear + "the key heads' width", positive<int64_t>());
  add_number(sub, "--value-head-dim", f.value_head_dim, linear + "the value heads' width", positive<int64_t>());
  add_number(sub, "--conv-kernel", f.conv_kernel, linear + "the causal depthwise convolution's kernel (Qwen3.5: 4)",
             positive<int64_t>());
  add_number(sub, "--latent-dim", f.latent_dim,
             "mla: the latent's width L (W_DKV (L, d_in); W_UK, W_UV (d_out, L)) (default: max(16, d_out / 8), the "
             "book's)",
             positive<int64_t>());
  add_number_with_default(sub, "--dropout", f.dropout, "Dropout on the attention weights, in [0, 1)");
  sub->add_flag("--qkv-bias", f.qkv_bias, "Give the query, key and value projections a bias");
  add_attention_flag(sub, f.path,
                     "Causal modules: auto (fused; textbook under --train dropout, for PyTorch's masks) | fused | "
                  "textbook");
  add_number(sub, "--num-kv-heads", f.variants.kv_heads,
             variants + "key/value heads G, dividing --num-heads (grouped-query attention; 1: multi-query); W_key and "
             "W_value are (G * head_dim, d_in) (default: --num-heads)",
             positive<int64_t>());
  sub->add_option_function<std::string>(
         "--rope",
         [&f](const std::string& s) {
           if (s != "half" && s != "interleaved")
             throw CLI::ValidationError("--rope: " + excerpt(s) + " is not a RoPE layout; expected half or interleaved");
           f.variants.rope = kernels::parse_rope_layout(s);
         },
         variants + "rotary position embedding of queries and keys: half (pairs i, i + D/2: Hugging Face, the book's "
         "Llama) | interleaved (pairs 2i, 2i + 1: GPT-J, Meta's Llama) (default: none)")
      ->type_name("LAYOUT");
  add_number_with_default(sub, "--rope-base", f.variants.rope_base, variants + "RoPE's base (frequencies base^(-2i/D))",
                          Range<double>{std::numeric_limits<double>::min(), std::numeric_limits<double>::max()});
  add_number(sub, "--window", f.variants.window,
             variants + "sliding window: query i sees keys j > i - W (W >= 1; default: no window)", positive<int64_t>());
  sub->add_flag("--alibi", f.variants.alibi, variants + "ALiBi bias -slope_h * (i - j) with the paper's slopes");
  add_number(sub, "--softcap", f.variants.softcap,
             variants + "cap the scaled scores as C * tanh(x / C) (Gemma 2; C > 0; default: none)");
  add_dtype_flag(sub, "--dtype", [&f](Dtype d) { f.variants.dtype = d; },
                 "Causal modules' fused path: f32 | bf16 (bf16 products, q, k, v; fp32 sums, softmax and outputs) "
                 "(default: f32)");
  sub->add_flag("--train", f.train, "Training mode: dropout is active, drawing after the weights as PyTorch does");
  add_number(sub, "--seed", f.seed, "Initialise as torch.manual_seed(S) followed by the PyTorch constructor");
  sub->add_option("--weights", f.weights, "Load the weights from a safetensors state dict (PyTorch's names)");
}

}  // namespace qkv::cli

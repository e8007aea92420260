// qkv/models/gguf_model.h - a model from llama.cpp's GGUF file (io/gguf.h), for the families whose
// registry entry names a GGUF architecture (models/family.h: gguf_architectures).
//
//   general.architecture "llama" | "qwen2" | "qwen3" | "gpt2" | "qwen35"   the family
//   {arch}.block_count, .embedding_length, .feed_forward_length, .context_length,
//   .attention.head_count, .attention.head_count_kv, .attention.key_length (head_dim, when given),
//   .attention.layer_norm_rms_epsilon, .rope.freq_base, .rope.dimension_count (all of head_dim),
//   .vocab_size (else token_embd's rows)     -> the config.json the family reads (gguf_config_json),
//                                               so one validation holds for both formats
//   rope_freqs.weight (Llama 3's scaling)    -> the largest is the factor; with Llama 3's low / high
//                                               frequency factors 1 and 4, the original context
//                                               from a factor between (8,192 when none pins it);
//                                               then checked against every one of the file's
//                                               factors (other scalings are refused)
//   .nextn_predict_layers (n)                -> the model's layers are block_count - n; the n
//                                               after them (multi-token prediction, Qwen3.5's
//                                               mtp.*) are left unread
//   no output.weight                         -> the head tied to token_embd
//   gpt2: {arch}.block_count, .embedding_length, .feed_forward_length (4 x the width),
//   .context_length, .attention.head_count, .attention.layer_norm_epsilon (1e-5)
//                                            -> the book's cfg dict (drop_rate 0; qkv_bias when the
//                                               file has blk.0.attn_qkv.bias: qkv writes zeros there
//                                               for a model without, as llama.cpp needs one)
//
// Tensors, by the family's state names (gguf_tensor_name):
//   model.embed_tokens.weight -> token_embd.weight      model.norm.weight -> output_norm.weight
//   lm_head.weight -> output.weight                      model.layers.N.X -> blk.N.Y with X -> Y:
//   input_layernorm -> attn_norm, self_attn.{q,k,v,o}_proj -> attn_{q,k,v,output},
//   self_attn.{q,k}_norm -> attn_{q,k}_norm, post_attention_layernorm -> ffn_norm,
//   mlp.{gate,up,down}_proj -> ffn_{gate,up,down}
// and the book's GPT names: tok_emb -> token_embd, pos_emb -> position_embd, final_norm ->
//   output_norm, out_head -> output, trf_blocks.N.X -> blk.N.Y with X -> Y: norm1 -> attn_norm,
//   att.W_{query,key,value} -> attn_qkv (its rows: Q, K, V), att.out_proj -> attn_output, norm2 ->
//   ffn_norm, ff.layers.{0,2} -> ffn_{up,down}; LayerNorm's scale and shift -> weight and bias
//   qwen35: .rope.dimension_count (the rotated dims), .full_attention_interval (layer_types),
//   .ssm.{group_count, time_step_rank, state_size, inner_size, conv_kernel} (the linear layers' key
//   heads, value heads, key width, value heads x width, kernel); tensors as above with
//   post_attention_layernorm -> post_attention_norm and linear_attn.X -> blk.N.Y: in_proj_qkv ->
//   attn_qkv, in_proj_z -> attn_gate, in_proj_b -> ssm_beta, in_proj_a -> ssm_alpha, conv1d ->
//   ssm_conv1d (C, K), dt_bias -> ssm_dt.bias, A_log -> ssm_a (-exp), norm -> ssm_norm, out_proj ->
//   ssm_out; the other norms hold 1 + weight; value heads tiled (GgufOrder)
// llama.cpp's converter reorders the rows of each head of Q and K for the "llama" architecture
// (rotary pairs interleaved: row h D + 2 i + s holds Hugging Face's row h D + s D/2 + i); they are
// put back as they are read.
//
// Loading: every name, shape and type is checked against the model before any is read, and the
// file's parameters against the metadata's (a block_count of 10^6 over a file of two layers is
// refused before the model is made). A file of F32 weights computes in f32; any other (F16, BF16,
// the quantized types) in bf16, its products' weights dequantized one tensor at a time straight
// into the model's bf16 copies (no float copy of the model), a piece of a tensor at a time, each
// piece's mapped pages given back once copied. The tokenizer is the file's (gguf_tokenizer_parts),
// made before the weights are read, its metadata then forgotten: a load peaks at about the file's
// size (bench/gguf_peak_memory.sh).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/io/gguf.h"
#include "qkv/models/family.h"
#include "qkv/text/hf_tokenizer.h"

namespace qkv {

// The file starts with GGUF's magic.
bool is_gguf_file(const std::string& path);
// The family whose gguf_architectures has the file's general.architecture; qkv::Error naming it
// and the architectures qkv reads otherwise.
const ModelFamily& family_of_gguf(const GgufFile& file);
// The file's metadata as the family's config.json (model_type, sizes, rope, tie_word_embeddings).
nlohmann::json gguf_config_json(const GgufFile& file);
// How a GGUF tensor's rows (or columns) are ordered against the state tensor's. kRopePairs:
// llama.cpp's "llama" Q and K, row h D + 2 i + s of the file is the state's row h D + s D/2 + i
// (`heads` heads of `width` = D rows). kTiledValueHeads: qwen35's linear layers with more value
// heads than key heads (r = Hv / Hk), the file's head j is the state's head (j % Hk) r + j / Hk
// (llama.cpp reads value head j with key head j % Hk; Hugging Face and qkv with key head j / r),
// `heads` = Hv heads of `width` rows from row `first` (or columns: ssm_out).
struct GgufOrder {
  enum Kind { kSame, kRopePairs, kTiledValueHeads };
  Kind kind = kSame;
  int64_t heads = 0, key_heads = 0, first = 0, width = 0;
  bool columns = false;
  bool same() const { return kind == kSame; }
  // The state's index of the file's row (column) i; those outside the heads are the same.
  int64_t state_index(int64_t i) const;
};
// The values a GGUF tensor holds against the state's w: w itself, 1 + w (the norms of a family
// whose RMSNorm scales by 1 + weight: llama.cpp's files hold the scale), or -exp(w) (qwen35's
// ssm_a from A_log).
enum class GgufValues { kSame, kOnePlus, kNegExp };

// Where a tensor of the family's model sits in a GGUF file of architecture `arch`: the whole of
// tensor `name`, or (gpt2's blk.N.attn_qkv, Q's rows then K's then V's) its rows [first_row,
// first_row + the tensor's rows) of `rows` (a bias's elements). name "" where GGUF has none.
struct GgufPlace {
  std::string name;
  int64_t first_row = 0;
  int64_t rows = 0;  // the GGUF tensor's rows when it holds more than this one; else 0
  GgufOrder order;
  GgufValues values = GgufValues::kSame;
  Shape shape;       // the GGUF tensor's shape where it is not the state's (qwen35's conv1d: (C, K))
  bool f32 = false;  // llama.cpp keeps it in F32 whatever the file's type (1-D tensors, ssm_conv1d)
  bool part() const { return rows > 0; }
};
GgufPlace gguf_place(const ModelFamily& family, const std::string& arch, const DecoderSpec& spec,
                     const std::string& state_name);
// A tensor's `rows` x `cols` elements of `elem_bytes` (a quantized tensor: rows of cols = its
// row's bytes, elem_bytes 1; its order's rows only) from the file's order into the state's
// (to_state) or back; in place.
void gguf_reorder(const GgufOrder& order, void* data, int64_t rows, int64_t cols, int64_t elem_bytes, bool to_state);
// Its values from the state's into the file's (to_state false) or back; `where` names the tensor
// in the error for a value the file cannot hold (ssm_a not negative).
void gguf_map_values(GgufValues values, float* data, int64_t n, bool to_state, const std::string& where);
// qwen35's full_attention_interval: n when layer i attends exactly where (i + 1) % n == 0 (L + 1
// when none does); a qkv::Error naming the layer types otherwise (llama.cpp knows no other pattern).
int64_t full_attention_interval(const DecoderSpec& spec);
// The tokenizer GGUF's metadata describes (tokenizer.ggml.*), as the parts HfTokenizer::build
// checks and makes the tokenizer of, as it does tokenizer.json's: model "gpt2" (byte-level BPE)
// with pre "llama-bpe" (Llama 3's split), "qwen2" (Qwen's, and NFC as Qwen's tokenizer.json has)
// or "gpt-2"; token_type 1 the vocabulary, 3 special added tokens, 4 added tokens that are not
// special, 5 unused (no text); merges "a b"; no text twice. Anything else is refused naming the key.
HfTokenizerParts gguf_tokenizer_parts(const GgufFile& file);
// The ids the file says end a text (tokenizer.ggml.eos_token_id, eot_token_id, eom_token_id, those
// present, in that order), each checked against tokenizer.ggml.tokens (qkv::Error naming the key):
// generation stops at them as at the family's end tokens, as llama.cpp does.
std::vector<int64_t> gguf_end_ids(const GgufFile& file);
// The same as a tokenizer.json (text/hf_tokenizer_json.h), for writing it out.
nlohmann::json gguf_tokenizer_json(const GgufFile& file);
// The model, in eval mode, with the file's tokenizer (options.tokenizer) and its family's end
// tokens and chat format.
LoadedModel load_gguf(const std::string& path, const LoadOptions& options);

// Writing (src/models/gguf_writer.cc): the model (its float weights: load it with float_weights) as
// llama.cpp's converter writes its family: the metadata above, Q and K permuted for "llama",
// rope_freqs.weight for Llama 3's scaling, 1-D tensors F32, every 2-D tensor in `type` (F32, F16,
// BF16, Q8_0, Q4_0, Q4_K, Q6_K), or where its rows are not whole blocks of it in Q8_0 or F16 (said
// in `notes`), and the tokenizer from its tokenizer.json (none: said in notes).
std::string gguf_model_bytes(LanguageModel& model, const nlohmann::json* tokenizer, const std::string& type,
                             std::vector<std::string>& notes);
// A qkv::Error unless qkv writes GGUF files of the family (one with a GGUF architecture): what
// gguf_model_bytes checks first, and what a caller may check before reading a model's weights.
void check_gguf_writable(const ModelFamily& family);
// tokenizer.json as GGUF's metadata for a model of `vocab` ids: tokens 0..vocab-1 ([PADn], type 5,
// for ids it has no token for), types, merges, pre (from its split), bos / eos / padding ids and
// add_bos_token as llama.cpp's converter writes them for the family.
std::vector<GgufMetadata> gguf_tokenizer_metadata(const nlohmann::json& tokenizer, int64_t vocab,
                                                  const ModelFamily& family);
// The tokenizer.json of a loaded model: its file, GPT-2's vocabulary as one (the GPT family's
// installed files), or the GGUF file `source`'s metadata; none when it has none of them.
std::optional<nlohmann::json> model_tokenizer_json(const LoadedModel& m, const std::string& source);
// A tokenizer.json to write into a GGUF file in place of the model's (qkv convert --tokenizer): a
// file, a folder holding one or an installed vocabulary's name (HfTokenizer::read), checked as the
// loader checks it (HfTokenizer::parse: qkv::Error naming the file and the entry).
nlohmann::json tokenizer_json_file(const std::string& path);

}  // namespace qkv

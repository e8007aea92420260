// qkv/io/safetensors.h - reading and writing .safetensors files (the Hugging Face format).
//
// Layout: an 8-byte little-endian u64 N, then N bytes of JSON header
//   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value", ...}}            (the metadata entry is optional)
// then the raw little-endian data buffer; offsets are relative to the start of that buffer.
//
// Reading accepts F32, and converts F16, BF16 (exactly) and F64 (rounded to nearest) to float32;
// integer dtypes only as whole numbers (load_safetensors_integers: token ids).
// Every malformed input - truncated, bad JSON, wrong types, absurd shapes, unknown dtypes, offsets
// out of range or overlapping - is a qkv::Error naming the file and, where it applies, the tensor;
// no input makes the reader crash or read out of bounds. Writing produces F32, or BF16 for the
// tensors named (rounded to nearest even: bf16 mode's weights at half the size), atomically.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv {

struct TensorFile {
  std::string path;                          // as given to load (or path_for_errors), for messages
  std::vector<std::string> names;            // in the order of their data offsets in the file
  std::map<std::string, Tensor> tensors;     // float32, contiguous, each named after its key
  std::map<std::string, std::string> metadata;
  std::map<std::string, std::string> stored_dtypes;  // each tensor's dtype in the file: "F32", "BF16", ...

  bool contains(const std::string& name) const { return tensors.count(name) != 0; }
  // Throws qkv::Error "'file.safetensors' has no tensor 'input' (it has: a, b, c)".
  const Tensor& get(const std::string& name) const;
};

TensorFile load_safetensors(const std::string& path);
TensorFile parse_safetensors(const std::string& bytes, const std::string& path_for_errors);

// Whole numbers from a safetensors file (training data's token ids: `qkv train --data`): the named
// tensors, of an integer dtype (I8 to I64, U8 to U64) or a float one (F32, F16, BF16, F64) whose
// every value is whole, as int64. The file is checked as load_safetensors checks it; a value int64
// cannot hold, or a float that is not whole, is an error naming the tensor and the element; a name
// the file lacks, TensorFile::get's. Integer dtypes are read here only (as weights they are
// refused: int8 weights mean nothing without their scales).
struct IntegerTensor {
  Shape shape;
  std::vector<int64_t> values;  // row-major
};
std::map<std::string, IntegerTensor> load_safetensors_integers(const std::string& path,
                                                               const std::vector<std::string>& names);

// A safetensors file memory-mapped read-only and checked whole when opened (the header, every
// entry's dtype, shape and byte range, no overlaps: load_safetensors's checks and errors), each
// tensor decoded to float32 only when read. Reading a model through it costs the model's tensors
// and not the file's bytes as well: `read` drops the pages it decoded from the process's memory
// (they come back from the page cache if read again). A path that cannot be mapped (not a regular
// file, empty) is read whole instead, with read_file's errors.
class MappedSafetensors {
 public:
  explicit MappedSafetensors(const std::string& path);
  ~MappedSafetensors();
  MappedSafetensors(const MappedSafetensors&) = delete;
  MappedSafetensors& operator=(const MappedSafetensors&) = delete;

  const std::string& path() const;
  const std::vector<std::string>& names() const;  // in the order of their data offsets
  const std::map<std::string, std::string>& metadata() const;
  bool contains(const std::string& name) const;
  // These throw TensorFile::get's error for a name the file does not have.
  const Shape& shape(const std::string& name) const;
  std::string stored_dtype(const std::string& name) const;  // "F32", "BF16", ...
  Tensor read(const std::string& name) const;                // float32, contiguous, named
  void read_into(const std::string& name, float* out) const; // the same into out[numel of its shape]
  // Elements [first, first + count) of the tensor in row-major order, as float32, into out[count]
  // (a matrix read a few rows at a time); a range outside [0, numel] throws, naming it.
  void read_range_into(const std::string& name, int64_t first, int64_t count, float* out) const;
  // The tensor as bf16 bits into out[numel]: a BF16 tensor's bits as stored (no float copy made),
  // another dtype's values rounded to nearest even.
  void read_bf16_into(const std::string& name, uint16_t* out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// The bytes of a safetensors file holding `tensors` as F32, data in the given order, header
// entries in the given order after "__metadata__" (omitted when empty), header padded with
// spaces to a multiple of 8 bytes. Non-contiguous tensors are copied. Throws qkv::Error (before
// anything is written) on an empty or duplicate name, the reserved name "__metadata__", or an
// undefined (absent) tensor, which the format cannot represent: leave such a tensor out.
// The tensors named in `bf16` are written as BF16 instead (each value rounded to nearest even; a
// name that is not among the tensors is an error).
std::string serialize_safetensors(const NamedTensors& tensors,
                                  const std::map<std::string, std::string>& metadata = {},
                                  const std::set<std::string>& bf16 = {});

// serialize_safetensors, then write_file_atomically: `path` is replaced whole or not at all.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {},
                      const std::set<std::string>& bf16 = {});

// Exact conversions used by the reader (exposed for tests).
float f16_to_f32(uint16_t bits);
float bf16_to_f32(uint16_t bits);
float f64_to_f32(double value);  // round to nearest even; beyond the float range -> +-inf

}  // namespace qkv

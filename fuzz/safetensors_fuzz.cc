// parse_safetensors on the bytes, as load_safetensors reads a file: any input either parses into
// tensors whose data the file holds (at least 2 bytes an element: F16 and BF16 are the smallest
// dtypes), or is a qkv::Error.
#include "fuzz_target.h"
#include "qkv/io/safetensors.h"

QKV_FUZZ_TARGET(data) {
  const qkv::TensorFile f = qkv::parse_safetensors(std::string(data), "fuzz.safetensors");
  QKV_FUZZ_EXPECT(f.names.size() == f.tensors.size());
  size_t elements = 0;
  for (const std::string& name : f.names) elements += static_cast<size_t>(f.get(name).numel());
  QKV_FUZZ_EXPECT(elements <= data.size() / 2);
}

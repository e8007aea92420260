// GgufFile::parse on the bytes, then every readable tensor of up to 2^16 values dequantized: any
// input either gives tensors whose bytes lie inside it, or is a qkv::Error.
#include <string>
#include <vector>

#include "fuzz_target.h"
#include "qkv/io/gguf.h"

QKV_FUZZ_TARGET(data) {
  const qkv::GgufFile f = qkv::GgufFile::parse(std::string(data), "fuzz.gguf");
  std::vector<float> out;
  for (const qkv::GgufTensor& t : f.tensors()) {
    QKV_FUZZ_EXPECT(t.bytes >= 0 && static_cast<size_t>(t.bytes) <= data.size());
    if (!t.type->readable || t.numel() > (1 << 16)) continue;
    out.resize(static_cast<size_t>(t.numel()));
    f.read_floats(t.name, out.data());
  }
}

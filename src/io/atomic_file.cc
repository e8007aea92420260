// Atomic whole-file writes. See include/qkv/io/atomic_file.h.
#include "qkv/io/atomic_file.h"

#include <sstream>

#include "qkv/core/error.h"
#include "qkv/io/output_files.h"

namespace qkv {

void write_file_atomically(const std::string& path, const std::string& bytes) {
  write_files_atomically({{path, bytes, ""}});  // the rule for every output (qkv/io/output_files.h)
}

void write_file_atomically(const std::string& path,
                           const std::function<void(std::ostream&)>& write) {
  std::ostringstream out;
  write(out);
  QKV_CHECK(out.good(), "cannot write '", path, "': producing its content failed");
  write_file_atomically(path, std::move(out).str());
}

}  // namespace qkv

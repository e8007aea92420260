// Process-wide limits on what input may ask for. See include/qkv/core/limits.h.
#include "qkv/core/limits.h"

#include <unistd.h>

#include <algorithm>
#include <mutex>

#include "qkv/core/error.h"
#include "qkv/core/thread_pool.h"

namespace qkv {
namespace {

std::mutex g_mutex;
bool g_set = false;
Limits g_limits{};

double gib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

}  // namespace

Limits default_limits() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  const int64_t physical = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : int64_t{8} << 30;
  Limits l;
  l.max_memory_bytes = physical / 2;
  l.max_file_bytes = physical / 2;
  l.max_threads = std::max(64, 8 * hardware_cores());
  return l;
}

const Limits& limits() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_set) {
    g_limits = default_limits();
    g_set = true;
  }
  return g_limits;
}

void set_limits(const Limits& l) {
  QKV_CHECK(l.max_memory_bytes > 0 && l.max_file_bytes > 0 && l.max_threads >= 1 && l.json_max_depth >= 1 &&
                l.max_json_bytes >= 1 &&
                l.regex_match_limit >= 1 && l.regex_match_limit <= UINT32_MAX && l.regex_min_bytes_per_second >= 1,
            "limits: every limit must be positive (memory ", l.max_memory_bytes, ", file ", l.max_file_bytes,
            ", threads ", l.max_threads, ", JSON depth ", l.json_max_depth, ", JSON bytes ", l.max_json_bytes,
            ", regex match limit ",
            l.regex_match_limit, ", at most 4294967295; regex bytes per second ", l.regex_min_bytes_per_second, ")");
  std::lock_guard<std::mutex> lock(g_mutex);
  g_limits = l;
  g_set = true;
}

void check_memory_request(int64_t bytes, const char* what) {
  const int64_t limit = limits().max_memory_bytes;
  QKV_CHECK(bytes <= limit, what, " needs ", bytes, " bytes (", gib(bytes), " GiB), more than the memory limit of ",
            limit, " bytes (", gib(limit), " GiB; max_memory_bytes)");
}

}  // namespace qkv

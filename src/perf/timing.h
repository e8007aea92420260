// perf/timing.h (private) - what every benchmark harness reports about its timed runs.
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <vector>

#include "qkv/core/machine.h"

namespace qkv::perf {

// Where the kernels that ask for many lines at once ahead of their loads put them (L1, L1-NTA or
// L2; core/machine.h), as a report names it.
inline const char* burst_prefetch_name() { return qkv::burst_prefetch_name(burst_prefetch()); }

struct TimeSummary {
  double median_ms = 0, min_ms = 0, max_ms = 0;
};

// The median (the mean of the middle two for an even count), min and max of at least one time.
inline TimeSummary summarize_times(std::vector<double> times_ms) {
  std::sort(times_ms.begin(), times_ms.end());
  const size_t n = times_ms.size();
  return {n % 2 ? times_ms[n / 2] : 0.5 * (times_ms[n / 2 - 1] + times_ms[n / 2]), times_ms.front(), times_ms.back()};
}

// This process's peak resident memory so far, MiB.
inline double max_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

}  // namespace qkv::perf

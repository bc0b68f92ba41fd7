// Small helpers for the benchmarks: wall clock, peak resident memory, medians.
#pragma once

#include <algorithm>
#include <chrono>
#include <sys/resource.h>
#include <vector>

namespace smol::bench {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Peak resident set size of this process so far, in MB.
inline double peak_rss_mb() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_maxrss) / 1024.0;
}

inline double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace smol::bench

// Small helpers for the benchmarks: wall clock, peak resident memory, medians.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
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

/// Runs `f` in a child process and returns the child's own peak resident set size in MB, so each
/// run of a benchmark is measured alone (a process's peak only grows: a later, smaller run would
/// report an earlier run's peak). The child's output is flushed before it exits; a child that
/// fails ends the benchmark with its status.
template <class F>
double peak_rss_mb_of(F&& f) {
    std::fflush(stdout);
    const pid_t pid = fork();
    if (pid < 0) std::exit(1);
    if (pid == 0) {
        f();
        std::fflush(stdout);
        _exit(0);
    }
    int status = 0;
    rusage u{};
    while (wait4(pid, &status, 0, &u) < 0) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) std::exit(1);
    return static_cast<double>(u.ru_maxrss) / 1024.0;
}

inline double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace smol::bench

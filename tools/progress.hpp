// A one-line progress bar on stderr for long runs (sweeps): done / total, rate and ETA,
// redrawn in place at most ten times a second. Drawn only when the stream is a terminal and
// --quiet is not given, so logs and pipes never see carriage returns.
#pragma once

#include <chrono>
#include <cstddef>
#include <ostream>
#include <string>

namespace smol::tools {

class ProgressBar {
public:
    ProgressBar(std::ostream& out, bool enabled, std::string what);
    ~ProgressBar();
    ProgressBar(const ProgressBar&) = delete;
    ProgressBar& operator=(const ProgressBar&) = delete;

    void update(std::size_t done, std::size_t total);
    /// Erases the bar (the next output starts on a clean line).
    void finish();

    /// "[=====>    ]  120/400 plans  35.2 plans/s  ETA 0:08" for `elapsed_s` seconds since the start.
    static std::string line(std::size_t done, std::size_t total, double elapsed_s, const std::string& what);

private:
    std::ostream& out_;
    bool enabled_;
    std::string what_;
    std::chrono::steady_clock::time_point start_, last_draw_;
    bool drawn_ = false;
};

}  // namespace smol::tools

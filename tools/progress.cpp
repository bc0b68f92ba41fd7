#include "tools/progress.hpp"

#include <cstdio>

namespace smol::tools {

ProgressBar::ProgressBar(std::ostream& out, bool enabled, std::string what)
    : out_(out), enabled_(enabled), what_(std::move(what)), start_(std::chrono::steady_clock::now()) {}

ProgressBar::~ProgressBar() { finish(); }

std::string ProgressBar::line(std::size_t done, std::size_t total, double elapsed_s, const std::string& what) {
    constexpr int kWidth = 24;
    const double fraction = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
    const int filled = static_cast<int>(fraction * kWidth);
    std::string bar(static_cast<std::size_t>(filled), '=');
    if (filled < kWidth) bar += '>';
    bar.resize(kWidth, ' ');
    const double rate = elapsed_s > 0 ? static_cast<double>(done) / elapsed_s : 0;
    char eta[32] = "--:--";
    if (rate > 0 && done < total) {
        const long s = static_cast<long>(static_cast<double>(total - done) / rate + 0.5);
        std::snprintf(eta, sizeof eta, "%ld:%02ld", s / 60, s % 60);
    } else if (done >= total) {
        std::snprintf(eta, sizeof eta, "0:00");
    }
    char buf[160];
    std::snprintf(buf, sizeof buf, "[%s] %zu/%zu %s  %.3g %s/s  ETA %s", bar.c_str(), done, total, what.c_str(), rate,
                  what.c_str(), eta);
    return buf;
}

void ProgressBar::update(std::size_t done, std::size_t total) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (drawn_ && done < total && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    drawn_ = true;
    out_ << '\r' << line(done, total, std::chrono::duration<double>(now - start_).count(), what_) << "\033[K" << std::flush;
}

void ProgressBar::finish() {
    if (!enabled_ || !drawn_) return;
    out_ << "\r\033[K" << std::flush;
    drawn_ = false;
}

}  // namespace smol::tools

// Units as value types. No bare double crosses an interface: a duration is a Time, a size is
// Bytes, work is Flops, a rate is Bandwidth or FlopRate. Dividing Bytes by Bandwidth gives Time.
//
// Time is an integer count of picoseconds (2^63 ps is 106 days), so event order is exact and
// runs are deterministic. Bytes are integers. Flops are doubles: a GPT-3 step is ~4e21 FLOPs,
// beyond int64.
#pragma once

#include <cmath>
#include <compare>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace smol {

class Time {
public:
    constexpr Time() = default;
    static constexpr Time ps(std::int64_t v) { return Time(v); }
    static constexpr Time ns(double v) { return Time(round_ps(v * 1e3)); }
    static constexpr Time us(double v) { return Time(round_ps(v * 1e6)); }
    static constexpr Time ms(double v) { return Time(round_ps(v * 1e9)); }
    static constexpr Time seconds(double v) { return Time(round_ps(v * 1e12)); }
    static constexpr Time zero() { return Time(0); }
    static constexpr Time max() { return Time(std::numeric_limits<std::int64_t>::max()); }

    constexpr std::int64_t count_ps() const { return ps_; }
    constexpr double to_seconds() const { return static_cast<double>(ps_) * 1e-12; }
    constexpr double to_us() const { return static_cast<double>(ps_) * 1e-6; }
    constexpr double to_ns() const { return static_cast<double>(ps_) * 1e-3; }

    constexpr Time operator+(Time o) const { return Time(ps_ + o.ps_); }
    constexpr Time operator-(Time o) const { return Time(ps_ - o.ps_); }
    constexpr Time& operator+=(Time o) { ps_ += o.ps_; return *this; }
    constexpr Time& operator-=(Time o) { ps_ -= o.ps_; return *this; }
    constexpr Time operator*(double k) const { return Time(round_ps(static_cast<double>(ps_) * k)); }
    constexpr Time operator*(std::int64_t k) const { return Time(ps_ * k); }
    constexpr double operator/(Time o) const { return static_cast<double>(ps_) / static_cast<double>(o.ps_); }
    constexpr auto operator<=>(const Time&) const = default;

private:
    constexpr explicit Time(std::int64_t v) : ps_(v) {}
    static constexpr std::int64_t round_ps(double v) {
        return static_cast<std::int64_t>(v >= 0 ? v + 0.5 : v - 0.5);
    }
    std::int64_t ps_ = 0;
};

class Bytes {
public:
    constexpr Bytes() = default;
    constexpr explicit Bytes(std::int64_t v) : n_(v) {}
    static constexpr Bytes kb(double v) { return from_double(v * 1e3); }
    static constexpr Bytes mb(double v) { return from_double(v * 1e6); }
    static constexpr Bytes gb(double v) { return from_double(v * 1e9); }
    static constexpr Bytes kib(double v) { return from_double(v * 1024.0); }
    static constexpr Bytes mib(double v) { return from_double(v * 1048576.0); }
    static constexpr Bytes gib(double v) { return from_double(v * 1073741824.0); }
    /// Rounds to the nearest byte; used where a size is derived by arithmetic (S·(p−1)/p).
    static constexpr Bytes from_double(double v) {
        return Bytes(static_cast<std::int64_t>(v >= 0 ? v + 0.5 : v - 0.5));
    }

    constexpr std::int64_t count() const { return n_; }
    constexpr double as_double() const { return static_cast<double>(n_); }
    constexpr double to_gb() const { return static_cast<double>(n_) * 1e-9; }

    constexpr Bytes operator+(Bytes o) const { return Bytes(n_ + o.n_); }
    constexpr Bytes operator-(Bytes o) const { return Bytes(n_ - o.n_); }
    constexpr Bytes& operator+=(Bytes o) { n_ += o.n_; return *this; }
    constexpr Bytes& operator-=(Bytes o) { n_ -= o.n_; return *this; }
    constexpr Bytes operator*(std::int64_t k) const { return Bytes(n_ * k); }
    constexpr Bytes operator*(double k) const { return from_double(static_cast<double>(n_) * k); }
    constexpr Bytes operator/(std::int64_t k) const { return Bytes(n_ / k); }
    constexpr double operator/(Bytes o) const { return static_cast<double>(n_) / static_cast<double>(o.n_); }
    constexpr auto operator<=>(const Bytes&) const = default;

private:
    std::int64_t n_ = 0;
};

class Flops {
public:
    constexpr Flops() = default;
    constexpr explicit Flops(double v) : n_(v) {}
    constexpr double count() const { return n_; }
    constexpr Flops operator+(Flops o) const { return Flops(n_ + o.n_); }
    constexpr Flops operator-(Flops o) const { return Flops(n_ - o.n_); }
    constexpr Flops& operator+=(Flops o) { n_ += o.n_; return *this; }
    constexpr Flops operator*(double k) const { return Flops(n_ * k); }
    constexpr Flops operator/(double k) const { return Flops(n_ / k); }
    constexpr double operator/(Flops o) const { return n_ / o.n_; }
    constexpr auto operator<=>(const Flops&) const = default;

private:
    double n_ = 0;
};

/// Bytes per second.
class Bandwidth {
public:
    constexpr Bandwidth() = default;
    static constexpr Bandwidth bytes_per_s(double v) { return Bandwidth(v); }
    static constexpr Bandwidth gb_per_s(double v) { return Bandwidth(v * 1e9); }
    static constexpr Bandwidth gbit_per_s(double v) { return Bandwidth(v * 1e9 / 8.0); }
    constexpr double bytes_per_second() const { return bps_; }
    constexpr double to_gb_per_s() const { return bps_ * 1e-9; }
    constexpr Bandwidth operator*(double k) const { return Bandwidth(bps_ * k); }
    constexpr Bandwidth operator/(double k) const { return Bandwidth(bps_ / k); }
    constexpr Bandwidth operator+(Bandwidth o) const { return Bandwidth(bps_ + o.bps_); }
    constexpr double operator/(Bandwidth o) const { return bps_ / o.bps_; }
    constexpr auto operator<=>(const Bandwidth&) const = default;

private:
    constexpr explicit Bandwidth(double v) : bps_(v) {}
    double bps_ = 0;
};

/// Floating-point operations per second.
class FlopRate {
public:
    constexpr FlopRate() = default;
    static constexpr FlopRate flops_per_s(double v) { return FlopRate(v); }
    static constexpr FlopRate tflops(double v) { return FlopRate(v * 1e12); }
    static constexpr FlopRate gflops(double v) { return FlopRate(v * 1e9); }
    constexpr double per_second() const { return r_; }
    constexpr double to_tflops() const { return r_ * 1e-12; }
    constexpr FlopRate operator*(double k) const { return FlopRate(r_ * k); }
    constexpr double operator/(FlopRate o) const { return r_ / o.r_; }
    constexpr auto operator<=>(const FlopRate&) const = default;

private:
    constexpr explicit FlopRate(double v) : r_(v) {}
    double r_ = 0;
};

/// Time to move `b` at rate `bw`, rounded up to the next picosecond. Infinite rate → zero.
constexpr Time operator/(Bytes b, Bandwidth bw) {
    const double ps = b.as_double() / bw.bytes_per_second() * 1e12;
    return Time::ps(static_cast<std::int64_t>(std::ceil(ps)));
}
/// Time to execute `f` at rate `r`, rounded up to the next picosecond.
constexpr Time operator/(Flops f, FlopRate r) {
    const double ps = f.count() / r.per_second() * 1e12;
    return Time::ps(static_cast<std::int64_t>(std::ceil(ps)));
}
constexpr Bytes operator*(Bandwidth bw, Time t) {
    return Bytes::from_double(bw.bytes_per_second() * t.to_seconds());
}
constexpr FlopRate operator/(Flops f, Time t) { return FlopRate::flops_per_s(f.count() / t.to_seconds()); }
constexpr Bandwidth operator/(Bytes b, Time t) { return Bandwidth::bytes_per_s(b.as_double() / t.to_seconds()); }

// Parsing "<number> <unit>" strings. Each throws smol::Error (kind bad_input) naming what was
// expected; the caller adds file and JSON path. Accepted units are listed in the messages.
Time parse_time(std::string_view text);            // "2 us", "1.5 ms", "3 s", "10 ns", "7 ps"
Bytes parse_bytes(std::string_view text);          // "80 GiB", "16 GB", "25 MB", "512 KiB", "100 B"
Bandwidth parse_bandwidth(std::string_view text);  // "25 GB/s", "1 Gbit/s", "100 Gb/s", "900 MB/s"
FlopRate parse_flop_rate(std::string_view text);   // "312 TFLOP/s", "30.2 GFLOP/s"

// Human formatting with three significant digits: "1.23 ms", "80.0 GB", "25.0 GB/s".
std::string to_string(Time t);
std::string to_string(Bytes b);
std::string to_string(Bandwidth bw);
std::string to_string(FlopRate r);

}  // namespace smol

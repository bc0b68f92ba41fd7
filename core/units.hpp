// Units as value types. No bare double crosses an interface: a duration is a Time, a size is
// Bytes, work is Flops, a rate is Bandwidth or FlopRate. Dividing Bytes by Bandwidth gives Time.
//
// Time is an integer count of picoseconds (2^63 ps is 106 days), so event order is exact and
// runs are deterministic. Bytes are integers. Flops are doubles: a GPT-3 step is ~4e21 FLOPs,
// beyond int64.
//
// Arithmetic cannot overflow silently: Time and Bytes sums, differences and products are checked
// (one overflow-flag branch each, see __builtin_add_overflow), conversions from double check the
// value is finite and in range, and Flops stay finite. A result out of range throws smol::Error
// of kind out_of_range whose message names the quantities ("moving 1 GB at 1 B/s takes 1e9 s,
// beyond the 106 days of simulated time"); callers add the op, file or flag. Bandwidth and
// FlopRate may be +infinity, which means "no limit" (dividing by it gives zero time); NaN is
// refused where a rate is made from a number and wherever a rate becomes a Time.
#pragma once

#include <cmath>
#include <compare>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace smol {

namespace detail {
// Out of line and cold, so the checked operators stay one compare-and-branch on the hot path.
[[noreturn]] void fail_time_range(double ps);                       // a duration beyond ±2^63 ps
[[noreturn]] void fail_time_sum(std::int64_t a, std::int64_t b, char op);
[[noreturn]] void fail_bytes_range(double bytes);
[[noreturn]] void fail_bytes_sum(std::int64_t a, std::int64_t b, char op);
[[noreturn]] void fail_not_finite(const char* what, double value);
[[noreturn]] void fail_transfer_time(double bytes, double bytes_per_s);
[[noreturn]] void fail_compute_time(double flops, double flops_per_s);
/// 2^63 as a double: the first value a double → int64 conversion cannot represent.
inline constexpr double kInt64Limit = 9223372036854775808.0;
}  // namespace detail

/// a · b for counts and sizes, or an out_of_range error naming `what` ("parameters of a layer").
std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* what);
/// a + b for counts and sizes, or an out_of_range error naming `what`.
std::int64_t checked_add(std::int64_t a, std::int64_t b, const char* what);
/// `v` rounded to the nearest integer, or an out_of_range error naming `what` when it is not
/// finite or beyond ±2^63 (a double → int64 conversion that would be undefined behaviour).
std::int64_t checked_round(double v, const char* what);

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

    /// `v` picoseconds given as a double (a computed duration), rounded to the nearest.
    static constexpr Time ps_rounded(double v) { return Time(round_ps(v)); }
    /// `v` picoseconds given as a double, rounded up (a transfer is done at the next picosecond).
    static constexpr Time ps_ceil(double v) {
        if (!(v > -detail::kInt64Limit && v < detail::kInt64Limit)) detail::fail_time_range(v);
        return Time(static_cast<std::int64_t>(std::ceil(v)));
    }

    constexpr std::int64_t count_ps() const { return ps_; }
    constexpr double to_seconds() const { return static_cast<double>(ps_) * 1e-12; }
    constexpr double to_us() const { return static_cast<double>(ps_) * 1e-6; }
    constexpr double to_ns() const { return static_cast<double>(ps_) * 1e-3; }

    constexpr Time operator+(Time o) const {
        std::int64_t r = 0;
        if (__builtin_add_overflow(ps_, o.ps_, &r)) detail::fail_time_sum(ps_, o.ps_, '+');
        return Time(r);
    }
    constexpr Time operator-(Time o) const {
        std::int64_t r = 0;
        if (__builtin_sub_overflow(ps_, o.ps_, &r)) detail::fail_time_sum(ps_, o.ps_, '-');
        return Time(r);
    }
    constexpr Time& operator+=(Time o) { return *this = *this + o; }
    constexpr Time& operator-=(Time o) { return *this = *this - o; }
    constexpr Time operator*(double k) const { return Time(round_ps(static_cast<double>(ps_) * k)); }
    constexpr Time operator*(std::int64_t k) const {
        std::int64_t r = 0;
        if (__builtin_mul_overflow(ps_, k, &r)) detail::fail_time_sum(ps_, k, '*');
        return Time(r);
    }
    constexpr double operator/(Time o) const { return static_cast<double>(ps_) / static_cast<double>(o.ps_); }
    constexpr auto operator<=>(const Time&) const = default;

private:
    constexpr explicit Time(std::int64_t v) : ps_(v) {}
    /// Nearest integer, or out_of_range for NaN, ±infinity and anything beyond ±2^63 ps.
    static constexpr std::int64_t round_ps(double v) {
        const double r = v >= 0 ? v + 0.5 : v - 0.5;
        if (!(r > -detail::kInt64Limit && r < detail::kInt64Limit)) detail::fail_time_range(v);
        return static_cast<std::int64_t>(r);
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
    /// NaN, infinities and sizes beyond ±2^63 bytes are out_of_range.
    static constexpr Bytes from_double(double v) {
        const double r = v >= 0 ? v + 0.5 : v - 0.5;
        if (!(r > -detail::kInt64Limit && r < detail::kInt64Limit)) detail::fail_bytes_range(v);
        return Bytes(static_cast<std::int64_t>(r));
    }

    constexpr std::int64_t count() const { return n_; }
    constexpr double as_double() const { return static_cast<double>(n_); }
    constexpr double to_gb() const { return static_cast<double>(n_) * 1e-9; }

    constexpr Bytes operator+(Bytes o) const {
        std::int64_t r = 0;
        if (__builtin_add_overflow(n_, o.n_, &r)) detail::fail_bytes_sum(n_, o.n_, '+');
        return Bytes(r);
    }
    constexpr Bytes operator-(Bytes o) const {
        std::int64_t r = 0;
        if (__builtin_sub_overflow(n_, o.n_, &r)) detail::fail_bytes_sum(n_, o.n_, '-');
        return Bytes(r);
    }
    constexpr Bytes& operator+=(Bytes o) { return *this = *this + o; }
    constexpr Bytes& operator-=(Bytes o) { return *this = *this - o; }
    constexpr Bytes operator*(std::int64_t k) const {
        std::int64_t r = 0;
        if (__builtin_mul_overflow(n_, k, &r)) detail::fail_bytes_sum(n_, k, '*');
        return Bytes(r);
    }
    constexpr Bytes operator*(double k) const { return from_double(static_cast<double>(n_) * k); }
    /// Integer division (towards zero); k = 0 or the one overflowing quotient are out_of_range.
    constexpr Bytes operator/(std::int64_t k) const {
        if (k == 0 || (k == -1 && n_ == std::numeric_limits<std::int64_t>::min())) detail::fail_bytes_sum(n_, k, '/');
        return Bytes(n_ / k);
    }
    constexpr double operator/(Bytes o) const { return static_cast<double>(n_) / static_cast<double>(o.n_); }
    constexpr auto operator<=>(const Bytes&) const = default;

private:
    std::int64_t n_ = 0;
};

/// A FLOP count: finite always (a sum or product that reaches infinity is out_of_range).
class Flops {
public:
    constexpr Flops() = default;
    constexpr explicit Flops(double v) : n_(v) {
        if (!std::isfinite(v)) detail::fail_not_finite("FLOP count", v);
    }
    constexpr double count() const { return n_; }
    constexpr Flops operator+(Flops o) const { return Flops(n_ + o.n_); }
    constexpr Flops operator-(Flops o) const { return Flops(n_ - o.n_); }
    constexpr Flops& operator+=(Flops o) { return *this = *this + o; }
    constexpr Flops operator*(double k) const { return Flops(n_ * k); }
    constexpr Flops operator/(double k) const { return Flops(n_ / k); }
    constexpr double operator/(Flops o) const { return n_ / o.n_; }
    constexpr auto operator<=>(const Flops&) const = default;

private:
    double n_ = 0;
};

/// Bytes per second; +infinity means "no limit". A NaN is refused where a rate is made from a
/// number (the named constructors); one that arithmetic makes (∞ × 0) is caught where the rate
/// becomes a Time (operator/ below), so the per-op arithmetic pays no check.
class Bandwidth {
public:
    constexpr Bandwidth() = default;
    static constexpr Bandwidth bytes_per_s(double v) { return checked(v); }
    static constexpr Bandwidth unlimited() { return Bandwidth(std::numeric_limits<double>::infinity()); }
    static constexpr Bandwidth gb_per_s(double v) { return checked(v * 1e9); }
    static constexpr Bandwidth gbit_per_s(double v) { return checked(v * 1e9 / 8.0); }
    constexpr double bytes_per_second() const { return bps_; }
    constexpr double to_gb_per_s() const { return bps_ * 1e-9; }
    constexpr Bandwidth operator*(double k) const { return Bandwidth(bps_ * k); }
    constexpr Bandwidth operator/(double k) const { return Bandwidth(bps_ / k); }
    constexpr Bandwidth operator+(Bandwidth o) const { return Bandwidth(bps_ + o.bps_); }
    constexpr double operator/(Bandwidth o) const { return bps_ / o.bps_; }
    constexpr auto operator<=>(const Bandwidth&) const = default;

private:
    constexpr explicit Bandwidth(double v) : bps_(v) {}
    static constexpr Bandwidth checked(double v) {
        if (std::isnan(v)) detail::fail_not_finite("bandwidth", v);
        return Bandwidth(v);
    }
    double bps_ = 0;
};

/// Floating-point operations per second; +infinity means "no limit"; NaN as for Bandwidth.
class FlopRate {
public:
    constexpr FlopRate() = default;
    static constexpr FlopRate flops_per_s(double v) { return checked(v); }
    static constexpr FlopRate tflops(double v) { return checked(v * 1e12); }
    static constexpr FlopRate gflops(double v) { return checked(v * 1e9); }
    constexpr double per_second() const { return r_; }
    constexpr double to_tflops() const { return r_ * 1e-12; }
    constexpr FlopRate operator*(double k) const { return FlopRate(r_ * k); }
    constexpr double operator/(FlopRate o) const { return r_ / o.r_; }
    constexpr auto operator<=>(const FlopRate&) const = default;

private:
    constexpr explicit FlopRate(double v) : r_(v) {}
    static constexpr FlopRate checked(double v) {
        if (std::isnan(v)) detail::fail_not_finite("FLOP rate", v);
        return FlopRate(v);
    }
    double r_ = 0;
};

/// Time to move `b` at rate `bw`, rounded up to the next picosecond. Infinite rate → zero;
/// a time beyond the range (a zero rate, or 1 GB at 1 B/s) is out_of_range naming both.
// The range is checked before rounding up (a double below 2^63 rounds up to one below 2^63), so
// the compiler keeps its cheap integer ceil(x) → int64 idiom instead of a full double ceil.
constexpr Time operator/(Bytes b, Bandwidth bw) {
    const double ps = b.as_double() / bw.bytes_per_second() * 1e12;
    if (!(ps > -detail::kInt64Limit && ps < detail::kInt64Limit)) detail::fail_transfer_time(b.as_double(), bw.bytes_per_second());
    return Time::ps(static_cast<std::int64_t>(std::ceil(ps)));
}
/// Time to execute `f` at rate `r`, rounded up to the next picosecond (out_of_range as above).
constexpr Time operator/(Flops f, FlopRate r) {
    const double ps = f.count() / r.per_second() * 1e12;
    if (!(ps > -detail::kInt64Limit && ps < detail::kInt64Limit)) detail::fail_compute_time(f.count(), r.per_second());
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
// Memory (capacities, footprints, allocations) in powers of 1024, three significant digits:
// "4.19 GiB", "512 MiB", "100 B" — as nvidia-smi, torch.cuda.memory_summary and free -h print
// it, and as HBM is sized (an "80 GB" A100 holds 80 GiB). Traffic and bandwidth stay decimal
// (to_string), as datasheets and NCCL's bus bandwidth state them.
std::string to_string_binary(Bytes b);
// A plain number as a user would type it, printf's %g: "0.5", "2", "1e-06".
std::string number_text(double v);

}  // namespace smol

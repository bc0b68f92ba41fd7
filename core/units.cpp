// Parsing and printing of unit-bearing quantities ("25 GB/s", "80 GiB", "2 us", "312 TFLOP/s").
//
// Units are case-sensitive on purpose: "Gb/s" is gigabits and "GB/s" gigabytes, a factor of 8.
// Decimal prefixes (KB, MB, GB, TB) are powers of 1000; binary ones (KiB, MiB, GiB, TiB) powers
// of 1024, as in IEC 80000-13.
#include "core/units.hpp"

#include <array>
#include <charconv>
#include <cstdio>
#include <string>

#include "core/error.hpp"

namespace smol {
namespace {

struct UnitScale {
    const char* name;
    double scale;  // base units (ps, bytes, bytes/s, FLOP/s) per one of this unit
};

// Base unit for Time is the picosecond.
constexpr std::array time_units{
    UnitScale{"ps", 1.0}, UnitScale{"ns", 1e3}, UnitScale{"us", 1e6}, UnitScale{"µs", 1e6},
    UnitScale{"ms", 1e9}, UnitScale{"s", 1e12},
};

constexpr std::array byte_units{
    UnitScale{"B", 1.0},          UnitScale{"KB", 1e3},           UnitScale{"MB", 1e6},
    UnitScale{"GB", 1e9},         UnitScale{"TB", 1e12},          UnitScale{"PB", 1e15},
    UnitScale{"KiB", 1024.0},     UnitScale{"MiB", 1048576.0},    UnitScale{"GiB", 1073741824.0},
    UnitScale{"TiB", 1099511627776.0},
};

// Base unit is bytes per second; the bit units divide by 8.
constexpr std::array bandwidth_units{
    UnitScale{"B/s", 1.0},           UnitScale{"KB/s", 1e3},          UnitScale{"MB/s", 1e6},
    UnitScale{"GB/s", 1e9},          UnitScale{"TB/s", 1e12},         UnitScale{"PB/s", 1e15},
    UnitScale{"KiB/s", 1024.0},
    UnitScale{"MiB/s", 1048576.0},   UnitScale{"GiB/s", 1073741824.0},
    UnitScale{"bit/s", 1.0 / 8},     UnitScale{"Kbit/s", 1e3 / 8},    UnitScale{"Mbit/s", 1e6 / 8},
    UnitScale{"Gbit/s", 1e9 / 8},    UnitScale{"Tbit/s", 1e12 / 8},   UnitScale{"Mb/s", 1e6 / 8},
    UnitScale{"Gb/s", 1e9 / 8},      UnitScale{"Tb/s", 1e12 / 8},
};

constexpr std::array flop_rate_units{
    UnitScale{"FLOP/s", 1.0},    UnitScale{"KFLOP/s", 1e3},   UnitScale{"MFLOP/s", 1e6},
    UnitScale{"GFLOP/s", 1e9},   UnitScale{"TFLOP/s", 1e12},  UnitScale{"PFLOP/s", 1e15},
    UnitScale{"EFLOP/s", 1e18},  UnitScale{"FLOPS", 1.0},     UnitScale{"GFLOPS", 1e9},
    UnitScale{"TFLOPS", 1e12},   UnitScale{"PFLOPS", 1e15},
};

template <std::size_t N>
std::string unit_list(const std::array<UnitScale, N>& units) {
    std::string out;
    for (const auto& u : units) {
        if (!out.empty()) out += ", ";
        out += u.name;
    }
    return out;
}

std::string quoted(std::string_view text) { return "\"" + std::string(text) + "\""; }

bool is_space(char c) { return c == ' ' || c == '\t'; }

struct Quantity {
    double value;  // in base units
    double number; // as written, before scaling (to check its sign and finiteness)
};

/// Splits "<number> <unit>" (the space is optional) and scales by the unit's factor.
/// `what` names the quantity for messages: "a bandwidth such as \"25 GB/s\"".
template <std::size_t N>
Quantity parse_quantity(std::string_view text, const std::array<UnitScale, N>& units, const std::string& what) {
    std::size_t b = 0, e = text.size();
    while (b < e && is_space(text[b])) ++b;
    while (e > b && is_space(text[e - 1])) --e;
    const std::string_view trimmed = text.substr(b, e - b);

    double number = 0;
    const char* first = trimmed.data();
    const char* last = trimmed.data() + trimmed.size();
    if (first != last && *first == '+') ++first;  // from_chars rejects a leading '+'
    const auto [end, ec] = std::from_chars(first, last, number);
    if (ec != std::errc() || end == first) {
        fail_input(what, quoted(text));
    }
    std::string_view unit(end, static_cast<std::size_t>(last - end));
    while (!unit.empty() && is_space(unit.front())) unit.remove_prefix(1);
    if (unit.empty()) {
        throw Error(ErrorKind::bad_input,
                    "missing unit in " + quoted(text) + ": expected one of " + unit_list(units));
    }
    for (const auto& u : units) {
        if (unit == u.name) return {number * u.scale, number};
    }
    throw Error(ErrorKind::bad_input, "unknown unit '" + std::string(unit) + "' in " + quoted(text) +
                                          ": expected one of " + unit_list(units));
}

/// Rejects NaN and infinities, negative numbers, and zero unless `allow_zero`. `noun` is "size",
/// "bandwidth" or "FLOP rate"; `example` a valid value such as "25 GB/s".
void check_amount(const Quantity& q, std::string_view text, const std::string& noun, const std::string& example,
                  bool allow_zero) {
    const std::string such_as = " such as \"" + example + "\"";
    if (!std::isfinite(q.number) || !std::isfinite(q.value)) fail_input("a finite " + noun + such_as, quoted(text));
    if (allow_zero && q.number < 0) fail_input("a non-negative " + noun + such_as, quoted(text));
    if (!allow_zero && q.number <= 0) fail_input("a " + noun + " above zero" + such_as, quoted(text));
}

/// Rounds to three significant digits: 0.0012345 → 0.00123, 99960 → 1e5.
double round_sig3(double v) {
    if (v == 0 || !std::isfinite(v)) return v;
    const double magnitude = std::pow(10.0, std::floor(std::log10(std::fabs(v))) - 2);
    return std::round(v / magnitude) * magnitude;
}

/// "1.23 ms": `m` of unit `name` to three significant digits (integers for values of 100 and
/// above, and whole numbers of a base unit, `whole`, as they are).
std::string unit_text(double m, const char* name, bool whole) {
    const double am = std::fabs(m);
    char buf[64];
    if (m == 0) {
        std::snprintf(buf, sizeof buf, "0 %s", name);
    } else if (am >= 99.95 || (whole && std::floor(am) == am)) {
        std::snprintf(buf, sizeof buf, "%.0f %s", m, name);
    } else if (am >= 9.995) {
        std::snprintf(buf, sizeof buf, "%.1f %s", m, name);
    } else if (am >= 0.9995) {
        std::snprintf(buf, sizeof buf, "%.2f %s", m, name);
    } else {
        // Below the smallest unit (e.g. 0.5 B/s): fall back to significant-digit notation.
        std::snprintf(buf, sizeof buf, "%.3g %s", m, name);
    }
    return buf;
}

/// "1.23 ms": picks the largest unit whose value is at least 1 and prints three significant
/// digits (integers for values of 100 and above). `units` run from small to large.
template <std::size_t N>
std::string format_sig3(double base_value, const std::array<UnitScale, N>& units) {
    if (!std::isfinite(base_value)) return std::to_string(base_value) + " " + units[0].name;
    const double r = round_sig3(base_value);
    const double mag = std::fabs(r);
    std::size_t pick = 0;
    for (std::size_t i = 0; i < N; ++i) {
        if (mag >= units[i].scale * (1 - 1e-9)) pick = i;
    }
    return unit_text(r / units[pick].scale, units[pick].name, units[pick].scale == 1.0);
}

// Units used for printing, small to large (a subset of the parse tables, decimal only).
constexpr std::array time_print{UnitScale{"ps", 1.0}, UnitScale{"ns", 1e3}, UnitScale{"us", 1e6},
                                UnitScale{"ms", 1e9}, UnitScale{"s", 1e12}};
constexpr std::array byte_print{UnitScale{"B", 1.0}, UnitScale{"KB", 1e3}, UnitScale{"MB", 1e6},
                                UnitScale{"GB", 1e9}, UnitScale{"TB", 1e12}, UnitScale{"PB", 1e15}};
constexpr std::array bandwidth_print{UnitScale{"B/s", 1.0}, UnitScale{"KB/s", 1e3}, UnitScale{"MB/s", 1e6},
                                     UnitScale{"GB/s", 1e9}, UnitScale{"TB/s", 1e12}};
constexpr std::array flop_rate_print{UnitScale{"FLOP/s", 1.0},  UnitScale{"KFLOP/s", 1e3},
                                     UnitScale{"MFLOP/s", 1e6}, UnitScale{"GFLOP/s", 1e9},
                                     UnitScale{"TFLOP/s", 1e12}, UnitScale{"PFLOP/s", 1e15},
                                     UnitScale{"EFLOP/s", 1e18}};

/// "1.23e+20" for messages about values that left their range.
std::string three_digits(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", v);
    return buf;
}

/// "3.2e+07 s (370 days)": a duration in picoseconds, for overflow messages.
std::string seconds_text(double ps) {
    if (!std::isfinite(ps)) return ps != ps ? std::string("an undefined time (0 / 0)") : std::string("forever");
    return three_digits(ps * 1e-12) + " s (" + three_digits(ps * 1e-12 / 86400) + " days)";
}

[[noreturn]] void fail_range(const std::string& message) { throw Error(ErrorKind::out_of_range, message); }

constexpr const char* kTimeRange = "the 106 days (2^63 ps) that simulated time can represent";

}  // namespace

namespace detail {

void fail_time_range(double ps) { fail_range("a duration of " + seconds_text(ps) + " is beyond " + kTimeRange); }

void fail_time_sum(std::int64_t a, std::int64_t b, char op) {
    if (op == '*')
        fail_range(to_string(Time::ps(a)) + " × " + std::to_string(b) + " is beyond " + kTimeRange);
    fail_range(to_string(Time::ps(a)) + " " + op + " " + to_string(Time::ps(b)) + " is beyond " + kTimeRange);
}

void fail_bytes_range(double bytes) {
    fail_range("a size of " + three_digits(bytes) + " bytes is beyond the 8 EiB (2^63 bytes) a size can hold");
}

void fail_bytes_sum(std::int64_t a, std::int64_t b, char op) {
    if (op == '/' && b == 0) fail_range("a size of " + std::to_string(a) + " bytes divided by zero");
    fail_range(std::to_string(a) + " bytes " + op + " " + std::to_string(b) +
               (op == '+' || op == '-' ? " bytes" : "") + " is beyond the 8 EiB (2^63 bytes) a size can hold");
}

void fail_not_finite(const char* what, double value) {
    fail_range(std::string("a ") + what + " of " + three_digits(value) + " (not a finite number)");
}

void fail_transfer_time(double bytes, double bytes_per_s) {
    fail_range("moving " + three_digits(bytes) + " bytes at " + three_digits(bytes_per_s) + " B/s takes " +
               seconds_text(bytes / bytes_per_s * 1e12) + ", beyond " + kTimeRange);
}

void fail_compute_time(double flops, double flops_per_s) {
    fail_range(three_digits(flops) + " FLOPs at " + three_digits(flops_per_s) + " FLOP/s take " +
               seconds_text(flops / flops_per_s * 1e12) + ", beyond " + kTimeRange);
}

}  // namespace detail

std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* what) {
    std::int64_t r = 0;
    if (__builtin_mul_overflow(a, b, &r))
        fail_range(std::string(what) + ": " + std::to_string(a) + " × " + std::to_string(b) +
                   " is beyond the 2^63 a 64-bit count can hold");
    return r;
}

std::int64_t checked_add(std::int64_t a, std::int64_t b, const char* what) {
    std::int64_t r = 0;
    if (__builtin_add_overflow(a, b, &r))
        fail_range(std::string(what) + ": " + std::to_string(a) + " + " + std::to_string(b) +
                   " is beyond the 2^63 a 64-bit count can hold");
    return r;
}

std::int64_t checked_round(double v, const char* what) {
    const double r = v >= 0 ? v + 0.5 : v - 0.5;
    if (!(r > -detail::kInt64Limit && r < detail::kInt64Limit))
        fail_range(std::string(what) + ": " + three_digits(v) + " is beyond the 2^63 a 64-bit count can hold");
    return static_cast<std::int64_t>(r);
}

Time parse_time(std::string_view text) {
    const std::string what = "a duration such as \"2 us\"";
    const Quantity q = parse_quantity(text, time_units, what);
    if (!std::isfinite(q.value)) fail_input("a finite duration", quoted(text));
    // 2^63 ps is about 106 days; anything longer cannot be represented.
    if (std::fabs(q.value) >= 9.2e18) fail_input("a duration under 100 days", quoted(text));
    return Time::ps(static_cast<std::int64_t>(std::llround(q.value)));
}

Bytes parse_bytes(std::string_view text) {
    const std::string what = "a size such as \"80 GiB\"";
    const Quantity q = parse_quantity(text, byte_units, what);
    check_amount(q, text, "size", "80 GiB", true);
    if (q.value >= 9.2e18) fail_input("a size under 8 EiB", quoted(text));
    return Bytes::from_double(q.value);
}

Bandwidth parse_bandwidth(std::string_view text) {
    const std::string what = "a bandwidth such as \"25 GB/s\"";
    const Quantity q = parse_quantity(text, bandwidth_units, what);
    check_amount(q, text, "bandwidth", "25 GB/s", false);
    return Bandwidth::bytes_per_s(q.value);
}

FlopRate parse_flop_rate(std::string_view text) {
    const std::string what = "a FLOP rate such as \"312 TFLOP/s\"";
    const Quantity q = parse_quantity(text, flop_rate_units, what);
    check_amount(q, text, "FLOP rate", "312 TFLOP/s", false);
    return FlopRate::flops_per_s(q.value);
}

std::string number_text(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

std::string to_string(Time t) {
    return format_sig3(static_cast<double>(t.count_ps()), time_print);
}
std::string to_string(Bytes b) { return format_sig3(b.as_double(), byte_print); }
std::string to_string_binary(Bytes b) {
    constexpr std::array names{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    const double v = b.as_double(), mag = std::fabs(v);
    std::size_t pick = 0;
    double scale = 1.0;
    while (pick + 1 < names.size() && mag >= scale * 1024.0) {
        scale *= 1024.0;
        ++pick;
    }
    if (pick + 1 < names.size() && pick > 0 && mag / scale >= 1023.5) {   // rounds to 1024: the next unit
        scale *= 1024.0;
        ++pick;
    }
    // Rounded once, in the unit printed (format_sig3 rounds the base value, which in powers of
    // 1024 would round twice).
    return unit_text(v / scale, names[pick], pick == 0);
}
std::string to_string(Bandwidth bw) {
    return format_sig3(bw.bytes_per_second(), bandwidth_print);
}
std::string to_string(FlopRate r) {
    return format_sig3(r.per_second(), flop_rate_print);
}

}  // namespace smol

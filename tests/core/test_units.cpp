// Units: parsing "<number> <unit>", every error, printing with three significant digits, and
// the Bytes / Bandwidth = Time arithmetic.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>

#include "core/error.hpp"
#include "core/units.hpp"
#include "test_support.hpp"

using namespace smol;
using Catch::Matchers::Contains;

using smol::test::bad_input_message;

TEST_CASE("parse_time accepts every unit, with or without a space", "[core][units]") {
    CHECK(parse_time("7 ps").count_ps() == 7);
    CHECK(parse_time("10 ns").count_ps() == 10'000);
    CHECK(parse_time("10ns").count_ps() == 10'000);
    CHECK(parse_time("2 us").count_ps() == 2'000'000);
    CHECK(parse_time("2 µs").count_ps() == 2'000'000);
    CHECK(parse_time("1.5 ms").count_ps() == 1'500'000'000);
    CHECK(parse_time("3 s").count_ps() == 3'000'000'000'000);
    CHECK(parse_time("  0.25s ").count_ps() == 250'000'000'000);
    CHECK(parse_time("1e-3 s") == Time::ms(1));
}

TEST_CASE("parse_bytes: decimal and binary prefixes", "[core][units]") {
    CHECK(parse_bytes("100 B").count() == 100);
    CHECK(parse_bytes("1 KB").count() == 1000);
    CHECK(parse_bytes("25 MB").count() == 25'000'000);
    CHECK(parse_bytes("16 GB").count() == 16'000'000'000);
    CHECK(parse_bytes("2 TB").count() == 2'000'000'000'000);
    CHECK(parse_bytes("512 KiB").count() == 512 * 1024);
    CHECK(parse_bytes("3 MiB").count() == 3 * 1048576);
    CHECK(parse_bytes("80 GiB").count() == 80LL * 1073741824LL);
    CHECK(parse_bytes("1TiB").count() == 1099511627776LL);
    CHECK(parse_bytes("0 B").count() == 0);
}

TEST_CASE("parse_bandwidth: bytes and bits per second", "[core][units]") {
    CHECK(parse_bandwidth("25 GB/s").bytes_per_second() == Approx(25e9));
    CHECK(parse_bandwidth("900 MB/s").bytes_per_second() == Approx(900e6));
    CHECK(parse_bandwidth("1 KB/s").bytes_per_second() == Approx(1e3));
    CHECK(parse_bandwidth("3.35 TB/s").bytes_per_second() == Approx(3.35e12));
    CHECK(parse_bandwidth("1 GiB/s").bytes_per_second() == Approx(1073741824.0));
    CHECK(parse_bandwidth("1 MiB/s").bytes_per_second() == Approx(1048576.0));
    CHECK(parse_bandwidth("2 KiB/s").bytes_per_second() == Approx(2048.0));
    // Bits are an eighth of a byte: 1 GbE is 125 MB/s, 100 Gb/s InfiniBand is 12.5 GB/s.
    CHECK(parse_bandwidth("1 Gbit/s").bytes_per_second() == Approx(125e6));
    CHECK(parse_bandwidth("100 Gb/s").bytes_per_second() == Approx(12.5e9));
    CHECK(parse_bandwidth("100 Mb/s").bytes_per_second() == Approx(12.5e6));
    CHECK(parse_bandwidth("100 Mbit/s").bytes_per_second() == Approx(12.5e6));
    CHECK(parse_bandwidth("8 Kbit/s").bytes_per_second() == Approx(1e3));
    CHECK(parse_bandwidth("8 bit/s").bytes_per_second() == Approx(1.0));
    CHECK(parse_bandwidth("1 Tbit/s").bytes_per_second() == Approx(125e9));
    CHECK(parse_bandwidth("64 B/s").bytes_per_second() == Approx(64.0));
}

TEST_CASE("parse_flop_rate", "[core][units]") {
    CHECK(parse_flop_rate("312 TFLOP/s").to_tflops() == Approx(312));
    CHECK(parse_flop_rate("312 TFLOPS").to_tflops() == Approx(312));
    CHECK(parse_flop_rate("30.2 GFLOP/s").per_second() == Approx(30.2e9));
    CHECK(parse_flop_rate("1 PFLOP/s").per_second() == Approx(1e15));
    CHECK(parse_flop_rate("1000 FLOP/s").per_second() == Approx(1000));
}

TEST_CASE("unit parsing errors", "[core][units]") {
    SECTION("unknown unit lists the accepted ones") {
        const std::string m = bad_input_message([] { parse_bandwidth("25 GB/h"); });
        CHECK_THAT(m, Contains("unknown unit 'GB/h' in \"25 GB/h\": expected one of"));
        CHECK_THAT(m, Contains("GB/s"));
        CHECK_THAT(m, Contains("Gbit/s"));
    }
    SECTION("unknown time unit") {
        CHECK_THAT(bad_input_message([] { parse_time("3 min"); }), Contains("unknown unit 'min'"));
    }
    SECTION("unit case matters: gb is not GB") {
        CHECK_THAT(bad_input_message([] { parse_bytes("16 gb"); }), Contains("unknown unit 'gb'"));
    }
    SECTION("a bandwidth unit is not a size") {
        CHECK_THAT(bad_input_message([] { parse_bytes("16 GB/s"); }), Contains("unknown unit 'GB/s'"));
    }
    SECTION("missing unit") {
        CHECK_THAT(bad_input_message([] { parse_bytes("25"); }), Contains("missing unit in \"25\""));
    }
    SECTION("missing number") {
        CHECK_THAT(bad_input_message([] { parse_bandwidth("GB/s"); }),
                   Contains("expected a bandwidth such as \"25 GB/s\", found \"GB/s\""));
    }
    SECTION("empty text") {
        CHECK_THAT(bad_input_message([] { parse_time(""); }), Contains("expected a duration"));
    }
    SECTION("negative bandwidth") {
        CHECK_THAT(bad_input_message([] { parse_bandwidth("-3 GB/s"); }),
                   Contains("expected a bandwidth above zero such as \"25 GB/s\", found \"-3 GB/s\""));
    }
    SECTION("zero bandwidth") {
        CHECK_THAT(bad_input_message([] { parse_bandwidth("0 GB/s"); }),
                   Contains("expected a bandwidth above zero such as \"25 GB/s\", found \"0 GB/s\""));
    }
    SECTION("negative size") {
        CHECK_THAT(bad_input_message([] { parse_bytes("-1 GiB"); }), Contains("non-negative size"));
    }
    SECTION("non-finite size") {
        CHECK_THAT(bad_input_message([] { parse_bytes("inf GB"); }), Contains("finite size"));
    }
    SECTION("non-finite bandwidth") {
        CHECK_THAT(bad_input_message([] { parse_bandwidth("nan GB/s"); }), Contains("finite bandwidth"));
    }
    SECTION("zero FLOP rate") {
        CHECK_THAT(bad_input_message([] { parse_flop_rate("0 TFLOP/s"); }), Contains("FLOP rate above zero"));
    }
    SECTION("negative FLOP rate") {
        CHECK_THAT(bad_input_message([] { parse_flop_rate("-1 TFLOP/s"); }), Contains("FLOP rate above zero"));
    }
    SECTION("size beyond int64") {
        CHECK_THAT(bad_input_message([] { parse_bytes("100000 PB"); }), Contains("under 8 EiB"));
    }
    SECTION("duration beyond Time's range") {
        CHECK_THAT(bad_input_message([] { parse_time("1e9 s"); }), Contains("under 100 days"));
    }
}

TEST_CASE("to_string prints three significant digits", "[core][units]") {
    CHECK(to_string(Time::us(1234)) == "1.23 ms");
    CHECK(to_string(Time::ns(2)) == "2.00 ns");
    CHECK(to_string(Time::ps(7)) == "7 ps");
    CHECK(to_string(Time::seconds(3)) == "3.00 s");
    CHECK(to_string(Time::zero()) == "0 ps");
    CHECK(to_string(Time::us(999.96)) == "1.00 ms");  // rounding carries into the next unit
    CHECK(to_string(Bytes::gb(80)) == "80.0 GB");
    CHECK(to_string(Bytes(100)) == "100 B");
    CHECK(to_string(Bytes::mb(123.456)) == "123 MB");
    CHECK(to_string(Bandwidth::gb_per_s(25)) == "25.0 GB/s");
    // Memory in powers of 1024: 80 GiB is 85.9 GB.
    CHECK(to_string_binary(Bytes::gib(80)) == "80.0 GiB");
    CHECK(to_string_binary(Bytes::gb(80)) == "74.5 GiB");
    CHECK(to_string_binary(Bytes::gib(4.19)) == "4.19 GiB");
    CHECK(to_string_binary(Bytes::gib(110.6)) == "111 GiB");
    CHECK(to_string_binary(Bytes(512ll << 20)) == "512 MiB");
    CHECK(to_string_binary(Bytes(1023ll << 20)) == "1023 MiB");
    CHECK(to_string_binary(Bytes((1ll << 30) - 1)) == "1.00 GiB");   // rounding carries into the next unit
    CHECK(to_string_binary(Bytes(1536)) == "1.50 KiB");
    CHECK(to_string_binary(Bytes(100)) == "100 B");
    CHECK(to_string_binary(Bytes(0)) == "0 B");
    CHECK(to_string_binary(Bytes::gib(3 * 1024)) == "3.00 TiB");
    CHECK(to_string(Bandwidth::gbit_per_s(1)) == "125 MB/s");
    CHECK(to_string(FlopRate::tflops(312)) == "312 TFLOP/s");
    CHECK(to_string(FlopRate::gflops(30.2)) == "30.2 GFLOP/s");
}

TEST_CASE("to_string output parses back to the same value within rounding", "[core][units]") {
    const double v = GENERATE(1.0, 3.14159, 42.42, 999.0, 1234.5, 7.77e6, 5.5e9, 2.5e12);
    CHECK(parse_bytes(to_string(Bytes::from_double(v))).as_double() == Approx(std::round(v)).epsilon(0.005));
    CHECK(parse_bandwidth(to_string(Bandwidth::bytes_per_s(v))).bytes_per_second() == Approx(v).epsilon(0.005));
    CHECK(parse_flop_rate(to_string(FlopRate::flops_per_s(v))).per_second() == Approx(v).epsilon(0.005));
    CHECK(parse_time(to_string(Time::ps(static_cast<std::int64_t>(v)))).count_ps() ==
          Approx(static_cast<double>(static_cast<std::int64_t>(v))).epsilon(0.005));
}

TEST_CASE("Bytes over Bandwidth is Time", "[core][units]") {
    // 25 GB at 25 GB/s is one second; 1 byte at 1 TB/s is one picosecond.
    CHECK(Bytes::gb(25) / Bandwidth::gb_per_s(25) == Time::seconds(1));
    CHECK(Bytes(1) / Bandwidth::bytes_per_s(1e12) == Time::ps(1));
    CHECK(Flops(312e12) / FlopRate::tflops(312) == Time::seconds(1));
    CHECK((Bandwidth::gb_per_s(10) * Time::ms(1)).count() == 10'000'000);
}

namespace {

/// The message of the out_of_range error `f` throws (another kind, or none, fails the test).
template <typename F>
std::string range_message(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        CHECK(e.kind() == ErrorKind::out_of_range);
        return e.what();
    }
    FAIL("no error thrown");
    return "";
}

}  // namespace

TEST_CASE("unit arithmetic cannot overflow silently", "[core][units]") {
    const Time max = Time::max();
    SECTION("Time sums, differences and products are exact up to 2^63 ps, then an error") {
        CHECK((max - Time::ps(1)) + Time::ps(1) == max);
        CHECK_THAT(range_message([&] { (void)(max + Time::ps(1)); }), Contains("beyond the 106 days"));
        CHECK_THAT(range_message([&] { (void)(Time::ps(-2) - max); }), Contains("beyond the 106 days"));
        CHECK_THAT(range_message([&] { (void)(Time::seconds(1e6) * std::int64_t{10}); }), Contains("× 10"));
        CHECK_THAT(range_message([&] { (void)(Time::seconds(1) * 1e7); }), Contains("days"));
        Time t = max;
        CHECK_THAT(range_message([&] { t += Time::ps(1); }), Contains("+"));
        CHECK(t == max);   // unchanged by the failed sum
    }
    SECTION("durations from doubles: NaN, infinities and 10^7 s are errors") {
        CHECK(Time::seconds(9.2e6).count_ps() == 9'200'000'000'000'000'000);
        CHECK_THAT(range_message([] { (void)Time::seconds(9.3e6); }), Contains("9.3e+06 s"));
        CHECK_THAT(range_message([] { (void)Time::seconds(std::nan("")); }), Contains("undefined"));
        CHECK_THAT(range_message([] { (void)Time::us(1.0 / 0.0); }), Contains("forever"));
        CHECK(Time::ps_ceil(1.2) == Time::ps(2));
        CHECK(Time::ps_rounded(1.5) == Time::ps(2));
    }
    SECTION("Bytes sums and products are checked; so is dividing by zero") {
        const Bytes big(std::numeric_limits<std::int64_t>::max() / 2 + 1);
        CHECK_THAT(range_message([&] { (void)(big + big); }), Contains("8 EiB"));
        CHECK_THAT(range_message([&] { (void)(big * std::int64_t{2}); }), Contains("8 EiB"));
        CHECK_THAT(range_message([&] { (void)(Bytes(5) / std::int64_t{0}); }), Contains("divided by zero"));
        CHECK_THAT(range_message([] { (void)Bytes::from_double(1e19); }), Contains("1e+19 bytes"));
        CHECK_THAT(range_message([] { (void)Bytes::gb(1.0 / 0.0); }), Contains("8 EiB"));
        CHECK(Bytes(7) / std::int64_t{2} == Bytes(3));
    }
    SECTION("a transfer or a computation beyond the range names both quantities") {
        CHECK_THAT(range_message([] { (void)(Bytes::gb(100) / Bandwidth::bytes_per_s(1)); }),
                   Contains("moving 1e+11 bytes at 1 B/s takes 1e+11 s"));
        CHECK_THAT(range_message([] { (void)(Bytes(0) / Bandwidth::bytes_per_s(0)); }), Contains("undefined"));
        CHECK_THAT(range_message([] { (void)(Flops(1e25) / FlopRate::flops_per_s(1e6)); }),
                   Contains("1e+25 FLOPs at 1e+06 FLOP/s take"));
        // An unlimited rate takes no time: the documented meaning of infinity.
        CHECK(Bytes::gb(1) / Bandwidth::unlimited() == Time::zero());
    }
    SECTION("FLOP counts stay finite; rates may be unlimited but not NaN") {
        CHECK_THAT(range_message([] { (void)Flops(1.0 / 0.0); }), Contains("FLOP count"));
        CHECK_THAT(range_message([] { (void)(Flops(1e308) * 10.0); }), Contains("not a finite number"));
        CHECK_THAT(range_message([] { (void)Bandwidth::bytes_per_s(std::nan("")); }), Contains("bandwidth"));
        CHECK_THAT(range_message([] { (void)FlopRate::flops_per_s(std::nan("")); }), Contains("FLOP rate"));
    }
    SECTION("checked counts") {
        CHECK(checked_mul(3'000'000'000, 3, "x") == 9'000'000'000);
        CHECK_THAT(range_message([] { checked_mul(std::int64_t{1} << 32, std::int64_t{1} << 31, "parameters of a layer"); }),
                   Contains("parameters of a layer: 4294967296 × 2147483648"));
        CHECK_THAT(range_message([] { checked_add(std::numeric_limits<std::int64_t>::max(), 1, "a sum"); }), Contains("a sum"));
        CHECK(checked_round(2.5, "x") == 3);
        CHECK_THAT(range_message([] { checked_round(1e30, "rows of a GEMM"); }), Contains("rows of a GEMM: 1e+30"));
    }
}

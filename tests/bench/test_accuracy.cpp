// The harness's error arithmetic against hand-computed examples.
#include <catch2/catch.hpp>

#include "bench/accuracy.hpp"

using namespace smol::bench;

TEST_CASE("the error is simulated over measured step time minus one", "[bench][accuracy]") {
    CHECK(relative_error(0.9, 1.0) == Approx(-0.1));   // 10 % too fast
    CHECK(relative_error(2.5, 2.0) == Approx(0.25));   // 25 % too slow
    CHECK(relative_error(3.0, 3.0) == Approx(0.0));
}

TEST_CASE("MAPE, median, max and bias by hand", "[bench][accuracy]") {
    SECTION("three step times") {
        // measured 1, 2, 4 s; simulated 0.9, 2.5, 3 s → errors −0.10, +0.25, −0.25.
        const std::vector<double> e{relative_error(0.9, 1.0), relative_error(2.5, 2.0), relative_error(3.0, 4.0)};
        const ErrorStats s = error_stats(e);
        CHECK(s.count == 3);
        CHECK(s.mape == Approx((0.10 + 0.25 + 0.25) / 3));  // 0.2
        CHECK(s.median_abs == Approx(0.25));               // |e| sorted: 0.10, 0.25, 0.25
        CHECK(s.max_abs == Approx(0.25));
        CHECK(s.bias == Approx((-0.10 + 0.25 - 0.25) / 3));  // −0.0333
    }
    SECTION("an even count takes the mean of the two middle values") {
        const ErrorStats s = error_stats({0.10, -0.20, -0.05, 0.40});
        CHECK(s.mape == Approx(0.75 / 4));           // 0.1875
        CHECK(s.median_abs == Approx((0.10 + 0.20) / 2));  // |e| sorted: 0.05, 0.10, 0.20, 0.40
        CHECK(s.max_abs == Approx(0.40));
        CHECK(s.bias == Approx(0.25 / 4));           // 0.0625: signed errors partly cancel
    }
    SECTION("the largest error is the largest magnitude, whatever its sign") {
        const ErrorStats s = error_stats({-0.89, 0.30});
        CHECK(s.max_abs == Approx(0.89));
        CHECK(s.bias == Approx(-0.295));
    }
    SECTION("no errors") {
        const ErrorStats s = error_stats({});
        CHECK(s.count == 0);
        CHECK(s.mape == 0);
        CHECK(s.max_abs == 0);
    }
}

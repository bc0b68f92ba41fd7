#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "sim/engine.hpp"

using namespace smol;
using namespace smol::sim;

TEST_CASE("events run in (time, insertion) order", "[sim][engine]") {
    Engine e;
    e.schedule(Time::us(2), 0, 1);
    e.schedule(Time::us(1), 0, 2);
    e.schedule(Time::us(2), 0, 3);
    e.schedule(Time::us(1), 0, 4);
    std::vector<std::uint32_t> order;
    while (!e.empty()) order.push_back(e.pop().id);
    CHECK(order == std::vector<std::uint32_t>{2, 4, 1, 3});
    CHECK(e.now() == Time::us(2));
    CHECK(e.processed() == 4);
}

TEST_CASE("time never goes backwards", "[sim][engine]") {
    Engine e;
    e.schedule(Time::us(5), 0, 0);
    e.pop();
    SECTION("scheduling in the past") { CHECK_THROWS_AS(e.schedule(Time::us(4), 0, 0), Error); }
    SECTION("advancing to the past") { CHECK_THROWS_AS(e.advance_to(Time::us(1)), Error); }
}

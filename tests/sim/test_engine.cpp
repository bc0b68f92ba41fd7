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
    SECTION("a kind beyond the event's 8 bits") { CHECK_THROWS_AS(e.schedule(Time::us(6), 256, 0), Error); }
}

TEST_CASE("a movable event runs at its last time, after those already there", "[sim][engine]") {
    Engine e;
    e.schedule(Time::us(1), 0, 1);
    const std::uint32_t later = e.schedule_movable(Time::us(2), 0, 2);
    const std::uint32_t sooner = e.schedule_movable(Time::us(9), 0, 3);
    e.schedule(Time::us(5), 0, 4);
    e.schedule(Time::us(3), 0, 5);
    e.move(later, Time::us(5));    // later: after event 4, scheduled at 5 us before the move
    e.move(sooner, Time::us(3));   // sooner: after event 5
    std::vector<std::uint32_t> order;
    std::vector<Time> times;
    while (!e.empty()) {
        const Event ev = e.pop();
        order.push_back(ev.id);
        times.push_back(ev.time);
    }
    CHECK(order == std::vector<std::uint32_t>{1, 5, 3, 4, 2});
    CHECK(times == std::vector<Time>{Time::us(1), Time::us(3), Time::us(3), Time::us(5), Time::us(5)});
    // Five events ran: a move is not an event.
    CHECK(e.processed() == 5);
}

TEST_CASE("a movable event's handle is reused once it has run, and moving a spent one is refused", "[sim][engine]") {
    Engine e;
    const std::uint32_t h = e.schedule_movable(Time::us(1), 0, 7);
    CHECK(e.pop().id == 7);
    CHECK_THROWS_AS(e.move(h, Time::us(2)), Error);   // its slot holds no pending event
    const std::uint32_t again = e.schedule_movable(Time::us(4), 0, 8);
    CHECK(again == h);
    e.schedule(Time::us(3), 0, 9);
    CHECK_THROWS_AS(e.move(again, Time::us(0)), Error);   // before now
    e.move(again, Time::us(2));
    CHECK(e.pop().id == 8);
    CHECK(e.pop().id == 9);
}

TEST_CASE("many movable events moved at random pop in time order", "[sim][engine]") {
    // An independent expectation: the last time each was moved to, sorted.
    Engine e;
    std::vector<std::uint32_t> handle;
    std::vector<std::int64_t> at;
    std::uint64_t x = 12345;
    auto next = [&] {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        return static_cast<std::int64_t>((x >> 33) % 100000);
    };
    for (std::uint32_t i = 0; i < 2000; ++i) {
        at.push_back(next());
        handle.push_back(e.schedule_movable(Time::ps(at.back()), 0, i));
        if (i % 3 == 0) e.schedule(Time::ps(next()), 1, i);
    }
    for (int k = 0; k < 5000; ++k) {
        const std::size_t i = static_cast<std::size_t>(next()) % handle.size();
        at[i] = next();
        e.move(handle[i], Time::ps(at[i]));
    }
    std::vector<std::int64_t> popped;
    Time last = Time::zero();
    while (!e.empty()) {
        const Event ev = e.pop();
        CHECK(ev.time >= last);
        last = ev.time;
        if (ev.kind == 0) {
            CHECK(ev.time == Time::ps(at[ev.id]));
            popped.push_back(at[ev.id]);
        }
    }
    CHECK(popped.size() == at.size());
}

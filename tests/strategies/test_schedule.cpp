#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <tuple>

#include "core/error.hpp"
#include "strategies/schedule.hpp"

using namespace smol;
using namespace smol::strategies;

namespace {

std::string show(const std::vector<Step>& steps) {
    std::string out;
    for (const Step& s : steps) {
        out += out.empty() ? "" : " ";
        out += s.pass == Pass::fwd ? "F" : s.pass == Pass::bwd ? "B" : s.pass == Pass::bwd_input ? "I" : "W";
        out += std::to_string(s.microbatch);
        if (s.chunk > 0) out += "c" + std::to_string(s.chunk);
    }
    return out;
}

/// Idle time of `device` between 0 and the end of the whole table, with forward = 1,
/// backward = 2 (input and weight gradients 1 each), per chunk divided by v.
struct UnitRun {
    double makespan = 0;
    std::vector<double> busy;
};
UnitRun unit_run(const PipelineSchedule& s) {
    const double v = s.chunks;
    const auto times = run_schedule(s, [&](int, const Step& st) { return (st.pass == Pass::bwd ? 2.0 : 1.0) / v; });
    UnitRun r;
    r.busy.assign(static_cast<std::size_t>(s.stages), 0);
    for (int d = 0; d < s.stages; ++d)
        for (const auto& t : times[static_cast<std::size_t>(d)]) {
            r.makespan = std::max(r.makespan, t.end);
            r.busy[static_cast<std::size_t>(d)] += t.end - t.start;
        }
    return r;
}

}  // namespace

TEST_CASE("1F1B and ZB-H1 tables for a small pipeline, by hand", "[strategies][pipeline]") {
    const PipelineSchedule f = make_schedule(Schedule::one_f_one_b, 2, 3);
    CHECK(show(f.steps[0]) == "F0 F1 B0 F2 B1 B2");
    CHECK(show(f.steps[1]) == "F0 B0 F1 B1 F2 B2");
    const PipelineSchedule g = make_schedule(Schedule::gpipe, 2, 3);
    CHECK(show(g.steps[0]) == "F0 F1 F2 B0 B1 B2");
    // Qi et al. 2023 Fig. 3: the last device defers each weight pass by p − 1 input passes.
    const PipelineSchedule z = make_schedule(Schedule::zb_h1, 3, 4);
    CHECK(show(z.steps[0]) == "F0 F1 F2 I0 W0 F3 I1 W1 I2 W2 I3 W3");
    CHECK(show(z.steps[2]) == "F0 I0 F1 I1 F2 I2 W0 F3 I3 W1 W2 W3");
    // Megatron's interleaved order for p = 2, v = 2, m = 2: device 1 warms up with (v − 1)·p = 2
    // forwards, then alternates.
    const PipelineSchedule i = make_schedule(Schedule::interleaved, 2, 4, 2);
    CHECK(show(i.steps[1]) == "F0 F1 F0c1 B0c1 F1c1 B1c1 F2 B0 F3 B1 F2c1 B2c1 F3c1 B3c1 B2 B3");
}

TEST_CASE("schedule tables: every pass once, backward after forward, every send received", "[strategies][pipeline]") {
    const auto kind = GENERATE(Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved, Schedule::zb_h1);
    const int p = GENERATE(1, 2, 3, 4, 8);
    const int mult = GENERATE(1, 2, 3);
    const int v = kind == Schedule::interleaved ? GENERATE(1, 2, 3) : 1;
    if (kind == Schedule::interleaved && p < 2) return;
    const int m = kind == Schedule::interleaved ? p * mult : p * mult + (mult == 3 ? 1 : 0);
    INFO(to_string(kind) << " p " << p << " m " << m << " v " << v);
    const PipelineSchedule s = make_schedule(kind, p, m, v);
    REQUIRE(static_cast<int>(s.steps.size()) == p);

    // Position of each pass on its device; each (micro-batch, chunk, pass) appears exactly once.
    std::map<std::tuple<int, int, int, Pass>, std::size_t> pos;
    for (int d = 0; d < p; ++d)
        for (std::size_t k = 0; k < s.steps[static_cast<std::size_t>(d)].size(); ++k) {
            const Step& st = s.steps[static_cast<std::size_t>(d)][k];
            CHECK(pos.emplace(std::tuple{d, st.microbatch, st.chunk, st.pass}, k).second);
        }
    const std::vector<Pass> back = s.split_backward() ? std::vector<Pass>{Pass::bwd_input, Pass::bwd_weight}
                                                      : std::vector<Pass>{Pass::bwd};
    CHECK(pos.size() == static_cast<std::size_t>(p * v * m) * (1 + back.size()));
    for (int d = 0; d < p; ++d)
        for (int c = 0; c < v; ++c)
            for (int k = 0; k < m; ++k) {
                const auto f = pos.find({d, k, c, Pass::fwd});
                REQUIRE(f != pos.end());
                std::size_t prev = f->second;
                for (Pass b : back) {
                    const auto it = pos.find({d, k, c, b});
                    REQUIRE(it != pos.end());
                    CHECK(it->second > prev);  // backward follows its forward (and W follows I)
                    prev = it->second;
                }
            }

    // Every send has its receive: the consumer step exists on the destination device.
    const auto tr = transfers(s);
    CHECK(tr.size() == static_cast<std::size_t>(2 * m * (p * v - 1)));
    for (const Transfer& t : tr) {
        const Pass want = t.gradient ? back.front() : Pass::fwd;
        CHECK(pos.count({t.dst_device, t.microbatch, t.dst_chunk, want}) == 1);
        CHECK(t.dst_device == (t.gradient ? (t.src_device + p - 1) % p : (t.src_device + 1) % p));
    }

    // The table runs to the end (no device waits forever) and respects the memory bounds.
    REQUIRE_NOTHROW(run_schedule(s, [](int, const Step&) { return 1.0; }));
    if (kind == Schedule::gpipe) CHECK(peak_in_flight(s, 0) == m);
    if (kind == Schedule::one_f_one_b)
        for (int d = 0; d < p; ++d) CHECK(peak_in_flight(s, d) == std::min(p - d, m));
    if (kind == Schedule::zb_h1)
        for (int d = 0; d < p; ++d) CHECK(peak_in_flight(s, d) <= std::min(p, m));
}

TEST_CASE("unit-cost bubbles of the tables match the papers' formulas", "[strategies][pipeline]") {
    const int p = GENERATE(2, 4, 8);
    const int m = GENERATE(8, 16, 32);
    SECTION("gpipe and 1f1b: (p − 1)/(m + p − 1) of the step") {
        for (Schedule k : {Schedule::gpipe, Schedule::one_f_one_b}) {
            const UnitRun r = unit_run(make_schedule(k, p, m));
            for (double b : r.busy) CHECK((r.makespan - b) / r.makespan == Approx(double(p - 1) / (m + p - 1)));
        }
    }
    SECTION("interleaved: (p − 1)/(v·m) of the ideal time") {
        const int v = GENERATE(2, 3);
        const UnitRun r = unit_run(make_schedule(Schedule::interleaved, p, m, v));
        const double ideal = 3.0 * m;
        CHECK((r.makespan - ideal) / ideal == Approx(double(p - 1) / (v * m)));
    }
    SECTION("zb-h1: (p − 1)/(3m) of the ideal time") {
        const UnitRun r = unit_run(make_schedule(Schedule::zb_h1, p, m));
        const double ideal = 3.0 * m;
        CHECK((r.makespan - ideal) / ideal == Approx(double(p - 1) / (3 * m)));
    }
}

TEST_CASE("impossible schedules say why", "[strategies][pipeline]") {
    SECTION("interleaved with micro-batches not a multiple of p") {
        CHECK_THROWS_WITH(make_schedule(Schedule::interleaved, 4, 6, 2), Catch::Contains("multiple of --pp 4"));
    }
    SECTION("interleaved on one stage") {
        CHECK_THROWS_WITH(make_schedule(Schedule::interleaved, 1, 4, 2), Catch::Contains("--pp of at least 2"));
    }
    SECTION("virtual stages without interleaving") {
        CHECK_THROWS_WITH(make_schedule(Schedule::one_f_one_b, 4, 8, 2), Catch::Contains("needs --schedule interleaved"));
    }
}

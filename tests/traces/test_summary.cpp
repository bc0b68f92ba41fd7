// The human table and the --json keys of a summary, from summaries made by hand: what applies to
// the model (no tokens for a CNN), what a ps-async "step" is, identical ranks grouped with the
// slowest and the fullest always shown, and the label of a plan without data parallelism.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>

#include "traces/summary.hpp"

using namespace smol;
using namespace smol::traces;
using Catch::Matchers::Contains;

namespace {

/// `n` ranks of one device kind; every rank's figures equal unless changed afterwards.
Summary summary_of(int n) {
    Summary s;
    s.info.model = "m";
    s.info.cluster = "c";
    s.info.strategy = "ddp";
    s.info.network = "flow";
    s.info.devices = n;
    s.info.dp = n;
    s.info.global_batch = n;
    s.info.seq = 128;
    s.info.dtype = "bf16";
    s.iteration = Time::ms(10);
    s.samples_per_s = 100;
    s.tokens_per_s = 12800;
    for (int r = 0; r < n; ++r)
        s.per_device.push_back({r, "node" + std::to_string(r / 8) + "/gpu" + std::to_string(r % 8), Bytes::gib(1), Time::ms(6),
                                Time::ms(3), Time::ms(1)});
    return s;
}

std::string table(const Summary& s) {
    std::ostringstream out;
    print_table(out, s);
    return out.str();
}

}  // namespace

TEST_CASE("summary: identical ranks share a row, the ones that differ are shown", "[traces][summary]") {
    SECTION("sixteen identical ranks are one row") {
        const std::string t = table(summary_of(16));
        CHECK_THAT(t, Contains("  0-15  16 devices        6.00 ms     3.00 ms     1.00 ms     1.00 GiB\n"));
        CHECK_THAT(t, !Contains("node0/gpu0"));
        CHECK_THAT(t, !Contains("more groups"));
    }
    SECTION("one slower rank and one fuller rank get rows of their own, named") {
        Summary s = summary_of(32);
        s.per_device[5].busy = Time::ms(8);
        s.per_device[20].peak_memory = Bytes::gib(2);
        const std::string t = table(s);
        CHECK_THAT(t, Contains("  0-4,6-19,21-31 30 devices"));
        CHECK_THAT(t, Contains("  5              node0/gpu5        8.00 ms"));
        CHECK_THAT(t, Contains("(slowest)"));
        CHECK_THAT(t, Contains("  20             node2/gpu4        6.00 ms     3.00 ms     1.00 ms     2.00 GiB (most memory)"));
    }
    SECTION("past sixteen groups the slowest and the fullest are still shown") {
        Summary s = summary_of(40);
        for (int r = 0; r < 40; ++r) s.per_device[static_cast<std::size_t>(r)].comm = Time::ms(1 + r);   // all differ
        s.per_device[37].busy = Time::ms(9);
        s.per_device[33].peak_memory = Bytes::gb(3);
        const std::string t = table(s);
        CHECK_THAT(t, Contains("  33    node4/gpu1"));
        CHECK_THAT(t, Contains("(most memory)"));
        CHECK_THAT(t, Contains("  37    node4/gpu5        9.00 ms"));
        CHECK_THAT(t, Contains("(slowest)"));
        CHECK_THAT(t, !Contains("  20    "));
        CHECK_THAT(t, Contains("  … 24 more groups of ranks (--json lists every rank)"));
    }
}

TEST_CASE("summary: what applies to the model and the plan", "[traces][summary]") {
    SECTION("a layer list (CNN, MLP) has no sequence and no tokens") {
        Summary s = summary_of(4);
        s.info.sequence = false;
        const std::string t = table(s);
        CHECK_THAT(t, !Contains("tokens/s"));
        CHECK_THAT(t, !Contains("seq"));
        CHECK_THAT(t, Contains("100 samples/s\n"));
        const Json j = to_json(s);
        CHECK(j["tokens_per_s"].is_null());
        CHECK(j["seq"].is_null());
        CHECK(to_json(summary_of(4))["tokens_per_s"] == 12800);
    }
    SECTION("ps-async says its time is rounds of updates, per round and per update") {
        Summary s = summary_of(4);
        s.info.async_updates = true;
        s.info.microbatches = 4;
        s.iteration = Time::seconds(16);
        const std::string t = table(s);
        CHECK_THAT(t, Contains("  time                  16.0 s for 4 rounds of updates (one per worker each: 16 updates)"));
        CHECK_THAT(t, Contains("  per round             4.00 s"));
        CHECK_THAT(t, Contains("  per update            1.00 s"));
        CHECK_THAT(t, !Contains("step time"));
        const Json j = to_json(s);
        CHECK(j["round_time_s"] == Approx(4));
        CHECK(j["update_time_s"] == Approx(1));
        CHECK(j["updates_per_worker"] == 4);
    }
    SECTION("a plan without data parallelism is not labelled ddp") {
        Summary s = summary_of(8);
        s.info.strategy = "none";
        s.info.tp = 8;
        s.info.dp = 1;
        CHECK_THAT(table(s), Contains("(8 devices): no data parallelism, tp 8 · pp 1 · dp 1"));
    }
}

// The Chrome trace writer, checked on a hand-built graph whose Timeline the test fills itself
// (the test plays the backend), by parsing the file back and asserting the layout the README fixes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/op_graph.hpp"
#include "core/timeline.hpp"
#include "traces/chrome_trace.hpp"
#include "traces/trace_checks.hpp"

using namespace smol;
using nlohmann::json;
using namespace smol::test;

namespace {

constexpr std::int64_t kUs = 1'000'000;  // picoseconds per microsecond

/// Three ranks: compute, an alloc/free pair, a send/recv 0→1, an all-reduce over all three, a copy
/// and one op that never ran.
struct Fixture {
    OpGraph graph{3};
    Timeline tl;
    OpId alloc0, c0, free0, send, recv, c1, c1b, c2, copy2, never2;
    std::vector<OpId> ar;

    Fixture() {
        const std::int32_t buf = graph.add_buffer(0, Tier::device, Bytes(4096), BufferLabel::activations);
        alloc0 = graph.add_alloc(buf, Stream::compute, 0, 0);
        c0 = graph.add_compute(0, Phase::fwd, 0, 0, Flops(1e9), Bytes(1000), KernelClass::gemm, DType::bf16);
        free0 = graph.add_free(buf, Stream::compute, 0, 0);
        std::tie(send, recv) = graph.add_send_recv(0, 1, Bytes(2048), Phase::fwd, 0, 0);
        graph.depend(c0, send);
        c1 = graph.add_compute(1, Phase::fwd, 1, 0, Flops(2e9), Bytes(1000), KernelClass::gemm, DType::bf16);
        graph.depend(recv, c1);
        c1b = graph.add_compute(1, Phase::bwd, 1, 0, Flops(4e9), Bytes(1000), KernelClass::gemm, DType::bf16);
        c2 = graph.add_compute(2, Phase::fwd, 0, 0, Flops(1e9), Bytes(1000), KernelClass::gemm, DType::bf16);
        ar = graph.add_collective(CollectiveKind::all_reduce, {0, 1, 2}, Bytes(8192), Stream::comm, Phase::bwd, -1,
                                  -1, 0);
        graph.depend(c1b, ar[1]);
        copy2 = graph.add_copy(2, Tier::device, Tier::host, Bytes(8192), Phase::opt);
        never2 = graph.add_compute(2, Phase::opt, -1, -1, Flops(1e6), Bytes(10), KernelClass::optimizer, DType::fp32);
        graph.finalize();

        tl.resize(graph.size(), 3);
        tl.device_names = {"node0/gpu0", "node0/gpu1", "node1/gpu0"};
        set(alloc0, 0, 0);
        set(c0, 1'500'000, 3'000'000);
        set(free0, 3'000'000, 3'000'000);
        set(send, 3'000'000, 4'000'000);
        set(recv, 2'000'000, 4'500'000);
        set(c1, 4'500'000, 5'000'000);
        set(c1b, 5'000'000, 6'000'000);
        set(c2, 0, 6'500'000);
        set(ar[0], 6'000'000, 9'000'000);
        set(ar[1], 6'000'000, 9'000'000);
        set(ar[2], 6'500'000, 9'000'000);
        set(copy2, 7, 9'000'000);
        // never2 keeps start = end = -1
        tl.memory = {{0, Tier::device, Time::ps(0), Bytes(0)},
                     {0, Tier::device, Time::ps(0), Bytes(4096)},
                     {0, Tier::device, Time::ps(3'000'000), Bytes(0)},
                     {2, Tier::host, Time::ps(9'000'000), Bytes(8192)}};
        tl.link_names = {"node0/nvlink", "node0<->switch0"};
        tl.links = {{0, Time::ps(0), 0.0f},
                    {1, Time::ps(3'000'000), 0.5f},
                    {0, Time::ps(3'000'000), 1.0f},
                    {0, Time::ps(4'000'000), 0.0f}};
        tl.makespan = Time::ps(9'000'000);
    }
    void set(OpId id, std::int64_t start, std::int64_t end) {
        tl.start[id] = Time::ps(start);
        tl.end[id] = Time::ps(end);
    }
    std::string write(const traces::TraceOptions& options = {}) const {
        std::ostringstream s;
        traces::write_chrome_trace(s, graph, tl, options);
        return s.str();
    }
};

std::map<int, std::string> process_names(const json& doc) {
    std::map<int, std::string> out;
    for (const json& e : events(doc, "M"))
        if (e.at("name") == "process_name") out[e.at("pid").get<int>()] = e.at("args").at("name").get<std::string>();
    return out;
}

}  // namespace

TEST_CASE("chrome trace: object form, slices and their args", "[traces]") {
    Fixture f;
    const std::string text = f.write();
    const json doc = json::parse(text);

    REQUIRE(doc.is_object());
    CHECK(doc.at("displayTimeUnit") == "ns");
    REQUIRE(doc.at("traceEvents").is_array());

    const auto xs = events(doc, "X");
    // Every op that ran, less the alloc/free markers: c0 send recv c1 c1b c2 3×all-reduce copy.
    CHECK(xs.size() == 10);
    std::set<std::int64_t> ops;
    for (const json& x : xs) {
        for (const char* key : {"name", "ph", "ts", "dur", "pid", "tid", "args"}) CHECK(x.contains(key));
        REQUIRE(x.at("args").contains("op"));
        const auto id = static_cast<OpId>(x.at("args").at("op").get<std::int64_t>());
        ops.insert(id);
        CHECK(x.at("name") == f.graph.op_name(id));
        CHECK(x.at("pid") == f.graph.op(id).rank);
        CHECK(x.at("tid") == static_cast<int>(f.graph.op(id).stream));
        CHECK(x.at("cat") == category(f.graph.op(id).kind));
        CHECK(ps(x.at("ts")) == f.tl.start[id].count_ps());
        // 1 ps shorter where the next slice of the thread starts at its end: c1 before c1b.
        CHECK(ps(x.at("dur")) == f.tl.duration(id).count_ps() - (id == f.c1 ? 1 : 0));
    }
    CHECK(ops.count(f.never2) == 0);
    CHECK(ops.count(f.alloc0) == 0);

    SECTION("args carry kind, phase, bytes, FLOPs and the labels that are set") {
        for (const json& x : xs) {
            const json& a = x.at("args");
            const auto id = static_cast<OpId>(a.at("op").get<std::int64_t>());
            const Op& op = f.graph.op(id);
            CHECK(a.at("kind") == to_string(op.kind));
            CHECK(a.at("bytes") == op.bytes);
            CHECK(a.at("flops").get<double>() == op.flops);
            CHECK(a.contains("layer") == (op.layer >= 0));
            CHECK(a.contains("microbatch") == (op.microbatch >= 0));
            CHECK(a.contains("phase") == (op.phase != Phase::none));
            if (op.layer >= 0) CHECK(a.at("layer") == op.layer);
            if (op.microbatch >= 0) CHECK(a.at("microbatch") == op.microbatch);
            if (op.phase != Phase::none) CHECK(a.at("phase") == to_string(op.phase));
        }
        const auto c0 = std::find_if(xs.begin(), xs.end(), [&](const json& x) { return x["args"]["op"] == f.c0; });
        REQUIRE(c0 != xs.end());
        CHECK((*c0)["args"]["flops"].get<double>() == 1e9);
        CHECK((*c0)["args"]["phase"] == "fwd");
    }

    SECTION("alloc and free are thread-scoped instants on the rank's memory thread") {
        const auto is = events(doc, "i");
        REQUIRE(is.size() == 2);
        for (const json& i : is) {
            CHECK(i.at("s") == "t");
            CHECK(i.at("pid") == 0);
            CHECK(i.at("tid") == kStreams);
        }
        CHECK(ps(is[0].at("ts")) == 0);
        CHECK(ps(is[1].at("ts")) == 3'000'000);
        CHECK(is[0].at("name") == f.graph.op_name(f.alloc0));
        CHECK(is[1].at("args").at("op") == f.free0);
    }

    SECTION("timestamps are exact decimals of picoseconds") {
        CHECK(text.find("\"ts\":1.500000,\"dur\":1.500000") != std::string::npos);  // c0
        CHECK(text.find("\"ts\":0.000007,\"dur\":8.999993") != std::string::npos);  // the copy
        CHECK(text.find("\"ts\":0.000000,\"dur\":6.500000") != std::string::npos);  // c2
    }

    SECTION("slices on one thread never overlap") { check_no_overlap(doc); }

    SECTION("metadata first, then events grouped by process and ordered by time per thread, then flows") {
        const json& evs = doc.at("traceEvents");
        std::size_t i = 0;
        while (i < evs.size() && evs[i].at("ph") == "M") ++i;
        CHECK(i > 0);
        int pid = -1;
        std::map<std::pair<int, int>, std::int64_t> last_ts;
        for (; i < evs.size(); ++i) {
            const json& e = evs[i];
            CHECK(e.at("ph") != "M");
            if (e.at("ph") == "s" || e.at("ph") == "t" || e.at("ph") == "f") continue;   // their own section
            CHECK(e.at("pid").get<int>() >= pid);
            pid = e.at("pid").get<int>();
            const std::pair<int, int> lane{pid, e.at("tid").get<int>()};
            const std::int64_t t = ps(e.at("ts"));
            if (last_ts.count(lane) && e.at("ph") != "C") CHECK(t >= last_ts[lane]);
            last_ts[lane] = t;
        }
    }
}

TEST_CASE("chrome trace: processes and threads are named after devices and streams", "[traces]") {
    Fixture f;
    f.tl.device_names[2] = "node\"1\\gpu\t0";  // needs escaping
    const json doc = json::parse(f.write());

    const auto names = process_names(doc);
    REQUIRE(names.size() == 4);
    for (int r = 0; r < 3; ++r) CHECK(names.at(r) == f.tl.device_names[r]);
    CHECK(names.at(3) == "network");

    std::map<std::pair<int, int>, std::string> threads;
    std::map<int, int> sort_index;
    for (const json& e : events(doc, "M")) {
        if (e.at("name") == "thread_name")
            threads[{e.at("pid").get<int>(), e.at("tid").get<int>()}] = e.at("args").at("name").get<std::string>();
        if (e.at("name") == "process_sort_index")
            sort_index[e.at("pid").get<int>()] = e.at("args").at("sort_index").get<int>();
    }
    const std::map<std::pair<int, int>, std::string> expected{
        {{0, 0}, "compute"}, {{0, 1}, "comm"}, {{0, 2}, "p2p"},     {{0, kStreams}, "memory"},
        {{1, 0}, "compute"}, {{1, 1}, "comm"}, {{1, 2}, "p2p"},     {{2, 0}, "compute"},
        {{2, 1}, "comm"},    {{2, 3}, "copy"}};
    CHECK(threads == expected);  // a thread only for a stream with events: rank 2 has no p2p
    CHECK(sort_index == std::map<int, int>{{0, 0}, {1, 1}, {2, 2}, {3, 3}});

    SECTION("every event of a thread sits on a named thread") {
        for (const json& e : doc.at("traceEvents")) {
            const std::string ph = e.at("ph");
            if (ph == "M" || ph == "C") continue;
            CHECK(threads.count({e.at("pid").get<int>(), e.at("tid").get<int>()}) == 1);
        }
    }
}

TEST_CASE("chrome trace: flows tie sends to receives and chain collective members", "[traces]") {
    Fixture f;
    const json doc = json::parse(f.write());
    const auto flows = check_flows(doc);
    REQUIRE(flows.size() == 2);  // one p2p, one chain through the three members of the all-reduce

    // In the order the slices started: the receive (posted at 2 us) before the send (3 us); the
    // all-reduce members on ranks 0 and 1 (6 us, rank order) before rank 2's (6.5 us).
    std::set<std::vector<std::int64_t>> chains;
    for (const auto& [id, ops] : flows) chains.insert(ops);
    const std::set<std::vector<std::int64_t>> expected{{f.recv, f.send}, {f.ar[0], f.ar[1], f.ar[2]}};
    CHECK(chains == expected);

    for (const json& e : doc.at("traceEvents"))
        if (e.at("ph") == "s" && e.at("name") == "p2p") {
            CHECK(ps(e.at("ts")) == 2'000'000);
            CHECK(e.at("pid") == 1);
            CHECK(e.at("cat") == "p2p");
        }
}

TEST_CASE("chrome trace: memory and link counters follow the samples", "[traces]") {
    Fixture f;
    const json doc = json::parse(f.write());

    std::map<std::pair<int, std::string>, std::vector<std::pair<std::int64_t, std::int64_t>>> memory;
    std::map<std::string, std::vector<std::pair<std::int64_t, double>>> links;
    for (const json& c : events(doc, "C")) {
        const int pid = c.at("pid").get<int>();
        const std::string name = c.at("name");
        if (pid < 3) {
            const auto bytes = c.at("args").at("bytes").get<std::int64_t>();
            CHECK(bytes >= 0);
            memory[{pid, name}].push_back({ps(c.at("ts")), bytes});
        } else {
            CHECK(pid == 3);
            links[name].push_back({ps(c.at("ts")), c.at("args").at("utilisation").get<double>()});
        }
    }
    using Series = std::vector<std::pair<std::int64_t, std::int64_t>>;
    CHECK(memory.size() == 2);
    CHECK(memory[{0, "memory device"}] == Series{{0, 0}, {0, 4096}, {3'000'000, 0}});
    CHECK(memory[{2, "memory host"}] == Series{{9'000'000, 8192}});

    using Util = std::vector<std::pair<std::int64_t, double>>;
    CHECK(links.size() == 2);
    CHECK(links["node0/nvlink"] == Util{{0, 0.0}, {3'000'000, 1.0}, {4'000'000, 0.0}});
    CHECK(links["node0<->switch0"] == Util{{3'000'000, 0.5}});

    SECTION("links = false drops the network process") {
        traces::TraceOptions options;
        options.links = false;
        const json d = json::parse(f.write(options));
        CHECK(process_names(d).count(3) == 0);
        for (const json& e : d.at("traceEvents")) CHECK(e.at("pid").get<int>() < 3);
        CHECK(events(d, "C").size() == 4);  // the memory counters stay
    }
    SECTION("a timeline without link samples has no network process") {
        f.tl.links.clear();
        const json d = json::parse(f.write());
        CHECK(process_names(d).count(3) == 0);
    }
}

TEST_CASE("chrome trace: the same input gives the same bytes", "[traces]") {
    Fixture f;
    const std::string a = f.write();
    const std::string b = f.write();
    CHECK(a == b);
    Fixture g;  // built again from scratch
    CHECK(g.write() == a);
}

TEST_CASE("chrome trace: rank selection drops other ranks and their flows", "[traces]") {
    Fixture f;
    traces::TraceOptions options;
    options.ranks = {1, 0};
    const json doc = json::parse(f.write(options));

    const auto names = process_names(doc);
    CHECK(names == std::map<int, std::string>{{0, "node0/gpu0"}, {1, "node0/gpu1"}, {3, "network"}});
    for (const json& e : doc.at("traceEvents")) CHECK(e.at("pid").get<int>() != 2);
    CHECK(events(doc, "X").size() == 7);  // c0 send recv c1 c1b, all-reduce on 0 and 1

    const auto flows = check_flows(doc);
    std::set<std::vector<std::int64_t>> chains;
    for (const auto& [id, ops] : flows) chains.insert(ops);
    CHECK(chains == std::set<std::vector<std::int64_t>>{{f.recv, f.send}, {f.ar[0], f.ar[1]}});

    SECTION("ranks 0 and 2 keep the collective chain but lose the p2p") {
        options.ranks = {2, 0};
        const json d = json::parse(f.write(options));
        const auto fl = check_flows(d);
        REQUIRE(fl.size() == 1);
        CHECK(fl.begin()->second == std::vector<std::int64_t>{f.ar[0], f.ar[2]});
        for (const json& c : events(d, "C"))
            if (c.at("pid").get<int>() < 3) CHECK(c.at("pid").get<int>() != 1);
    }
    SECTION("a rank outside the graph is bad input") {
        options.ranks = {3};
        try {
            f.write(options);
            FAIL("no error");
        } catch (const Error& e) {
            CHECK(e.kind() == ErrorKind::bad_input);
            CHECK(std::string(e.what()).find("rank 3") != std::string::npos);
        }
    }
}

TEST_CASE("chrome trace: measured clock jitter cannot make slices overlap", "[traces]") {
    Fixture f;
    f.set(f.c1b, 4'900'000, 6'000'000);  // starts 0.1 us before c1 ended on the same stream
    const std::string text = f.write();
    const json doc = json::parse(text);
    check_no_overlap(doc);
    const auto xs = events(doc, "X");
    const auto c1b = std::find_if(xs.begin(), xs.end(), [&](const json& x) { return x["args"]["op"] == f.c1b; });
    REQUIRE(c1b != xs.end());
    CHECK(ps((*c1b)["ts"]) == 5'000'000);
    CHECK(ps((*c1b)["dur"]) == 1'000'000);
    check_flows(doc);

    SECTION("an op that started but never ended is a zero-length slice") {
        f.tl.end[f.copy2] = Time::ps(-1);
        const json d = json::parse(f.write());
        const auto x = events(d, "X");
        const auto copy = std::find_if(x.begin(), x.end(), [&](const json& e) { return e["args"]["op"] == f.copy2; });
        REQUIRE(copy != x.end());
        CHECK(ps((*copy)["dur"]) == 0);
    }
}

TEST_CASE("chrome trace: a timeline that does not match the graph is an error", "[traces]") {
    Fixture f;
    f.tl.start.pop_back();
    std::ostringstream s;
    CHECK_THROWS_AS(traces::write_chrome_trace(s, f.graph, f.tl), Error);
}

TEST_CASE("chrome trace: a larger pipeline keeps every invariant", "[traces]") {
    // Four ranks, each a chain of compute ops with a send to the next rank after every fifth op and
    // an all-reduce every tenth; the test schedules each stream back to back.
    const int ranks = 4, steps = 200;
    OpGraph g(ranks);
    std::vector<std::pair<OpId, OpId>> p2p;
    for (int i = 0; i < steps; ++i) {
        for (int r = 0; r < ranks; ++r)
            g.add_compute(r, Phase::fwd, i, i % 8, Flops(1e6 * (r + 1)), Bytes(100), KernelClass::gemm, DType::bf16);
        if (i % 5 == 0)
            for (int r = 0; r + 1 < ranks; ++r) p2p.push_back(g.add_send_recv(r, r + 1, Bytes(64), Phase::fwd, i, 0));
        if (i % 10 == 0)
            g.add_collective(CollectiveKind::all_reduce, {0, 1, 2, 3}, Bytes(1024), Stream::comm, Phase::bwd, i);
    }
    g.finalize();
    Timeline tl;
    tl.resize(g.size(), ranks);
    std::vector<std::int64_t> clock(static_cast<std::size_t>(ranks) * kStreams, 0);
    for (OpId id = 0; id < g.size(); ++id) {
        const Op& op = g.op(id);
        std::int64_t& c = clock[static_cast<std::size_t>(op.rank) * kStreams + static_cast<int>(op.stream)];
        const std::int64_t dur = 1000 + 37 * ((id * 7919) % 101);
        tl.start[id] = Time::ps(c);
        tl.end[id] = Time::ps(c + dur);
        c += dur + (id % 3 == 0 ? 0 : 11);
    }
    for (int r = 0; r < ranks; ++r) tl.device_names[r] = "node0/gpu" + std::to_string(r);

    std::ostringstream a, b;
    traces::write_chrome_trace(a, g, tl);
    traces::write_chrome_trace(b, g, tl);
    REQUIRE(a.str() == b.str());
    const json doc = json::parse(a.str());
    CHECK(events(doc, "X").size() == g.size());
    check_no_overlap(doc);
    const auto flows = check_flows(doc);
    CHECK(flows.size() == p2p.size() + g.collectives().size());
}

TEST_CASE("chrome trace: run metadata goes into the top-level metadata object", "[traces]") {
    Fixture f;
    traces::TraceOptions options;
    options.metadata = {{"model", "gpt2-small"}, {"command-line", "smolcluster simulate --model \"x\""}};
    const json doc = json::parse(f.write(options));
    CHECK(doc.at("metadata").at("model") == "gpt2-small");
    CHECK(doc.at("metadata").at("command-line") == "smolcluster simulate --model \"x\"");
    CHECK_FALSE(json::parse(f.write()).contains("metadata"));
}

// The Chakra writer, checked on hand-built graphs whose traces are known op by op: the files are
// read back with the classes protoc generates from Chakra's schema and every node, dependency and
// attribute compared with what the graph holds (tests/traces/chakra_reader.hpp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/op_graph.hpp"
#include "traces/chakra.hpp"
#include "traces/chakra_reader.hpp"

using namespace smol;
using namespace smol::test;
namespace pb = ChakraProtoMsg;

namespace {

std::string written(const traces::ChakraWriter& w, int rank, traces::ChakraRankStats* stats = nullptr) {
    std::ostringstream out(std::ios::binary);
    const traces::ChakraRankStats s = w.write_rank(out, rank);
    if (stats) *stats = s;
    return out.str();
}

const pb::Node& node(const ChakraTrace& t, OpId id) {
    const auto it = std::find_if(t.nodes.begin(), t.nodes.end(), [&](const pb::Node& n) { return n.id() == id; });
    REQUIRE(it != t.nodes.end());
    return *it;
}

std::vector<std::uint64_t> ctrl(const pb::Node& n) { return {n.ctrl_deps().begin(), n.ctrl_deps().end()}; }
std::vector<std::uint64_t> data(const pb::Node& n) { return {n.data_deps().begin(), n.data_deps().end()}; }

/// Three ranks with every exported kind, a dependency through each kind without a node, and
/// one cross-rank edge.
struct Fixture {
    OpGraph g{3};
    OpId alloc0, c0, host0, copy0, send0, ar0, free0, c0b;
    OpId recv1, c1, timer1, host1, ar1, ag1, load1;
    OpId ar2, ag2, store2;

    Fixture() {
        const std::int32_t buf = g.add_buffer(0, Tier::device, Bytes(4096), BufferLabel::activations);
        alloc0 = g.add_alloc(buf, Stream::compute, 0, 0);
        c0 = g.add_compute(0, Phase::fwd, 0, 0, Flops(2.5e9), Bytes(1000), KernelClass::gemm, DType::bf16);
        host0 = g.add_compute(0, Phase::opt, -1, -1, Flops(7), Bytes(64), KernelClass::optimizer, DType::fp32, true,
                              Stream::host);
        copy0 = g.add_copy(0, Tier::device, Tier::host, Bytes(333), Phase::fwd, 0, 0);
        g.depend(c0, copy0);
        const auto [s, r] = g.add_send_recv(0, 1, Bytes(777), Phase::fwd, 0, 0);
        send0 = s;
        recv1 = r;
        g.depend(c0, send0);
        const std::vector<OpId> ar = g.add_collective(CollectiveKind::all_reduce, {0, 1, 2}, Bytes(4000), Stream::comm,
                                                      Phase::bwd, -1, -1, 0);
        ar0 = ar[0];
        ar1 = ar[1];
        ar2 = ar[2];
        g.depend(c0, ar0);
        free0 = g.add_free(buf, Stream::compute, 0, 0);
        c0b = g.add_compute(0, Phase::bwd, 0, 0, Flops(5e9), Bytes(2000), KernelClass::gemm, DType::bf16);

        c1 = g.add_compute(1, Phase::fwd, 1, 0, Flops(1e9), Bytes(500), KernelClass::elementwise, DType::bf16);
        g.depend(recv1, c1);
        g.depend(c0, c1);   // across ranks: no file can hold it
        timer1 = g.add_timer(1, Time::ps(5'000'000'000), Stream::host, Phase::comm);
        g.depend(c1, timer1);
        host1 = g.add_compute(1, Phase::opt, -1, -1, Flops(3), Bytes(8), KernelClass::optimizer, DType::fp32, true,
                              Stream::host);
        g.depend(c1, ar1);
        const std::vector<OpId> ag = g.add_collective(CollectiveKind::all_gather, {1, 2}, Bytes(1001), Stream::comm,
                                                      Phase::fwd, 2, 0);
        ag1 = ag[0];
        ag2 = ag[1];
        load1 = g.add_copy(1, Tier::nvme, Tier::host, Bytes(123), Phase::fwd, 2, 0);
        g.depend(ag1, load1);
        store2 = g.add_copy(2, Tier::host, Tier::nvme, Bytes(456), Phase::bwd, 2, 0);
        g.depend(ag2, store2);
        g.finalize();
    }
};

}  // namespace

TEST_CASE("every node, dependency and attribute survives write and read", "[traces][chakra]") {
    Fixture f;
    const traces::ChakraWriter w(f.g);
    CHECK(w.cross_rank_edges() == 1);
    // Communicators in member-list order: [0,1,2] < [1,2].
    REQUIRE(w.groups() == std::vector<std::vector<int>>{{0, 1, 2}, {1, 2}});
    CHECK(w.comm_group_json() == "{\n  \"1\": [0, 1, 2],\n  \"2\": [1, 2]\n}\n");

    SECTION("rank 0: compute, host compute, a store, a send, an all-reduce; ctrl deps through a free") {
        traces::ChakraRankStats stats;
        const ChakraTrace t = read_chakra(written(w, 0, &stats));
        CHECK(t.metadata.version() == "1.0.0");
        std::map<std::string, std::int64_t> meta;
        for (const auto& a : t.metadata.attr())
            if (a.has_int64_val()) meta[a.name()] = a.int64_val();
        CHECK(meta == std::map<std::string, std::int64_t>{{"rank", 0}, {"ranks", 3}, {"representative", 0}});
        // alloc0 and free0 have no node; the other six do, and nothing else.
        REQUIRE(t.nodes.size() == 6);
        CHECK(stats.nodes == 6);
        CHECK(stats.without_node == 2);
        std::set<std::uint64_t> ids;
        for (const auto& n : t.nodes) ids.insert(n.id());
        CHECK(ids == std::set<std::uint64_t>{f.c0, f.host0, f.copy0, f.send0, f.ar0, f.c0b});

        const pb::Node& c0 = node(t, f.c0);
        CHECK(c0.type() == pb::COMP_NODE);
        CHECK(c0.name() == f.g.op_name(f.c0));
        CHECK(ctrl(c0).empty());   // its stream predecessor is the alloc, which waits for nothing
        CHECK(data(c0).empty());
        auto a = attrs(c0);
        CHECK(a.size() == 3);
        CHECK(a.at("is_cpu_op").bool_val() == false);
        CHECK(a.at("num_ops").int64_val() == 2'500'000'000);
        CHECK(a.at("tensor_size").uint64_val() == 1000);

        a = attrs(node(t, f.host0));
        CHECK(node(t, f.host0).type() == pb::COMP_NODE);
        CHECK(a.at("is_cpu_op").bool_val() == true);
        CHECK(a.at("num_ops").int64_val() == 7);
        CHECK(a.at("tensor_size").uint64_val() == 64);

        const pb::Node& copy0 = node(t, f.copy0);
        CHECK(copy0.type() == pb::MEM_STORE_NODE);   // device → host: away from the device
        CHECK(data(copy0) == std::vector<std::uint64_t>{f.c0});
        CHECK(ctrl(copy0).empty());
        a = attrs(copy0);
        CHECK(a.size() == 2);
        CHECK(a.at("tensor_size").uint64_val() == 333);

        const pb::Node& send0 = node(t, f.send0);
        CHECK(send0.type() == pb::COMM_SEND_NODE);
        CHECK(send0.name() == f.g.op_name(f.send0));   // "send fwd L0 mb0 r0->r1"
        CHECK(data(send0) == std::vector<std::uint64_t>{f.c0});
        a = attrs(send0);
        CHECK(a.size() == 5);
        CHECK(a.at("is_cpu_op").bool_val() == false);
        CHECK(a.at("comm_src").int32_val() == 0);
        CHECK(a.at("comm_dst").int32_val() == 1);
        CHECK(a.at("comm_tag").int32_val() == 0);
        CHECK(a.at("comm_size").int64_val() == 777);

        const pb::Node& ar0 = node(t, f.ar0);
        CHECK(ar0.type() == pb::COMM_COLL_NODE);
        CHECK(ar0.name() == "all_reduce bwd bucket 0 pg 1");
        CHECK(data(ar0) == std::vector<std::uint64_t>{f.c0});
        a = attrs(ar0);
        CHECK(a.size() == 4);
        CHECK(a.at("comm_type").int64_val() == pb::ALL_REDUCE);
        CHECK(a.at("comm_size").int64_val() == 4000);
        CHECK(a.at("pg_name").string_val() == "1");

        // c0b follows free0 on the compute stream, and free0 follows c0: a ctrl dep on c0.
        const pb::Node& c0b = node(t, f.c0b);
        CHECK(ctrl(c0b) == std::vector<std::uint64_t>{f.c0});
        CHECK(data(c0b).empty());
        CHECK(stats.ctrl_deps == 1);
        CHECK(stats.data_deps == 3);
    }

    SECTION("rank 1: a receive, a data dep through a timer, an all-gather's input size, a load") {
        const ChakraTrace t = read_chakra(written(w, 1));
        REQUIRE(t.nodes.size() == 6);   // recv, c1, host1, ar1, ag1, load1 (the timer has none)
        const pb::Node& recv1 = node(t, f.recv1);
        CHECK(recv1.type() == pb::COMM_RECV_NODE);
        auto a = attrs(recv1);
        CHECK(a.at("comm_src").int32_val() == 0);
        CHECK(a.at("comm_dst").int32_val() == 1);
        CHECK(a.at("comm_tag").int32_val() == attrs(node(read_chakra(written(w, 0)), f.send0)).at("comm_tag").int32_val());
        CHECK(a.at("comm_size").int64_val() == 777);

        // c1 waits for the receive (data) and for c0 on rank 0 (across ranks: dropped).
        const pb::Node& c1 = node(t, f.c1);
        CHECK(data(c1) == std::vector<std::uint64_t>{f.recv1});
        CHECK(ctrl(c1).empty());
        // host1 follows the timer on the host stream; the timer waits for c1 by an explicit edge,
        // so host1's dependency on c1 is a data dep.
        const pb::Node& host1 = node(t, f.host1);
        CHECK(data(host1) == std::vector<std::uint64_t>{f.c1});
        CHECK(ctrl(host1).empty());
        // ag1 follows ar1 on the comm stream.
        const pb::Node& ag1 = node(t, f.ag1);
        CHECK(ctrl(ag1) == std::vector<std::uint64_t>{f.ar1});
        a = attrs(ag1);
        CHECK(a.at("comm_type").int64_val() == pb::ALL_GATHER);
        CHECK(a.at("comm_size").int64_val() == 501);   // ceil(1001 / 2): ASTRA-sim's size is each rank's input
        CHECK(a.at("pg_name").string_val() == "2");
        CHECK(node(t, f.ar1).name() == "all_reduce bwd bucket 0 pg 1");
        const pb::Node& load1 = node(t, f.load1);
        CHECK(load1.type() == pb::MEM_LOAD_NODE);   // NVMe → host: towards the device
        CHECK(attrs(load1).at("tensor_size").uint64_val() == 123);
        CHECK(data(load1) == std::vector<std::uint64_t>{f.ag1});
    }

    SECTION("every dependency precedes its node in the file") {
        for (int r = 0; r < 3; ++r) {
            const ChakraTrace t = read_chakra(written(w, r));
            std::set<std::uint64_t> seen;
            for (const auto& n : t.nodes) {
                for (auto d : n.ctrl_deps()) CHECK(seen.count(d) == 1);
                for (auto d : n.data_deps()) CHECK(seen.count(d) == 1);
                seen.insert(n.id());
            }
        }
    }

    SECTION("the same graph writes the same bytes") {
        const traces::ChakraWriter again(f.g);
        for (int r = 0; r < 3; ++r) CHECK(written(w, r) == written(again, r));
    }

    SECTION("the framing is one varint length per message, to the last byte") {
        const std::string bytes = written(w, 2);
        std::size_t at = 0;
        int messages = 0;
        while (at < bytes.size()) {
            std::uint64_t size = 0;
            int shift = 0;
            while (true) {
                const auto b = static_cast<unsigned char>(bytes.at(at++));
                size |= static_cast<std::uint64_t>(b & 0x7f) << shift;
                if (!(b & 0x80)) break;
                shift += 7;
            }
            at += size;
            ++messages;
        }
        CHECK(at == bytes.size());
        CHECK(messages == 1 + 3);   // metadata, ar2, ag2, store2
    }
}

TEST_CASE("a folded graph writes each mirror its representative's program with its own ranks", "[traces][chakra]") {
    // Ranks (t, d): 0 = (0,0), 1 = (1,0) hold ops; 2 = (0,1) mirrors 0 and 3 = (1,1) mirrors 1. Each replica
    // runs compute, a tensor-parallel all-reduce within it, a send from t 0 to t 1 and a data-parallel
    // all-reduce across replicas. Unfolded, ranks 2 and 3 hold the same program themselves.
    auto build = [](bool folded) {
        OpGraph g(4);
        const int replicas = folded ? 1 : 2;
        for (int d = 0; d < replicas; ++d) {
            const int a = 2 * d, b = 2 * d + 1;
            const OpId ca = g.add_compute(a, Phase::fwd, 0, 0, Flops(1e6), Bytes(10), KernelClass::gemm, DType::bf16);
            const OpId cb = g.add_compute(b, Phase::fwd, 0, 0, Flops(1e6), Bytes(10), KernelClass::gemm, DType::bf16);
            const auto tp = g.add_collective(CollectiveKind::all_reduce, {a, b}, Bytes(64), Stream::comm, Phase::fwd, 0, 0);
            g.depend(ca, tp[0]);
            g.depend(cb, tp[1]);
            const auto [s, r] = g.add_send_recv(a, b, Bytes(32), Phase::fwd, 0, 0);
            g.depend(tp[0], s);
            g.depend(tp[1], r);
        }
        for (int t = 0; t < 2; ++t) {
            const std::int32_t c = g.declare_collective(CollectiveKind::reduce_scatter, {t, t + 2}, Bytes(128));
            for (int d = 0; d < replicas; ++d) g.add_collective_op(c, t + 2 * d, Stream::comm, Phase::bwd);
        }
        if (folded) g.set_representatives({0, 1, 0, 1});
        g.finalize();
        return g;
    };
    const OpGraph folded = build(true), full = build(false);
    REQUIRE(folded.folded());
    const traces::ChakraWriter wf(folded), wu(full);
    REQUIRE(wf.groups() == std::vector<std::vector<int>>{{0, 1}, {0, 2}, {1, 3}, {2, 3}});
    CHECK(wu.groups() == wf.groups());
    CHECK(wf.comm_group_json() == wu.comm_group_json());

    // A node without its id, its dependencies by name.
    auto canonical = [](const ChakraTrace& t) {
        std::map<std::uint64_t, std::string> name;
        for (const auto& n : t.nodes) name[n.id()] = n.name();
        std::multiset<std::string> out;
        for (const auto& n : t.nodes) {
            std::string s = n.name() + " type " + std::to_string(n.type());
            for (const auto& [k, a] : attrs(n))   // tags are the pair's id in the graph: checked apart
                if (k != "comm_tag") s += " " + k + "=" + a.ShortDebugString();
            for (auto d : n.ctrl_deps()) s += " ctrl:" + name.at(d);
            for (auto d : n.data_deps()) s += " data:" + name.at(d);
            out.insert(s);
        }
        return out;
    };
    for (int r = 0; r < 4; ++r) {
        INFO("rank " << r);
        const ChakraTrace a = read_chakra(written(wf, r)), b = read_chakra(written(wu, r));
        CHECK(a.nodes.size() == 4);
        CHECK(canonical(a) == canonical(b));
    }
    // Rank 3's receive comes from rank 2, its tensor-parallel group is {2, 3} (pg 4), its
    // data-parallel one {1, 3} (pg 3).
    const ChakraTrace t3 = read_chakra(written(wf, 3));
    std::set<std::string> pgs;
    for (const auto& n : t3.nodes) {
        const auto a = attrs(n);
        if (n.type() == pb::COMM_RECV_NODE) {
            CHECK(a.at("comm_src").int32_val() == 2);
            CHECK(a.at("comm_dst").int32_val() == 3);
            CHECK(n.name() == "recv fwd L0 mb0 r2->r3");
        }
        if (n.type() == pb::COMM_COLL_NODE) pgs.insert(a.at("pg_name").string_val());
    }
    CHECK(pgs == std::set<std::string>{"3", "4"});
    // Each send's tag is its receive's, folded or not.
    for (const traces::ChakraWriter* w : {&wf, &wu})
        for (int src : {0, 2}) {
            auto tag = [&](int rank, pb::NodeType type) {
                for (const auto& n : read_chakra(written(*w, rank)).nodes)
                    if (n.type() == type) return attrs(n).at("comm_tag").int32_val();
                FAIL("no p2p node on rank " << rank);
                return -1;
            };
            CHECK(tag(src, pb::COMM_SEND_NODE) == tag(src + 1, pb::COMM_RECV_NODE));
        }
    CHECK(wf.counterpart(1, 2) == 3);
    CHECK(wf.counterpart(0, 3) == 2);
    CHECK(wf.counterpart(1, 1) == 1);
}

TEST_CASE("with a timeline every node carries its op's duration in microseconds", "[traces][chakra]") {
    Fixture f;
    Timeline tl;
    tl.resize(f.g.size(), f.g.ranks());
    constexpr std::int64_t us = 1'000'000;   // picoseconds
    auto ran = [&](OpId id, std::int64_t start_ps, std::int64_t end_ps) {
        tl.start[id] = Time::ps(start_ps);
        tl.end[id] = Time::ps(end_ps);
    };
    ran(f.c0, 0, 2 * us + us * 4 / 10);               // 2.4 µs → 2
    ran(f.copy0, 3 * us, 3 * us + us * 26 / 10);      // 2.6 µs → 3
    ran(f.ar0, 10 * us, 110 * us);                    // 100 µs
    ran(f.send0, 5 * us, 5 * us + us / 10);           // 0.1 µs → 0, written as 0
    // host0 and c0b never ran (start = end = -1 ps): no duration.
    const traces::ChakraWriter w(f.g, &tl);
    const ChakraTrace t = read_chakra(written(w, 0));
    CHECK(node(t, f.c0).duration_micros() == 2);
    CHECK(node(t, f.copy0).duration_micros() == 3);
    CHECK(node(t, f.ar0).duration_micros() == 100);
    CHECK(node(t, f.send0).duration_micros() == 0);
    CHECK(node(t, f.host0).duration_micros() == 0);
    CHECK(node(t, f.c0b).duration_micros() == 0);
    // Without a timeline the same graph carries none.
    for (const auto& n : read_chakra(written(traces::ChakraWriter(f.g), 0)).nodes) CHECK(n.duration_micros() == 0);

    Timeline short_tl;
    short_tl.resize(3, 3);
    CHECK_THROWS_WITH(traces::ChakraWriter(f.g, &short_tl), Catch::Contains("the timeline has 3 ops"));
}

TEST_CASE("process groups with the same members that the graph keeps apart stay apart", "[traces][chakra]") {
    // Megatron's expert- and data-parallel groups may hold the same ranks (OpGraph::declare_collective's group).
    OpGraph g(2);
    for (int group : {0, 1}) {
        const std::int32_t c = g.declare_collective(CollectiveKind::all_to_all, {0, 1}, Bytes(64), -1, group);
        for (int r : {0, 1}) g.add_collective_op(c, r, group ? Stream::comm : Stream::p2p, Phase::fwd);
    }
    g.finalize();
    const traces::ChakraWriter w(g);
    CHECK(w.groups() == std::vector<std::vector<int>>{{0, 1}, {0, 1}});
    std::vector<std::string> pgs;
    for (const auto& n : read_chakra(written(w, 1)).nodes) pgs.push_back(attrs(n).at("pg_name").string_val());
    CHECK(pgs == std::vector<std::string>{"1", "2"});
}

TEST_CASE("the writer refuses what it cannot export", "[traces][chakra]") {
    SECTION("a graph not finalized") {
        OpGraph g(1);
        g.add_compute(0, Phase::fwd, 0, 0, Flops(1), Bytes(1), KernelClass::gemm, DType::bf16);
        CHECK_THROWS_WITH(traces::ChakraWriter(g), Catch::Contains("not finalized"));
    }
    SECTION("a rank outside the graph") {
        Fixture f;
        const traces::ChakraWriter w(f.g);
        std::ostringstream out;
        CHECK_THROWS_WITH(w.write_rank(out, 3), Catch::Contains("rank 3 is not in the graph"));
    }
}

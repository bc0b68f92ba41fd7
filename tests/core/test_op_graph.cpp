#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "core/op_graph.hpp"

using namespace smol;

namespace {
OpId fwd(OpGraph& g, int rank, int layer) {
    return g.add_compute(rank, Phase::fwd, layer, 0, Flops(1), Bytes(0), KernelClass::gemm, DType::bf16);
}
}  // namespace

TEST_CASE("ops on one stream run in the order they were added", "[core][op_graph]") {
    OpGraph g(2);
    const OpId a = fwd(g, 0, 0), b = fwd(g, 0, 1), c = fwd(g, 1, 0);
    g.finalize();
    CHECK(g.successors(a).size() == 1);
    CHECK(g.successors(a)[0] == b);
    CHECK(g.in_degree(c) == 0);
    CHECK(g.num_edges() == 1);
    CHECK(g.op_name(b) == "fwd L1 mb0");
    CHECK(g.describe(c) == "rank 1: fwd L0 mb0");
}

TEST_CASE("a cycle is rejected with the ops on it", "[core][op_graph]") {
    OpGraph g(2);
    const OpId a = fwd(g, 0, 0), b = fwd(g, 0, 1);  // a → b by stream order
    g.depend(b, a);
    try {
        g.finalize();
        FAIL("expected a cycle error");
    } catch (const Error& e) {
        CHECK_THAT(e.what(), Catch::Contains("cycle"));
        CHECK_THAT(e.what(), Catch::Contains("rank 0: fwd L0 mb0"));
        CHECK_THAT(e.what(), Catch::Contains("rank 0: fwd L1 mb0"));
    }
}

TEST_CASE("collectives out of order across ranks are rejected naming both", "[core][op_graph]") {
    OpGraph g(2);
    const auto a = g.declare_collective(CollectiveKind::all_reduce, {0, 1}, Bytes(64));
    const auto b = g.declare_collective(CollectiveKind::all_reduce, {0, 1}, Bytes(64));
    SECTION("the same order on both ranks is fine") {
        for (int r : {0, 1}) {
            g.add_collective_op(a, r, Stream::comm, Phase::comm, -1, -1, 1);
            g.add_collective_op(b, r, Stream::comm, Phase::comm, -1, -1, 2);
        }
        CHECK_NOTHROW(g.finalize());
    }
    SECTION("rank 1 runs them the other way round") {
        g.add_collective_op(a, 0, Stream::comm, Phase::comm, -1, -1, 1);
        g.add_collective_op(b, 0, Stream::comm, Phase::comm, -1, -1, 2);
        g.add_collective_op(b, 1, Stream::comm, Phase::comm, -1, -1, 2);
        g.add_collective_op(a, 1, Stream::comm, Phase::comm, -1, -1, 1);
        try {
            g.finalize();
            FAIL("expected an error");
        } catch (const Error& e) {
            CHECK_THAT(e.what(), Catch::Contains("out of order"));
            CHECK_THAT(e.what(), Catch::Contains("all_reduce bucket 1"));
            CHECK_THAT(e.what(), Catch::Contains("all_reduce bucket 2"));
        }
    }
    SECTION("one communicator on two streams") {
        g.add_collective_op(a, 0, Stream::comm, Phase::comm);
        g.add_collective_op(a, 1, Stream::comm, Phase::comm);
        g.add_collective_op(b, 0, Stream::p2p, Phase::comm);
        g.add_collective_op(b, 1, Stream::p2p, Phase::comm);
        CHECK_THROWS_WITH(g.finalize(), Catch::Contains("two streams"));
    }
    SECTION("a member without its op") {
        g.add_collective_op(a, 0, Stream::comm, Phase::comm);
        g.add_collective_op(b, 0, Stream::comm, Phase::comm);
        g.add_collective_op(b, 1, Stream::comm, Phase::comm);
        CHECK_THROWS_WITH(g.finalize(), Catch::Contains("has no op on rank 1"));
    }
}

TEST_CASE("critical path follows the longest chain", "[core][op_graph]") {
    OpGraph g(2);
    const OpId a = fwd(g, 0, 0), b = fwd(g, 0, 1);  // chain on rank 0
    const OpId c = fwd(g, 1, 0);                    // alone on rank 1
    const OpId d = fwd(g, 1, 1);
    g.depend(b, d);
    g.finalize();
    const auto path = g.critical_path([&](OpId id) { return id == c ? Time::us(100) : Time::us(1); });
    // c (100) → d (1) = 101 beats a → b → d = 3.
    CHECK(path == std::vector<OpId>{c, d});
    const auto path2 = g.critical_path([](OpId) { return Time::us(1); });
    CHECK(path2 == std::vector<OpId>{a, b, d});
}

TEST_CASE("a free without its alloc is rejected", "[core][op_graph]") {
    OpGraph g(1);
    const auto buf = g.add_buffer(0, Tier::device, Bytes(10), BufferLabel::activations);
    g.add_free(buf, Stream::compute);
    CHECK_THROWS_WITH(g.finalize(), Catch::Contains("frees a buffer that is not allocated"));
}

TEST_CASE("an op, collective, transfer or buffer of negative size is a bug, not a graph", "[core][op_graph]") {
    // A strategy subtracting more than it holds (a unit's experts from its trainable parameters,
    // say) must fail where it builds, not simulate a negative transfer.
    OpGraph g(2);
    auto internal = [](auto&& add) {
        try {
            add();
        } catch (const Error& e) {
            return e.kind() == ErrorKind::internal && std::string(e.what()).find("negative") != std::string::npos;
        }
        return false;
    };
    CHECK(internal([&] { g.add_compute(0, Phase::fwd, 0, 0, Flops(-1), Bytes(0), KernelClass::gemm, DType::bf16); }));
    CHECK(internal([&] { g.add_compute(0, Phase::fwd, 0, 0, Flops(1), Bytes(-1), KernelClass::gemm, DType::bf16); }));
    CHECK(internal([&] { g.declare_collective(CollectiveKind::all_gather, {0, 1}, Bytes(-8)); }));
    CHECK(internal([&] { g.add_send_recv(0, 1, Bytes(-8), Phase::fwd, 0, 0); }));
    CHECK(internal([&] { g.add_copy(0, Tier::host, Tier::device, Bytes(-8), Phase::fwd); }));
    CHECK(internal([&] { g.add_buffer(0, Tier::device, Bytes(-8), BufferLabel::staging); }));
    // Zero is a size: an empty buffer, a collective of nothing.
    CHECK_NOTHROW(g.add_buffer(0, Tier::device, Bytes(0), BufferLabel::staging));
    CHECK_NOTHROW(g.declare_collective(CollectiveKind::all_gather, {0, 1}, Bytes(0)));
}

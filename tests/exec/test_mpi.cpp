// The MPI plumbing: the graph hash and the check that every rank built the same graph (the first
// differing op named on every rank), communicators in member order, clocks of one host.
#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "exec/mpi.hpp"
#include "exec_support.hpp"

using namespace smol;
using Catch::Matchers::Contains;

namespace {

/// A small graph over `ranks` ranks; `tweak` changes one op's size on the ranks it is true for.
OpGraph small_graph(int ranks, bool tweak, bool extra) {
    OpGraph g(ranks);
    for (int r = 0; r < ranks; ++r) {
        g.add_compute(r, Phase::fwd, 0, 0, Flops(1e6), Bytes(1000), KernelClass::gemm, DType::fp32);
        g.add_compute(r, Phase::bwd, 0, 0, Flops(2e6), Bytes(tweak && r == 0 ? 2222 : 2000), KernelClass::gemm, DType::fp32);
    }
    std::vector<int> all;
    for (int r = 0; r < ranks; ++r) all.push_back(r);
    g.add_collective(CollectiveKind::all_reduce, all, Bytes(4096), Stream::comm, Phase::bwd);
    // On a stream of its own, so no earlier op gains a successor: the graphs differ at it first.
    if (extra) g.add_compute(0, Phase::opt, -1, -1, Flops(1e3), Bytes(10), KernelClass::optimizer, DType::fp32, false, Stream::host);
    g.finalize();
    return g;
}

std::string mismatch(const exec::Mpi& mpi, const OpGraph& g) {
    try {
        exec::check_same_graph(mpi, g);
    } catch (const Error& e) {
        CHECK(e.kind() == ErrorKind::bad_input);
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("the graph hash tells graphs apart and is the same for the same graph", "[exec][graph]") {
    const auto a = exec::graph_prefix_hashes(small_graph(2, false, false));
    CHECK(a == exec::graph_prefix_hashes(small_graph(2, false, false)));
    const auto b = exec::graph_prefix_hashes(small_graph(2, true, false));
    REQUIRE(a.size() == b.size());
    // Op 1 (rank 0's backward) differs: prefixes up to it agree, from it on they differ.
    CHECK(a[0] == b[0]);
    CHECK(a[1] == b[1]);
    CHECK(a[2] != b[2]);
    CHECK(a.back() != b.back());
    CHECK(exec::graph_prefix_hashes(small_graph(3, false, false))[0] != a[0]);
}

TEST_CASE("ranks that built the same graph pass the check", "[exec][mpi][graph]") {
    const exec::Mpi& mpi = test::session().mpi();
    CHECK(mismatch(mpi, small_graph(mpi.size(), false, false)).empty());
}

TEST_CASE("a graph mismatch is an error on every rank naming the first differing op", "[exec][mpi][graph]") {
    const exec::Mpi& mpi = test::session().mpi();
    const int last = mpi.size() - 1;
    SECTION("one op's size differs on the last rank") {
        const std::string m = mismatch(mpi, small_graph(mpi.size(), mpi.rank() == last, false));
        CHECK_THAT(m, Contains("different op graphs"));
        CHECK_THAT(m, Contains("the first difference is op 1"));
        CHECK_THAT(m, Contains("rank 0 has 'rank 0: bwd L0 mb0'"));
        CHECK_THAT(m, Contains("2.00 KB"));
        CHECK_THAT(m, Contains("2.22 KB"));
        CHECK_THAT(m, Contains("ranks that differ from rank 0: " + std::to_string(last)));
    }
    SECTION("the last rank has one op more") {
        const std::string m = mismatch(mpi, small_graph(mpi.size(), false, mpi.rank() == last));
        CHECK_THAT(m, Contains("the first difference is op " + std::to_string(2 * mpi.size() + mpi.size())));
        CHECK_THAT(m, Contains("rank 0 has no op"));
    }
}

TEST_CASE("one MPI communicator per graph communicator, ranked in member order", "[exec][mpi][graph]") {
    const exec::Mpi& mpi = test::session().mpi();
    const int p = mpi.size();
    OpGraph g(p);
    std::vector<int> forward, backward;
    for (int r = 0; r < p; ++r) forward.push_back(r);
    backward.assign(forward.rbegin(), forward.rend());
    g.add_collective(CollectiveKind::all_reduce, forward, Bytes(64), Stream::comm, Phase::bwd);
    g.add_collective(CollectiveKind::all_reduce, backward, Bytes(64), Stream::p2p, Phase::bwd);
    g.add_collective(CollectiveKind::barrier, {p - 1}, Bytes(0), Stream::host, Phase::bwd);   // a communicator of one
    g.finalize();
    const exec::Communicators comms(mpi, g);
    for (std::size_t c = 0; c < g.communicators().size(); ++c) {
        const auto& members = g.communicators()[c];
        const auto at = std::find(members.begin(), members.end(), mpi.rank());
        const MPI_Comm comm = comms.of(static_cast<std::int32_t>(c));
        if (at == members.end()) {
            CHECK(comm == MPI_COMM_NULL);
            continue;
        }
        REQUIRE(comm != MPI_COMM_NULL);
        int rank = -1, size = 0;
        MPI_Comm_rank(comm, &rank);
        MPI_Comm_size(comm, &size);
        CHECK(rank == at - members.begin());
        CHECK(size == static_cast<int>(members.size()));
    }
}

TEST_CASE("ranks of one host share its clock", "[exec][mpi][graph]") {
    const exec::Mpi& mpi = test::session().mpi();
    const exec::ClockReport r = exec::align_clocks(mpi);
    CHECK(r.hosts == mpi.hosts());
    REQUIRE(r.offset.size() == static_cast<std::size_t>(r.hosts));
    CHECK(r.offset[0] == Time::zero());
    CHECK(r.uncertainty[0] == Time::zero());
    CHECK(r.residual >= Time::zero());
}

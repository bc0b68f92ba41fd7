// The memory model: a GPU starts with the runtime's own memory (CUDA context, NCCL's buffers per
// channel, from NCCL's buffer constants), allocations are rounded as PyTorch's caching allocator
// rounds them, unified memory is one pool, and each tier's contents at its peak are kept by label.
#include <catch2/catch.hpp>

#include "sim/collectives.hpp"
#include "sim/memory.hpp"
#include "sim/simulator.hpp"
#include "sim_fixtures.hpp"
#include "topologies/topology.hpp"

using namespace smol;
using namespace smol::sim;

TEST_CASE("NCCL's buffers per channel are its three protocols' receive buffers", "[sim][memory]") {
    // src/init.cc: LL = 8 lines × 512 threads × 8 steps × 16 B, LL128 = 120 × 640 × 8 × 8 B,
    // Simple = NCCL_BUFFSIZE 4 MiB.
    CHECK(kNcclBytesPerChannel == 524288 + 4915200 + 4194304);
    CHECK(kCudaContextBytes == 1343ll * 1024 * 1024);
}

TEST_CASE("the caching allocator's rounding", "[sim][memory]") {
    CHECK(allocator_size(1) == 512);
    CHECK(allocator_size(1000) == 1024);
    CHECK(allocator_size(5 << 20) == 5 << 20);                       // 512-byte multiples below 10 MiB
    CHECK(allocator_size((10 << 20) + 1) == 12 << 20);               // 2 MiB multiples from 10 MiB
    CHECK(allocator_size(0) == 0);
}

TEST_CASE("a GPU's device tier holds the runtime's memory before the step's first buffer", "[sim][memory]") {
    const topo::Cluster c = test::gpu_node_cluster(2, 100);
    OpGraph g(2);
    for (int r = 0; r < 2; ++r) {
        const auto b = g.add_buffer(r, Tier::device, Bytes((10 << 20) + 1), BufferLabel::parameters);
        g.add_alloc(b, Stream::compute);
    }
    g.add_collective(CollectiveKind::all_reduce, {0, 1}, Bytes(1 << 20), Stream::comm, Phase::comm);
    g.finalize();
    const Timeline tl = simulate(g, c);
    // NCCL's channels for this communicator (twice the ring graph's, connect.cc:460).
    const topo::Topology t(c);
    CollectiveContext ctx;
    ctx.node_of = [&](int r) { return c.device(r).node; };
    ctx.nic_of = [](int) { return 0; };
    ctx.gpu = true;
    ctx.cluster = &c;
    const std::int64_t channels = std::min(64, 2 * nccl_communicator({0, 1}, ctx).channels);
    const MemoryBreakdown& m = tl.peak_breakdown[0][static_cast<int>(Tier::device)];
    CHECK(m.cuda_context == Bytes(kCudaContextBytes));
    CHECK(m.nccl == Bytes(channels * kNcclBytesPerChannel));
    CHECK(m.labels[static_cast<int>(BufferLabel::parameters)] == Bytes((10 << 20) + 1));
    CHECK(m.allocator == Bytes((12 << 20) - (10 << 20) - 1));
    CHECK(tl.peak[0][static_cast<int>(Tier::device)] == m.total());
    CHECK(m.total() == Bytes(kCudaContextBytes + channels * kNcclBytesPerChannel + (12 << 20)));
}

TEST_CASE("CPU boards have no runtime reserve, unified memory is one pool", "[sim][memory]") {
    const topo::Cluster c = test::uniform_switch_cluster(1, 1.0, 0, 0);   // unified, 8 GB
    OpGraph g(1);
    const auto d = g.add_buffer(0, Tier::device, Bytes::gb(3), BufferLabel::parameters);
    const auto h = g.add_buffer(0, Tier::host, Bytes::gb(4), BufferLabel::optimizer_state);
    g.add_alloc(d, Stream::compute);
    g.add_alloc(h, Stream::compute);
    g.finalize();
    const Timeline tl = simulate(g, c);
    const MemoryBreakdown& m = tl.peak_breakdown[0][static_cast<int>(Tier::device)];
    CHECK(m.runtime() == Bytes(0));
    // The host allocation comes out of the board's one DRAM: 7 GB in the device tier, none apart.
    CHECK(tl.peak[0][static_cast<int>(Tier::device)] == Bytes::gb(7));
    CHECK(tl.peak[0][static_cast<int>(Tier::host)] == Bytes(0));
    CHECK(tl.capacity[0][static_cast<int>(Tier::host)] == Bytes(0));
    CHECK(m.labels[static_cast<int>(BufferLabel::optimizer_state)] == Bytes::gb(4));
    CHECK_FALSE(tl.oom);
}

TEST_CASE("the out-of-memory result and the peak keep what the tier held", "[sim][memory]") {
    const topo::Cluster c = test::gpu_node_cluster(1, 100);   // 80 GiB
    OpGraph g(1);
    const auto p = g.add_buffer(0, Tier::device, Bytes::gib(40), BufferLabel::parameters);
    const auto o = g.add_buffer(0, Tier::device, Bytes::gib(40), BufferLabel::optimizer_state);
    g.add_alloc(p, Stream::compute);
    const OpId failing = g.add_alloc(o, Stream::compute);
    g.finalize();
    const Timeline tl = simulate(g, c);
    REQUIRE(tl.oom);
    CHECK(tl.oom->op == failing);
    // 80 GiB of buffers plus the CUDA context do not fit 80 GiB; what was free was the capacity
    // less the context and the first 40 GiB.
    CHECK(tl.oom->free == Bytes::gib(40) - Bytes(kCudaContextBytes));
    const MemoryBreakdown& m = tl.peak_breakdown[0][static_cast<int>(Tier::device)];
    CHECK(m.labels[static_cast<int>(BufferLabel::optimizer_state)] == Bytes::gib(40));
    CHECK(m.total() == Bytes::gib(80) + Bytes(kCudaContextBytes));
}

// NCCL's tuner against hand calculations from NVIDIA/nccl v2.30.7 src/graph/tuning.cc and the
// channel search of src/graph/search.cc, and the simulator against the tuner.
#include <catch2/catch.hpp>

#include "sim/collectives.hpp"
#include "sim/nccl_tuner.hpp"
#include "sim/simulator.hpp"
#include "topologies/cluster.hpp"

using namespace smol;
using namespace smol::sim;
using nccl::Algo;
using nccl::Func;
using nccl::Proto;

namespace {

/// One A100 node: 12 NVLinks × 20 GB/s (NCCL's SM80 per-link figure) = 240 GB/s per GPU.
nccl::Communicator a100_node(int ranks) {
    return nccl::make_communicator(ranks, 1, 8.0, true, true, nccl::CpuVendor::amd, 240, 25, 8);
}

Time one_collective(const topo::Cluster& c, CollectiveKind kind, Bytes s, NetworkMode mode = NetworkMode::flow) {
    OpGraph g(c.num_devices());
    std::vector<int> all;
    for (int r = 0; r < c.num_devices(); ++r) all.push_back(r);
    g.add_collective(kind, all, s, Stream::comm, Phase::comm);
    g.finalize();
    SimOptions o;
    o.network = mode;
    o.record_links = true;
    return simulate(g, c, o).makespan;
}

}  // namespace

TEST_CASE("NCCL's channel search on A100 and H100 nodes", "[sim][nccl]") {
    // A100: the fastest SM80 intra speed under 240 GB/s is 40, so 6 channels; duplicated (≥ 25
    // GB/s) into 12 channels of 20 GB/s.
    const nccl::Communicator a = a100_node(8);
    CHECK(a.channels == 12);
    CHECK(a.bw_intra == Approx(20));
    // H100: 18 NVLinks × 20.6 = 370.8 GB/s; SM90 speed 60 → 6 channels, duplicated to 12 × 30.
    const nccl::Communicator h = nccl::make_communicator(8, 1, 9.0, true, true, nccl::CpuVendor::intel, 370.8, 50, 8);
    CHECK(h.channels == 12);
    CHECK(h.bw_intra == Approx(30));
    CHECK(h.nvls_channels == 8);
    // Four DGX A100: one 24 GB/s channel per HDR NIC (25 GB/s); intra raised to 30 (≤ 2 × 24 and
    // ≤ 240 / 8), then duplicated: 16 channels, 15 / 12 GB/s.
    const nccl::Communicator m = nccl::make_communicator(32, 4, 8.0, true, true, nccl::CpuVendor::amd, 240, 25, 8);
    CHECK(m.channels == 16);
    CHECK(m.bw_intra == Approx(15));
    CHECK(m.bw_inter == Approx(12));
}

TEST_CASE("NCCL latencies and bandwidths, computed by hand from tuning.cc", "[sim][nccl]") {
    const nccl::Communicator a = a100_node(8);
    SECTION("ring all-reduce, one node of 8 A100") {
        // Simple: 8.4 + 2(8−1) steps × 3.4 µs; bus bandwidth 12 × 20 = 240, × 8/14 to algorithm bandwidth.
        const nccl::Cost s = nccl::model(Func::all_reduce, Algo::ring, Proto::simple, a);
        CHECK(s.latency_us == Approx(8.4 + 14 * 3.4));
        CHECK(s.bandwidth_gbs == Approx(240.0 * 8 / 14));
        // LL: 6.6 + 14 × 0.6; min(llMaxBw Ampere-N1 87.7, 240 × 0.5).
        const nccl::Cost ll = nccl::model(Func::all_reduce, Algo::ring, Proto::ll, a);
        CHECK(ll.latency_us == Approx(6.6 + 14 * 0.6));
        CHECK(ll.bandwidth_gbs == Approx(87.7 * 8 / 14));
        // LL128: 14 + 14 × 1.9; min(240 × 0.92, 12 channels × 20).
        const nccl::Cost l128 = nccl::model(Func::all_reduce, Algo::ring, Proto::ll128, a);
        CHECK(l128.latency_us == Approx(14 + 14 * 1.9));
        CHECK(l128.bandwidth_gbs == Approx(240 * 0.92 * 8 / 14));
    }
    SECTION("tree all-reduce, one node") {
        // 8.4 + 2 · ((8 − 1) · 4.0 + log2(1) · 14); min(240 × 0.92, 12 × 24) × 0.5.
        const nccl::Cost t = nccl::model(Func::all_reduce, Algo::tree, Proto::simple, a);
        CHECK(t.latency_us == Approx(8.4 + 2 * 7 * 4.0));
        CHECK(t.bandwidth_gbs == Approx(240 * 0.92 * 0.5));
    }
    SECTION("all-gather and reduce-scatter are rings (no tree)") {
        CHECK_FALSE(nccl::model(Func::all_gather, Algo::tree, Proto::simple, a).enabled());
        const nccl::Cost ag = nccl::model(Func::all_gather, Algo::ring, Proto::simple, a);
        CHECK(ag.latency_us == Approx(8.4 + 7 * 3.4));
        CHECK(ag.bandwidth_gbs == Approx(240.0 * 8 / 7));
    }
    SECTION("ring all-reduce over 4 DGX A100 (AMD hosts)") {
        // Intra steps pay at least a network post (2 µs on AMD, ×3 with Simple): max(3.4, 6);
        // 2(4 − 1) inter-node steps at 14 µs; 62 steps in all. Bandwidth: more than 2 nodes uses
        // bwInter: 16 channels × 12 GB/s, × 32/62.
        const nccl::Communicator m = nccl::make_communicator(32, 4, 8.0, true, true, nccl::CpuVendor::amd, 240, 25, 8);
        const nccl::Cost s = nccl::model(Func::all_reduce, Algo::ring, Proto::simple, m);
        CHECK(s.latency_us == Approx(8.4 + (62 - 6) * 6.0 + 6 * 14.0));
        CHECK(s.bandwidth_gbs == Approx(16 * 12.0 * 32 / 62));
        // The ring plateau (×1.4 on SM80+) for large calls.
        const double t = nccl::predict_us(Func::all_reduce, Algo::ring, Proto::simple, m, 1 << 30);
        CHECK(t == Approx(s.latency_us * 1.4 + (1 << 30) / (1000.0 * s.bandwidth_gbs)));
    }
    SECTION("PAT for one GPU per node") {
        // Four 10 GbE Jetsons: one 1.2 GB/s channel; PAT: 8 + log2(4) · 14/3.5 + 4 · 2.8 µs, 0.75 × 1.2.
        const nccl::Communicator j = nccl::make_communicator(4, 4, 8.7, false, false, nccl::CpuVendor::other, 12, 1.25, 1);
        const nccl::Cost pat = nccl::model(Func::all_gather, Algo::pat, Proto::simple, j);
        CHECK(pat.latency_us == Approx(8.0 + 2 * 4.0 + 4 * 2.8));
        CHECK(pat.bandwidth_gbs == Approx(0.9));
        // Ring LL: 6.6 + 3 × 5.0 µs (one GPU per node: the tree's network latency), min(20.4,
        // 1.2 × 0.5) × 4/3 = 0.8 GB/s; ring Simple: 8.4 + 3 × 14 µs at 1.6 GB/s. PAT beats LL above
        // 40.3 KB and Simple below 47.7 KB: NCCL picks it for gathers in between.
        CHECK(nccl::choose(Func::all_gather, j, 1024).algo == Algo::ring);
        CHECK(nccl::choose(Func::all_gather, j, 1024).proto == Proto::ll);
        CHECK(nccl::choose(Func::all_gather, j, 44000).algo == Algo::pat);
        CHECK(nccl::choose(Func::all_gather, j, 1 << 28).proto == Proto::simple);
    }
    SECTION("protocols by size: LL for small all-reduces, Simple for large") {
        CHECK(nccl::choose(Func::all_reduce, a, 4096).proto == Proto::ll);
        CHECK(nccl::choose(Func::all_reduce, a, std::int64_t{1} << 30).proto == Proto::simple);
    }
}

TEST_CASE("an uncontended collective takes NCCL's predicted time, a ring leaves a node on every rail",
          "[sim][nccl][collectives]") {
    SECTION("one DGX A100, 1 GiB all-reduce") {
        const topo::Cluster c = topo::cluster_preset("dgx-a100");
        const Bytes S = Bytes::gib(1);
        const nccl::Choice best = nccl::choose(Func::all_reduce, a100_node(8), S.count());
        CHECK(best.algo == Algo::ring);
        for (auto mode : {NetworkMode::flow, NetworkMode::analytic})
            CHECK(one_collective(c, CollectiveKind::all_reduce, S, mode).to_us() == Approx(best.time_us).epsilon(0.005));
    }
    SECTION("two DGX A100, 1 GiB all-gather: every one of the 16 NIC uplinks carries 2 · 15/16 · S / 16") {
        const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);
        const topo::Topology t(c);
        OpGraph g(16);
        std::vector<int> all;
        for (int r = 0; r < 16; ++r) all.push_back(r);
        g.add_collective(CollectiveKind::all_gather, all, Bytes::gib(1), Stream::comm, Phase::comm);
        g.finalize();
        SimOptions o;
        o.record_links = true;
        const Timeline tl = simulate(g, c, t, o);
        int busy_uplinks = 0;
        for (std::size_t l = 0; l < t.links().size(); ++l) {
            const auto& link = t.links()[l];
            if (t.vertices()[static_cast<std::size_t>(link.from)].kind != topo::VertexKind::nic ||
                t.vertices()[static_cast<std::size_t>(link.to)].kind != topo::VertexKind::network_switch)
                continue;
            bool used = false;
            for (const LinkSample& s : tl.links) used = used || (s.link == static_cast<int>(l) && s.utilisation > 0);
            busy_uplinks += used;
        }
        CHECK(busy_uplinks == 16);
    }
}

TEST_CASE("NCCL's thread blocks per call, by hand from enqueue.cc", "[sim][nccl]") {
    // One node of 8 H100: comm->nChannels = 2 × the ring's 12 channels = 24 (src/graph/connect.cc:460),
    // one block each for a large call — the 24 blocks of the ncclAllGather an NVIDIA forum post
    // profiled on an H100 (forums.developer.nvidia.com/t/337991, "launches 24 blocks").
    const nccl::Communicator h = nccl::make_communicator(8, 1, 9.0, true, true, nccl::CpuVendor::intel, 370.8, 50, 8);
    CHECK(nccl::thread_blocks(Algo::ring, Proto::simple, h, std::int64_t{1} << 30) == 24);
    // Small calls use fewer (src/enqueue.cc:2093-2096): a Simple ring block takes 512 threads × 64
    // B, 32,768 B, so 100,000 B keep 3 blocks (3 × 32,768 ≤ 100,000 < 4 × 32,768).
    CHECK(nccl::thread_blocks(Algo::ring, Proto::simple, h, 100000) == 3);
    // LL on a ring: 512 threads × 8 B × 8 ranks, the same 32,768 B a block; LL128: 640 × 8 = 5,120
    // B a block, so 19 (19 × 5,120 = 97,280 ≤ 100,000); a tree's Simple block 512 × 64.
    CHECK(nccl::thread_blocks(Algo::ring, Proto::ll, h, 100000) == 3);
    CHECK(nccl::thread_blocks(Algo::ring, Proto::ll128, h, 100000) == 19);
    CHECK(nccl::thread_blocks(Algo::tree, Proto::simple, h, 100000) == 3);
    // NVLS: NVLS_NCHANNELS_SM90 = 16 blocks whatever the size (src/transport/nvls.cc:155, 213).
    CHECK(nccl::thread_blocks(Algo::nvls, Proto::simple, h, 1000) == 16);
    CHECK(nccl::thread_blocks(Algo::nvls, Proto::simple, h, std::int64_t{1} << 30) == 16);
    // Four DGX A100: 2 × 16 ring channels = 32.
    const nccl::Communicator m = nccl::make_communicator(32, 4, 8.0, true, true, nccl::CpuVendor::amd, 240, 25, 8);
    CHECK(nccl::thread_blocks(Algo::ring, Proto::simple, m, std::int64_t{1} << 30) == 32);
    // Hopper across nodes doubles comm->nChannels again while under 16 with ring channels above
    // 45 GB/s inside the node (connect.cc:480-483): 4 ring channels of 48 GB/s give 2 × 2 × 4.
    nccl::Communicator fast = m;
    fast.compute_capability = 9.0;
    fast.arch = nccl::Arch::hopper;
    fast.channels = 4;
    fast.bw_intra = 48;
    CHECK(nccl::thread_blocks(Algo::ring, Proto::simple, fast, std::int64_t{1} << 30) == 16);
    fast.bw_intra = 45;
    CHECK(nccl::thread_blocks(Algo::ring, Proto::simple, fast, std::int64_t{1} << 30) == 8);
    // A ring no faster than PCIe Gen3 (bw_intra × channels ≤ PCI_BW, 12 GB/s, src/graph/topo.h:25)
    // runs Simple blocks of 256 threads (src/graph/tuning.cc:244-245): 40,000 B keep both blocks
    // (2 × 256 × 64 = 32,768 ≤ 40,000), where blocks of 512 threads would keep one.
    const nccl::Communicator pcie = nccl::make_communicator(2, 1, 8.0, false, false, nccl::CpuVendor::intel, 12, 12, 1);
    REQUIRE(pcie.bw_intra * pcie.channels <= 12.0);
    CHECK(2 * pcie.channels == 2);
    CHECK(nccl::thread_blocks(Algo::ring, Proto::simple, pcie, 40000) == 2);
    // One rank: no call, no blocks.
    CHECK(nccl::thread_blocks(Algo::ring, Proto::simple, nccl::make_communicator(1, 1, 9.0, true, true, nccl::CpuVendor::intel, 370.8, 50, 8),
                              std::int64_t{1} << 30) == 0);
}

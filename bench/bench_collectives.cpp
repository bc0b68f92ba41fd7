// One all-reduce of S bytes over P ranks on a fat tree of DGX A100 nodes (rail-optimized,
// 8 GPUs per node), flow-level: wall time, events and peak memory, per algorithm.
// Usage: bench_collectives [ranks=4096] [GiB=1]
#include <cstdio>
#include <cstdlib>

#include "bench_util.hpp"
#include "sim/simulator.hpp"
#include "topologies/topology.hpp"

using namespace smol;

int main(int argc, char** argv) {
    const int ranks = argc > 1 ? std::atoi(argv[1]) : 4096;
    const double gib = argc > 2 ? std::atof(argv[2]) : 1.0;
    auto t0 = std::chrono::steady_clock::now();
    const topo::Cluster cluster = topo::cluster_preset("dgx-a100").with_nodes(ranks / 8);
    const topo::Topology topology(cluster);
    std::printf("collectives: %d ranks on %s × %d: %zu vertices, %zu links, topology %.3f s\n", ranks,
                cluster.name.c_str(), cluster.num_nodes(), topology.vertices().size(), topology.links().size(),
                bench::seconds_since(t0));
    std::vector<int> all(static_cast<std::size_t>(ranks));
    for (int r = 0; r < ranks; ++r) all[static_cast<std::size_t>(r)] = r;
    for (auto algo : {sim::CollectiveAlgo::ring, sim::CollectiveAlgo::hierarchical, sim::CollectiveAlgo::tree,
                      sim::CollectiveAlgo::automatic}) {
        OpGraph g(ranks);
        g.add_collective(CollectiveKind::all_reduce, all, Bytes::gib(gib), Stream::comm, Phase::comm);
        g.finalize();
        sim::SimOptions opt;
        opt.algo = algo;
        opt.record_memory = false;
        t0 = std::chrono::steady_clock::now();
        const Timeline tl = sim::simulate(g, cluster, topology, opt);
        std::printf("  %-13s all-reduce %.3g GiB: simulated %-10s wall %.3f s, %llu events, peak RSS %.0f MB\n",
                    sim::to_string(algo), gib, to_string(tl.makespan).c_str(), bench::seconds_since(t0),
                    static_cast<unsigned long long>(tl.events), bench::peak_rss_mb());
    }
    return 0;
}

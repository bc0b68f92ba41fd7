// Engine alone: events per second on a synthetic graph of N compute ops (default 10 M).
//
// R ranks each run a chain of N/R compute ops; op i on rank r also waits for op i−1 on rank
// r+1 (a wavefront, so the ready set stays wide and the event heap holds ~R events). Every op
// completion is one event. Usage: bench_engine [ops] [ranks] [repeats]
#include <cstdio>
#include <cstdlib>

#include "bench_util.hpp"
#include "sim/simulator.hpp"
#include "topologies/cluster.hpp"

using namespace smol;

int main(int argc, char** argv) {
    const long ops = argc > 1 ? std::atol(argv[1]) : 10'000'000;
    const int ranks = argc > 2 ? std::atoi(argv[2]) : 1024;
    const int repeats = argc > 3 ? std::atoi(argv[3]) : 3;
    const topo::Cluster cluster = topo::cluster_preset("dgx-a100").with_nodes(ranks / 8);

    auto t0 = std::chrono::steady_clock::now();
    OpGraph g(ranks);
    const long per_rank = ops / ranks;
    std::vector<OpId> prev(static_cast<std::size_t>(ranks));
    for (long i = 0; i < per_rank; ++i) {
        std::vector<OpId> cur(static_cast<std::size_t>(ranks));
        for (int r = 0; r < ranks; ++r) {
            // Durations vary with (i, r) so events interleave instead of moving in lockstep.
            const double flops = 1e9 * (1 + (i * 7 + r * 13) % 5);
            cur[static_cast<std::size_t>(r)] =
                g.add_compute(r, Phase::fwd, static_cast<int>(i % 100), 0, Flops(flops), Bytes(0), KernelClass::gemm, DType::bf16);
            if (i > 0) g.depend(prev[static_cast<std::size_t>((r + 1) % ranks)], cur[static_cast<std::size_t>(r)]);
        }
        prev.swap(cur);
    }
    g.finalize();
    const double build_s = bench::seconds_since(t0);

    sim::SimOptions opt;
    opt.record_memory = false;
    std::vector<double> rates, walls;
    std::uint64_t events = 0;
    for (int k = 0; k < repeats; ++k) {
        const Timeline tl = sim::simulate(g, cluster, opt);
        events = tl.events;
        walls.push_back(tl.wall_s);
        rates.push_back(static_cast<double>(tl.events) / tl.wall_s);
    }
    std::printf("engine: %zu ops, %zu edges, %d ranks: build %.2f s\n", g.size(), g.num_edges(), ranks, build_s);
    std::printf("engine: %llu events, simulate median %.3f s over %d runs: %.2f M events/s; peak RSS %.0f MB\n",
                static_cast<unsigned long long>(events), bench::median(walls), repeats, bench::median(rates) / 1e6,
                bench::peak_rss_mb());
    return 0;
}

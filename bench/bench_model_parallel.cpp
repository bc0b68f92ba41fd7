// Model parallelism at scale.
//
//  1. The 1,024-GPU GPT-3 175B plan of Narayanan et al. 2021 (dgx-a100 × 128, tp 8 · pp 16 ·
//     dp 8, 1F1B, global batch 1536, micro-batch 1) built and simulated end to end with the flow
//     network: build time, graph size, simulate wall time, events, step time.
//  2. GPT-3 175B on dgx-a100 × 8 (64 GPUs), tp ∈ {1, 2, 4, 8} × pp ∈ {1, 2, 4, 8, 16}, dp the
//     rest, 1F1B, global batch 512: step time, TFLOP/s per GPU, bubble, peak memory, whether it
//     fits in 80 GB.
//
// Each big run is measured in a process of its own (its peak RSS is its own, not the largest so far).
//
// Usage: bench_model_parallel [--skip-big] [--skip-16k] [--skip-table] [--global-batch N] [--recompute none|selective|full]
//                             [--strategy ddp|zero1]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "bench_util.hpp"
#include "sim/simulator.hpp"
#include "strategies/plan.hpp"
#include "tools/simulation.hpp"
#include "traces/summary.hpp"

using namespace smol;
using namespace smol::strategies;

namespace {

/// GPT-3 175B, tp 8 · pp 16 · dp `dp` (dp·128 GPUs), 1F1B, 192 micro-batches per replica.
void big(int dp, bool fold) {
    const Model m = model_preset("gpt3-175b");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(16 * dp);
    Plan p;
    p.tp = 8;
    p.pp = 16;
    p.dp = dp;
    p.fold = fold;
    p.schedule = Schedule::one_f_one_b;
    p.global_batch = 192 * dp;
    p.micro_batch = 1;
    auto t0 = std::chrono::steady_clock::now();
    const topo::Topology topology(c);
    const double topo_s = bench::seconds_since(t0);
    sim::SimOptions opt;
    opt.record_memory = false;
    t0 = std::chrono::steady_clock::now();
    const tools::Simulation run = tools::simulate_plan(m, c, p, opt, &topology);
    const Built& b = run.built;
    const Timeline& tl = run.timeline;
    const traces::Summary& s = run.summary;
    const double build_s = bench::seconds_since(t0) - tl.wall_s;
    std::printf("GPT-3 175B on dgx-a100 x %d (%d GPUs): tp 8 pp 16 dp %d, 1F1B, global batch %d, micro-batch 1, %s\n",
                16 * dp, 128 * dp, dp, 192 * dp, b.graph.folded() ? "replicas folded" : "every replica simulated");
    std::printf("  graph              %zu ops, %zu edges, %zu collectives, %zu sends\n", b.graph.size(), b.graph.num_edges(),
                b.graph.collectives().size(), b.graph.p2ps().size());
    std::printf("  build + summarise  %.2f s\n", build_s);
    std::printf("  topology           %.2f s\n", topo_s);
    std::printf("  simulate (flow)    %.2f s wall, %llu events (%.1f M events/s)\n", tl.wall_s,
                static_cast<unsigned long long>(tl.events), static_cast<double>(tl.events) / tl.wall_s * 1e-6);
    std::printf("  step time          %.3f s, %.1f TFLOP/s per GPU (MFU %.1f %%), bubble %.1f %%, exposed comm %.3f s\n",
                s.iteration.to_seconds(), s.tflops_per_device, s.mfu * 100, s.bubble_fraction * 100,
                s.exposed_comm.to_seconds());
    std::printf("  peak memory        %.1f GB (stage 0) … %.1f GB (stage 15), %s\n", s.per_stage.front().peak_memory.to_gb(),
                s.per_stage.back().peak_memory.to_gb(), s.fits() ? "fits" : "DOES NOT FIT");
}

/// big() in a process of its own, so its peak RSS is its own.
void big_alone(int dp, bool fold) {
    const double rss = bench::peak_rss_mb_of([&] { big(dp, fold); });
    std::printf("  peak RSS           %.0f MB (this run alone)\n\n", rss);
}

void table(std::int64_t global_batch, Recompute recompute, DataParallel strategy) {
    const Model m = model_preset("gpt3-175b");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(8);
    std::printf("GPT-3 175B on dgx-a100 x 8 (64 GPUs), 1F1B, global batch %lld, micro-batch 1, %s over dp, recompute %s\n",
                static_cast<long long>(global_batch), to_string(strategy), to_string(recompute));
    std::printf("| tp | pp | dp | micro-batches | step (s) | TFLOP/s per GPU | bubble | peak memory (GB) | fits | sim wall (s) |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n");
    for (int tp : {1, 2, 4, 8})
        for (int pp : {1, 2, 4, 8, 16}) {
            Plan p;
            p.tp = tp;
            p.pp = pp;
            p.global_batch = global_batch;
            p.recompute = recompute;
            p.strategy = strategy;
            try {
                sim::SimOptions opt;
                opt.record_memory = false;
                const tools::Simulation run = tools::simulate_plan(m, c, p, opt);
                const Built& b = run.built;
                const Timeline& tl = run.timeline;
                const traces::Summary& s = run.summary;
                std::printf("| %d | %d | %d | %d | %.2f | %.1f | %.1f %% | %.1f | %s | %.2f |\n", tp, pp, b.layout.dp,
                            b.layout.microbatches, s.iteration.to_seconds(), s.tflops_per_device, s.bubble_fraction * 100,
                            s.peak_memory.to_gb(), s.fits() ? "yes" : "no", tl.wall_s);
            } catch (const Error& e) {
                std::printf("| %d | %d | – | – | – | – | – | – | refused: %s | – |\n", tp, pp, e.what());
            }
            std::fflush(stdout);
        }
}

}  // namespace

int main(int argc, char** argv) {
    bool do_big = true, do_table = true, skip_16k = false;
    std::int64_t gb = 512;
    Recompute recompute = Recompute::none;
    DataParallel strategy = DataParallel::ddp;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--skip-big")) do_big = false;
        else if (!std::strcmp(argv[i], "--skip-16k")) skip_16k = true;
        else if (!std::strcmp(argv[i], "--skip-table")) do_table = false;
        else if (!std::strcmp(argv[i], "--global-batch") && i + 1 < argc) gb = std::atoll(argv[++i]);
        else if (!std::strcmp(argv[i], "--recompute") && i + 1 < argc) recompute = parse_recompute(argv[++i], {});
        else if (!std::strcmp(argv[i], "--strategy") && i + 1 < argc) strategy = parse_data_parallel(argv[++i]);
    }
    if (do_big) {
        big_alone(8, false);    // 1,024 GPUs, full expansion
        big_alone(8, true);     // 1,024 GPUs, folded
        if (!skip_16k) big_alone(128, true);   // 16,384 GPUs, folded
    }
    if (do_table) table(gb, recompute, strategy);
    return 0;
}

// Sweep throughput: plans simulated per minute, analytic and flow-level, for GPT-3 175B on 128
// DGX A100 nodes (1,024 GPUs) at global batch 1536 (Narayanan et al. 2021's setting). A full
// sweep simulates every plan that survives pruning; this benchmark times a deterministic sample
// of them (every k-th plan, via the sweep's own sharding: shard 0 of k), on --jobs threads.
//
//   bench_sweep [jobs=2] [analytic_stride=1] [flow_stride=8]
//
// With analytic_stride 1 it runs the whole analytic sweep and prints the best plans.
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "sim/simulator.hpp"
#include "strategies/plan.hpp"
#include "tools/sweep.hpp"
#include "topologies/topology.hpp"
#include "traces/summary.hpp"

using namespace smol;

int main(int argc, char** argv) {
    const int jobs = argc > 1 ? std::atoi(argv[1]) : 2;
    const int analytic_stride = argc > 2 ? std::atoi(argv[2]) : 1;
    const int flow_stride = argc > 3 ? std::atoi(argv[3]) : 8;
    const Model model = model_preset("gpt3-175b");
    const topo::Cluster cluster = topo::cluster_preset("dgx-a100").with_nodes(128);
    std::printf("gpt3-175b on 128 x dgx-a100 (%d GPUs), global batch 1536, %d threads\n", cluster.num_devices(), jobs);
    for (const auto& [network, stride] : {std::pair{sim::NetworkMode::analytic, analytic_stride},
                                          std::pair{sim::NetworkMode::flow, flow_stride}}) {
        tools::SweepOptions o;
        o.global_batch = 1536;
        o.jobs = jobs;
        o.network = network;
        o.refine = 0;
        o.shard_count = stride;
        const auto t0 = std::chrono::steady_clock::now();
        const tools::SweepResult r = tools::sweep(model, cluster, o);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const std::size_t pruned = r.count(tools::PlanStatus::pruned), pending = r.count(tools::PlanStatus::pending);
        const std::size_t simulated = r.plans.size() - pruned - pending;
        std::printf("\n%s: %zu candidates, %zu pruned (", sim::to_string(network), r.plans.size(), pruned);
        bool first = true;
        for (const auto& [key, entry] : r.pruned_by_reason()) {
            std::printf("%s%zu %s", first ? "" : ", ", entry.first, key.c_str());
            first = false;
        }
        std::printf("), %zu simulated (every %d-th of %zu) in %.1f s: %.0f plans/min\n", simulated, stride,
                    simulated + pending, s, simulated / s * 60);
        std::printf("  out of memory %zu, ranked %zu\n", r.count(tools::PlanStatus::out_of_memory), r.ranking.size());
        if (network == sim::NetworkMode::analytic) {
            // Where the time goes: build (strategies::build, finalize's checks included),
            // simulate and summarise, for the first 8 simulated plans of the sample, one thread.
            double build_s = 0, sim_s = 0, sum_s = 0;
            int n = 0;
            const topo::Topology topology(cluster);
            sim::SimOptions so;
            so.network = network;
            so.record_memory = false;
            for (const tools::PlanResult& p : r.plans) {
                if (!p.result || n == 8) continue;
                ++n;
                auto t = std::chrono::steady_clock::now();
                strategies::Plan plan = p.plan;
                plan.fold_unshared = true;   // as tools::simulate_plan builds it for the analytic network
                const strategies::Built b = strategies::build(model, cluster, plan);
                build_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
                t = std::chrono::steady_clock::now();
                const Timeline tl = sim::simulate(b.graph, cluster, topology, so);
                sim_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
                t = std::chrono::steady_clock::now();
                traces::StepInfo info;
                info.devices = b.layout.devices;
                (void)traces::summarize(b.graph, tl, info);
                sum_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
            }
            const double all = build_s + sim_s + sum_s;
            std::printf("  per plan (mean of %d): build %.3f s (%.0f %%), simulate %.3f s (%.0f %%), summarise %.3f s (%.0f %%)\n",
                        n, build_s / n, 100 * build_s / all, sim_s / n, 100 * sim_s / all, sum_s / n, 100 * sum_s / all);
        }
        for (std::size_t k = 0; k < std::min<std::size_t>(r.ranking.size(), 5); ++k) {
            const tools::PlanResult& p = r.plans[r.ranking[k]];
            std::printf("  %zu. %-55s dp %-3d %8.3f s  MFU %4.1f %%  peak %s\n", k + 1, tools::describe_plan(p).c_str(),
                        p.layout.dp, p.result->iteration.to_seconds(), p.result->mfu * 100,
                        to_string(p.result->peak_memory).c_str());
        }
    }
    return 0;
}

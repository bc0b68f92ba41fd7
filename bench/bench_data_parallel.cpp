// The data-parallel family side by side: for gpt2-xl on dgx-a100 × 2 (16 GPUs) and resnet50 on
// pi5-1gbe × 8, the simulated step time, throughput, peak device memory and exposed
// communication of every strategy with its defaults. Parameter servers use one dedicated server
// (the last device), so they train on one device fewer. ps-async runs 4 iterations per worker:
// its "step" is those 4 rounds, compare samples/s.
#include <cstdio>
#include <string>
#include <vector>

#include "sim/simulator.hpp"
#include "strategies/parameter_server.hpp"
#include "strategies/plan.hpp"
#include "tools/simulation.hpp"
#include "traces/summary.hpp"

using namespace smol;
using namespace smol::strategies;

namespace {

struct Variant {
    const char* label;
    Plan plan;
};

std::vector<Variant> variants() {
    std::vector<Variant> v;
    auto add = [&](const char* label, DataParallel s) {
        Plan p;
        p.strategy = s;
        v.push_back({label, p});
        return &v.back().plan;
    };
    add("ps (1 dedicated)", DataParallel::ps);
    add("ps-async (K=4)", DataParallel::ps_async);
    add("ring (Horovod)", DataParallel::ring);
    add("ddp", DataParallel::ddp);
    add("zero1", DataParallel::zero1);
    add("zero2", DataParallel::zero2);
    add("zero3", DataParallel::zero3);
    add("fsdp full", DataParallel::fsdp);
    add("fsdp grad-op", DataParallel::fsdp)->fsdp_sharding = FsdpSharding::grad_op;
    add("fsdp hybrid", DataParallel::fsdp)->fsdp_sharding = FsdpSharding::hybrid;
    return v;
}

void table(const std::string& model_name, const std::string& cluster_name, int nodes) {
    const Model m = model_preset(model_name);
    const topo::Cluster c = topo::cluster_preset(cluster_name).with_nodes(nodes);
    const topo::Topology topo(c);
    std::printf("\n%s on %s × %d (%d devices)\n\n", model_name.c_str(), cluster_name.c_str(), nodes, c.num_devices());
    std::printf("| strategy | dp | step | samples/s | peak memory | exposed comm | fits |\n");
    std::printf("|---|---:|---:|---:|---:|---:|---|\n");
    for (const Variant& v : variants()) {
        try {
            sim::SimOptions opt;
            opt.record_memory = false;
            const tools::Simulation run = tools::simulate_plan(m, c, v.plan, opt, &topo);
            const Built& b = run.built;
            const traces::Summary& s = run.summary;
            std::string extra;
            if (v.plan.strategy == DataParallel::ps_async)
                if (auto st = s.mean_staleness) extra = " (staleness " + std::to_string(*st).substr(0, 4) + ")";
            std::printf("| %s%s | %d | %s | %.4g | %s | %s | %s |\n", v.label, extra.c_str(), b.layout.dp,
                        to_string(s.iteration).c_str(), s.samples_per_s, to_string(s.peak_memory).c_str(),
                        to_string(s.exposed_comm).c_str(), s.fits() ? "yes" : "no");
        } catch (const Error& e) {
            std::printf("| %s | – | – | – | – | – | %s |\n", v.label, e.what());
        }
    }
}

}  // namespace

int main() {
    table("gpt2-xl", "dgx-a100", 2);
    table("resnet50", "pi5-1gbe", 8);
    return 0;
}

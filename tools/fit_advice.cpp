#include "tools/fit_advice.hpp"

#include <algorithm>
#include <optional>

#include "core/error.hpp"
#include "strategies/zero.hpp"
#include "tools/simulation.hpp"

namespace smol::tools {

namespace {

using strategies::DataParallel;
using strategies::Offload;

/// How much of the model states a strategy shards: more is more memory saved.
int sharding(DataParallel s) {
    switch (s) {
        case DataParallel::zero1: return 1;
        case DataParallel::zero2: return 2;
        case DataParallel::zero3:
        case DataParallel::fsdp: return 3;
        default: return 0;
    }
}

/// The change is a plan smolcluster runs (resolve accepts it) and can simulate on this machine
/// (check_simulable: a tiny --bucket-mb that one replica ignores makes billions of ops with ZeRO).
bool accepted(const Model& model, const topo::Cluster& cluster, const strategies::Plan& p) {
    try {
        check_simulable(strategies::resolve(model, cluster, p), p);
        return true;
    } catch (const Error& e) {
        if (!is_input_error(e.kind())) throw;
        return false;
    }
}

}  // namespace

std::vector<OffloadChoice> offload_choices(DataParallel s, bool nvme) {
    std::vector<OffloadChoice> out{{}};
    switch (s) {
        case DataParallel::zero1:
        case DataParallel::zero2: out.push_back({Offload::none, Offload::cpu, Offload::none, "--offload-optimizer cpu"}); break;
        case DataParallel::zero3:
            out.push_back({Offload::none, Offload::cpu, Offload::none, "--offload-optimizer cpu"});
            out.push_back({Offload::cpu, Offload::cpu, Offload::none, "--offload cpu"});
            if (nvme) {
                out.push_back({Offload::none, Offload::nvme, Offload::none, "--offload-optimizer nvme"});
                out.push_back({Offload::nvme, Offload::nvme, Offload::none, "--offload nvme"});
            }
            break;
        case DataParallel::fsdp: out.push_back({Offload::none, Offload::none, Offload::cpu, "--offload cpu"}); break;
        default: break;
    }
    return out;
}

void apply_offload(strategies::Plan& plan, const OffloadChoice& o) {
    plan.offload = o.fsdp;
    plan.offload_params = o.params;
    plan.offload_optimizer = o.optimizer;
    if (o.params != Offload::none && o.params == o.optimizer) {
        plan.offload = o.params;
        plan.offload_params = plan.offload_optimizer = Offload::none;
    }
}

std::vector<PlanChange> memory_saving_changes(const Model& model, const topo::Cluster& cluster,
                                              const strategies::Plan& plan) {
    const strategies::Layout l = strategies::resolve(model, cluster, plan);
    bool nvme = true;
    for (const auto& g : cluster.groups) nvme = nvme && g.nvme_capacity.has_value();
    std::vector<DataParallel> strategies{plan.strategy};
    if (l.tp == 1 && l.pp == 1 && l.servers == 0 && plan.strategy != DataParallel::ps && plan.strategy != DataParallel::ps_async)
        for (DataParallel s : {DataParallel::zero1, DataParallel::zero2, DataParallel::zero3, DataParallel::fsdp})
            if (sharding(s) > sharding(plan.strategy)) strategies.push_back(s);
    if ((l.tp > 1 || l.pp > 1) && plan.strategy == DataParallel::ddp) strategies.push_back(DataParallel::zero1);
    // Recompute, lightest first: the attention core; then (Megatron core 0.12 on) every module of
    // --recompute-modules with something to redo in this model but moe, then with moe (which
    // holds moe_act and shared_experts); then whole layers.
    std::vector<std::pair<Recompute, RecomputeModules>> recomputes{{plan.recompute, plan.recompute_modules}};
    for (Recompute r : {Recompute::selective, Recompute::full})
        if (static_cast<int>(r) > static_cast<int>(plan.recompute)) recomputes.push_back({r, {}});
    if (plan.recompute != Recompute::full)
        for (const RecomputeModules m : strategies::recompute_module_tiers(model, l.framework))
            if (!(m == plan.recompute_modules)) recomputes.insert(recomputes.end() - 1, {Recompute::selective, m});
    std::vector<int> micro_batches{plan.micro_batch};
    for (int m = plan.micro_batch / 2; m >= 1; m /= 2) micro_batches.push_back(m);
    // A mixture of experts: more expert parallelism, each rank holding fewer experts (every power
    // of two above the plan's dividing dp and the experts).
    std::vector<int> eps{plan.ep};
    if (model.is_transformer() && model.shape().is_moe())
        for (int e = plan.ep * 2; e <= l.dp && model.shape().moe.experts % e == 0; e *= 2)
            if (l.dp % e == 0) eps.push_back(e);

    // Twin-Flow: more of the optimizer on the host, in tenths, each a different number of
    // sub-groups (1: all of it, plain ZeRO-Offload). A fraction that leaves only the biases' and
    // norms' sub-groups on the device is plain ZeRO-Offload in all but name and is not offered.
    std::vector<std::optional<double>> fractions{plan.optimizer_offload_fraction};
    if (const auto twin = strategies::twin_flow_split(model, l, plan))
        for (int t = 1, last = twin->on_cpu; t <= 10; ++t) {
            const double f = t / 10.0;
            const int k = static_cast<int>(f * twin->subgroups);
            if (t < 10 && k >= twin->weight_subgroups) continue;
            if (f > *plan.optimizer_offload_fraction && k > last) fractions.push_back(f), last = k;
        }

    std::vector<PlanChange> out;
    for (const std::optional<double>& f : fractions)
        for (DataParallel s : strategies)
            for (const OffloadChoice& o : offload_choices(s, nvme))
                for (const auto& [r, modules] : recomputes)
                    for (int m : micro_batches)
                        for (int e : eps) {
                            PlanChange c;
                            c.plan = plan;
                            if (f != plan.optimizer_offload_fraction) {
                                if (s != plan.strategy) continue;
                                c.plan.optimizer_offload_fraction = f;
                                c.flags += " --optimizer-offload-fraction " + number_text(*f);
                                ++c.changes;
                            }
                            if (s != plan.strategy) {
                                c.plan.strategy = s;
                                // The framework follows the strategy (FSDP is PyTorch's, ZeRO DeepSpeed's).
                                c.plan.framework.clear();
                                c.flags += " --strategy " + std::string(strategies::to_string(s));
                                ++c.changes;
                            }
                            if (o.offloads()) {
                                const bool already = plan.offload != Offload::none || plan.offload_params != Offload::none ||
                                                     plan.offload_optimizer != Offload::none;
                                if (already && s == plan.strategy) continue;   // the plan's own offload, or one it has
                                apply_offload(c.plan, o);
                                c.flags += " " + o.flags;
                                ++c.changes;
                            }
                            if (r != plan.recompute || !(modules == plan.recompute_modules)) {
                                c.plan.recompute = r;
                                c.plan.recompute_modules = modules;
                                c.flags += " --recompute " + std::string(to_string(r));
                                if (!(modules == RecomputeModules{})) c.flags += " --recompute-modules " + to_string(modules);
                                ++c.changes;
                            }
                            if (m != plan.micro_batch) {
                                c.plan.micro_batch = m;
                                c.plan.global_batch = l.global_batch;   // the same batch in more micro-batches
                                c.flags += " --micro-batch " + std::to_string(m);
                                ++c.changes;
                            }
                            if (e != plan.ep) {
                                c.plan.ep = e;
                                c.flags += " --ep " + std::to_string(e);
                                ++c.changes;
                            }
                            if (c.changes == 0 || !accepted(model, cluster, c.plan)) continue;
                            c.flags.erase(0, 1);
                            out.push_back(std::move(c));
                        }
    std::stable_sort(out.begin(), out.end(), [](const PlanChange& a, const PlanChange& b) { return a.changes < b.changes; });
    return out;
}

std::vector<traces::FitOption> fitting_changes(const Model& model, const topo::Cluster& cluster,
                                               const strategies::Plan& plan, std::size_t limit) {
    sim::SimOptions quick;
    quick.network = sim::NetworkMode::analytic;
    quick.record_memory = false;
    const topo::Topology topology(cluster);
    const Time base = simulate_plan(model, cluster, plan, quick, &topology).summary.iteration;
    std::vector<std::pair<int, traces::FitOption>> found;   // (changes, option)
    int tier = -1;
    for (const PlanChange& c : memory_saving_changes(model, cluster, plan)) {
        if (c.changes != tier) {
            if (found.size() >= limit) break;
            tier = c.changes;
        }
        const Simulation run = simulate_plan(model, cluster, c.plan, quick, &topology);
        if (!run.summary.fits()) continue;
        traces::FitOption f;
        f.change = c.flags;
        f.peak = run.summary.peak_memory;
        f.capacity = run.timeline.capacity[static_cast<std::size_t>(run.summary.peak_rank)][static_cast<int>(Tier::device)];
        f.step = run.summary.iteration;
        f.slowdown = base > Time::zero() ? f.step / base : 0;
        found.emplace_back(c.changes, std::move(f));
    }
    // Fewest changes first; among as many changes, the fastest.
    std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first < b.first : a.second.step < b.second.step;
    });
    std::vector<traces::FitOption> out;
    for (auto& [changes, f] : found)
        if (out.size() < limit) out.push_back(std::move(f));
    return out;
}

}  // namespace smol::tools

#include "tools/simulation.hpp"

#include "strategies/parameter_server.hpp"

namespace smol::tools {

traces::StepInfo step_info(const Model& model, const topo::Cluster& cluster, const strategies::Plan& plan,
                           const strategies::Built& built, const std::string& network) {
    traces::StepInfo info;
    info.model = model.name();
    info.cluster = cluster.name;
    info.strategy = strategies::to_string(plan.strategy);
    info.network = network;
    info.framework = strategies::describe(built.layout.framework);
    const strategies::Layout& l = built.layout;
    info.devices = l.devices;
    info.tp = l.tp;
    info.pp = l.pp;
    info.dp = l.dp;
    info.microbatches = l.microbatches;
    info.micro_batch = l.micro_batch;
    info.global_batch = l.global_batch;
    info.seq = l.seq;
    if (plan.seq == 0) info.seq_note = model.seq_note();
    info.ep = l.ep;
    info.attention = to_string(l.attention);
    info.dtype = to_string(l.dtype);
    info.model_flops = built.model_flops;
    info.folded = built.graph.folded();
    for (int r = 0; r < l.devices; ++r) info.peak.push_back(cluster.device_kind(r).peak_for(l.dtype));
    return info;
}

traces::Summary summarize_plan(const strategies::Built& built, const Timeline& timeline, const traces::StepInfo& info,
                               const strategies::Plan& plan) {
    traces::Summary summary = traces::summarize(built.graph, timeline, info);
    if (plan.strategy == strategies::DataParallel::ps_async) summary.mean_staleness = strategies::mean_staleness(built.graph, timeline);
    return summary;
}

Simulation simulate_plan(const Model& model, const topo::Cluster& cluster, const strategies::Plan& plan,
                         const sim::SimOptions& options, const topo::Topology* topology) {
    strategies::Built built = strategies::build(model, cluster, plan);
    Timeline tl = topology ? sim::simulate(built.graph, cluster, *topology, options)
                           : sim::simulate(built.graph, cluster, options);
    const traces::StepInfo info = step_info(model, cluster, plan, built, sim::to_string(options.network));
    traces::Summary summary = summarize_plan(built, tl, info, plan);
    return {std::move(built), std::move(tl), std::move(summary)};
}

}  // namespace smol::tools

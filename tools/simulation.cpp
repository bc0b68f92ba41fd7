#include "tools/simulation.hpp"

#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include <unistd.h>

#include "strategies/parameter_server.hpp"
#include "strategies/zero.hpp"
#include "tools/pipeline_split.hpp"

namespace smol::tools {

namespace {

/// Memory this machine can give a simulation: MemAvailable of /proc/meminfo (what the kernel
/// can hand out without swapping), or the physical memory where that cannot be read.
std::int64_t available_memory() {
    std::ifstream meminfo("/proc/meminfo");
    std::string key;
    std::int64_t kib = 0;
    std::string unit;
    while (meminfo >> key >> kib >> unit)
        if (key == "MemAvailable:") return kib * 1024;
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? static_cast<std::int64_t>(pages) * page : std::int64_t{1} << 40;
}

std::string figure(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2g", v);
    return buf;
}

/// What the summary says about slow devices, jitter, Hogwild! and a profile.
std::vector<std::string> speed_notes(const Model& model, const topo::Cluster& cluster, const strategies::Layout& layout,
                                     const strategies::Plan& plan) {
    std::vector<std::string> notes;
    std::string slow;
    for (std::size_t gi = 0; gi < cluster.groups.size(); ++gi) {
        const topo::NodeGroup& g = cluster.groups[gi];
        if (g.speed != 1.0 || g.nic_speed != 1.0)
            slow += (slow.empty() ? "" : "; ") + std::string("group ") + g.name + " at " + number_text(g.speed) + "× compute" +
                    (g.nic_speed != 1.0 ? ", " + number_text(g.nic_speed) + "× NIC" : "");
    }
    for (const auto& [rank, s] : cluster.slow_devices)
        slow += (slow.empty() ? "" : "; ") + std::string("rank ") + std::to_string(rank) + " (" + cluster.device_name(rank) +
                ") at " + number_text(s.compute) + "× compute" + (s.nic != 1.0 ? ", " + number_text(s.nic) + "× NIC" : "");
    if (!slow.empty()) notes.push_back("slow devices: " + slow);
    if (cluster.jitter.percent > 0)
        notes.push_back("jitter: every compute op within ±" + number_text(cluster.jitter.percent) + " % of its time (seed " +
                        std::to_string(cluster.jitter.seed) + ")");
    if (!cluster.uniform_speed() && !layout.folded && plan.fold) {
        // Said only where the same plan on devices of equal speed would fold.
        topo::Cluster uniform = cluster;
        uniform.slow_devices.clear();
        uniform.jitter = {};
        if (strategies::resolve(model, uniform, plan).folded)
            notes.push_back("replicas not folded: the devices differ in speed (--slow, --jitter), so replicas are not mirrors");
    }
    if (plan.hogwild)
        notes.push_back("Hogwild!: " + std::to_string(layout.dp) +
                        " workers update one shared parameter store without locks, no staleness bound");
    if (!cluster.profile.empty()) notes.push_back(profile_note(cluster));
    return notes;
}

}  // namespace

/// What a --profile replaced: "profile F: measured compute and memory rates; measured all_reduce
/// over 2-8 ranks on 1 host, p2p within a host" (a GPU's: "measured GPU kernel rates (NVIDIA …)"). Transfers of one kind and host span are listed
/// as the range of their group sizes.
std::string profile_note(const topo::Cluster& cluster) {
    std::string note = "profile " + cluster.profile + ": ";
    if (const auto& m = cluster.groups[0].device.measured)
        note += m->on_gpu() ? "measured GPU kernel rates (" + m->gpu + "); " : "measured compute and memory rates; ";
    std::map<std::pair<std::string, int>, std::pair<int, int>> spans;   // (kind, hosts) -> (fewest, most) ranks
    if (cluster.measured_network)
        for (const topo::MeasuredTransfer& t : cluster.measured_network->transfers) {
            const auto key = std::make_pair(std::string(t.p2p ? "p2p" : to_string(t.kind)), t.nodes);
            const auto [it, fresh] = spans.try_emplace(key, t.ranks, t.ranks);
            if (!fresh) it->second = {std::min(it->second.first, t.ranks), std::max(it->second.second, t.ranks)};
        }
    std::string list;
    for (const auto& [key, ranks] : spans) {
        const auto& [kind, hosts] = key;
        list += (list.empty() ? "" : ", ") + kind;
        if (kind == "p2p") {
            list += hosts == 1 ? " within a host" : " between hosts";
            continue;
        }
        list += " over " + std::to_string(ranks.first) +
                (ranks.second > ranks.first ? "-" + std::to_string(ranks.second) : std::string()) + " ranks on " +
                std::to_string(hosts) + (hosts == 1 ? " host" : " hosts");
    }
    return note + (list.empty() ? "no measured transfers" : "measured " + list);
}

void check_simulable(const strategies::Layout& layout, const strategies::Plan& plan) {
    const double need = static_cast<double>(layout.estimated_ops) * kBytesPerOp;
    const std::int64_t have = available_memory();
    if (need <= static_cast<double>(have)) return;
    const bool could_fold = layout.dp > 1 && !layout.folded && !plan.fold;
    throw Error(ErrorKind::out_of_range,
                "the plan needs about " + figure(static_cast<double>(layout.estimated_ops)) + " ops, about " +
                    to_string_binary(Bytes::from_double(need)) + " to build and simulate, more than the " + to_string_binary(Bytes(have)) +
                    " of memory this machine has available: fewer micro-batches (a smaller --global-batch or a larger "
                    "--micro-batch), fewer devices (--nodes, --devices)" +
                    (could_fold ? ", or folded replicas (leave out --no-fold)" : "") +
                    "; a sweep screens plans faster with --network analytic",
                {"", "", "--global-batch"});
}

traces::StepInfo step_info(const Model& model, const topo::Cluster& cluster, const strategies::Plan& plan,
                           const strategies::Built& built, const std::string& network) {
    traces::StepInfo info;
    info.model = model.name();
    info.cluster = cluster.name;
    // With one replica the replicated and sharded flavours do nothing: the plan has no data
    // parallelism (a parameter server still has its servers). Context-parallel ranks reduce and
    // shard like replicas (zero1 and fsdp shard over dp · cp).
    const bool ps = plan.strategy == strategies::DataParallel::ps || plan.strategy == strategies::DataParallel::ps_async;
    info.strategy = built.layout.dp_cp() == 1 && !ps ? "none" : strategies::to_string(plan.strategy);
    info.sequence = model.is_transformer();
    info.async_updates = plan.strategy == strategies::DataParallel::ps_async;
    info.network = network;
    info.framework = strategies::describe(built.layout.framework);
    const strategies::Layout& l = built.layout;
    info.devices = l.devices;
    info.tp = l.tp;
    info.pp = l.pp;
    info.dp = l.dp;
    info.cp = l.cp;
    info.cp_comm = to_string(plan.cp_comm);
    info.microbatches = l.microbatches;
    info.micro_batch = l.micro_batch;
    info.global_batch = l.global_batch;
    info.seq = l.seq;
    if (plan.seq == 0) info.seq_note = model.seq_note();
    info.ep = l.ep;
    info.attention = to_string(l.attention);
    if (l.attention == Attention::flash) info.attention_backend = to_string(l.attention_backend);
    info.dtype = to_string(l.dtype);
    info.fp8 = to_string(l.fp8);
    info.fp8_bf16_first = l.fp8_bf16_first;
    info.fp8_bf16_last = l.fp8_bf16_last;
    info.fp8_param_gather = l.fp8_param_gather;
    info.cross_entropy_fusion = strategies::to_string(plan.cross_entropy_fusion);
    info.compression = strategies::to_string(plan.compress);
    info.finetune = strategies::to_string(plan.finetune);
    info.optimizer = strategies::to_string(plan.optimizer);
    info.model_flops = built.model_flops;
    info.folded = built.graph.folded();
    info.folded_tp = l.folded_tp;
    info.fold_width = l.fold_width;
    info.notes = speed_notes(model, cluster, built.layout, plan);
    // Megatron's tokenizer pads the vocabulary (--make-vocab-size-divisible-by); every framework
    // here pads it to a multiple of tp, so the vocab-parallel shards split evenly.
    if (model.is_transformer()) {
        const std::int64_t vocab = model.shape().vocab;
        info.padded_vocab = padded_vocab(vocab, l.tp, l.framework.vocab_multiple);
        if (info.padded_vocab != vocab)
            info.notes.push_back("vocabulary padded from " + std::to_string(vocab) + " to " + std::to_string(info.padded_vocab) + " rows, a multiple of " +
                                 (l.framework.vocab_multiple > 1 ? std::to_string(l.framework.vocab_multiple) + " × " : std::string()) +
                                 "tp " + std::to_string(l.tp) +
                                 (l.framework.vocab_multiple > 1 ? " (Megatron's --make-vocab-size-divisible-by)" : std::string(" (even shards)")));
    }
    if (plan.zero_quantized_weights || plan.zero_hpz_partition_size > 1 || plan.zero_quantized_gradients) {
        std::vector<std::string> parts;
        if (plan.zero_quantized_weights) parts.push_back("parameter gathers in int8 with fp32 scales (qwZ)");
        if (plan.zero_hpz_partition_size > 1)
            parts.push_back("a secondary partition over groups of " + std::to_string(plan.zero_hpz_partition_size) +
                            " ranks, gathered from after the step's first forward (hpZ)");
        if (plan.zero_quantized_gradients)
            parts.push_back(l.qgz_node_ranks > 0 ? "gradients reduced by int4 all-to-alls inside each node of " +
                                                       std::to_string(l.qgz_node_ranks) + ", then across nodes (qgZ" +
                                                       (plan.zero_loco ? ", with LoCo's int8 error feedback)" : ")")
                                                 : "qgZ asked for, but one node: gradients reduce-scattered, as DeepSpeed "
                                                   "does below two nodes");
        std::string z = "ZeRO++:";
        for (std::size_t i = 0; i < parts.size(); ++i) z += (i ? "; " : " ") + parts[i];
        info.notes.push_back(z);
    }
    if (const int n = plan.zero_mics_shard_size; n > 0) {
        const int groups = l.dp / n;
        info.notes.push_back(
            "MiCS: model states sharded over " + std::to_string(groups) + (groups == 1 ? " group" : " groups") + " of " +
            (n == 1 ? std::string("one rank") : std::to_string(n) + " consecutive ranks") +
            ", parameters gathered" +
            (l.mics_node_ranks > 0 ? " in two levels (across nodes among the ranks of one local index, then inside each node of " +
                                         std::to_string(l.mics_node_ranks) + ")"
                                   : std::string()) +
            " and gradients reduce-scattered inside each" +
            (groups > 1 ? "; each rank's gradient partition all-reduced with the same partition of the other " +
                              std::to_string(groups - 1) + (groups == 2 ? " group" : " groups") + " at the accumulation boundary"
                        : " (one group: plain ZeRO-3)"));
    }
    if (const auto twin = strategies::twin_flow_split(model, l, plan)) {
        auto count = [](std::int64_t n) {
            const double v = static_cast<double>(n);
            char t[48];
            if (v >= 1e9) std::snprintf(t, sizeof t, "%.3g billion", v / 1e9);
            else if (v >= 1e6) std::snprintf(t, sizeof t, "%.3g million", v / 1e6);
            else if (v >= 1e3) std::snprintf(t, sizeof t, "%.3g thousand", v / 1e3);
            else return std::to_string(n);
            return std::string(t);
        };
        const int on_device = twin->subgroups - twin->on_cpu;
        std::string note = "Twin-Flow: " + std::to_string(twin->on_cpu) + " of " + std::to_string(twin->subgroups) +
                           " optimizer sub-groups stepped on the CPU (" + count(twin->cpu_params) +
                           " parameters a rank), " + std::to_string(on_device) + " on the device (" +
                           count(twin->params - twin->cpu_params) + ")";
        // Nothing moved, or only the biases and norms stayed: the ratio met whole sub-groups.
        if (twin->on_cpu == 0 || twin->on_cpu >= twin->weight_subgroups)
            note += "; DeepSpeed cuts each parameter group (the weights, then the biases and norms) into sub-groups of "
                    "zero_optimization.sub_group_size, " + count(l.framework.sub_group_size) +
                    " elements, and rounds ratio × sub-groups down: a smaller sub_group_size in --deepspeed-config splits finer";
        info.notes.push_back(note);
    }
    if (const Time d = built.layout.framework.dispatch_per_kernel; d > Time::zero())
        info.notes.push_back("host dispatch " + to_string(d) + " per GPU kernel before the driver's launch (" +
                             (plan.framework_overrides.dispatch_per_kernel ? std::string("--dispatch-overhead")
                                                                           : info.framework + "'s, calibrated on vTrain's host") +
                             ")");
    if (model.is_transformer() && l.attention == Attention::eager && dtype_bytes(l.dtype) == 2) {
        // Megatron's fused softmax takes b·a/t score matrices only in multiples of its block.
        const std::int64_t per_sample = model.shape().heads / l.tp;
        const int e = dtype_bytes(l.dtype);
        if (!megatron_fused_softmax(l.micro_batch * per_sample, l.seq, l.seq, e, true)) {
            std::string why = "unfused softmax: Megatron's fused kernel does not take " +
                              std::to_string(l.micro_batch * per_sample) + " score matrices of " + std::to_string(l.seq) +
                              " × " + std::to_string(l.seq) + " " + to_string(l.dtype) + " per rank, so PyTorch's cast, " +
                              (l.framework.qk_layer_scaling ? "layer-number scale, " : "") +
                              "mask, fp32 softmax and cast back run instead of one kernel";
            for (int b = l.micro_batch + 1; b <= 8 * l.micro_batch; ++b)
                if (megatron_fused_softmax(b * per_sample, l.seq, l.seq, e, true)) {
                    why += " (--micro-batch " + std::to_string(b) + " would take it)";
                    break;
                }
            info.notes.push_back(why);
        }
    }
    for (int r = 0; r < l.devices; ++r) info.peak.push_back(cluster.device_kind(r).peak_for(l.dtype));
    return info;
}

traces::Summary summarize_plan(const strategies::Built& built, const Timeline& timeline, const traces::StepInfo& info,
                               const strategies::Plan& plan) {
    traces::Summary summary = traces::summarize(built.graph, timeline, info);
    if (plan.strategy == strategies::DataParallel::ps_async) {
        summary.mean_staleness = strategies::mean_staleness(built.graph, timeline, plan.hogwild);
        summary.update_rate = strategies::update_rate(built.graph, timeline);
    }
    return summary;
}

Simulation simulate_plan(const Model& model, const topo::Cluster& cluster, const strategies::Plan& given,
                         const sim::SimOptions& options, const topo::Topology* topology) {
    strategies::Plan plan = with_pipeline_split(model, cluster, given);
    // The analytic network shares no links, so folding is exact wherever ranks run one program.
    plan.fold_unshared = options.network == sim::NetworkMode::analytic;
    check_simulable(strategies::resolve(model, cluster, plan), plan);
    strategies::Built built = strategies::build(model, cluster, plan);
    Timeline tl = topology ? sim::simulate(built.graph, cluster, *topology, options)
                           : sim::simulate(built.graph, cluster, options);
    const traces::StepInfo info = step_info(model, cluster, plan, built, sim::to_string(options.network));
    traces::Summary summary = summarize_plan(built, tl, info, plan);
    return {std::move(built), std::move(tl), std::move(summary)};
}

}  // namespace smol::tools

#include "strategies/plan.hpp"

#include <sstream>

#include "core/error.hpp"
#include "strategies/data_parallel.hpp"

namespace smol::strategies {

namespace {
template <class E, std::size_t N>
E parse_name(const std::string& text, const E (&values)[N], const char* flag) {
    std::vector<std::string> names;
    for (E v : values) {
        if (text == to_string(v)) return v;
        names.emplace_back(to_string(v));
    }
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    const std::string near = nearest_name(text, names);
    fail_input("one of " + list, "'" + text + "'" + (near.empty() ? "" : " (did you mean '" + near + "'?)"),
               {"", "", flag});
}
}  // namespace

const char* to_string(DataParallel s) {
    switch (s) {
        case DataParallel::ps: return "ps";
        case DataParallel::ps_async: return "ps-async";
        case DataParallel::ring: return "ring";
        case DataParallel::ddp: return "ddp";
        case DataParallel::zero1: return "zero1";
        case DataParallel::zero2: return "zero2";
        case DataParallel::zero3: return "zero3";
        case DataParallel::fsdp: return "fsdp";
    }
    return "?";
}

DataParallel parse_data_parallel(const std::string& text) {
    // Only the strategies that are built are accepted.
    static const DataParallel implemented[] = {DataParallel::ddp};
    return parse_name(text, implemented, "--strategy");
}

const char* to_string(Schedule s) {
    switch (s) {
        case Schedule::gpipe: return "gpipe";
        case Schedule::one_f_one_b: return "1f1b";
        case Schedule::interleaved: return "interleaved";
        case Schedule::zb_h1: return "zb-h1";
    }
    return "?";
}

Schedule parse_schedule(const std::string& text) {
    static const Schedule all[] = {Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved, Schedule::zb_h1};
    return parse_name(text, all, "--schedule");
}

const char* to_string(Offload o) {
    switch (o) {
        case Offload::none: return "none";
        case Offload::cpu: return "cpu";
        case Offload::nvme: return "nvme";
    }
    return "?";
}

Offload parse_offload(const std::string& text) {
    static const Offload all[] = {Offload::none};
    return parse_name(text, all, "--offload");
}

Layout resolve(const Model& model, const topo::Cluster& cluster, const Plan& plan) {
    Layout l;
    l.devices = cluster.num_devices();
    if (plan.tp < 1) fail_input("--tp must be at least 1, found " + std::to_string(plan.tp), {"", "", "--tp"});
    if (plan.pp < 1) fail_input("--pp must be at least 1, found " + std::to_string(plan.pp), {"", "", "--pp"});
    if (plan.dp < 0) fail_input("--dp must be at least 1, found " + std::to_string(plan.dp), {"", "", "--dp"});
    if (plan.tp > 1) fail_input("tensor parallelism (--tp > 1) is not available yet; use --tp 1", {"", "", "--tp"});
    if (plan.pp > 1) fail_input("pipeline parallelism (--pp > 1) is not available yet; use --pp 1", {"", "", "--pp"});
    if (plan.micro_batch < 1)
        fail_input("--micro-batch must be at least 1, found " + std::to_string(plan.micro_batch), {"", "", "--micro-batch"});
    if (!(plan.bucket_mb > 0))
        fail_input("--bucket-mb must be positive, found " + std::to_string(plan.bucket_mb), {"", "", "--bucket-mb"});
    if (!(plan.first_bucket_mb > 0))
        fail_input("--first-bucket-mb must be positive, found " + std::to_string(plan.first_bucket_mb),
                   {"", "", "--first-bucket-mb"});
    l.tp = plan.tp;
    l.pp = plan.pp;
    if (l.devices % (l.tp * l.pp) != 0)
        fail_input("tp × pp = " + std::to_string(l.tp * l.pp) + " does not divide the " + std::to_string(l.devices) +
                       " devices of " + cluster.name,
                   {"", "", "--tp"});
    l.dp = plan.dp > 0 ? plan.dp : l.devices / (l.tp * l.pp);
    if (l.tp * l.pp * l.dp != l.devices)
        fail_input("tp × pp × dp = " + std::to_string(l.tp) + " × " + std::to_string(l.pp) + " × " + std::to_string(l.dp) +
                       " = " + std::to_string(l.tp * l.pp * l.dp) + ", but the cluster has " +
                       std::to_string(l.devices) + " devices (use --devices to take fewer)",
                   {"", "", "--dp"});
    l.micro_batch = plan.micro_batch;
    l.global_batch = plan.global_batch > 0 ? plan.global_batch : static_cast<std::int64_t>(l.dp) * plan.micro_batch;
    if (l.global_batch % l.dp != 0)
        fail_input("the global batch " + std::to_string(l.global_batch) + " does not split over dp = " +
                       std::to_string(l.dp) + " replicas",
                   {"", "", "--global-batch"});
    const std::int64_t per_replica = l.global_batch / l.dp;
    if (per_replica % l.micro_batch != 0)
        fail_input("the micro-batch " + std::to_string(l.micro_batch) + " does not divide the per-replica batch " +
                       std::to_string(per_replica) + " (global batch " + std::to_string(l.global_batch) + " / dp " +
                       std::to_string(l.dp) + ")",
                   {"", "", "--micro-batch"});
    l.microbatches = static_cast<int>(per_replica / l.micro_batch);
    l.seq = plan.seq > 0 ? plan.seq : model.default_seq();
    if (model.is_transformer() && l.seq > model.shape().max_seq)
        fail_input("--seq " + std::to_string(l.seq) + " exceeds the " + std::to_string(model.shape().max_seq) +
                       " positions of " + model.name(),
                   {"", "", "--seq"});
    // One dtype for the plan: the user's, or the first device's default (bf16 on GPUs, fp32 on CPUs).
    l.dtype = plan.dtype ? *plan.dtype : cluster.device_kind(0).default_dtype();
    for (const auto& g : cluster.groups)
        if (!g.device.supports(l.dtype))
            fail_input(std::string("the ") + g.device.name + " devices of group '" + g.name + "' have no " +
                           to_string(l.dtype) + " peak; choose another --dtype",
                       {"", "", "--dtype"});
    return l;
}

Built build(const Model& model, const topo::Cluster& cluster, const Plan& plan) {
    const Layout layout = resolve(model, cluster, plan);
    Built out{build_data_parallel(model, layout, plan), layout,
              model.flops_per_iteration(layout.global_batch, layout.seq, plan.recompute)};
    out.graph.finalize();
    return out;
}

}  // namespace smol::strategies

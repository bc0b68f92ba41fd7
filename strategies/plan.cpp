#include "strategies/plan.hpp"

#include <sstream>

#include "core/error.hpp"
#include "strategies/data_parallel.hpp"
#include "strategies/model_parallel.hpp"
#include "strategies/moe.hpp"

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
    fail_input("one of " + list, "'" + text + "'" + did_you_mean(text, names), {"", "", flag});
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
    static const DataParallel implemented[] = {DataParallel::ps,    DataParallel::ps_async, DataParallel::ring,
                                               DataParallel::ddp,   DataParallel::zero1,    DataParallel::zero2,
                                               DataParallel::zero3, DataParallel::fsdp};
    return parse_name(text, implemented, "--strategy");
}

const char* to_string(PsPlacement p) { return p == PsPlacement::dedicated ? "dedicated" : "colocated"; }

PsPlacement parse_ps_placement(const std::string& text) {
    static const PsPlacement all[] = {PsPlacement::dedicated, PsPlacement::colocated};
    return parse_name(text, all, "--ps-placement");
}

const char* to_string(FsdpSharding f) {
    switch (f) {
        case FsdpSharding::full: return "full";
        case FsdpSharding::grad_op: return "grad-op";
        case FsdpSharding::hybrid: return "hybrid";
        case FsdpSharding::none: return "none";
    }
    return "?";
}

FsdpSharding parse_fsdp_sharding(const std::string& text) {
    static const FsdpSharding all[] = {FsdpSharding::full, FsdpSharding::grad_op, FsdpSharding::hybrid,
                                       FsdpSharding::none};
    return parse_name(text, all, "--fsdp-sharding");
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

const char* to_string(Partition p) { return p == Partition::equal ? "equal" : "balanced"; }

Partition parse_partition(const std::string& text) {
    static const Partition all[] = {Partition::equal, Partition::balanced};
    return parse_name(text, all, "--partition");
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
    if (plan.micro_batch < 1)
        fail_input("--micro-batch must be at least 1, found " + std::to_string(plan.micro_batch), {"", "", "--micro-batch"});
    if (!(plan.bucket_mb > 0))
        fail_input("--bucket-mb must be positive, found " + std::to_string(plan.bucket_mb), {"", "", "--bucket-mb"});
    if (!(plan.first_bucket_mb > 0))
        fail_input("--first-bucket-mb must be positive, found " + std::to_string(plan.first_bucket_mb),
                   {"", "", "--first-bucket-mb"});
    l.tp = plan.tp;
    l.pp = plan.pp;
    // Parameter servers (ps, ps-async): with --ps-placement dedicated the S servers are the last S
    // devices of the cluster and the workers the first devices − S (pi5-1gbe × 5 with one server:
    // dp = 4); colocated servers live on the first S workers, so S ≤ dp.
    const bool ps = plan.strategy == DataParallel::ps || plan.strategy == DataParallel::ps_async;
    if (ps) {
        if (plan.ps_servers < 1)
            fail_input("--ps-servers must be at least 1, found " + std::to_string(plan.ps_servers),
                       {"", "", "--ps-servers"});
        if (plan.ps_placement == PsPlacement::dedicated) {
            if (plan.ps_servers >= l.devices)
                fail_input(std::to_string(plan.ps_servers) + " dedicated parameter servers leave no worker among the " +
                               std::to_string(l.devices) + " devices of " + cluster.name +
                               " (dp = devices − servers); use fewer --ps-servers or --ps-placement colocated",
                           {"", "", "--ps-servers"});
            l.servers = plan.ps_servers;
        }
        if (plan.staleness < 0)
            fail_input("--staleness must be at least 0, found " + std::to_string(plan.staleness), {"", "", "--staleness"});
    }
    if (plan.strategy == DataParallel::ring) {
        if (!(plan.fusion_mb > 0))
            fail_input("--fusion-mb must be positive, found " + std::to_string(plan.fusion_mb), {"", "", "--fusion-mb"});
        if (!(plan.cycle_ms >= 0))
            fail_input("--cycle-ms must be at least 0, found " + std::to_string(plan.cycle_ms), {"", "", "--cycle-ms"});
    }
    const int workers = l.devices - l.servers;
    if (workers % (l.tp * l.pp) != 0)
        fail_input("tp × pp = " + std::to_string(l.tp * l.pp) + " does not divide the " + std::to_string(l.devices) +
                       " devices of " + cluster.name,
                   {"", "", "--tp"});
    l.dp = plan.dp > 0 ? plan.dp : workers / (l.tp * l.pp);
    if (l.tp * l.pp * l.dp != workers)
        fail_input("tp × pp × dp = " + std::to_string(l.tp) + " × " + std::to_string(l.pp) + " × " + std::to_string(l.dp) +
                       " = " + std::to_string(l.tp * l.pp * l.dp) + ", but the cluster has " +
                       std::to_string(workers) + " devices" +
                       (l.servers > 0 ? " for workers (" + std::to_string(l.devices) + " less " +
                                            std::to_string(l.servers) + " parameter servers)"
                                      : std::string()) +
                       " (use --devices to take fewer)",
                   {"", "", "--dp"});
    if (ps && plan.ps_placement == PsPlacement::colocated && plan.ps_servers > l.dp)
        fail_input(std::to_string(plan.ps_servers) + " colocated parameter servers need as many workers, but dp = " +
                       std::to_string(l.dp),
                   {"", "", "--ps-servers"});
    if (plan.strategy == DataParallel::fsdp && plan.fsdp_sharding == FsdpSharding::hybrid) {
        // Hybrid sharding: shard within a group of consecutive ranks (a node by default), replicate
        // across groups.
        if (plan.fsdp_group < 0)
            fail_input("--fsdp-group must be at least 1, found " + std::to_string(plan.fsdp_group), {"", "", "--fsdp-group"});
        l.shard_group = plan.fsdp_group > 0 ? plan.fsdp_group : cluster.groups.front().devices_per_node;
        if (l.dp % l.shard_group != 0)
            fail_input("the hybrid shard group of " + std::to_string(l.shard_group) + " devices does not divide the " +
                           std::to_string(l.dp) + " data-parallel devices; choose --fsdp-group dividing " +
                           std::to_string(l.dp),
                       {"", "", "--fsdp-group"});
    }
    l.micro_batch = plan.micro_batch;
    // ps-async runs each worker's loop of updates: by default 4 iterations per worker (each
    // micro-batch is one update), so the staleness bound and the server's queue show.
    const std::int64_t default_iterations = plan.strategy == DataParallel::ps_async ? 4 : 1;
    if (plan.gradient_accumulation < 0)
        fail_input("gradient_accumulation_steps must be at least 1, found " + std::to_string(plan.gradient_accumulation),
                   {"", "", "--deepspeed-config"});
    const std::int64_t accumulated = static_cast<std::int64_t>(l.dp) * plan.micro_batch * plan.gradient_accumulation;
    if (plan.gradient_accumulation > 0 && plan.global_batch > 0 && plan.global_batch != accumulated)
        fail_input("the global batch " + std::to_string(plan.global_batch) + " is not dp " + std::to_string(l.dp) +
                       " × micro-batch " + std::to_string(plan.micro_batch) + " × gradient_accumulation_steps " +
                       std::to_string(plan.gradient_accumulation) + " = " + std::to_string(accumulated),
                   {"", "", "--deepspeed-config"});
    l.global_batch = plan.global_batch > 0        ? plan.global_batch
                     : plan.gradient_accumulation ? accumulated
                                                  : static_cast<std::int64_t>(l.dp) * plan.micro_batch * default_iterations;
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
    // The framework: the user's, or the plan's usual one; then the flags that change it.
    const bool zero = plan.strategy == DataParallel::zero1 || plan.strategy == DataParallel::zero2 ||
                      plan.strategy == DataParallel::zero3;
    const bool pytorch_only = plan.strategy == DataParallel::ring || plan.strategy == DataParallel::ps ||
                              plan.strategy == DataParallel::ps_async || plan.strategy == DataParallel::fsdp;
    l.framework = !plan.framework.empty() ? parse_framework(plan.framework)
                  : pytorch_only         ? parse_framework("pytorch")
                                         : default_framework(l.tp > 1 || l.pp > 1, zero);
    {
        // Which frameworks run which strategy: Horovod's ring and the parameter servers are their
        // own frameworks (modelled as such); FSDP is PyTorch's; ZeRO is DeepSpeed's (zero1 also
        // Megatron's distributed optimizer).
        const FrameworkName f = l.framework.name;
        bool ok = true;
        switch (plan.strategy) {
            case DataParallel::ring:
            case DataParallel::ps:
            case DataParallel::ps_async:
            case DataParallel::fsdp: ok = f == FrameworkName::pytorch; break;
            case DataParallel::zero1: ok = f != FrameworkName::pytorch; break;
            case DataParallel::zero2:
            case DataParallel::zero3: ok = f == FrameworkName::deepspeed || f == FrameworkName::megatron_deepspeed; break;
            case DataParallel::ddp: break;
        }
        if (!ok)
            fail_input(std::string("--strategy ") + to_string(plan.strategy) + " does not run on " + describe(l.framework) +
                           (plan.strategy == DataParallel::zero1 ? "; zero1 runs on deepspeed, megatron (its distributed "
                                                                   "optimizer) or megatron-deepspeed"
                            : zero ? "; ZeRO stages 2 and 3 are DeepSpeed's (deepspeed, megatron-deepspeed)"
                                   : "; leave --framework out (it is pytorch)"),
                       {"", "", "--framework"});
    }
    {
        const auto& o = plan.framework_overrides;
        if (o.overlap_comm) l.framework.overlap_comm = *o.overlap_comm;
        if (o.reduce_bucket) l.framework.reduce_bucket = *o.reduce_bucket, l.framework.after_backward_bucket = *o.reduce_bucket;
        if (o.prefetch_bucket) l.framework.prefetch_bucket = *o.prefetch_bucket;
        if (o.max_live_parameters) l.framework.max_live_parameters = *o.max_live_parameters;
        if (o.max_reuse_distance) l.framework.max_reuse_distance = *o.max_reuse_distance;
        if (o.param_persistence_threshold) l.framework.param_persistence_threshold = *o.param_persistence_threshold;
        if (l.framework.overlap_comm && *l.framework.overlap_comm) l.framework.grad_reduce = GradReduce::overlapped;
    }
    if (plan.overlap_grad_reduce) {
        if (l.framework.name == FrameworkName::pytorch)
            fail_input("--overlap-grad-reduce has no effect with PyTorch, whose DDP always overlaps bucketed gradient "
                       "all-reduces with backward",
                       {"", "", "--overlap-grad-reduce"});
        if (!l.framework.can_overlap_grad_reduce)
            fail_input(describe(l.framework) + " has no switch to overlap gradient reduction with backward "
                       "(megatron-core, megatron@0.1 or later, has --overlap-grad-reduce)",
                       {"", "", "--overlap-grad-reduce"});
        l.framework.grad_reduce = GradReduce::overlapped;
        if (l.framework.name == FrameworkName::deepspeed || l.framework.name == FrameworkName::megatron_deepspeed)
            l.framework.overlap_comm = true;
    }
    if (plan.overlap_p2p_comm) {
        if (l.pp < 2) fail_input("--overlap-p2p-comm needs pipeline parallelism (--pp 2 or more)", {"", "", "--overlap-p2p-comm"});
        if (l.framework.name != FrameworkName::megatron)
            fail_input("--overlap-p2p-comm is Megatron's (--framework megatron); " + describe(l.framework) +
                           " does not have it",
                       {"", "", "--overlap-p2p-comm"});
        l.framework.overlap_p2p = true;
    }
    l.ep = plan.ep;
    check_expert_parallel(model, plan, l);
    // Attention: FlashAttention-2 where every device runs it (Ampere and later: flash-attn's README,
    // "FlashAttention-2 currently supports Ampere, Ada, or Hopper GPUs"), eager elsewhere.
    {
        const topo::NodeGroup* slowest = nullptr;
        for (const auto& g : cluster.groups)
            if (!slowest || g.device.is_cpu || g.device.compute_capability < slowest->device.compute_capability) slowest = &g;
        const bool flash_runs = slowest && !slowest->device.is_cpu && slowest->device.compute_capability >= 8.0;
        l.attention = plan.attention ? *plan.attention : flash_runs ? Attention::flash : Attention::eager;
        if (l.attention == Attention::flash && !flash_runs)
            fail_input("--attention flash needs GPUs of compute capability 8.0 or later (FlashAttention-2 runs on Ampere, "
                       "Ada and Hopper); the " + slowest->device.name + " devices of group '" + slowest->name + "' " +
                           (slowest->device.is_cpu ? std::string("are CPUs")
                                                   : "have compute capability " + std::to_string(slowest->device.compute_capability).substr(0, 3)),
                       {"", "", "--attention"});
    }
    if (l.tp > 1 || l.pp > 1 || l.ep > 1) check_model_parallel(model, plan, l);
    // Folding is exact where every node holds ranks of one data-parallel replica: then a mirror
    // replica's intra-node links carry only its own traffic, the same as its representative's.
    const int per_node = cluster.groups.front().devices_per_node;
    // Expert parallelism exchanges tokens between replicas: they are no longer mirrors.
    l.folded = plan.fold && l.dp > 1 && (l.tp > 1 || l.pp > 1) && cluster.groups.size() == 1 && l.servers == 0 &&
               l.tp % per_node == 0 && l.ep == 1;
    return l;
}

Built build(const Model& model, const topo::Cluster& cluster, const Plan& plan) {
    const Layout layout = resolve(model, cluster, plan);
    // Expert parallelism needs the model-parallel builder's per-layer passes (strategies/moe.hpp).
    Built out{layout.tp > 1 || layout.pp > 1 || layout.ep > 1 ? build_model_parallel(model, layout, plan)
                                             : build_data_parallel(model, cluster, layout, plan),
              layout,
              model.flops_per_iteration(layout.global_batch, layout.seq, plan.recompute)};
    out.graph.finalize();
    return out;
}

}  // namespace smol::strategies

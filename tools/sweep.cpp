#include "tools/sweep.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <map>
#include <thread>

#include "core/error.hpp"
#include "core/json.hpp"
#include "strategies/data_parallel.hpp"
#include "strategies/finetune.hpp"
#include "strategies/hybrid_cnn.hpp"
#include "strategies/optimizer.hpp"
#include "strategies/zero.hpp"
#include "tools/fit_advice.hpp"
#include "tools/pipeline_split.hpp"
#include "tools/simulation.hpp"
#include "topologies/topology.hpp"

namespace smol::tools {

using strategies::DataParallel;
using strategies::Layout;
using strategies::Plan;
using strategies::Schedule;

const char* to_string(Objective o) {
    switch (o) {
        case Objective::time: return "time";
        case Objective::tokens: return "tokens";
        case Objective::memory: return "memory";
    }
    return "?";
}

Objective parse_objective(const std::string& text) {
    for (Objective o : {Objective::time, Objective::tokens, Objective::memory})
        if (text == to_string(o)) return o;
    fail_input("time, tokens or memory", "'" + text + "'" + did_you_mean(text, {"time", "tokens", "memory"}),
               {"", "", "--objective"});
}

const char* to_string(PlanStatus s) {
    switch (s) {
        case PlanStatus::pending: return "pending";
        case PlanStatus::pruned: return "pruned";
        case PlanStatus::ranked: return "ranked";
        case PlanStatus::out_of_memory: return "out-of-memory";
        case PlanStatus::over_limit: return "over-limit";
        case PlanStatus::failed: return "failed";
    }
    return "?";
}

std::size_t SweepResult::count(PlanStatus s) const {
    return static_cast<std::size_t>(
        std::count_if(plans.begin(), plans.end(), [s](const PlanResult& p) { return p.status == s; }));
}

std::map<std::string, std::pair<std::size_t, std::string>> SweepResult::pruned_by_reason() const {
    std::map<std::string, std::pair<std::size_t, std::string>> out;
    for (const PlanResult& p : plans) {
        if (p.status != PlanStatus::pruned) continue;
        auto& [n, example] = out[p.reason_key];
        if (n++ == 0) example = p.reason;
    }
    return out;
}

std::vector<DeviceOrder> device_orders(const topo::Cluster& cluster) {
    std::vector<DeviceOrder> out{{"as given", cluster}};
    bool mixed = false;
    for (const topo::NodeGroup& g : cluster.groups) mixed |= g.device.name != cluster.groups.front().device.name;
    if (!mixed) return out;
    // Stable sorts by device memory: ties keep the given order.
    for (const char* name : {"memory first", "memory last"}) {
        topo::Cluster c = cluster;
        const bool first = std::string(name) == "memory first";
        std::stable_sort(c.groups.begin(), c.groups.end(), [first](const topo::NodeGroup& a, const topo::NodeGroup& b) {
            return first ? a.device.memory > b.device.memory : a.device.memory < b.device.memory;
        });
        const bool seen = std::any_of(out.begin(), out.end(), [&](const DeviceOrder& o) {
            return std::equal(o.cluster.groups.begin(), o.cluster.groups.end(), c.groups.begin(), c.groups.end(),
                              [](const topo::NodeGroup& a, const topo::NodeGroup& b) { return a.name == b.name; });
        });
        if (!seen) out.push_back({name, std::move(c)});
    }
    return out;
}

std::string describe_plan(const PlanResult& p) {
    const Plan& x = p.plan;
    std::string s = std::string(strategies::to_string(x.strategy));
    if (x.strategy == DataParallel::fsdp && x.fsdp_sharding != strategies::FsdpSharding::full)
        s += std::string(" ") + strategies::to_string(x.fsdp_sharding);
    s += " tp " + std::to_string(x.tp) + " pp " + std::to_string(x.pp);
    if (x.pp > 1) s += std::string(" ") + strategies::to_string(x.schedule);
    if (x.schedule == Schedule::interleaved) s += " v " + std::to_string(x.virtual_stages);
    if (x.cp > 1) s += " cp " + std::to_string(x.cp) + (x.cp_comm == CpComm::p2p ? "" : std::string(" ") + to_string(x.cp_comm));
    if (x.ep > 1) s += " ep " + std::to_string(x.ep);
    s += " mb " + std::to_string(x.micro_batch) + " recompute " + to_string(x.recompute);
    if (x.recompute == Recompute::selective && !(x.recompute_modules == RecomputeModules{}))
        s += " --recompute-modules " + to_string(x.recompute_modules);
    if (x.sequence_parallel) s += " sp";
    if (x.partition) s += std::string(" partition ") + strategies::to_string(*x.partition);
    if (const std::string o = offload_flags(x); !o.empty()) s += " " + o;
    if (const std::string z = zeropp_flags(x); !z.empty()) s += " " + z;
    if (x.zero_mics_shard_size > 0) s += " --mics-shard-size " + std::to_string(x.zero_mics_shard_size);
    return s;
}

std::string zeropp_flags(const Plan& x) {
    std::string s;
    const auto add = [&](const std::string& flag) { s += (s.empty() ? "" : " ") + flag; };
    if (x.zero_quantized_weights) add("--zero-quantized-weights");
    if (x.zero_hpz_partition_size > 1) add("--zero-hpz-partition-size " + std::to_string(x.zero_hpz_partition_size));
    if (x.zero_quantized_gradients) add("--zero-quantized-gradients");
    return s;
}

std::string offload_flags(const Plan& x) {
    std::string s;
    const auto add = [&](const char* flag, strategies::Offload o) {
        if (o != strategies::Offload::none) s += std::string(s.empty() ? "" : " ") + flag + " " + strategies::to_string(o);
    };
    add("--offload", x.offload);
    add("--offload-params", x.offload_params);
    add("--offload-optimizer", x.offload_optimizer);
    if (x.optimizer_offload_fraction) s += std::string(s.empty() ? "" : " ") + "--optimizer-offload-fraction " + number_text(*x.optimizer_offload_fraction);
    return s;
}

namespace {

// ---- the plan dimensions ----------------------------------------------------------------------

/// What a dimension may look at: the model, the cluster and the sweep's options, and the layout
/// strategies::resolve gave the partial plan so far.
struct Context {
    const Model& model;
    const topo::Cluster& cluster;
    const SweepOptions& options;
};

using Expand = std::vector<Plan> (*)(const Context&, const Plan&, const Layout&);

/// `plan` once per value of `member`.
template <class T>
std::vector<Plan> vary(const Plan& plan, T Plan::*member, const std::vector<T>& values) {
    std::vector<Plan> out;
    for (const T& v : values) {
        Plan p = plan;
        p.*member = v;
        out.push_back(std::move(p));
    }
    return out;
}

/// 1, 2, 4, … up to `most`, or the user's list.
std::vector<int> powers_of_two(int most, const std::vector<int>& chosen) {
    if (!chosen.empty()) return chosen;
    std::vector<int> out;
    for (int v = 1; v <= most; v *= 2) out.push_back(v);
    return out;
}

/// The dimensions of strategies::Plan, in expansion order. A dimension that does not apply to a
/// partial plan (a schedule without a pipeline) returns the plan unchanged. Adding a dimension
/// (offload, attention kernels) is one row.
struct Dimension {
    const char* name;
    Expand expand;
    /// Resolve the partial plans after this dimension. Not after strategy, tp and cp: their partial
    /// plans have tp = 1 or pp = 1, whose dp may not divide the global batch when a larger tp · pp
    /// would. From pp on, the later dimensions' defaults (micro-batch 1, 1F1B, no virtual stages,
    /// no recompute, no sp) never make a plan impossible, so an error is the choices' own.
    bool resolve = true;
};
const Dimension kDimensions[] = {
    // Synchronous data-parallel flavours; ps-async's "step" is K asynchronous updates per worker
    // and is not comparable (pass --strategies to sweep it anyway).
    {"strategy",
     [](const Context& c, const Plan& p, const Layout&) {
         const std::vector<DataParallel> all{DataParallel::ddp,   DataParallel::ring,  DataParallel::zero1,
                                             DataParallel::zero2, DataParallel::zero3, DataParallel::fsdp};
         return vary(p, &Plan::strategy, c.options.space.strategies.empty() ? all : c.options.space.strategies);
     },
     false},
    // The frameworks to try each strategy on (--framework deepspeed,megatron); without: each
    // plan's default (Megatron with tp or pp, DeepSpeed for ZeRO, PyTorch otherwise).
    {"framework",
     [](const Context& c, const Plan& p, const Layout&) {
         if (c.options.frameworks.empty()) return std::vector<Plan>{p};
         return vary(p, &Plan::framework, c.options.frameworks);
     },
     false},
    {"tp", [](const Context& c, const Plan& p, const Layout&) {
         return vary(p, &Plan::tp, powers_of_two(c.cluster.num_devices(), c.options.space.tp));
     },
     false},
    // Context parallelism only where the user lists it (--cp 1,2,4): it pays for long sequences,
    // and most models' default lengths are not.
    {"cp", [](const Context& c, const Plan& p, const Layout&) {
         return vary(p, &Plan::cp, c.options.space.cp.empty() ? std::vector<int>{1} : c.options.space.cp);
     },
     false},
    // How a context-parallel group exchanges keys and values: TE's ring unless --cp-comm lists more.
    {"cp_comm", [](const Context& c, const Plan& p, const Layout&) {
         if (p.cp == 1 || c.options.space.cp_comm.empty()) return std::vector<Plan>{p};
         return vary(p, &Plan::cp_comm, c.options.space.cp_comm);
     },
     false},
    {"pp", [](const Context& c, const Plan& p, const Layout&) {
         return vary(p, &Plan::pp, powers_of_two(c.cluster.num_devices() / (p.tp * p.cp), c.options.space.pp));
     }},
    // FSDP's sharding: full, and hybrid (HSDP, a node's replicas a shard group) where the replicas
    // span more than one node, unless --fsdp-sharding lists them.
    {"fsdp_sharding", [](const Context& c, const Plan& p, const Layout& l) {
         if (p.strategy != DataParallel::fsdp) return std::vector<Plan>{p};
         if (!c.options.space.fsdp_sharding.empty()) return vary(p, &Plan::fsdp_sharding, c.options.space.fsdp_sharding);
         const int per_node = c.cluster.groups.front().devices_per_node / (l.tp * l.cp);   // a shard group's replicas
         if (per_node < 1 || l.dp <= per_node) return std::vector<Plan>{p};
         return vary(p, &Plan::fsdp_sharding, {strategies::FsdpSharding::full, strategies::FsdpSharding::hybrid});
     }},
    // Expert parallelism over the data- and context-parallel ranks (strategies/moe.hpp): for a
    // mixture of experts every power of two dividing dp · cp and the experts unless --ep lists
    // them; 1 otherwise.
    {"ep", [](const Context& c, const Plan& p, const Layout& l) {
         const bool moe = c.model.is_transformer() && c.model.shape().is_moe();
         if (!c.options.space.ep.empty()) return vary(p, &Plan::ep, c.options.space.ep);
         if (!moe) return std::vector<Plan>{p};
         std::vector<int> eps;
         for (int e = 1; e <= l.dp_cp() && c.model.shape().moe.experts % e == 0; e *= 2)
             if (l.dp_cp() % e == 0) eps.push_back(e);
         return vary(p, &Plan::ep, eps);
     }},
    // Gradient compression only where the user lists it (--compress none,powersgd:4,…): a
    // trade of accuracy for bandwidth that a plan search must not make on its own.
    {"compress", [](const Context& c, const Plan& p, const Layout&) {
         if (c.options.space.compress.empty()) return std::vector<Plan>{p};
         return vary(p, &Plan::compress, c.options.space.compress);
     }},
    // ZeRO++ only where the user asks (--zeropp): zero3 over several GPU nodes of one size, on a
    // DeepSpeed that has it, as run by DeepSpeed's recommended layout — hpZ over a node's GPUs,
    // alone and with qwZ and qgZ.
    {"zeropp", [](const Context& c, const Plan& p, const Layout& l) {
         const int per_node = c.cluster.groups.front().devices_per_node;
         const bool gpu_nodes = std::all_of(c.cluster.groups.begin(), c.cluster.groups.end(), [&](const topo::NodeGroup& g) {
             return !g.device.is_cpu && g.devices_per_node == per_node;
         });
         if (!c.options.space.zeropp || p.strategy != DataParallel::zero3 || l.tp > 1 || !l.framework.zeropp || !gpu_nodes ||
             l.dp <= per_node || l.dp % per_node != 0)
             return std::vector<Plan>{p};
         Plan hpz = p, all = p;
         hpz.zero_hpz_partition_size = all.zero_hpz_partition_size = per_node;
         all.zero_quantized_weights = all.zero_quantized_gradients = true;
         return std::vector<Plan>{p, hpz, all};
     }},
    // MiCS only where the user asks (--mics): zero3 over several GPU nodes of one size, on a
    // DeepSpeed that has it, sharded over a node's GPUs (not with ZeRO++'s twins: refused).
    {"mics", [](const Context& c, const Plan& p, const Layout& l) {
         const int per_node = c.cluster.groups.front().devices_per_node;
         const bool gpu_nodes = std::all_of(c.cluster.groups.begin(), c.cluster.groups.end(), [&](const topo::NodeGroup& g) {
             return !g.device.is_cpu && g.devices_per_node == per_node;
         });
         if (!c.options.space.mics || p.strategy != DataParallel::zero3 || l.tp > 1 || !l.framework.mics || !gpu_nodes ||
             l.dp <= per_node || l.dp % per_node != 0 || !zeropp_flags(p).empty())
             return std::vector<Plan>{p};
         Plan m = p;
         m.zero_mics_shard_size = per_node;
         return std::vector<Plan>{p, m};
     }},
    // Up to the per-replica batch (one micro-batch per replica).
    // On a pipeline whose stages sit on different device kinds: layers by FLOPs, or by each
    // stage's time on its own devices within their memory (tools/pipeline_split.hpp).
    {"partition", [](const Context& c, const Plan& p, const Layout& l) {
         if (p.pp == 1 || !stages_on_mixed_devices(c.cluster, l)) return std::vector<Plan>{p};
         return vary(p, &Plan::partition,
                     std::vector<std::optional<strategies::Partition>>{strategies::Partition::balanced,
                                                                       strategies::Partition::speed});
     }},
    {"micro_batch", [](const Context& c, const Plan& p, const Layout& l) {
         return vary(p, &Plan::micro_batch,
                     powers_of_two(static_cast<int>(std::min<std::int64_t>(l.global_batch / l.dp, 1 << 20)),
                                   c.options.space.micro_batch));
     }},
    {"schedule", [](const Context&, const Plan& p, const Layout&) {
         if (p.pp == 1) return std::vector<Plan>{p};
         return vary(p, &Plan::schedule,
                     {Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved, Schedule::zb_h1});
     }},
    // Megatron-LM's interleaved schedule with 2 to 8 model chunks per device.
    {"virtual_stages", [](const Context&, const Plan& p, const Layout&) {
         if (p.schedule != Schedule::interleaved) return std::vector<Plan>{p};
         return vary(p, &Plan::virtual_stages, {2, 3, 4, 5, 6, 7, 8});
     }},
    // With --recompute-modules, Megatron core's module sets too (strategies::recompute_module_tiers).
    {"recompute", [](const Context& c, const Plan& p, const Layout& l) {
         std::vector<Plan> out = vary(p, &Plan::recompute, {Recompute::none, Recompute::selective, Recompute::full});
         if (c.options.space.recompute_modules)
             for (const RecomputeModules m : strategies::recompute_module_tiers(c.model, l.framework)) {
                 Plan q = p;
                 q.recompute = Recompute::selective;
                 q.recompute_modules = m;
                 out.insert(out.end() - 1, q);
             }
         return out;
     }},
    {"sp", [](const Context& c, const Plan& p, const Layout&) {
         if (p.tp == 1) return std::vector<Plan>{p};
         std::vector<Plan> out = vary(p, &Plan::sequence_parallel, {false, true});
         out.back().tp_comm_overlap = c.options.tp_comm_overlap;   // with sp only, as Megatron asserts
         return out;
     }},
};

struct Candidate {
    Plan plan;
    std::optional<Layout> layout;   // unset: pruned by resolve
    std::string reason, reason_key;
    int order = 0;                  // DeviceOrder
};

/// resolve, where flags ask something of every plan that only some frameworks do: a plan
/// that cannot run it (resolve refuses naming the flag) runs as its framework does, the flag
/// cleared in `p`. --overlap-grad-reduce: a plan that overlaps already or cannot (ZeRO-3's
/// buckets, PyTorch DDP; "no effect here"). --overlap-param-gather: a plan without Megatron's
/// distributed optimizer, or on one data-parallel rank. --fp8-param-gather: a plan without it, or
/// with its optimizer offloaded. --tp-comm-overlap: a plan off
/// Megatron core, or with experts. --make-vocab-size-divisible-by: a plan off Megatron,
/// which trains the model's vocabulary as it is. `cleared` keeps the first reason per flag.
Layout resolve_lenient(const Context& c, Plan& p, std::map<std::string, std::string>& cleared) {
    for (;;) {
        try {
            return strategies::resolve(c.model, c.cluster, p);
        } catch (const Error& e) {
            const std::string& flag = e.context().flag;
            if (p.overlap_grad_reduce && flag == "--overlap-grad-reduce")
                p.overlap_grad_reduce = false;
            else if (p.overlap_param_gather && flag == "--overlap-param-gather")
                p.overlap_param_gather = false;
            else if (p.tp_comm_overlap && flag == "--tp-comm-overlap")
                p.tp_comm_overlap = false;
            else if (p.fp8_param_gather && flag == "--fp8-param-gather")
                p.fp8_param_gather = false;
            else if (p.vocab_multiple && flag == "--make-vocab-size-divisible-by")
                p.vocab_multiple.reset();
            else
                throw;
            cleared.emplace(flag, e.detail());
        }
    }
}

/// A flag that every plan runs as its framework does (resolve_lenient cleared it from each, or
/// none was offered it) has no effect on the sweep: refused naming the flag, as a sweep refuses
/// --zeropp without zero3, not ignored. Checked only where some plan resolved: a space with none
/// has its own report.
void refuse_idle_flags(const Context& c, const std::vector<Candidate>& done, const std::map<std::string, std::string>& cleared) {
    struct Asked {
        bool asked;
        bool Plan::*member;
        const char* flag;
        const char* unoffered;   // why no plan was offered it, when resolve cleared it from none
    };
    const Asked flags[] = {
        {c.options.overlap_grad_reduce, &Plan::overlap_grad_reduce, "--overlap-grad-reduce", ""},
        {c.options.overlap_param_gather, &Plan::overlap_param_gather, "--overlap-param-gather", ""},
        {c.options.tp_comm_overlap, &Plan::tp_comm_overlap, "--tp-comm-overlap",
         "it runs the tensor-parallel collectives of plans with sequence parallelism, and no plan searched has a --tp of 2 "
         "or more"},
        {c.options.fp8_param_gather, &Plan::fp8_param_gather, "--fp8-param-gather", ""},
    };
    const auto resolved = [](const Candidate& k) { return k.layout.has_value(); };
    if (std::none_of(done.begin(), done.end(), resolved)) return;
    for (const Asked& a : flags) {
        if (!a.asked) continue;
        if (std::any_of(done.begin(), done.end(), [&](const Candidate& k) { return resolved(k) && k.plan.*a.member; }))
            continue;
        const auto found = cleared.find(a.flag);
        std::string why = found == cleared.end() ? a.unoffered : found->second;
        for (const std::string& said : {std::string(a.flag) + " has no effect here: ", std::string("has no effect here: ")})
            if (why.starts_with(said)) why.erase(0, said.size());
        fail_input("has no effect here: every plan searched runs as its framework does (" + why + ")", {"", "", a.flag});
    }
}

/// Expands the table dimension by dimension, resolving every partial plan.
std::vector<Candidate> enumerate(const Context& c) {
    Plan base;
    base.global_batch = c.options.global_batch;
    base.seq = c.options.seq;
    base.dtype = c.options.dtype;
    base.fp8 = c.options.fp8;
    base.attention = c.options.attention;
    base.attention_backend = c.options.attention_backend;
    base.finetune = c.options.finetune;
    base.optimizer = c.options.optimizer;
    base.cross_entropy_fusion = c.options.cross_entropy_fusion;
    // Transformer Engine's FP8 and Megatron core's fused cross-entropy run on Megatron core
    // (strategies::resolve).
    if (c.options.fp8 != Fp8Recipe::none || c.options.cross_entropy_fusion != strategies::CrossEntropyFusion::none)
        base.framework = "megatron";
    base.overlap_grad_reduce = c.options.overlap_grad_reduce;
    base.overlap_param_gather = c.options.overlap_param_gather;
    base.fp8_param_gather = c.options.fp8_param_gather;
    base.vocab_multiple = c.options.vocab_multiple;
    base.fold = c.options.fold;
    base.framework_overrides.dispatch_per_kernel = c.options.dispatch;
    std::vector<Candidate> done, open{{base, Layout{}, "", ""}};
    std::map<std::string, std::string> cleared;   // resolve_lenient's first reason per flag
    for (const Dimension& dim : kDimensions) {
        std::vector<Candidate> next;
        for (const Candidate& partial : open)
            for (Plan& p : dim.expand(c, partial.plan, *partial.layout)) {
                if (!dim.resolve) {
                    next.push_back({std::move(p), Layout{}, "", ""});
                    continue;
                }
                try {
                    Layout l = resolve_lenient(c, p, cleared);   // may clear p's overlap_grad_reduce, vocab_multiple
                    next.push_back({std::move(p), std::move(l), "", ""});
                } catch (const Error& e) {
                    if (!is_input_error(e.kind())) throw;
                    done.push_back({std::move(p), std::nullopt, e.detail(), e.context().flag.empty() ? "model" : e.context().flag});
                }
            }
        open = std::move(next);
    }
    done.insert(done.end(), std::make_move_iterator(open.begin()), std::make_move_iterator(open.end()));
    refuse_idle_flags(c, done, cleared);
    return done;
}

// ---- memory bound -----------------------------------------------------------------------------

/// What the device limits allow on average over the devices: the least of each device's capacity,
/// --max-memory and (1 − --min-headroom) of its capacity.
double mean_allowed_bytes(const topo::Cluster& cluster, const SweepOptions& o) {
    double sum = 0;
    const int n = cluster.num_devices();
    for (int r = 0; r < n; ++r) {
        double cap = static_cast<double>(cluster.device_kind(r).memory.count());
        double allowed = cap;
        if (o.max_memory) allowed = std::min(allowed, static_cast<double>(o.max_memory->count()));
        if (o.min_headroom) allowed = std::min(allowed, (1 - *o.min_headroom) * cap);
        sum += allowed;
    }
    return sum / n;
}

// ---- offload ----------------------------------------------------------------------------------

/// The tiers a sweep offloads to: --offload's list (none: no tier), or host memory by default.
std::vector<strategies::Offload> offload_tiers(const topo::Cluster& cluster, const std::vector<strategies::Offload>& asked) {
    if (asked.empty()) return {strategies::Offload::cpu};
    const bool none = std::find(asked.begin(), asked.end(), strategies::Offload::none) != asked.end();
    if (none && asked.size() > 1) fail_input("--offload none cannot be listed with cpu or nvme", {"", "", "--offload"});
    std::vector<strategies::Offload> out;
    for (strategies::Offload t : asked) {
        if (t == strategies::Offload::none || std::find(out.begin(), out.end(), t) != out.end()) continue;
        if (t == strategies::Offload::nvme)
            for (const topo::NodeGroup& g : cluster.groups)
                if (!g.nvme_capacity)
                    fail_input("--offload nvme: the nodes of " + g.name + " have no NVMe drive (no \"nvme\" in the cluster file)",
                               {"", "", "--offload"});
        out.push_back(t);
    }
    return out;
}

/// After `group`'s one plan, when it resolved, offloads nothing and cannot fit the devices without
/// offload (its memory bound is above `allowed`): the same plan with each offload choice of its
/// strategy on `tiers`, resolved (or pruned with resolve's reason); none on unified memory, where
/// offload frees nothing.
void add_offload_variants(const Context& c, double allowed, const std::vector<strategies::Offload>& tiers,
                          std::vector<Candidate>& group) {
    if (tiers.empty() || !group.front().layout) return;
    const Plan p = group.front().plan;   // copies: group grows below
    const Layout layout = *group.front().layout;
    if (p.offload != strategies::Offload::none || p.offload_params != strategies::Offload::none ||
        p.offload_optimizer != strategies::Offload::none)
        return;
    const bool nvme = std::find(tiers.begin(), tiers.end(), strategies::Offload::nvme) != tiers.end();
    const std::vector<OffloadChoice> choices = offload_choices(p.strategy, nvme);
    if (choices.size() < 2) return;
    if (static_cast<double>(memory_lower_bound(c.model, c.cluster, p, layout).count()) <= allowed) return;
    for (const OffloadChoice& choice : choices) {
        if (!choice.offloads() || std::find(tiers.begin(), tiers.end(), choice.tier()) == tiers.end()) continue;
        Candidate v{p, std::nullopt, "", ""};
        apply_offload(v.plan, choice);
        try {
            v.layout = strategies::resolve(c.model, c.cluster, v.plan);
            // Unified memory (Jetson, CPU boards): host memory is the device's, nothing moves.
            if (v.layout->offload_ignored) continue;
        } catch (const Error& e) {
            if (!is_input_error(e.kind())) throw;
            v.reason = e.detail();
            v.reason_key = e.context().flag.empty() ? "model" : e.context().flag;
        }
        // DeepSpeed's Twin-Flow: the optimizer's sub-groups split between host and device, in
        // tenths, each fraction a different number of sub-groups on the host and at least 1 % of
        // the partition on the device (a last sub-group of a norm's few elements alone runs as
        // plain offload); the memory bound prunes those whose device share cannot fit.
        const bool twin = v.layout && v.plan.strategy == DataParallel::zero3 &&
                          v.layout->optimizer_offload == strategies::Offload::cpu && v.layout->framework.twin_flow;
        const Plan offloaded = v.plan;
        const Layout offloaded_layout = twin ? *v.layout : Layout{};
        group.push_back(std::move(v));
        if (!twin) continue;
        const std::vector<Block> blocks = strategies::detail::replica_blocks(c.model, offloaded_layout, offloaded);
        const strategies::Framework& fw = offloaded_layout.framework;
        for (int t = 1, last = 0; t <= 9; ++t) {
            Candidate w{offloaded, offloaded_layout, "", ""};
            w.plan.optimizer_offload_fraction = t / 10.0;
            const strategies::TwinFlowSplit split = strategies::twin_flow_split(
                blocks, offloaded_layout.dp, fw.sub_group_size, *w.plan.optimizer_offload_fraction);
            if (split.on_cpu <= last || 100 * (split.params - split.cpu_params) < split.params) continue;
            last = split.on_cpu;
            group.push_back(std::move(w));
        }
    }
}

// ---- simulating -------------------------------------------------------------------------------

Outcome outcome_of(const Simulation& s, sim::NetworkMode network) {
    const traces::Summary& m = s.summary;
    Outcome o;
    o.network = network;
    o.iteration = m.iteration;
    o.samples_per_s = m.samples_per_s;
    o.tokens_per_s = m.tokens_per_s;
    o.mfu = m.mfu;
    o.bubble_fraction = m.bubble_fraction;
    o.peak_memory = m.peak_memory;
    o.exposed_comm = m.exposed_comm;
    o.fits = m.fits();
    o.events = m.events;
    o.min_headroom = 1;
    const auto dev = static_cast<std::size_t>(Tier::device);
    for (std::size_t r = 0; r < s.timeline.peak.size(); ++r) {
        const double cap = static_cast<double>(s.timeline.capacity[r][dev].count());
        if (cap > 0) o.min_headroom = std::min(o.min_headroom, 1 - static_cast<double>(s.timeline.peak[r][dev].count()) / cap);
    }
    if (m.oom)
        o.oom = m.oom->device + " could not allocate " + to_string_binary(m.oom->requested) + " of " + to_string(m.oom->tier) +
                " memory with " + to_string_binary(m.oom->free) + " free";
    return o;
}

/// Sets status and reason from the outcome and the limits.
void judge(PlanResult& p, const SweepOptions& o) {
    const Outcome& r = *p.result;
    p.reason.clear();
    if (!r.fits) {
        p.status = PlanStatus::out_of_memory;
        p.reason = r.oom;
    } else if (o.max_memory && r.peak_memory > *o.max_memory) {
        p.status = PlanStatus::over_limit;
        p.reason = "peak " + to_string_binary(r.peak_memory) + " above --max-memory " + to_string_binary(*o.max_memory);
    } else if (o.min_headroom && r.min_headroom < *o.min_headroom) {
        char buf[96];
        std::snprintf(buf, sizeof buf, "headroom %.1f %% below --min-headroom %.1f %%", r.min_headroom * 100,
                      *o.min_headroom * 100);
        p.status = PlanStatus::over_limit;
        p.reason = buf;
    } else {
        p.status = PlanStatus::ranked;
    }
}

/// Simulates `plans[i]` for every i in `which` on `jobs` threads, each with its own Topology.
/// `store(i, simulation)` runs on the worker; each i is one slot, so no two workers share one.
void simulate_all(const Model& model, const std::vector<DeviceOrder>& orders, std::vector<PlanResult>& plans,
                  const std::vector<std::size_t>& which, const SweepOptions& o, sim::NetworkMode network) {
    sim::SimOptions sim_options;
    sim_options.network = network;
    sim_options.algo = o.algo;
    sim_options.record_memory = false;
    sim_options.record_links = false;
    std::atomic<std::size_t> next{0}, done{0};
    auto worker = [&] {
        std::vector<std::optional<topo::Topology>> topologies(orders.size());   // built when first needed
        for (std::size_t k; (k = next.fetch_add(1)) < which.size(); done.fetch_add(1)) {
            PlanResult& p = plans[which[k]];
            try {
                const topo::Cluster& cluster = orders[static_cast<std::size_t>(p.order)].cluster;
                std::optional<topo::Topology>& topology = topologies[static_cast<std::size_t>(p.order)];
                if (!topology) topology.emplace(cluster);
                const Simulation s = simulate_plan(model, cluster, p.plan, sim_options, &*topology);
                if (p.result && p.result->network != network) p.screen = p.result;
                p.result = outcome_of(s, network);
                judge(p, o);
            } catch (const Error& e) {
                p.status = PlanStatus::failed;
                p.reason = e.what();
            } catch (const std::bad_alloc&) {
                // A thread cannot let an exception escape; the plan outgrew this machine's memory.
                p.status = PlanStatus::failed;
                p.reason = "out of memory while simulating (fewer ranks, or a smaller --global-batch)";
            }
        }
    };
    const int jobs = std::max(1, std::min<int>(o.jobs, static_cast<int>(which.size())));
    std::vector<std::thread> threads;
    for (int j = 1; j < jobs; ++j) threads.emplace_back(worker);
    if (o.progress) {
        // The calling thread reports progress while the others work, then joins in.
        std::thread last(worker);
        while (done.load() < which.size()) {
            o.progress(done.load(), which.size());
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        last.join();
        o.progress(which.size(), which.size());
    } else {
        worker();
    }
    for (std::thread& t : threads) t.join();
}

/// True when a ranks better than b under the objective (ties: enumeration order).
bool better(const PlanResult& a, const PlanResult& b, Objective objective) {
    const Outcome &x = *a.result, &y = *b.result;
    switch (objective) {
        case Objective::time:
            if (x.iteration != y.iteration) return x.iteration < y.iteration;
            break;
        case Objective::tokens:
            if (x.tokens_per_s != y.tokens_per_s) return x.tokens_per_s > y.tokens_per_s;
            break;
        case Objective::memory:
            if (x.peak_memory != y.peak_memory) return x.peak_memory < y.peak_memory;
            if (x.iteration != y.iteration) return x.iteration < y.iteration;
            break;
    }
    return a.index < b.index;
}

// ---- plans between processes ------------------------------------------------------------------

Json double_bits(double v) { return std::bit_cast<std::uint64_t>(v); }
double bits_double(const Json& j) { return std::bit_cast<double>(j.get<std::uint64_t>()); }

Json outcome_json(const Outcome& o) {
    return {{"network", sim::to_string(o.network)},
            {"iteration_ps", o.iteration.count_ps()},
            {"samples_per_s", double_bits(o.samples_per_s)},
            {"tokens_per_s", double_bits(o.tokens_per_s)},
            {"mfu", double_bits(o.mfu)},
            {"bubble_fraction", double_bits(o.bubble_fraction)},
            {"peak_memory", o.peak_memory.count()},
            {"min_headroom", double_bits(o.min_headroom)},
            {"exposed_comm_ps", o.exposed_comm.count_ps()},
            {"fits", o.fits},
            {"oom", o.oom},
            {"events", o.events}};
}

Outcome outcome_from(const Json& j) {
    Outcome o;
    o.network = sim::parse_network_mode(j.at("network").get<std::string>());
    o.iteration = Time::ps(j.at("iteration_ps").get<std::int64_t>());
    o.samples_per_s = bits_double(j.at("samples_per_s"));
    o.tokens_per_s = bits_double(j.at("tokens_per_s"));
    o.mfu = bits_double(j.at("mfu"));
    o.bubble_fraction = bits_double(j.at("bubble_fraction"));
    o.peak_memory = Bytes(j.at("peak_memory").get<std::int64_t>());
    o.min_headroom = bits_double(j.at("min_headroom"));
    o.exposed_comm = Time::ps(j.at("exposed_comm_ps").get<std::int64_t>());
    o.fits = j.at("fits").get<bool>();
    o.oom = j.at("oom").get<std::string>();
    o.events = j.at("events").get<std::uint64_t>();
    return o;
}

}  // namespace

std::vector<std::size_t> ranking(const std::vector<PlanResult>& plans, Objective objective) {
    std::vector<std::size_t> out;
    for (const PlanResult& p : plans)
        if (p.status == PlanStatus::ranked) out.push_back(p.index);
    std::sort(out.begin(), out.end(), [&](std::size_t a, std::size_t b) {
        const bool fa = plans[a].screen.has_value(), fb = plans[b].screen.has_value();
        if (fa != fb) return fa;
        return better(plans[a], plans[b], objective);
    });
    return out;
}

std::vector<std::size_t> shard_plans(const SweepResult& r, const SweepOptions& o) {
    std::vector<std::size_t> out;
    for (const PlanResult& p : r.plans)
        if (p.status != PlanStatus::pruned && static_cast<int>(p.index % static_cast<std::size_t>(o.shard_count)) == o.shard_index)
            out.push_back(p.index);
    return out;
}

std::string export_plans(const SweepResult& r, const std::vector<std::size_t>& which) {
    Json list = Json::array();
    for (std::size_t i : which) {
        const PlanResult& p = r.plans.at(i);
        Json j{{"index", p.index}, {"status", to_string(p.status)}, {"reason", p.reason}};
        if (p.result) j["result"] = outcome_json(*p.result);
        if (p.screen) j["screen"] = outcome_json(*p.screen);
        list.push_back(std::move(j));
    }
    return list.dump(-1, ' ', false, Json::error_handler_t::replace);
}

void import_plans(SweepResult& into, const std::string& text) {
    const Json list = Json::parse(text);
    for (const Json& j : list) {
        const auto i = j.at("index").get<std::size_t>();
        if (i >= into.plans.size())
            throw Error(ErrorKind::internal, "a shard's plan " + std::to_string(i) + " is not one of the sweep's " +
                                                 std::to_string(into.plans.size()));
        PlanResult& p = into.plans[i];
        const std::string status = j.at("status").get<std::string>();
        const PlanStatus all[] = {PlanStatus::pending,       PlanStatus::pruned,     PlanStatus::ranked,
                                  PlanStatus::out_of_memory, PlanStatus::over_limit, PlanStatus::failed};
        const auto* found = std::find_if(std::begin(all), std::end(all), [&](PlanStatus s) { return status == to_string(s); });
        if (found == std::end(all)) throw Error(ErrorKind::internal, "a shard's plan has status '" + status + "'");
        p.status = *found;
        p.reason = j.at("reason").get<std::string>();
        p.result = j.contains("result") ? std::optional<Outcome>(outcome_from(j["result"])) : std::nullopt;
        p.screen = j.contains("screen") ? std::optional<Outcome>(outcome_from(j["screen"])) : std::nullopt;
    }
}

std::vector<std::size_t> refine(const Model& model, SweepResult& r, const SweepOptions& o) {
    if (o.network != sim::NetworkMode::analytic || o.refine <= 0) return {};
    std::vector<std::size_t> best = ranking(r.plans, o.objective);
    best.resize(std::min<std::size_t>(best.size(), static_cast<std::size_t>(o.refine)));
    std::sort(best.begin(), best.end());
    r.refined = best.size();
    std::vector<std::size_t> mine;
    for (std::size_t k = 0; k < best.size(); ++k)
        if (static_cast<int>(k % static_cast<std::size_t>(o.shard_count)) == o.shard_index) mine.push_back(best[k]);
    SweepOptions quiet = o;
    quiet.progress = nullptr;
    simulate_all(model, r.orders, r.plans, mine, quiet, sim::NetworkMode::flow);
    return mine;
}

// ---------------------------------------------------------------------------------------------

Bytes memory_lower_bound(const Model& model, const topo::Cluster& cluster, const Plan& plan, const Layout& l) {
    if (plan.strategy == DataParallel::ps || plan.strategy == DataParallel::ps_async) return Bytes(0);  // not derived
    std::vector<Block> blocks = strategies::detail::replica_blocks(model, l, plan);
    // LoRA / QLoRA: the blocks' params become the trainable adapters; the frozen weights are held
    // whole, or sharded by FSDP.
    const strategies::Training training = strategies::apply_finetune(model, l, blocks);
    double params = 0, activations = 0, fp8 = 0;   // per tensor rank, over one pipeline
    for (const Block& b : blocks) {
        params += static_cast<double>(b.params);
        activations += static_cast<double>(b.activations.count());
        fp8 += static_cast<double>(b.fp8_params);
    }
    params /= l.pp;                       // per device, averaged over the pipeline's stages
    fp8 /= l.pp;
    const strategies::StateBytes sb = strategies::state_bytes(l.dtype);
    const double opt = strategies::optimizer_state_per_param(l.optimizer, l.dtype);   // --optimizer's, master weights included
    const double n = l.dp_cp();           // ranks the sharded states are split over
    const double frozen = static_cast<double>(training.frozen.count()) / l.pp;
    double states = 0;
    switch (plan.strategy) {
        case DataParallel::ddp:
        case DataParallel::ring: states = params * (sb.params + sb.grads + opt) + frozen; break;
        case DataParallel::zero1: states = params * (sb.params + sb.grads + opt / n) + frozen; break;
        case DataParallel::zero2: states = params * (sb.params + (sb.grads + opt) / n) + frozen; break;
        // FSDP shards at most as much as ZeRO-3 (full sharding); the others shard less.
        case DataParallel::zero3:
        case DataParallel::fsdp:
            // MiCS shards them over its group, not every rank.
            states = (params * (sb.params + sb.grads + opt) + frozen) / (plan.zero_mics_shard_size > 0 ? plan.zero_mics_shard_size : n);
            // hpZ's secondary partition: every partitioned tensor's 1/N slice (a bound: the
            // persistent tensors are not sliced).
            if (plan.zero_hpz_partition_size > 1) states += params * sb.params / plan.zero_hpz_partition_size;
            // --fp8-param-gather: Megatron-FSDP's FP8 shards hold a byte per weight.
            if (l.fp8_param_gather) states -= fp8 * (sb.params - 1) / n;
            break;
        case DataParallel::ps:
        case DataParallel::ps_async: break;
        case DataParallel::hybrid_cnn: {
            // The convolutional states replicated, the FC layers' split over the dp workers
            // (strategies/hybrid_cnn.hpp); its FC activations only grow, so DDP's stay a bound.
            double fc = 0;
            for (auto i = static_cast<std::size_t>(strategies::hybrid_first_fc(model)); i < model.layers().size(); ++i)
                fc += static_cast<double>(model.layers()[i].params);
            states = (params - fc + fc / n) * (sb.params + sb.grads + opt);
            break;
        }
    }
    // Offloaded, the optimizer state and the gradients live in host memory (DeepSpeed copies
    // each gradient out as it is reduced; FSDP's CPUOffload moves parameters and gradients),
    // and with the parameters offloaded only the layers being computed are on the device.
    if (l.param_offload != strategies::Offload::none) {
        states = 0;
    } else if (l.optimizer_offload != strategies::Offload::none) {
        const bool sharded = plan.strategy == DataParallel::zero3 || plan.strategy == DataParallel::fsdp;
        states = (params * sb.params + frozen) / (sharded ? n : 1.0);
    }
    // Twin-Flow: the device's sub-groups keep their fp32 gradients and optimizer state there.
    if (const auto twin = strategies::twin_flow_split(model, l, plan))
        states += static_cast<double>(twin->params - twin->cpu_params) * (4 + opt);
    const int chunks = l.pp * (plan.schedule == Schedule::interleaved ? plan.virtual_stages : 1);
    (void)cluster;
    return Bytes(static_cast<std::int64_t>(states + activations / chunks));
}

SweepResult sweep(const Model& model, const topo::Cluster& cluster, const SweepOptions& o) {
    if (o.global_batch < 1)
        fail_input("--global-batch must be at least 1, found " + std::to_string(o.global_batch), {"", "", "--global-batch"});
    if (o.jobs < 1) fail_input("--jobs must be at least 1, found " + std::to_string(o.jobs), {"", "", "--jobs"});
    if (o.refine < 0) fail_input("--refine must be at least 0, found " + std::to_string(o.refine), {"", "", "--refine"});
    if (o.min_headroom && !(*o.min_headroom >= 0 && *o.min_headroom < 1))
        fail_input("--min-headroom must be a fraction in [0, 1), found " + std::to_string(*o.min_headroom),
                   {"", "", "--min-headroom"});
    if (o.max_memory && o.max_memory->count() <= 0)
        fail_input("--max-memory must be above zero", {"", "", "--max-memory"});
    if (o.shard_count < 1 || o.shard_index < 0 || o.shard_index >= o.shard_count)
        throw Error(ErrorKind::internal, "sweep shard " + std::to_string(o.shard_index) + " of " + std::to_string(o.shard_count));

    const Context context{model, cluster, o};
    SweepResult out;
    out.orders = device_orders(cluster);
    const double allowed = mean_allowed_bytes(cluster, o);
    const std::vector<strategies::Offload> tiers = offload_tiers(cluster, o.space.offload);
    std::vector<Candidate> candidates;
    for (Candidate& enumerated : enumerate(context)) {
        std::vector<Candidate> group{std::move(enumerated)};
        add_offload_variants(context, allowed, tiers, group);
        for (Candidate& c : group) {
            const bool mixed_pipeline = c.layout && stages_on_mixed_devices(cluster, *c.layout);
            candidates.push_back(std::move(c));
            if (!mixed_pipeline) continue;
            for (int k = 1; k < static_cast<int>(out.orders.size()); ++k) {
                Candidate other = candidates.back();
                other.order = k;
                candidates.push_back(std::move(other));
            }
        }
    }
    out.plans.resize(candidates.size());
    std::vector<std::size_t> to_simulate;
    for (std::size_t i = 0; i < candidates.size(); ++i) {
        Candidate& c = candidates[i];
        PlanResult& p = out.plans[i];
        p.index = i;
        p.plan = std::move(c.plan);
        p.order = c.order;
        if (!c.layout) {
            p.status = PlanStatus::pruned;
            p.reason = std::move(c.reason);
            p.reason_key = std::move(c.reason_key);
            continue;
        }
        p.layout = *c.layout;
        p.memory_bound = memory_lower_bound(model, cluster, p.plan, p.layout);
        if (static_cast<double>(p.memory_bound.count()) > allowed) {
            p.status = PlanStatus::pruned;
            p.reason_key = "memory bound";
            p.reason = "needs at least " + to_string_binary(p.memory_bound) + " per device (model states and one chunk of "
                       "activations), above the " + to_string_binary(Bytes(static_cast<std::int64_t>(allowed))) + " allowed";
            continue;
        }
        if (static_cast<int>(i % static_cast<std::size_t>(o.shard_count)) == o.shard_index) to_simulate.push_back(i);
    }
    simulate_all(model, out.orders, out.plans, to_simulate, o, o.network);

    // Sharded, the best plans are known only once the shards are gathered: the caller refines.
    if (o.shard_count == 1) refine(model, out, o);
    out.ranking = ranking(out.plans, o.objective);
    return out;
}

SweepResult merge_shards(std::vector<SweepResult> shards, const SweepOptions& o) {
    if (shards.empty()) return {};
    SweepResult out = std::move(shards.front());
    for (std::size_t i = 0; i < out.plans.size(); ++i) {
        SweepResult& from = shards[i % shards.size()];
        if (i % shards.size() != 0) out.plans[i] = std::move(from.plans[i]);
    }
    out.ranking = ranking(out.plans, o.objective);
    return out;
}

}  // namespace smol::tools

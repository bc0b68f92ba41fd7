// `smolcluster sweep`: every valid plan of a model on a cluster, simulated and ranked (the search
// itself is tools/sweep.*); the table, the pruning and fitting counts, --csv and --json, and with
// --nodes 1,2,4,8 a scaling table per strategy. Under mpirun the plans are split over the ranks
// and gathered with MPI (sweep_over_ranks); rank 0 prints what one process would.
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <thread>

#include "core/error.hpp"
#include "exec/executor.hpp"
#include "tools/execution.hpp"
#include "tools/fit_advice.hpp"
#include "tools/commands.hpp"
#include "tools/output_file.hpp"
#include "tools/plan_flags.hpp"
#include "tools/progress.hpp"
#include "tools/simulation.hpp"
#include "tools/sweep.hpp"

namespace smol::tools {

namespace {

/// Megatron core's --recompute-modules of a selective plan where they are not the default
/// (core_attn); else empty.
std::string recompute_modules_of(const strategies::Plan& p) {
    if (p.recompute != Recompute::selective || p.recompute_modules == RecomputeModules{}) return "";
    return to_string(p.recompute_modules);
}

struct SweepFlags {
    std::string model, cluster, cluster_network;
    std::vector<int> nodes;
    std::optional<int> devices;
    std::int64_t global_batch = 0;
    std::optional<int> seq;               // unset: the model's
    std::string fp8;
    std::string cross_entropy_fusion;
    std::string finetune = "full", optimizer = "adam";
    std::string attention;
    std::string attention_backend;
    std::string dtype, network = "flow", collective_algo = "auto", objective = "time";
    bool no_fold = false;
    std::vector<std::string> strategies;
    std::vector<int> tp, pp, micro_batch, cp, ep;
    std::vector<std::string> fsdp_sharding;
    std::vector<std::string> cp_comm;
    std::vector<std::string> offload;
    std::vector<std::string> compress;
    bool zeropp = false, mics = false, recompute_modules = false;
    std::string max_memory;
    std::string dispatch_overhead;
    std::vector<std::string> frameworks;
    bool overlap_grad_reduce = false, overlap_param_gather = false, tp_comm_overlap = false, fp8_param_gather = false;
    std::optional<int> vocab_multiple;
    std::string profile;
    std::string slow;
    double jitter = 0;
    std::uint64_t seed = 1;
    const CLI::App* app = nullptr;        // the subcommand: resolve_cluster tells --seed given from its default
    std::optional<double> min_headroom;
    int top = 10;
    std::optional<int> refine;
    std::optional<int> jobs;              // unset: the machine's cores
    std::string csv, json;
    bool force = false, quiet = false;
};

struct NodeSweep {
    std::optional<int> nodes;
    topo::Cluster cluster;
    SweepResult result;
};

std::string fmt(const char* f, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, f, v);
    return buf;
}

std::string with_commas(std::size_t n) {
    const std::string digits = std::to_string(n);
    std::string s;
    for (std::size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
        s += digits[i];
    }
    return s;
}

std::string pad(std::string s, std::size_t w) {
    // Pads by code points so "·" and "×" count as one column.
    std::size_t cols = 0;
    for (unsigned char c : s) cols += (c & 0xC0) != 0x80;
    if (cols < w) s.append(w - cols, ' ');
    return s;
}

/// What --slow and --jitter apply to every plan, for the heading: "" when neither is given.
std::string speed_text(const SweepFlags& f) {
    std::string s;
    if (!f.slow.empty()) s = "slow devices " + f.slow;
    if (f.jitter > 0) s += (s.empty() ? "" : ", ") + std::string("jitter ±") + fmt("%g", f.jitter) + " % (seed " + std::to_string(f.seed) + ")";
    return s;
}

void print_sweep(std::ostream& out, const Model& model, const NodeSweep& n, const SweepOptions& o, int top, const std::string& speed) {
    const SweepResult& r = n.result;
    out << model.name() << " on " << n.cluster.name << " (" << n.cluster.num_devices() << (n.cluster.num_devices() == 1 ? " device" : " devices") << "), global batch "
        << o.global_batch << (o.fp8 != Fp8Recipe::none ? std::string(", fp8 ") + to_string(o.fp8) : std::string())
        << (o.cross_entropy_fusion != strategies::CrossEntropyFusion::none
                ? std::string(", cross-entropy fusion ") + strategies::to_string(o.cross_entropy_fusion)
                : std::string())
        << (o.finetune.kind != strategies::FineTuneKind::full ? ", finetune " + strategies::to_string(o.finetune) : std::string())
        << (o.optimizer != strategies::Optimizer::adam ? std::string(", optimizer ") + strategies::to_string(o.optimizer) : std::string())
        << (o.attention ? std::string(", ") + to_string(*o.attention) + " attention" : std::string())
        << (o.attention_backend ? std::string(", attention backend ") + to_string(*o.attention_backend) : std::string())
        << (o.frameworks.empty() ? std::string() : (o.frameworks.size() == 1 ? ", framework " : ", frameworks ") + join(o.frameworks))
        << (o.overlap_grad_reduce ? ", overlap-grad-reduce" : "") << (o.overlap_param_gather ? ", overlap-param-gather" : "")
        << (o.tp_comm_overlap ? ", tp-comm-overlap" : "") << (o.fp8_param_gather ? ", fp8-param-gather" : "")
        << (o.vocab_multiple ? ", vocabulary padded to a multiple of " + std::to_string(*o.vocab_multiple) + " × tp on Megatron"
                             : std::string())
        << ", objective " << to_string(o.objective) << ", " << sim::to_string(o.network) << " network\n";
    if (!n.cluster.description.empty() && n.cluster.groups.size() > 1) out << "  cluster: " << n.cluster.description << "\n";
    if (!n.cluster.profile.empty()) out << "  " << profile_note(n.cluster) << "\n";
    if (!speed.empty()) out << "  every plan with " << speed << "\n";
    const std::size_t pruned = r.count(PlanStatus::pruned);
    const std::size_t simulated = r.plans.size() - pruned - r.count(PlanStatus::pending);
    out << "  " << with_commas(r.plans.size()) << " candidate plans: " << with_commas(pruned) << " pruned before simulating, "
        << with_commas(simulated) << " simulated (" << sim::to_string(o.network) << ")";
    if (r.refined) out << ", the best " << r.refined << " re-simulated flow-level";
    out << "\n";
    const auto reasons = r.pruned_by_reason();
    std::size_t key_width = 16;
    for (const auto& [key, entry] : reasons) key_width = std::max(key_width, key.size());
    for (const auto& [key, entry] : reasons)
        out << "    pruned " << pad(with_commas(entry.first), 7) << " " << pad(key, key_width) << " e.g. " << entry.second << "\n";
    const std::size_t oom = r.count(PlanStatus::out_of_memory), over = r.count(PlanStatus::over_limit),
                      failed = r.count(PlanStatus::failed);
    out << "  did not fit: " << with_commas(oom) << " out of memory, " << with_commas(over) << " over the memory limits";
    if (failed) out << ", " << failed << " failed to simulate";
    out << "\n";
    for (PlanStatus s : {PlanStatus::out_of_memory, PlanStatus::over_limit, PlanStatus::failed})
        for (const PlanResult& p : r.plans)
            if (p.status == s) {
                out << "    first " << to_string(s) << ": " << describe_plan(p) << ": " << p.reason << "\n";
                break;
            }
    if (r.ranking.empty()) {
        out << "\n  no plan fits\n";
        return;
    }
    const std::size_t shown = std::min<std::size_t>(r.ranking.size(), static_cast<std::size_t>(top));
    const auto schedule_of = [](const PlanResult& p) {
        std::string schedule = p.plan.pp > 1 ? strategies::to_string(p.plan.schedule) : "-";
        if (p.plan.schedule == strategies::Schedule::interleaved) schedule += " v" + std::to_string(p.plan.virtual_stages);
        if (p.plan.partition) schedule += std::string("/") + strategies::to_string(*p.plan.partition);
        return schedule;
    };
    // The schedule column widens for the partitions of mixed clusters ("interleaved v2/balanced").
    std::size_t width = 13;
    for (std::size_t k = 0; k < shown; ++k) width = std::max(width, schedule_of(r.plans[r.ranking[k]]).size());
    // Device orders (mixed clusters): a last column saying which group's devices come first.
    const bool orders = r.orders.size() > 1;
    if (orders) {
        out << "  device orders tried for pipelines over mixed stages:";
        for (const DeviceOrder& d : r.orders) out << " " << d.name << " (" << d.cluster.groups.front().name << " first)" << (&d == &r.orders.back() ? "" : ",");
        out << "\n";
    }
    // A cp column where a shown plan is context-parallel (sweep --cp): "2", or "2 ag" and "2 a2a"
    // where its keys and values are all-gathered or its heads all-to-all'ed (--cp-comm).
    const auto cp_of = [](const PlanResult& p) {
        std::string s = std::to_string(p.layout.cp);
        if (p.layout.cp > 1 && p.plan.cp_comm != CpComm::p2p) s += p.plan.cp_comm == CpComm::all_gather ? " ag" : " a2a";
        return s;
    };
    bool cps = false;
    std::size_t cp_width = 3;
    for (std::size_t k = 0; k < shown; ++k) {
        cps |= r.plans[r.ranking[k]].layout.cp > 1;
        cp_width = std::max(cp_width, cp_of(r.plans[r.ranking[k]]).size());
    }
    // An ep column where a shown plan is expert-parallel (a mixture of experts).
    bool eps = false;
    for (std::size_t k = 0; k < shown; ++k) eps |= r.plans[r.ranking[k]].layout.ep > 1;
    // An offload column where a shown plan offloads: "opt cpu" (the optimizer), "cpu" (every state
    // the strategy can move), "nvme" alike.
    const auto offload_of = [](const PlanResult& p) -> std::string {
        const strategies::Plan& x = p.plan;
        std::string s;
        if (x.offload != strategies::Offload::none) {
            s = strategies::to_string(x.offload);
        } else {
            if (x.offload_params != strategies::Offload::none) s = std::string("params ") + strategies::to_string(x.offload_params);
            if (x.offload_optimizer != strategies::Offload::none)
                s += std::string(s.empty() ? "" : ", ") + "opt " + strategies::to_string(x.offload_optimizer);
        }
        if (x.optimizer_offload_fraction) s += " " + number_text(*x.optimizer_offload_fraction);   // Twin-Flow's share
        return s.empty() ? "-" : s;
    };
    bool offloads = false;
    std::size_t offload_width = 7;
    for (std::size_t k = 0; k < shown; ++k) {
        const std::string o = offload_of(r.plans[r.ranking[k]]);
        offloads |= o != "-";
        offload_width = std::max(offload_width, o.size());
    }
    // A compress column where a shown plan compresses its gradients ("powersgd:4").
    bool compressed = false;
    std::size_t compress_width = 8;
    for (std::size_t k = 0; k < shown; ++k) {
        const strategies::Compression& c = r.plans[r.ranking[k]].plan.compress;
        compressed |= c.method != strategies::CompressionMethod::none;
        compress_width = std::max(compress_width, strategies::to_string(c).size());
    }
    // A framework column where the sweep tries several (--framework deepspeed,megatron).
    const bool frameworks = o.frameworks.size() > 1;
    std::size_t framework_width = 9;
    if (frameworks)
        for (std::size_t k = 0; k < shown; ++k)
            framework_width = std::max(framework_width, strategies::describe(r.plans[r.ranking[k]].layout.framework).size());
    // The strategy column names FSDP's sharding where it is not full ("fsdp hybrid") and ZeRO++'s
    // parts ("zero3 qwz+hpz8+qgz").
    const auto strategy_of = [](const PlanResult& p) {
        std::string s = strategies::to_string(p.plan.strategy);
        if (p.plan.strategy == strategies::DataParallel::fsdp && p.plan.fsdp_sharding != strategies::FsdpSharding::full)
            s += std::string(" ") + strategies::to_string(p.plan.fsdp_sharding);
        std::string z;
        const auto add = [&](const std::string& part) { z += (z.empty() ? " " : "+") + part; };
        if (p.plan.zero_quantized_weights) add("qwz");
        if (p.plan.zero_hpz_partition_size > 1) add("hpz" + std::to_string(p.plan.zero_hpz_partition_size));
        if (p.plan.zero_quantized_gradients) add("qgz");
        if (p.plan.zero_mics_shard_size > 0) add("mics" + std::to_string(p.plan.zero_mics_shard_size));
        return s + z;
    };
    std::size_t strategy_width = 8;
    for (std::size_t k = 0; k < shown; ++k) strategy_width = std::max(strategy_width, strategy_of(r.plans[r.ranking[k]]).size());
    // The recompute column names the modules where they are not the attention core alone.
    const auto recompute_of = [](const PlanResult& p) {
        const std::string m = recompute_modules_of(p.plan);
        return std::string(to_string(p.plan.recompute)) + (m.empty() ? "" : " " + m);
    };
    std::size_t recompute_width = 9;
    for (std::size_t k = 0; k < shown; ++k) recompute_width = std::max(recompute_width, recompute_of(r.plans[r.ranking[k]]).size());
    out << "\n  rank  " << pad("strategy", strategy_width + 2) << (frameworks ? pad("framework", framework_width + 2) : "") << "tp  pp  " << (cps ? pad("cp", cp_width + 1) : "") << "dp   "
        << (eps ? "ep   " : "")
        << pad("schedule", width + 1)
        << "mb  " << pad("recompute", recompute_width + 2) << "sp  " << (offloads ? pad("offload", offload_width + 2) : "")
        << (compressed ? pad("compress", compress_width + 2) : "") << "step time   tokens/s    MFU     peak memory  network" << (orders ? "  devices" : "") << "\n";
    for (std::size_t k = 0; k < shown; ++k) {
        const PlanResult& p = r.plans[r.ranking[k]];
        const Outcome& x = *p.result;
        const std::string schedule = pad(schedule_of(p), width);
        char cp[16] = "", ep[16] = "";
        if (cps) std::snprintf(cp, sizeof cp, "%s ", pad(cp_of(p), cp_width).c_str());
        if (eps) std::snprintf(ep, sizeof ep, "%-4d ", p.layout.ep);
        const std::string offload = (offloads ? pad(offload_of(p), offload_width + 2) : "") +
                                    (compressed ? pad(strategies::to_string(p.plan.compress), compress_width + 2) : "");
        char buf[448];
        std::snprintf(buf, sizeof buf, "  %-5zu %s %-3d %-3d %s%-4d %s%s %-3d %s %-3s %s%-11s %-11s %-7s %-12s %s\n", k + 1,
                      (pad(strategy_of(p), strategy_width + 1) +
                       (frameworks ? " " + pad(strategies::describe(p.layout.framework), framework_width + 1) : ""))
                          .c_str(),
                      p.layout.tp, p.layout.pp, cp, p.layout.dp, ep, schedule.c_str(),
                      p.layout.micro_batch, pad(recompute_of(p), recompute_width + 1).c_str(), p.plan.sequence_parallel ? "yes" : "-",
                      offload.c_str(), to_string(x.iteration).c_str(), fmt("%.4g", x.tokens_per_s).c_str(),
                      fmt("%.1f %%", x.mfu * 100).c_str(), to_string_binary(x.peak_memory).c_str(), sim::to_string(x.network));
        std::string line = buf;
        if (orders) line.insert(line.size() - 1, std::string(std::max<std::size_t>(1, 9 - std::strlen(sim::to_string(x.network))), ' ') +
                                                     r.orders[static_cast<std::size_t>(p.order)].name);
        out << line;
    }
    if (r.ranking.size() > static_cast<std::size_t>(top))
        out << "  … " << with_commas(r.ranking.size() - static_cast<std::size_t>(top)) << " more ranked plans (--top, --csv, --json)\n";
}

/// The best ranked plan of each strategy at each node count, and its speed-up and efficiency
/// over the strategy's smallest node count.
struct ScalingRow {
    std::string strategy;
    int nodes;
    double samples_per_s, speedup, efficiency;
    std::size_t plan;
};

std::vector<ScalingRow> scaling_rows(const std::vector<NodeSweep>& sweeps) {
    std::vector<std::string> names;
    for (const NodeSweep& n : sweeps)
        for (std::size_t i : n.result.ranking) {
            const std::string s = strategies::to_string(n.result.plans[i].plan.strategy);
            if (std::find(names.begin(), names.end(), s) == names.end()) names.push_back(s);
        }
    std::sort(names.begin(), names.end());
    std::vector<ScalingRow> rows;
    for (const std::string& s : names) {
        std::optional<std::pair<int, double>> base;
        for (const NodeSweep& n : sweeps) {
            // The ranking is best first, so the first plan of the strategy is its best.
            for (std::size_t i : n.result.ranking) {
                const PlanResult& p = n.result.plans[i];
                if (strategies::to_string(p.plan.strategy) != s) continue;
                const double thr = p.result->samples_per_s;
                if (!base) base = {*n.nodes, thr};
                const double speedup = thr / base->second;
                rows.push_back({s, *n.nodes, thr, speedup, speedup * base->first / *n.nodes, i});
                break;
            }
        }
    }
    return rows;
}

void print_scaling(std::ostream& out, const std::vector<ScalingRow>& rows, const std::vector<NodeSweep>& sweeps) {
    out << "\nscaling (best plan of each strategy per node count; speed-up and efficiency against its fewest nodes)\n\n"
        << "  strategy  nodes  samples/s   speed-up  efficiency  plan\n";
    for (const ScalingRow& row : rows) {
        const NodeSweep* n = nullptr;
        for (const NodeSweep& s : sweeps)
            if (*s.nodes == row.nodes) n = &s;
        char buf[256];
        std::snprintf(buf, sizeof buf, "  %-9s %-6d %-11s %-9s %-11s %s\n", row.strategy.c_str(), row.nodes,
                      fmt("%.4g", row.samples_per_s).c_str(), fmt("%.2f×", row.speedup).c_str(),
                      fmt("%.1f %%", row.efficiency * 100).c_str(), describe_plan(n->result.plans[row.plan]).c_str());
        out << buf;
    }
}

Json plan_json(const Model& model, const SweepResult& r, const PlanResult& p, std::optional<std::size_t> rank) {
    Json j{{"index", p.index},
           {"strategy", strategies::to_string(p.plan.strategy)},
           {"tp", p.plan.tp},
           {"pp", p.plan.pp},
           {"cp", p.plan.cp},
           {"cp_comm", to_string(p.plan.cp_comm)},
           {"ep", p.plan.ep},
           {"fsdp_sharding", p.plan.strategy == strategies::DataParallel::fsdp ? Json(strategies::to_string(p.plan.fsdp_sharding)) : Json(nullptr)},
           {"schedule", strategies::to_string(p.plan.schedule)},
           {"virtual_stages", p.plan.virtual_stages},
           {"micro_batch", p.plan.micro_batch},
           {"recompute", to_string(p.plan.recompute)},
           {"recompute_modules", recompute_modules_of(p.plan)},
           {"sp", p.plan.sequence_parallel},
           {"offload", offload_flags(p.plan)},
           {"compress", strategies::to_string(p.plan.compress)},
           {"zeropp", zeropp_flags(p.plan)},
           {"mics", p.plan.zero_mics_shard_size > 0 ? Json(p.plan.zero_mics_shard_size) : Json(nullptr)},
           {"overlap_grad_reduce", p.plan.overlap_grad_reduce},
           {"overlap_param_gather", p.plan.overlap_param_gather},
           {"tp_comm_overlap", p.plan.tp_comm_overlap},
           {"fp8_param_gather", p.plan.fp8_param_gather},
           {"partition", p.plan.partition ? Json(strategies::to_string(*p.plan.partition)) : Json(nullptr)},
           {"device_order", r.orders[static_cast<std::size_t>(p.order)].name},
           {"status", to_string(p.status)},
           {"reason", p.reason},
           {"rank", rank ? Json(*rank) : Json(nullptr)}};
    if (p.status != PlanStatus::pruned || p.reason_key == "memory bound") {
        j["framework"] = strategies::describe(p.layout.framework);
        // The vocabulary rows it trains, as simulate's --json (null for a layer list).
        j["padded_vocab"] = model.is_transformer()
                                ? Json(padded_vocab(model.shape().vocab, p.layout.tp, p.layout.framework.vocab_multiple))
                                : Json(nullptr);
        j["dp"] = p.layout.dp;
        j["microbatches"] = p.layout.microbatches;
        j["memory_lower_bound_bytes"] = p.memory_bound.count();
    }
    if (p.result) {
        const Outcome& x = *p.result;
        j["network"] = sim::to_string(x.network);
        j["iteration_time_s"] = x.iteration.to_seconds();
        j["samples_per_s"] = x.samples_per_s;
        j["tokens_per_s"] = x.tokens_per_s;
        j["mfu"] = x.mfu;
        j["peak_memory_bytes"] = x.peak_memory.count();
        j["min_headroom"] = x.min_headroom;
        j["bubble_fraction"] = x.bubble_fraction;
        j["exposed_comm_s"] = x.exposed_comm.to_seconds();
        j["fits"] = x.fits;
        j["events"] = x.events;
    }
    if (p.screen) j["screen_iteration_time_s"] = p.screen->iteration.to_seconds();
    return j;
}

std::vector<std::optional<std::size_t>> ranks_of(const SweepResult& r) {
    std::vector<std::optional<std::size_t>> rank(r.plans.size());
    for (std::size_t k = 0; k < r.ranking.size(); ++k) rank[r.ranking[k]] = k + 1;
    return rank;
}

std::string csv_text(const Model& model, const std::vector<NodeSweep>& sweeps) {
    std::ostringstream out;
    out << "model,cluster,nodes,devices,index,rank,strategy,fsdp_sharding,tp,pp,cp,cp_comm,ep,dp,schedule,virtual_stages,micro_batch,microbatches,"
           "recompute,sp,offload,compress,overlap_grad_reduce,framework,partition,device_order,status,network,iteration_time_s,samples_per_s,tokens_per_s,mfu,peak_memory_bytes,min_headroom,"
           "bubble_fraction,exposed_comm_s,memory_lower_bound_bytes,screen_iteration_time_s,reason,zeropp,mics,recompute_modules,"
           "overlap_param_gather,tp_comm_overlap,fp8_param_gather\n";
    auto quoted = [](const std::string& s) {
        std::string q = "\"";
        for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
        return q + "\"";
    };
    for (const NodeSweep& n : sweeps) {
        const auto rank = ranks_of(n.result);
        for (const PlanResult& p : n.result.plans) {
            const bool resolved = p.status != PlanStatus::pruned || p.reason_key == "memory bound";
            out << model.name() << ',' << quoted(n.cluster.name) << ',' << (n.nodes ? std::to_string(*n.nodes) : "") << ','
                << n.cluster.num_devices() << ',' << p.index << ',' << (rank[p.index] ? std::to_string(*rank[p.index]) : "")
                << ',' << strategies::to_string(p.plan.strategy) << ','
                << (p.plan.strategy == strategies::DataParallel::fsdp ? strategies::to_string(p.plan.fsdp_sharding) : "") << ','
                << p.plan.tp << ',' << p.plan.pp << ',' << p.plan.cp << ','
                << to_string(p.plan.cp_comm) << ',' << p.plan.ep << ',' << (resolved ? std::to_string(p.layout.dp) : "") << ',' << strategies::to_string(p.plan.schedule) << ','
                << p.plan.virtual_stages << ',' << p.plan.micro_batch << ','
                << (resolved ? std::to_string(p.layout.microbatches) : "") << ',' << to_string(p.plan.recompute) << ','
                << (p.plan.sequence_parallel ? "true" : "false") << ','
                << quoted(offload_flags(p.plan)) << ',' << strategies::to_string(p.plan.compress) << ','
                << (p.plan.overlap_grad_reduce ? "true" : "false") << ','
                << (resolved ? strategies::describe(p.layout.framework) : "") << ','
                << (p.plan.partition ? strategies::to_string(*p.plan.partition) : "") << ','
                << quoted(n.result.orders[static_cast<std::size_t>(p.order)].name) << ',' << to_string(p.status) << ',';
            if (p.result) {
                const Outcome& x = *p.result;
                out << sim::to_string(x.network) << ',' << x.iteration.to_seconds() << ',' << x.samples_per_s << ','
                    << x.tokens_per_s << ',' << x.mfu << ',' << x.peak_memory.count() << ',' << x.min_headroom << ','
                    << x.bubble_fraction << ',' << x.exposed_comm.to_seconds() << ',';
            } else {
                out << ",,,,,,,,,";
            }
            out << (resolved ? std::to_string(p.memory_bound.count()) : "") << ','
                << (p.screen ? fmt("%.9g", p.screen->iteration.to_seconds()) : "") << ',' << quoted(p.reason) << ','
                << quoted(zeropp_flags(p.plan)) << ','
                << (p.plan.zero_mics_shard_size > 0 ? std::to_string(p.plan.zero_mics_shard_size) : "") << ','
                << quoted(recompute_modules_of(p.plan)) << ',' << (p.plan.overlap_param_gather ? "true" : "false") << ','
                << (p.plan.tp_comm_overlap ? "true" : "false") << ',' << (p.plan.fp8_param_gather ? "true" : "false") << '\n';
        }
    }
    return out.str();
}

std::string json_text(const Model& model, const SweepOptions& o, const SweepFlags& f, const std::vector<NodeSweep>& sweeps,
                      const std::vector<ScalingRow>& scaling) {
    Json j{{"model", model.name()},
           {"global_batch", o.global_batch},
           {"objective", to_string(o.objective)},
           {"network", sim::to_string(o.network)}};
    if (!o.frameworks.empty()) j["frameworks"] = o.frameworks;
    if (o.overlap_grad_reduce) j["overlap_grad_reduce"] = true;
    if (o.overlap_param_gather) j["overlap_param_gather"] = true;
    if (o.tp_comm_overlap) j["tp_comm_overlap"] = true;
    if (o.fp8_param_gather) j["fp8_param_gather"] = true;
    if (o.vocab_multiple) j["make_vocab_size_divisible_by"] = *o.vocab_multiple;
    if (!f.slow.empty()) j["slow"] = f.slow;
    if (f.jitter > 0) {
        j["jitter_pct"] = f.jitter;
        j["seed"] = f.seed;
    }
    if (o.fp8 != Fp8Recipe::none) j["fp8"] = to_string(o.fp8);
    if (o.cross_entropy_fusion != strategies::CrossEntropyFusion::none)
        j["cross_entropy_fusion"] = strategies::to_string(o.cross_entropy_fusion);
    if (o.finetune.kind != strategies::FineTuneKind::full) j["finetune"] = strategies::to_string(o.finetune);
    if (o.optimizer != strategies::Optimizer::adam) j["optimizer"] = strategies::to_string(o.optimizer);
    if (o.attention) j["attention"] = to_string(*o.attention);
    if (o.attention_backend) j["attention_backend"] = to_string(*o.attention_backend);
    Json list = Json::array();
    for (const NodeSweep& n : sweeps) {
        const SweepResult& r = n.result;
        Json pruned = Json::object();
        for (const auto& [key, entry] : r.pruned_by_reason()) pruned[key] = {{"count", entry.first}, {"example", entry.second}};
        Json plans = Json::array();
        const auto rank = ranks_of(r);
        for (const PlanResult& p : r.plans) plans.push_back(plan_json(model, r, p, rank[p.index]));
        list.push_back({{"cluster", n.cluster.name},
                        {"profile", n.cluster.profile.empty() ? Json(nullptr) : Json(n.cluster.profile)},
                        {"nodes", n.nodes ? Json(*n.nodes) : Json(nullptr)},
                        {"devices", n.cluster.num_devices()},
                        {"device_memory_bytes", n.cluster.device_kind(0).memory.count()},
                        {"candidates", r.plans.size()},
                        {"pruned", std::move(pruned)},
                        {"out_of_memory", r.count(PlanStatus::out_of_memory)},
                        {"over_limit", r.count(PlanStatus::over_limit)},
                        {"failed", r.count(PlanStatus::failed)},
                        {"refined", r.refined},
                        {"ranking", r.ranking},
                        {"plans", std::move(plans)}});
    }
    j["sweeps"] = std::move(list);
    Json rows = Json::array();
    for (const ScalingRow& row : scaling)
        rows.push_back({{"strategy", row.strategy},
                        {"nodes", row.nodes},
                        {"samples_per_s", row.samples_per_s},
                        {"speedup", row.speedup},
                        {"efficiency", row.efficiency},
                        {"plan", row.plan}});
    j["scaling"] = std::move(rows);
    return j.dump(1, ' ', false, Json::error_handler_t::replace) + "\n";
}

/// The exit status: 0, or 3 when no plan fits (the same status as a simulate that does not fit).
int sweeps_fit(const std::vector<NodeSweep>& sweeps) {
    for (const NodeSweep& n : sweeps)
        if (!n.result.ranking.empty()) return 0;
    return 3;
}

/// One sweep split over the processes of an mpirun job: each rank simulates its shard on its
/// --jobs threads, the shards' plans are gathered on every rank (MPI_Allgatherv of export_plans
/// texts, exec/executor.hpp), the best plans are refined flow-level split the same way, and
/// gathered again. Every rank then holds the whole result, ranked as one process ranks it.
SweepResult sweep_over_ranks(const Model& model, const topo::Cluster& cluster, SweepOptions o, exec::Session& session) {
    o.shard_index = session.rank();
    o.shard_count = session.size();
    SweepResult r = sweep(model, cluster, o);
    // Every rank takes over every text, its own included, so all hold the same figures.
    const auto gather = [&](const std::vector<std::size_t>& mine) {
        for (const std::string& text : exec::all_gather_text(session, export_plans(r, mine))) import_plans(r, text);
    };
    gather(shard_plans(r, o));
    gather(refine(model, r, o));   // nothing to refine: an empty gather on every rank
    r.ranking = ranking(r.plans, o.objective);
    return r;
}

/// `session`: the MPI job when mpirun started this process (rank 0 prints, the others are quiet).
int run_sweep(const SweepFlags& f, const Io& io, exec::Session* session) {
    // Everything that can be refused is refused before the first simulation.
    check_trace_target(f.csv, f.force, "--csv");
    check_trace_target(f.json, f.force, "--json");
    const Model model = load_model_warning(f.model, io.err);
    SweepOptions o;
    o.global_batch = f.global_batch;
    if (f.global_batch < 1)
        fail_input("--global-batch must be at least 1, found " + std::to_string(f.global_batch), flag("--global-batch"));
    if (f.seq && *f.seq < 1)
        fail_input("--seq must be at least 1 (leave it out for the model's), found " + std::to_string(*f.seq), flag("--seq"));
    o.seq = f.seq.value_or(0);
    if (!f.dtype.empty()) o.dtype = parse_dtype(f.dtype, flag("--dtype"));
    if (!f.fp8.empty()) o.fp8 = parse_fp8_recipe(f.fp8, flag("--fp8"));
    if (!f.cross_entropy_fusion.empty()) o.cross_entropy_fusion = strategies::parse_cross_entropy_fusion(f.cross_entropy_fusion);
    o.finetune = strategies::parse_finetune(f.finetune);
    o.optimizer = strategies::parse_optimizer(f.optimizer);
    if (!f.attention.empty()) o.attention = parse_attention(f.attention, flag("--attention"));
    if (!f.attention_backend.empty()) o.attention_backend = parse_attention_backend(f.attention_backend, "--attention-backend");
    o.fold = !f.no_fold;
    o.network = sim::parse_network_mode(f.network);
    o.algo = sim::parse_collective_algo(f.collective_algo);
    o.objective = parse_objective(f.objective);
    if (!f.max_memory.empty()) {
        try {
            o.max_memory = parse_bytes(f.max_memory);
        } catch (const Error&) {
            fail_input("a size such as \"60 GiB\"", "'" + f.max_memory + "'", flag("--max-memory"));
        }
    }
    o.dispatch = parse_dispatch_overhead(f.dispatch_overhead);
    for (const std::string& name : f.frameworks) {
        const strategies::Framework fw = strategies::parse_framework(name);   // bad_input names --framework
        if (o.fp8 != Fp8Recipe::none && !fw.fp8)
            fail_input("--fp8 runs through Transformer Engine on Megatron core; " + strategies::describe(fw) +
                           " does not: leave out --framework, or give megatron",
                       flag("--framework"));
        if (const std::string why = strategies::cross_entropy_fusion_refusal(fw, o.cross_entropy_fusion); !why.empty())
            fail_input(why, flag("--framework"));
        if (std::find(o.frameworks.begin(), o.frameworks.end(), name) != o.frameworks.end())
            fail_input("a framework listed twice, " + name, flag("--framework"));
        o.frameworks.push_back(name);
    }
    if (o.frameworks.empty())
        if (const std::string why = strategies::cross_entropy_fusion_refusal(strategies::parse_framework("megatron"),
                                                                             o.cross_entropy_fusion);
            !why.empty())
            fail_input(why, flag("--cross-entropy-fusion"));
    o.overlap_grad_reduce = f.overlap_grad_reduce;
    o.overlap_param_gather = f.overlap_param_gather;
    o.tp_comm_overlap = f.tp_comm_overlap;
    o.fp8_param_gather = f.fp8_param_gather;
    if (o.fp8_param_gather && o.fp8 == Fp8Recipe::none)
        fail_input("has no effect without --fp8: it keeps the FP8 layers' weights in FP8 and gathers them so",
                   flag("--fp8-param-gather"));
    if (f.vocab_multiple) {
        // What resolve would refuse of every plan alike is refused here; a plan off Megatron
        // trains the model's vocabulary (sweep.cpp resolve_lenient).
        strategies::check_vocab_multiple(model, *f.vocab_multiple);
        const bool megatron = std::any_of(o.frameworks.begin(), o.frameworks.end(), [](const std::string& name) {
            return strategies::pads_vocabulary(strategies::parse_framework(name));
        });
        if (!o.frameworks.empty() && !megatron)
            fail_input("has no effect here: it pads the vocabulary of the plans on Megatron or Megatron-DeepSpeed, and --framework " + join(o.frameworks) +
                           " trains the model's vocabulary as it is",
                       flag("--make-vocab-size-divisible-by"));
        o.vocab_multiple = f.vocab_multiple;
    }
    o.min_headroom = f.min_headroom;
    if (f.jobs && (*f.jobs < 1 || *f.jobs > 1024))
        fail_input("--jobs between 1 and 1024 (leave it out for the machine's cores)", std::to_string(*f.jobs), flag("--jobs"));
    // Under mpirun the ranks of one host share its cores.
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    o.jobs = f.jobs.value_or(std::max(1, cores / (session ? session->local_size() : 1)));
    if (f.refine && o.network != sim::NetworkMode::analytic)
        fail_input("has no effect here: it sets how many plans --network analytic re-simulates flow-level", flag("--refine"));
    o.refine = f.refine.value_or(10);
    for (const std::string& s : f.strategies) o.space.strategies.push_back(strategies::parse_data_parallel(s));
    o.space.tp = f.tp;
    o.space.pp = f.pp;
    o.space.cp = f.cp;
    o.space.ep = f.ep;
    for (const std::string& v : f.fsdp_sharding) {
        const strategies::FsdpSharding sharding = strategies::parse_fsdp_sharding(v);
        if (std::find(o.space.fsdp_sharding.begin(), o.space.fsdp_sharding.end(), sharding) == o.space.fsdp_sharding.end())
            o.space.fsdp_sharding.push_back(sharding);
    }
    if (!o.space.fsdp_sharding.empty() && !o.space.strategies.empty() &&
        std::find(o.space.strategies.begin(), o.space.strategies.end(), strategies::DataParallel::fsdp) == o.space.strategies.end())
        fail_input("has no effect here: it is FSDP's sharding, and --strategies does not search fsdp", flag("--fsdp-sharding"));
    for (const std::string& s : f.cp_comm) {
        const CpComm c = parse_cp_comm(s, flag("--cp-comm"));
        if (std::find(o.space.cp_comm.begin(), o.space.cp_comm.end(), c) == o.space.cp_comm.end()) o.space.cp_comm.push_back(c);
    }
    if (!o.space.cp_comm.empty() && std::none_of(f.cp.begin(), f.cp.end(), [](int v) { return v > 1; }))
        fail_input("--cp-comm has no effect here: it sets how context-parallel attention exchanges keys and values; "
                   "list a --cp size of 2 or more",
                   flag("--cp-comm"));
    for (const std::string& s : f.offload) o.space.offload.push_back(strategies::parse_offload(s, "--offload"));
    // Offload asked for where no searched strategy can offload (ddp, ring, ps) is refused, not
    // ignored; which strategy offloads where is offload_choices' (fit_advice.hpp).
    if (!o.space.strategies.empty()) {
        const auto reaches = [&](strategies::Offload tier) {
            return std::any_of(o.space.strategies.begin(), o.space.strategies.end(), [&](strategies::DataParallel d) {
                const auto choices = offload_choices(d, tier == strategies::Offload::nvme);
                return std::any_of(choices.begin(), choices.end(), [&](const OffloadChoice& c) { return c.tier() == tier; });
            });
        };
        for (strategies::Offload tier : o.space.offload) {
            if (tier == strategies::Offload::none || reaches(tier)) continue;
            if (tier == strategies::Offload::nvme && reaches(strategies::Offload::cpu))
                fail_input("nvme has no effect here: only zero3 offloads to NVMe (ZeRO-Infinity); add zero3 to --strategies",
                           flag("--offload"));
            fail_input("no effect here: none of the --strategies searched keeps states off the device; "
                       "list zero1, zero2, zero3 or fsdp",
                       flag("--offload"));
        }
    }
    for (const std::string& c : f.compress) o.space.compress.push_back(strategies::parse_compression(c));
    o.space.zeropp = f.zeropp;
    o.space.mics = f.mics;
    o.space.recompute_modules = f.recompute_modules;
    if (f.recompute_modules && strategies::recompute_module_tiers(model, strategies::parse_framework("megatron")).empty())
        fail_input("has no effect here: " + model.name() + " has no module of Megatron core's --recompute-modules to redo "
                   "but the attention core, which --recompute selective is",
                   flag("--recompute-modules"));
    if (f.mics && !o.space.strategies.empty() &&
        std::find(o.space.strategies.begin(), o.space.strategies.end(), strategies::DataParallel::zero3) == o.space.strategies.end())
        fail_input("has no effect here: MiCS shards zero3, and --strategies does not search it", flag("--mics"));
    if (f.zeropp && !o.space.strategies.empty() &&
        std::find(o.space.strategies.begin(), o.space.strategies.end(), strategies::DataParallel::zero3) == o.space.strategies.end())
        fail_input("has no effect here: ZeRO++ reworks zero3, and --strategies does not search it", flag("--zeropp"));
    // Compression asked for where no searched strategy compresses (only ddp and ring all-reduce
    // full gradients, strategies/compression.hpp) is refused, not ignored.
    const bool compresses = std::any_of(o.space.compress.begin(), o.space.compress.end(),
                                        [](const strategies::Compression& c) { return c.method != strategies::CompressionMethod::none; });
    if (compresses && !o.space.strategies.empty() &&
        std::none_of(o.space.strategies.begin(), o.space.strategies.end(), [](strategies::DataParallel d) {
            return d == strategies::DataParallel::ddp || d == strategies::DataParallel::ring;
        }))
        fail_input("no effect here: only ddp and ring compress their gradients' all-reduce; add one of them to --strategies",
                   flag("--compress"));
    o.space.micro_batch = f.micro_batch;
    if (f.top < 1) fail_input("--top must be at least 1, found " + std::to_string(f.top), flag("--top"));
    for (const auto& [name, list] : {std::pair{"--tp", &f.tp}, {"--pp", &f.pp}, {"--cp", &f.cp}, {"--ep", &f.ep}, {"--micro-batch", &f.micro_batch}})
        for (int v : *list)
            if (v < 1) fail_input(std::string(name) + " values must be at least 1, found " + std::to_string(v), flag(name));

    PlanFlags plan_flags;
    plan_flags.model = f.model;
    plan_flags.cluster = f.cluster;
    plan_flags.cluster_network = f.cluster_network;
    plan_flags.devices = f.devices;
    plan_flags.profile = f.profile;
    plan_flags.slow = f.slow;
    plan_flags.jitter = f.jitter;
    plan_flags.seed = f.seed;
    plan_flags.app = f.app;   // --slow, --jitter and --seed: resolve_cluster's checks, as simulate's
    std::vector<NodeSweep> sweeps;
    if (f.nodes.empty()) {
        sweeps.push_back({std::nullopt, resolve_cluster(plan_flags), {}});
    } else {
        for (int n : f.nodes) {
            plan_flags.nodes = n;
            sweeps.push_back({n, resolve_cluster(plan_flags), {}});
        }
    }
    for (NodeSweep& n : sweeps) {
        ProgressBar bar(io.err, io.err_is_terminal && !f.quiet, "plans");
        SweepOptions mine = o;
        if (io.err_is_terminal && !f.quiet) mine.progress = [&bar](std::size_t done, std::size_t total) { bar.update(done, total); };
        n.result = session ? sweep_over_ranks(model, n.cluster, mine, *session) : sweep(model, n.cluster, mine);
        bar.finish();
        if (&n != &sweeps.front()) io.out << "\n";
        print_sweep(io.out, model, n, o, f.top, speed_text(f));
    }
    std::vector<ScalingRow> scaling;
    if (sweeps.size() > 1) {
        scaling = scaling_rows(sweeps);
        print_scaling(io.out, scaling, sweeps);
    }
    // Under mpirun every rank holds the whole result; rank 0 alone writes the files.
    if (session && !session->root()) return sweeps_fit(sweeps);
    if (!f.csv.empty()) {
        write_text_file(f.csv, csv_text(model, sweeps), f.force, "--csv");
        io.out << "\n  every plan written to " << f.csv << "\n";
    }
    if (!f.json.empty()) {
        write_text_file(f.json, json_text(model, o, f, sweeps, scaling), f.force, "--json");
        io.out << (f.csv.empty() ? "\n" : "") << "  every plan written to " << f.json << "\n";
    }
    return sweeps_fit(sweeps);
}

}  // namespace

Command add_sweep(CLI::App& parent) {
    auto f = std::make_shared<SweepFlags>();
    CLI::App* app = parent.add_subcommand("sweep", "search every valid plan of a model on a cluster and rank them");
    app->add_option("--model", f->model, "model preset or JSON file")->required();
    app->add_option("--cluster", f->cluster, "cluster preset, JSON file, or presets composed as NAME:NODES,NAME:NODES")
        ->required();
    app->add_option("--cluster-network", f->cluster_network,
                    "network joining a composed cluster's groups: switch or fat-tree (default: one switch)");
    app->add_option("--nodes", f->nodes, "node counts to sweep, e.g. 1,2,4,8 (a scaling table with more than one)")
        ->delimiter(',');
    app->add_option("--devices", f->devices, "use the first N devices of the cluster");
    app->add_option("--global-batch", f->global_batch, "samples per step")->required();
    app->add_option("--seq", f->seq, "sequence length (default: the model's)");
    app->add_option("--dtype", f->dtype, "bf16, fp16 or fp32 (default: the device's)");
    app->add_option("--fp8", f->fp8,
                    "delayed or tensorwise: every plan's linear layers in FP8 (Transformer Engine), on Megatron core");
    app->add_option("--cross-entropy-fusion", f->cross_entropy_fusion,
                    "native or te: every plan's loss as Megatron core's fused cross-entropy, on Megatron core (te: give "
                    "--framework megatron@0.18 or an earlier core from 0.12)");
    app->add_option("--finetune", f->finetune,
                    "what every plan trains: full, lora:RANK[:TARGETS] or qlora:RANK[:TARGETS] (as simulate's)")
        ->capture_default_str();
    app->add_option("--optimizer", f->optimizer, "every plan's optimizer: adam, adamw-8bit, sgd or lamb")->capture_default_str();
    app->add_option("--attention", f->attention,
                    "flash or eager: every plan's attention (default: flash on GPUs of compute capability 8.0 or later, "
                    "eager elsewhere; on CPUs flash is PyTorch's CPU flash kernel)");
    app->add_option("--attention-backend", f->attention_backend,
                    "flash (FlashAttention-2), fused (cuDNN's) or flash3 (FlashAttention-3, Hopper): every plan's flash "
                    "attention kernel (default: each plan's framework's)");
    app->add_option("--network", f->network, "flow, or analytic (screen analytically, re-simulate the best flow-level)")
        ->capture_default_str();
    app->add_option("--refine", f->refine, "with --network analytic: plans re-simulated flow-level (default: 10)");
    app->add_option("--collective-algo", f->collective_algo, "auto, ring, tree, halving-doubling, hierarchical, direct, nvls, pat")
        ->capture_default_str();
    app->add_flag("--no-fold", f->no_fold, "simulate every data-parallel replica");
    app->add_option("--strategies", f->strategies, "data-parallel flavours to try (default: ddp,ring,zero1,zero2,zero3,fsdp)")
        ->delimiter(',');
    app->add_option("--tp", f->tp, "tensor-parallel sizes to try (default: powers of two)")->delimiter(',');
    app->add_option("--pp", f->pp, "pipeline sizes to try (default: powers of two)")->delimiter(',');
    app->add_option("--cp", f->cp, "context-parallel sizes to try, e.g. 1,2,4 (default: 1)")->delimiter(',');
    app->add_option("--fsdp-sharding", f->fsdp_sharding,
                    "FSDP's sharding to try, of full,grad-op,hybrid,none (default: full, and hybrid on several nodes)")
        ->delimiter(',');
    app->add_option("--ep", f->ep,
                    "expert-parallel sizes to try, e.g. 1,8 (default: for a mixture of experts every power of two "
                    "dividing dp · cp and the experts, else 1)")
        ->delimiter(',');
    app->add_option("--cp-comm", f->cp_comm, "with --cp: key-value exchanges to try, of p2p,all-gather,a2a (default: p2p)")->delimiter(',');
    app->add_option("--micro-batch", f->micro_batch, "micro-batch sizes to try (default: powers of two)")->delimiter(',');
    app->add_option("--offload", f->offload,
                    "where plans that cannot fit without offload may keep model states: cpu, nvme, or none (default: cpu)")
        ->delimiter(',');
    app->add_option("--compress", f->compress,
                    "gradient compressions to try, of none,1bit,topk:RATIO,powersgd:RANK (default: none; ddp and ring "
                    "compress)")
        ->delimiter(',');
    app->add_flag("--zeropp", f->zeropp,
                  "zero3 plans on several GPU nodes also try ZeRO++: hpZ over a node, and with qwZ and qgZ too (their "
                  "quantization changes the numbers, so only when asked)");
    app->add_flag("--recompute-modules", f->recompute_modules,
                  "on Megatron core (0.12 on), selective recompute also of Megatron's --recompute-modules: every module "
                  "with something to redo in the model but moe, then with moe");
    app->add_flag("--mics", f->mics,
                  "zero3 plans on several GPU nodes also try MiCS over a node (model states sharded over its GPUs, "
                  "replicated across nodes)");
    app->add_option("--objective", f->objective, "time (step time), tokens (tokens/s) or memory (peak)")->capture_default_str();
    app->add_option("--max-memory", f->max_memory, "peak device memory allowed, e.g. \"60 GiB\"");
    app->add_option("--framework", f->frameworks,
                    "the frameworks to try every plan on, NAME[@VERSION] as simulate's, e.g. deepspeed,megatron (default: "
                    "each plan's); the strategies one does not run are pruned naming it")
        ->delimiter(',');
    app->add_flag("--overlap-grad-reduce", f->overlap_grad_reduce,
                  "every plan whose framework can reduces gradients in buckets during backward (Megatron's "
                  "--overlap-grad-reduce, DeepSpeed's overlap_comm); those that overlap already or cannot run as they do "
                  "(each plan's overlap_grad_reduce in --csv and --json)");
    app->add_flag("--overlap-param-gather", f->overlap_param_gather,
                  "every zero1 plan on Megatron core (its distributed optimizer) all-gathers its parameters under the next "
                  "forward (Megatron's --overlap-param-gather); other plans run as they do (each plan's "
                  "overlap_param_gather in --csv and --json)");
    app->add_flag("--tp-comm-overlap", f->tp_comm_overlap,
                  "every plan with sequence parallelism on Megatron core runs its tensor-parallel collectives through "
                  "Transformer Engine's userbuffers (Megatron's --tp-comm-overlap); other plans run as they do (each "
                  "plan's tp_comm_overlap in --csv and --json)");
    app->add_flag("--fp8-param-gather", f->fp8_param_gather,
                  "with --fp8, every zero1 plan on Megatron core and every Megatron-FSDP plan keeps its FP8 weights in FP8 "
                  "and all-gathers them so (Megatron's --fp8-param-gather); other plans run as they do (each plan's "
                  "fp8_param_gather in --csv and --json)");
    app->add_option("--make-vocab-size-divisible-by", f->vocab_multiple,
                    "every plan on Megatron or Megatron-DeepSpeed pads the vocabulary to a multiple of N × tp (default: "
                    "128, Megatron's); plans on PyTorch and DeepSpeed train the model's vocabulary");
    app->add_option("--dispatch-overhead", f->dispatch_overhead,
                    "host time per GPU kernel before the driver's launch for every plan, such as \"20 us\" (default: each "
                    "plan's framework's; see simulate --help)");
    app->add_option("--profile", f->profile,
                    "a calibration profile (smolcluster calibrate --out FILE; a GPU's with --backend cuda) whose measured "
                    "rates replace the cluster's leads for every plan");
    app->add_option("--slow", f->slow,
                    "slow devices for every plan, RANK:FACTOR[:nic=FACTOR],… (as simulate's: 3:0.5, device 3 at half its "
                    "rates)");
    app->add_option("--jitter", f->jitter, "vary every plan's compute ops within ±PCT % (as simulate's), seeded by --seed");
    app->add_option("--seed", f->seed, "seed of --jitter");
    f->app = app;
    app->add_option("--min-headroom", f->min_headroom, "fraction of each device's memory to leave free, e.g. 0.1");
    app->add_option("--top", f->top, "plans to print")->capture_default_str();
    app->add_option("--jobs", f->jobs, "simulation threads (default: the machine's cores)");
    app->add_option("--csv", f->csv, "write every plan with its summary as CSV to FILE");
    app->add_option("--json", f->json, "write every plan with its summary as JSON to FILE");
    app->add_flag("--force", f->force, "overwrite existing --csv / --json files");
    app->add_flag("--quiet", f->quiet, "no progress bar");
    return {app, [f](const Io& io) {
                if (!exec::launched_by_mpirun()) return run_sweep(*f, io, nullptr);
                exec::require_available("sweep under mpirun");
                return in_session(io, [&](exec::Session& session) {
                    // Rank 0 prints; the others' output (warnings included) goes nowhere. An error
                    // is still printed by every rank that raises it (in_session), as `run` does.
                    std::ostream nowhere(nullptr);
                    const Io quiet{nowhere, nowhere, false, io.command_line, io.argv};
                    return run_sweep(*f, session.root() ? io : quiet, &session);
                });
            }};
}

}  // namespace smol::tools

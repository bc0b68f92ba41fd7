#include "traces/summary.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>

namespace smol::traces {

namespace {

using Interval = std::pair<Time, Time>;

/// Sorts and merges overlapping intervals in place.
void merge(std::vector<Interval>& v) {
    std::sort(v.begin(), v.end());
    std::size_t out = 0;
    for (const auto& iv : v) {
        if (out > 0 && iv.first <= v[out - 1].second)
            v[out - 1].second = std::max(v[out - 1].second, iv.second);
        else
            v[out++] = iv;
    }
    v.resize(out);
}

Time length(const std::vector<Interval>& v) {
    Time t;
    for (const auto& iv : v) t += iv.second - iv.first;
    return t;
}

/// Length of the intersection of two merged interval lists.
Time overlap(const std::vector<Interval>& a, const std::vector<Interval>& b) {
    Time t;
    std::size_t i = 0, j = 0;
    while (i < a.size() && j < b.size()) {
        const Time lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
        if (lo < hi) t += hi - lo;
        (a[i].second < b[j].second) ? ++i : ++j;
    }
    return t;
}

std::string fmt(const char* f, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, f, v);
    return buf;
}

}  // namespace

std::string describe_breakdown(const MemoryBreakdown& m) {
    std::vector<std::pair<Bytes, std::string>> parts;
    for (int l = 0; l < kBufferLabels; ++l)
        if (m.labels[static_cast<std::size_t>(l)] > Bytes(0))
            parts.emplace_back(m.labels[static_cast<std::size_t>(l)], describe(static_cast<BufferLabel>(l)));
    std::stable_sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::string out;
    for (const auto& [bytes, what] : parts) out += (out.empty() ? "" : " · ") + what + " " + to_string_binary(bytes);
    if (m.runtime() > Bytes(0)) {
        out += (out.empty() ? "" : " · ") + std::string("runtime ") + to_string_binary(m.runtime()) + " (CUDA context " + to_string_binary(m.cuda_context) +
               ", NCCL " + to_string_binary(m.nccl) + ", allocator rounding " + to_string_binary(m.allocator) + ")";
    }
    return out.empty() ? "nothing" : out;
}

Json breakdown_json(const MemoryBreakdown& m) {
    Json j = Json::object();
    for (int l = 0; l < kBufferLabels; ++l) j[to_string(static_cast<BufferLabel>(l))] = m.labels[static_cast<std::size_t>(l)].count();
    j["cuda_context"] = m.cuda_context.count();
    j["nccl"] = m.nccl.count();
    j["allocator"] = m.allocator.count();
    return j;
}

Summary summarize(const OpGraph& graph, const Timeline& tl, const StepInfo& info) {
    Summary s;
    s.info = info;
    s.iteration = tl.makespan;
    s.oom = tl.oom;
    if (tl.oom) {
        // Name the buffer by what it holds, and keep the device's memory at its peak.
        OomReport r;
        const OutOfMemory& o = *tl.oom;
        if (o.op == OpGraph::kNoOp || graph.op(o.op).kind != OpKind::alloc) {
            r.buffer = "the runtime's own memory (CUDA context and NCCL buffers)";
            r.label = "runtime";
        } else {
            const Op& op = graph.op(o.op);
            const Buffer& b = graph.buffers()[static_cast<std::size_t>(op.ref)];
            const auto label = static_cast<BufferLabel>(b.label);
            r.label = to_string(label);
            r.layer = op.layer;
            r.microbatch = op.microbatch;
            r.buffer = describe(label);
            if (label == BufferLabel::activations && op.layer >= 0)
                r.buffer += " of layer " + std::to_string(op.layer) + ", micro-batch " + std::to_string(op.microbatch);
            else if (op.layer >= 0)
                r.buffer += " of layer " + std::to_string(op.layer);
        }
        if (static_cast<std::size_t>(o.rank) < tl.peak_breakdown.size())
            r.peak = tl.peak_breakdown[static_cast<std::size_t>(o.rank)][static_cast<int>(o.tier)];
        r.capacity = tl.capacity[static_cast<std::size_t>(o.rank)][static_cast<int>(o.tier)];
        s.oom_report = std::move(r);
    }
    s.events = tl.events;
    s.sim_wall_s = tl.wall_s;
    const double secs = s.iteration.to_seconds();
    if (secs > 0) {
        s.samples_per_s = static_cast<double>(info.global_batch) / secs;
        s.tokens_per_s = s.samples_per_s * info.seq;
        s.tflops_per_device = info.model_flops.count() / secs / info.devices * 1e-12;
        double peak = 0;
        for (FlopRate p : info.peak) peak += p.per_second();
        if (peak > 0) s.mfu = info.model_flops.count() / (secs * peak);
    }
    const int ranks = graph.ranks();
    std::vector<std::vector<Interval>> compute(ranks), comm(ranks);
    for (OpId id = 0; id < graph.size(); ++id) {
        if (tl.start[id] < Time::zero()) continue;
        const Op& op = graph.op(id);
        const Interval iv{tl.start[id], tl.end[id]};
        if (op.kind == OpKind::compute)
            compute[op.rank].push_back(iv);
        else if (op.kind == OpKind::collective)
            comm[op.rank].push_back(iv);
        else if (op.kind == OpKind::send || op.kind == OpKind::recv) {
            // From the rendezvous: a pipeline stage waiting for its neighbour's activations is in
            // the bubble, not communicating.
            const P2P& p = graph.p2ps()[static_cast<std::size_t>(op.ref)];
            comm[op.rank].push_back({std::max(tl.start[p.send], tl.start[p.recv]), tl.end[id]});
        }
    }
    // Materialized ranks from their ops; a folded graph's mirror ranks copy their representative
    // (same program, same times, same memory).
    std::vector<DeviceSummary> own(static_cast<std::size_t>(ranks));
    for (int r = 0; r < ranks; ++r) {
        if (!graph.materialized(r)) continue;
        merge(compute[r]);
        merge(comm[r]);
        DeviceSummary& d = own[static_cast<std::size_t>(r)];
        d.peak_memory = tl.peak[r][static_cast<int>(Tier::device)];
        d.busy = length(compute[r]);
        d.comm = length(comm[r]);
        d.exposed_comm = d.comm - overlap(compute[r], comm[r]);
        std::vector<Interval>().swap(compute[r]);
        std::vector<Interval>().swap(comm[r]);
    }
    double bubble = 0;
    for (int r = 0; r < ranks; ++r) {
        DeviceSummary d = own[static_cast<std::size_t>(graph.representative(r))];
        d.rank = r;
        d.device = tl.device_names[r];
        if (secs > 0) bubble += (s.iteration - d.busy - d.exposed_comm) / s.iteration;
        if (d.peak_memory > s.peak_memory || r == 0) s.peak_rank = r;
        s.peak_memory = std::max(s.peak_memory, d.peak_memory);
        s.exposed_comm = std::max(s.exposed_comm, d.exposed_comm);
        s.total_comm = std::max(s.total_comm, d.comm);
        s.per_device.push_back(std::move(d));
    }
    s.bubble_fraction = ranks > 0 ? bubble / ranks : 0;
    if (static_cast<std::size_t>(s.peak_rank) < tl.peak_breakdown.size()) {
        s.peak_device = tl.peak_breakdown[static_cast<std::size_t>(s.peak_rank)][static_cast<int>(Tier::device)];
        s.peak_host = tl.peak_breakdown[static_cast<std::size_t>(s.peak_rank)][static_cast<int>(Tier::host)];
        s.peak_nvme = tl.peak_breakdown[static_cast<std::size_t>(s.peak_rank)][static_cast<int>(Tier::nvme)];
    }
    // Pipeline stage of a rank: Megatron order, rank = t + tp·(c + cp·(d + dp·stage)).
    const int per_stage = std::max(1, info.tp * info.cp * info.dp);
    if (info.pp > 1 && ranks == info.pp * per_stage) {
        s.per_stage.resize(static_cast<std::size_t>(info.pp));
        for (const DeviceSummary& d : s.per_device) {
            StageSummary& st = s.per_stage[static_cast<std::size_t>(d.rank / per_stage)];
            st.stage = d.rank / per_stage;
            st.peak_memory = std::max(st.peak_memory, d.peak_memory);
        }
    }
    return s;
}

Json to_json(const Summary& s) {
    Json j;
    j["model"] = s.info.model;
    j["cluster"] = s.info.cluster;
    j["strategy"] = s.info.strategy;
    j["framework"] = s.info.framework;
    j["network"] = s.info.network;
    j["devices"] = s.info.devices;
    j["tp"] = s.info.tp;
    j["pp"] = s.info.pp;
    j["cp"] = s.info.cp;
    j["cp_comm"] = s.info.cp_comm;
    j["dp"] = s.info.dp;
    j["global_batch"] = s.info.global_batch;
    j["micro_batch"] = s.info.micro_batch;
    j["microbatches"] = s.info.microbatches;
    j["seq"] = s.info.sequence ? Json(s.info.seq) : Json(nullptr);
    j["seq_note"] = s.info.seq_note;
    j["ep"] = s.info.ep;
    j["attention"] = s.info.attention;
    j["attention_backend"] = s.info.attention_backend.empty() ? Json(nullptr) : Json(s.info.attention_backend);
    j["dtype"] = s.info.dtype;
    j["fp8"] = s.info.fp8 == "none" ? Json(nullptr) : Json(s.info.fp8);
    j["fp8_param_gather"] = s.info.fp8_param_gather;
    j["cross_entropy_fusion"] = s.info.cross_entropy_fusion == "none" ? Json(nullptr) : Json(s.info.cross_entropy_fusion);
    j["padded_vocab"] = s.info.sequence ? Json(s.info.padded_vocab) : Json(nullptr);
    j["compression"] = s.info.compression;
    j["finetune"] = s.info.finetune;
    j["optimizer"] = s.info.optimizer;
    j["folded"] = s.info.folded;
    if (!s.info.notes.empty()) j["notes"] = s.info.notes;
    j["measured"] = s.info.measured;
    j["iteration_time_s"] = s.iteration.to_seconds();
    j["samples_per_s"] = s.samples_per_s;
    j["tokens_per_s"] = s.info.sequence ? Json(s.tokens_per_s) : Json(nullptr);
    j["model_flops_per_iteration"] = s.info.model_flops.count();
    j["tflops_per_device"] = s.tflops_per_device;
    j["mfu"] = s.mfu;
    j["peak_memory_bytes"] = s.peak_memory.count();
    j["fits"] = s.fits();
    if (s.oom) {
        j["oom"] = {{"device", s.oom->device},          {"rank", s.oom->rank},
                    {"tier", to_string(s.oom->tier)},   {"op", s.oom->op == OpGraph::kNoOp ? Json(nullptr) : Json(s.oom->op)},
                    {"requested_bytes", s.oom->requested.count()}, {"free_bytes", s.oom->free.count()}};
        if (s.oom_report) {
            const OomReport& r = *s.oom_report;
            Json& o = j["oom"];
            o["buffer"] = r.buffer;
            o["label"] = r.label;
            o["layer"] = r.layer >= 0 ? Json(r.layer) : Json(nullptr);
            o["microbatch"] = r.microbatch >= 0 ? Json(r.microbatch) : Json(nullptr);
            o["capacity_bytes"] = r.capacity.count();
            o["peak_bytes"] = r.peak.total().count();
            o["breakdown"] = breakdown_json(r.peak);
            Json fits = Json::array();
            for (const FitOption& f : r.fits)
                fits.push_back({{"change", f.change},
                                {"peak_memory_bytes", f.peak.count()},
                                {"capacity_bytes", f.capacity.count()},
                                {"step_time_s", f.step.to_seconds()},
                                {"slowdown", f.slowdown}});
            o["fits"] = std::move(fits);
            o["fits_network"] = r.fits_network;
            if (!r.fits_skipped.empty()) o["fits_skipped"] = r.fits_skipped;
        }
    } else {
        j["oom"] = nullptr;
    }
    j["memory"] = {{"rank", s.peak_rank},
                   {"device", breakdown_json(s.peak_device)},
                   {"host", breakdown_json(s.peak_host)},
                   {"nvme", breakdown_json(s.peak_nvme)}};
    j["exposed_comm_s"] = s.exposed_comm.to_seconds();
    j["total_comm_s"] = s.total_comm.to_seconds();
    j["bubble_fraction"] = s.bubble_fraction;
    Json devices = Json::array();
    for (const auto& d : s.per_device)
        devices.push_back({{"rank", d.rank},
                           {"device", d.device},
                           {"peak_memory_bytes", d.peak_memory.count()},
                           {"busy_s", d.busy.to_seconds()},
                           {"comm_s", d.comm.to_seconds()},
                           {"exposed_comm_s", d.exposed_comm.to_seconds()}});
    j["per_device"] = std::move(devices);
    Json stages = Json::array();
    for (const auto& st : s.per_stage) stages.push_back({{"stage", st.stage}, {"peak_memory_bytes", st.peak_memory.count()}});
    j["per_stage"] = std::move(stages);
    j["events"] = s.events;
    j["sim_wall_s"] = s.sim_wall_s;
    if (s.mean_staleness) j["mean_staleness"] = *s.mean_staleness;
    if (s.update_rate) j["update_rate_per_s"] = *s.update_rate;
    if (s.info.async_updates) {
        // ps-async's step is microbatches rounds, each one update per worker (see print_table).
        j["updates_per_worker"] = s.info.microbatches;
        j["round_time_s"] = s.iteration.to_seconds() / s.info.microbatches;
        j["update_time_s"] = s.iteration.to_seconds() / (static_cast<double>(s.info.microbatches) * s.info.dp);
    }
    return j;
}

namespace {

/// ", 8 data-parallel replicas folded into one" (or into the first node's, each stage's first
/// node's, or replicas and tensor ranks), or "".
std::string fold_note(const StepInfo& i) {
    if (!i.folded) return "";
    std::string note = ", " + std::to_string(i.dp);
    if (i.folded_tp) {
        note += " replicas × ";
        note += std::to_string(i.tp);
        note += " tensor ranks folded into one per stage";
    } else if (i.fold_width > 1) {
        note += " data-parallel replicas folded into " + std::string(i.pp > 1 ? "each stage's" : "the") + " first node's " +
                std::to_string(i.fold_width);
    } else {
        note += " data-parallel replicas folded into one";
    }
    return note;
}

/// "0-7,16-23": sorted ranks as ranges.
std::string rank_ranges(const std::vector<int>& ranks) {
    std::string out;
    for (std::size_t i = 0; i < ranks.size();) {
        std::size_t j = i;
        while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
        out += (out.empty() ? "" : ",") + std::to_string(ranks[i]) + (j > i ? "-" + std::to_string(ranks[j]) : "");
        i = j + 1;
    }
    // A table cell: past 24 characters (strided ranks of a folded 3D plan), the first ranges and
    // "…" — the device column says how many there are and --json lists every one.
    constexpr std::size_t kCell = 24;
    if (out.size() > kCell) {
        const std::size_t cut = out.rfind(',', kCell - 2);
        out = out.substr(0, cut == std::string::npos ? kCell - 2 : cut) + ",…";
    }
    return out;
}

/// Ranks whose figures are identical: one row of the table.
struct RankGroup {
    std::vector<int> ranks;
    const DeviceSummary* first;
};

std::vector<RankGroup> group_ranks(const std::vector<DeviceSummary>& devices) {
    std::vector<RankGroup> groups;
    std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t>, std::size_t> index;
    for (const DeviceSummary& d : devices) {
        const auto key = std::make_tuple(d.busy.count_ps(), d.comm.count_ps(), d.exposed_comm.count_ps(), d.peak_memory.count());
        const auto [it, added] = index.emplace(key, groups.size());
        if (added) groups.push_back({{}, &d});
        groups[it->second].ranks.push_back(d.rank);
    }
    return groups;   // in order of their first rank
}

}  // namespace

void print_table(std::ostream& out, const Summary& s) {
    const auto& i = s.info;
    out << i.model << " on " << i.cluster << " (" << i.devices << (i.devices == 1 ? " device): " : " devices): ")
        << (i.strategy == "none" ? "no data parallelism" : i.strategy)
        << (i.compression == "none" ? "" : " with " + i.compression + " gradient compression")
        << (i.finetune == "full" ? "" : ", " + i.finetune + " fine-tuning") << ", tp " << i.tp << " · pp " << i.pp
        << (i.cp > 1 ? " · cp " + std::to_string(i.cp) + (i.cp_comm == "p2p" ? "" : " (" + i.cp_comm + ")") : std::string()) << " · dp " << i.dp << (i.ep > 1 ? " (ep " + std::to_string(i.ep) + ")" : "") << ", global batch " << i.global_batch << " = "
        << i.dp << " × " << i.microbatches << " × " << i.micro_batch
        << (i.sequence ? ", seq " + std::to_string(i.seq) : std::string()) << ", " << i.dtype
        << (i.fp8 == "none" ? ""
                            : " with FP8 linears (" + i.fp8 + " scaling" +
                                  (i.fp8_bf16_first + i.fp8_bf16_last > 0
                                       ? "; the first " + std::to_string(i.fp8_bf16_first) + " and last " +
                                             std::to_string(i.fp8_bf16_last) + " layers in " + i.dtype
                                       : std::string()) +
                                  (i.fp8_param_gather ? "; weights kept and gathered in FP8" : "") + ")")
        << (i.cross_entropy_fusion == "none" ? "" : ", " + i.cross_entropy_fusion + " fused cross-entropy")
        << (i.optimizer == "adam" ? "" : ", " + i.optimizer)
        << (i.attention.empty() ? "" : ", " + i.attention + " attention" + (i.attention_backend == "fused"    ? " (cuDNN)"
                                                                           : i.attention_backend == "flash3" ? " (FlashAttention-3)"
                                                                                                             : "")) << ", "
        << (i.measured ? "measured" : i.network + " network") << (i.framework.empty() ? "" : ", as " + i.framework)
        << fold_note(i) << "\n";
    if (!i.seq_note.empty() && i.sequence) out << "  seq " << i.seq << ": " << i.seq_note << "\n";
    for (const std::string& note : i.notes) out << "  " << note << "\n";
    out << "\n";
    auto row = [&](const std::string& k, const std::string& v) {
        out << "  " << k << std::string(k.size() < 22 ? 22 - k.size() : 1, ' ') << v << '\n';
    };
    if (i.async_updates) {
        // ps-async has no synchronous step: each worker runs `microbatches` updates against the
        // servers, at its own pace within the staleness bound.
        const double rounds = i.microbatches, updates = rounds * i.dp;
        row("time", to_string(s.iteration) + " for " + std::to_string(i.microbatches) + " rounds of updates (one per worker each: " +
                        fmt("%.0f", updates) + " updates)");
        row("per round", to_string(s.iteration * (1.0 / rounds)) + " (every worker's update)");
        row("per update", to_string(s.iteration * (1.0 / updates)) + " (server side, all workers together)");
        if (s.update_rate) row("update rate", fmt("%.4g updates/s", *s.update_rate) + " (each worker at its own pace, summed)");
    } else {
        row("step time", to_string(s.iteration));
    }
    row("throughput", fmt("%.4g samples/s", s.samples_per_s) + (i.sequence ? fmt(", %.4g tokens/s", s.tokens_per_s) : ""));
    row(i.async_updates ? "model FLOPs / run" : "model FLOPs / step", fmt("%.4g", i.model_flops.count()));
    row("TFLOP/s per device", fmt("%.4g", s.tflops_per_device) + fmt(" (MFU %.1f %%)", s.mfu * 100));
    row("communication", to_string(s.total_comm) + " (exposed " + to_string(s.exposed_comm) + ")");
    row("bubble", fmt(i.async_updates ? "%.1f %% of the run" : "%.1f %% of the step", s.bubble_fraction * 100));
    row("peak memory", to_string_binary(s.peak_memory) + (s.fits() ? " (fits)" : " (DOES NOT FIT)"));
    if (!s.per_stage.empty()) {
        std::string stages;
        for (const auto& st : s.per_stage) stages += (stages.empty() ? "" : ", ") + to_string_binary(st.peak_memory);
        row("peak memory by stage", stages);
    }
    if (s.peak_host.total() > Bytes(0)) row("host memory at peak", describe_breakdown(s.peak_host) + " (rank " + std::to_string(s.peak_rank) + ")");
    if (s.peak_nvme.total() > Bytes(0)) row("NVMe at peak", describe_breakdown(s.peak_nvme) + " (rank " + std::to_string(s.peak_rank) + ")");
    if (s.oom) {
        const std::string what = s.oom_report ? s.oom_report->buffer : std::string("an allocation");
        row("out of memory", s.oom->device + " " + to_string(s.oom->tier) + ": the " + what + " (" + to_string_binary(s.oom->requested) +
                                 ") did not fit, " + to_string_binary(s.oom->free) + " free");
        if (s.oom_report) {
            const OomReport& r = *s.oom_report;
            row("memory at its peak", to_string_binary(r.peak.total()) + " of " + to_string_binary(r.capacity) + ": " + describe_breakdown(r.peak));
            if (!r.fits_skipped.empty()) row("plans that fit", "not searched: " + r.fits_skipped);
            if (r.fits.empty() && !r.fits_network.empty())
                row("plans that fit", "none of the strategies, offload choices, recompute settings and micro-batches "
                                      "smolcluster tried fits");
            if (!r.fits.empty()) {
                row("plans that fit", "each simulated (" + r.fits_network + " network), slowdown against this plan's step:");
                // The changes in a column at least 44 wide, as wide as the longest.
                std::size_t width = 44;
                for (const FitOption& f : r.fits) width = std::max(width, f.change.size() + 2);
                for (const FitOption& f : r.fits)
                    out << "    " << f.change << std::string(width - f.change.size(), ' ')
                        << to_string_binary(f.peak) << " of " << to_string_binary(f.capacity)
                        << (f.slowdown >= 1 ? fmt(", %.2f× slower", f.slowdown) : fmt(", %.2f× faster", 1 / f.slowdown)) << '\n';
            }
        }
    }
    if (s.mean_staleness) row("mean staleness", fmt("%.3g updates", *s.mean_staleness));
    if (i.measured)
        row("executed", std::to_string(s.events) + " ops (one measured step)");
    else
        row("simulated", std::to_string(s.events) + fmt(" events in %.3g s", s.sim_wall_s));

    // One row per group of identical ranks. Past kRows groups, the first ones, then the slowest
    // rank's group and the one with the most memory, whatever their place.
    constexpr std::size_t kRows = 16;
    const std::vector<RankGroup> groups = group_ranks(s.per_device);
    std::size_t slowest = 0, fullest = 0;
    for (std::size_t g = 0; g < groups.size(); ++g) {
        const DeviceSummary& d = *groups[g].first;
        const DeviceSummary& a = *groups[slowest].first;
        if (d.busy + d.exposed_comm > a.busy + a.exposed_comm) slowest = g;
        if (d.peak_memory > groups[fullest].first->peak_memory) fullest = g;
    }
    std::vector<std::size_t> shown;
    for (std::size_t g = 0; g < groups.size() && shown.size() < (groups.size() > kRows ? kRows - 2 : kRows); ++g) shown.push_back(g);
    for (std::size_t g : {slowest, fullest})
        if (std::find(shown.begin(), shown.end(), g) == shown.end()) shown.push_back(g);
    std::sort(shown.begin(), shown.end());
    std::size_t width = 5;
    // Display width: "…" is one column of three bytes (printf pads by bytes, so its rows get 2 more).
    const auto columns = [](const std::string& t) { return t.size() - 2 * (t.find("…") != std::string::npos); };
    for (std::size_t g : shown) width = std::max(width, columns(rank_ranges(groups[g].ranks)));
    out << "\n  " << std::string("rank") + std::string(width - 3, ' ') << "device            busy        comm        exposed     peak memory\n";
    std::size_t previous = 0;
    for (std::size_t k = 0; k < shown.size(); ++k) {
        const std::size_t g = shown[k];
        if (k > 0 && g != previous + 1) out << "  …\n";
        previous = g;
        const RankGroup& grp = groups[g];
        const DeviceSummary& d = *grp.first;
        const std::string device = grp.ranks.size() == 1 ? d.device : std::to_string(grp.ranks.size()) + " devices";
        std::string note;
        if (groups.size() > 1 && g == slowest) note += " (slowest)";
        if (groups.size() > 1 && g == fullest) note += " (most memory)";
        char buf[320];
        const std::string ranks = rank_ranges(grp.ranks);
        std::snprintf(buf, sizeof buf, "  %-*s %-17s %-11s %-11s %-11s %s%s\n",
                      static_cast<int>(width + ranks.size() - columns(ranks)), ranks.c_str(), device.c_str(), to_string(d.busy).c_str(), to_string(d.comm).c_str(),
                      to_string(d.exposed_comm).c_str(), to_string_binary(d.peak_memory).c_str(), note.c_str());
        out << buf;
    }
    if (shown.size() < groups.size())
        out << "  … " << groups.size() - shown.size() << " more groups of ranks (--json lists every rank)\n";
}

}  // namespace smol::traces

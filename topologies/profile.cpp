#include "topologies/profile.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.hpp"

namespace smol::topo {

namespace {

/// Format 2 added the causal flash tables to `compute`; a format-1 profile without `compute`
/// (network and memory only) reads the same in both. Format 3 added a GPU's profile
/// (`measured_on.gpu` with its `sms`, the 16-bit GEMM tables, `host_link`); a format-2 profile
/// reads as before.
constexpr int kFormat = 3;

const std::vector<std::pair<CollectiveKind, const char*>>& kind_names() {
    static const std::vector<std::pair<CollectiveKind, const char*>> names{
        {CollectiveKind::all_reduce, "all_reduce"}, {CollectiveKind::reduce_scatter, "reduce_scatter"},
        {CollectiveKind::all_gather, "all_gather"}, {CollectiveKind::broadcast, "broadcast"},
        {CollectiveKind::reduce, "reduce"},         {CollectiveKind::all_to_all, "all_to_all"},
        {CollectiveKind::barrier, "barrier"}};
    return names;
}

Json numbers(const std::vector<double>& v) { return Json(v); }

Json curve_json(const Curve& c, const char* x, const char* y) { return {{x, numbers(c.x)}, {y, numbers(c.y)}}; }

Json table_json(const ShapeTable& t, const char* rate) {
    return {{"m", numbers(t.m)}, {"n", numbers(t.n)}, {"k", numbers(t.k)}, {rate, numbers(t.rate)}};
}

/// A JSON array of positive finite numbers; `increasing` demands strictly increasing values.
std::vector<double> read_numbers(const JsonView& parent, const std::string& key, bool increasing) {
    const JsonView list = parent.at(key);
    list.expect_array();
    if (list.size() == 0) list.fail("a non-empty array of numbers", "an empty array");
    std::vector<double> out;
    for (std::size_t i = 0; i < list.size(); ++i) {
        const JsonView item = list.at(i);
        if (!item.raw().is_number()) item.fail("a number", describe_json(item.raw()));
        const double v = item.raw().get<double>();
        if (!std::isfinite(v) || v <= 0) item.fail("a number above zero", describe_json(item.raw()));
        if (increasing && !out.empty() && v <= out.back())
            item.fail("a value above the one before it (" + std::to_string(out.back()) + ")", describe_json(item.raw()));
        out.push_back(v);
    }
    return out;
}

/// The (x, y) arrays of a curve; `alone`: they are the object's only members.
Curve read_curve(const JsonView& j, const char* x, const char* y, bool alone = true) {
    if (alone) j.expect_only({x, y});
    Curve c;
    c.x = read_numbers(j, x, true);
    c.y = read_numbers(j, y, false);
    if (c.x.size() != c.y.size())
        j.at(y).fail("as many values as " + std::string(x) + " (" + std::to_string(c.x.size()) + ")",
                     std::to_string(c.y.size()) + " values");
    return c;
}

ShapeTable read_table(const JsonView& j, const char* rate) {
    j.expect_only({"m", "n", "k", rate});
    ShapeTable t;
    t.m = read_numbers(j, "m", true);
    t.n = read_numbers(j, "n", true);
    t.k = read_numbers(j, "k", true);
    t.rate = read_numbers(j, rate, false);
    const std::size_t cells = t.m.size() * t.n.size() * t.k.size();
    if (t.rate.size() != cells)
        j.at(rate).fail("m × n × k = " + std::to_string(cells) + " values", std::to_string(t.rate.size()) + " values");
    return t;
}

double positive(const JsonView& j, const std::string& key) {
    const double v = j.number(key);
    if (!std::isfinite(v) || v <= 0) j.fail_member(key, "a number above zero", describe_json(j.raw().at(key)));
    return v;
}

int count(const JsonView& j, const std::string& key) {
    const std::int64_t v = j.positive_integer(key);
    if (v > 1'000'000) j.fail_member(key, "at most 1000000", std::to_string(v));
    return static_cast<int>(v);
}

/// Latency and bandwidth of a point-to-point curve (alpha-beta, from its smallest and largest messages).
std::pair<Time, Bandwidth> fit(const Curve& c) {
    const double alpha = c.y.front();
    const double rest = std::max(c.y.back() - alpha, c.y.back() * 1e-3);
    return {Time::seconds(alpha), Bandwidth::bytes_per_s(c.x.back() / rest)};
}

}  // namespace

Json to_json(const Profile& p) {
    Json net = Json::array();
    for (const MeasuredTransfer& t : p.network.transfers) {
        std::string kind = "p2p";
        if (!t.p2p)
            for (const auto& [k, name] : kind_names())
                if (k == t.kind) kind = name;
        net.push_back({{"kind", kind}, {"ranks", t.ranks}, {"nodes", t.nodes}, {"bytes", numbers(t.time.x)},
                       {"seconds", numbers(t.time.y)}});
    }
    const MeasuredCompute& c = p.compute;
    Json out = {
        {"smolcluster_profile", kFormat},
        {"measured_on",
         {{"hosts", p.hosts},
          {"cpu_model", p.cpu_model},
          {"cores", p.cores},
          {"nodes", p.nodes},
          {"ranks_per_node", p.ranks_per_node},
          {"blas", p.blas},
          {"blas_threads", p.blas_threads},
          {"mpi", p.mpi},
          {"date", p.date},
          {"quick", p.quick}}},
        {"network", net},
    };
    if (!p.source.empty()) out["measured_on"]["source"] = p.source;
    if (c.on_gpu()) {
        out["measured_on"]["gpu"] = c.gpu;
        out["measured_on"]["sms"] = c.sms;
    }
    if (p.has_compute) {
        out["compute"] = {{"dispatch_s", c.dispatch.to_seconds()},
                          {"gemm", table_json(c.gemm, "flops_per_s")},
                          {"flash_forward", table_json(c.flash_fwd, "flops_per_s")},
                          {"flash_backward", table_json(c.flash_bwd, "flops_per_s")},
                          {"flash_forward_causal", table_json(c.flash_fwd_causal, "flops_per_s")},
                          {"flash_backward_causal", table_json(c.flash_bwd_causal, "flops_per_s")},
                          {"stream", curve_json(c.stream, "bytes", "bytes_per_s")},
                          {"softmax", curve_json(c.softmax, "elements", "elements_per_s")},
                          {"adam", curve_json(c.adam, "parameters", "parameters_per_s")}};
        if (c.comm_slowdown > 0) out["compute"]["comm_slowdown"] = c.comm_slowdown;
        if (c.arithmetic > 0) out["compute"]["arithmetic_flops_per_s"] = c.arithmetic;
        if (c.on_gpu()) {
            out["compute"]["gemm_bf16"] = table_json(c.gemm_bf16, "flops_per_s");
            out["compute"]["gemm_fp16"] = table_json(c.gemm_fp16, "flops_per_s");
        }
    }
    if (!p.h2d.empty() || !p.d2h.empty())
        out["host_link"] = {{"h2d", curve_json(p.h2d, "bytes", "seconds")}, {"d2h", curve_json(p.d2h, "bytes", "seconds")}};
    if (p.has_memory)
        out["memory"] = {{"memcpy_bytes_per_s", p.memcpy.bytes_per_second()},
                         {"file_read_bytes_per_s", p.file_read.bytes_per_second()},
                         {"file_write_bytes_per_s", p.file_write.bytes_per_second()},
                         {"direct_io", p.direct_io}};
    return out;
}

Profile profile_from_json(const JsonView& j) {
    j.expect_only({"smolcluster_profile", "measured_on", "compute", "memory", "network", "host_link"});
    const std::int64_t format = j.integer("smolcluster_profile");
    if (format == 1 && j.has("compute"))
        j.fail_member("compute", "the causal attention timings of format 2 and later (run smolcluster calibrate again)",
                      "a format-1 profile's compute section, timed without the causal mask");
    if (format < 1 || format > kFormat)
        j.fail_member("smolcluster_profile", "format " + std::to_string(kFormat) + " (this smolcluster's)",
                      describe_json(j.raw().at("smolcluster_profile")));
    Profile p;
    const JsonView on = j.at("measured_on");
    on.expect_only({"hosts", "cpu_model", "cores", "nodes", "ranks_per_node", "blas", "blas_threads", "mpi", "date", "quick",
                    "source", "gpu", "sms"});
    if (format < 3 && on.has("gpu"))
        on.fail_member("gpu", "no GPU in a format-" + std::to_string(format) + " profile (a GPU's is format 3)",
                       describe_json(on.raw().at("gpu")));
    const JsonView hosts = on.at("hosts");
    hosts.expect_array();
    for (std::size_t i = 0; i < hosts.size(); ++i) {
        if (!hosts.at(i).raw().is_string()) hosts.at(i).fail("a host name", describe_json(hosts.at(i).raw()));
        p.hosts.push_back(hosts.at(i).raw().get<std::string>());
    }
    p.cpu_model = on.string_or("cpu_model", "");
    p.cores = on.has("cores") ? count(on, "cores") : 1;
    p.nodes = count(on, "nodes");
    p.ranks_per_node = count(on, "ranks_per_node");
    p.blas = on.string_or("blas", "");
    p.blas_threads = on.has("blas_threads") ? count(on, "blas_threads") : 1;
    p.mpi = on.string_or("mpi", "");
    p.date = on.string("date");
    p.quick = on.boolean_or("quick", false);
    p.source = on.string_or("source", "");
    p.compute.gpu = on.string_or("gpu", "");
    if (on.has("gpu") && p.compute.gpu.empty()) on.fail_member("gpu", "the GPU's name", "an empty string");
    const bool gpu = p.compute.on_gpu();
    if (gpu) p.compute.sms = count(on, "sms");
    else if (on.has("sms"))
        on.fail_member("sms", "no streaming multiprocessors in a profile without measured_on.gpu", describe_json(on.raw().at("sms")));

    p.has_compute = j.has("compute");
    if (p.has_compute) {
        const JsonView c = j.at("compute");
        c.expect_only({"dispatch_s", "comm_slowdown", "arithmetic_flops_per_s", "gemm", "gemm_bf16", "gemm_fp16", "flash_forward",
                       "flash_backward", "flash_forward_causal", "flash_backward_causal", "stream", "softmax", "adam"});
        if (!gpu)
            for (const char* key : {"gemm_bf16", "gemm_fp16"})
                if (c.has(key))
                    c.fail_member(key, "no 16-bit GEMM table in a CPU's profile (a GPU's names it in measured_on.gpu)",
                                  "one");
        p.compute.dispatch = Time::seconds(positive(c, "dispatch_s"));
        // A GPU's profile has neither (the cluster keeps its leads); a CPU's has both.
        p.compute.comm_slowdown = 0;
        if (!gpu || c.has("comm_slowdown")) {
            p.compute.comm_slowdown = c.number("comm_slowdown");
            if (!(p.compute.comm_slowdown >= 1.0))
                c.fail_member("comm_slowdown", "a slowdown factor of at least 1", describe_json(c.raw().at("comm_slowdown")));
        }
        if (!gpu || c.has("arithmetic_flops_per_s")) p.compute.arithmetic = positive(c, "arithmetic_flops_per_s");
        p.compute.gemm = read_table(c.at("gemm"), "flops_per_s");
        if (gpu) {
            p.compute.gemm_bf16 = read_table(c.at("gemm_bf16"), "flops_per_s");
            p.compute.gemm_fp16 = read_table(c.at("gemm_fp16"), "flops_per_s");
        }
        p.compute.flash_fwd = read_table(c.at("flash_forward"), "flops_per_s");
        p.compute.flash_bwd = read_table(c.at("flash_backward"), "flops_per_s");
        p.compute.flash_fwd_causal = read_table(c.at("flash_forward_causal"), "flops_per_s");
        p.compute.flash_bwd_causal = read_table(c.at("flash_backward_causal"), "flops_per_s");
        p.compute.stream = read_curve(c.at("stream"), "bytes", "bytes_per_s");
        p.compute.softmax = read_curve(c.at("softmax"), "elements", "elements_per_s");
        p.compute.adam = read_curve(c.at("adam"), "parameters", "parameters_per_s");
    }
    p.has_memory = j.has("memory");
    if (p.has_memory) {
        const JsonView m = j.at("memory");
        m.expect_only({"memcpy_bytes_per_s", "file_read_bytes_per_s", "file_write_bytes_per_s", "direct_io"});
        p.memcpy = Bandwidth::bytes_per_s(positive(m, "memcpy_bytes_per_s"));
        p.file_read = Bandwidth::bytes_per_s(positive(m, "file_read_bytes_per_s"));
        p.file_write = Bandwidth::bytes_per_s(positive(m, "file_write_bytes_per_s"));
        p.direct_io = m.boolean("direct_io");
    }

    if (j.has("host_link")) {
        const JsonView h = j.at("host_link");
        if (!gpu) h.fail("no host_link (a GPU's pinned copies) in a profile without measured_on.gpu", "one");
        h.expect_only({"h2d", "d2h"});
        p.h2d = read_curve(h.at("h2d"), "bytes", "seconds");
        p.d2h = read_curve(h.at("d2h"), "bytes", "seconds");
    }

    const JsonView net = j.at("network");
    net.expect_array();
    std::set<std::tuple<std::string, int, int>> seen;
    for (std::size_t i = 0; i < net.size(); ++i) {
        const JsonView t = net.at(i);
        t.expect_only({"kind", "ranks", "nodes", "bytes", "seconds"});
        MeasuredTransfer mt;
        const std::string kind = t.string("kind");
        std::vector<std::string> names{"p2p"};
        for (const auto& [k, name] : kind_names()) names.emplace_back(name);
        if (kind == "p2p") {
            mt.p2p = true;
        } else {
            const auto it = std::find_if(kind_names().begin(), kind_names().end(), [&](const auto& kn) { return kind == kn.second; });
            if (it == kind_names().end())
                t.fail_member("kind", "a collective kind or \"p2p\"" + did_you_mean(kind, names), "\"" + kind + "\"");
            mt.kind = it->first;
        }
        mt.ranks = count(t, "ranks");
        mt.nodes = count(t, "nodes");
        if (mt.nodes > mt.ranks) t.fail_member("nodes", "at most ranks (" + std::to_string(mt.ranks) + ")", std::to_string(mt.nodes));
        mt.time = read_curve(t, "bytes", "seconds", false);
        if (!seen.insert({kind, mt.ranks, mt.nodes}).second)
            t.fail("one curve per kind, ranks and nodes", "a second " + kind + " over " + std::to_string(mt.ranks) + " ranks");
        p.network.transfers.push_back(std::move(mt));
    }
    return p;
}

Profile load_profile(const std::string& path) {
    const Json json = load_json_file(path);
    return profile_from_json(JsonView(json, path));
}

Cluster apply_profile(const Cluster& cluster, const Profile& profile, const std::string& file) {
    const ErrorContext where{file, "", "--profile"};
    for (std::size_t i = 1; i < cluster.groups.size(); ++i)
        if (cluster.groups[i].device.name != cluster.groups[0].device.name)
            fail_input("profile " + file + " describes one kind of host, and cluster " + cluster.name + " mixes " +
                           cluster.groups[0].device.name + " and " + cluster.groups[i].device.name +
                           ": calibrate each kind and give each group its own cluster file",
                       where);
    const bool gpu = profile.compute.on_gpu();
    if (gpu)
        for (const NodeGroup& g : cluster.groups)
            if (g.device.is_cpu)
                fail_input("profile " + file + " was measured on a GPU (" + profile.compute.gpu + "), and cluster " + cluster.name +
                               "'s devices are CPUs (" + g.device.name + "): calibrate the board itself (smolcluster calibrate)",
                           where);
    Cluster out = cluster;
    const auto compute = profile.has_compute ? std::make_shared<const MeasuredCompute>(profile.compute) : nullptr;
    const MeasuredTransfer* intra = profile.network.p2p(1);
    const MeasuredTransfer* inter = profile.network.p2p(2);
    for (NodeGroup& g : out.groups) {
        // Only a CPU's compute and memory rates depend on how many ranks share a host (a GPU's
        // are its own); a collective curve is looked up by its own ranks and hosts, so a
        // network-only profile fits any node.
        if (((profile.has_compute && !gpu) || profile.has_memory) && g.devices_per_node != profile.ranks_per_node)
            fail_input("profile " + file + " was measured with " + std::to_string(profile.ranks_per_node) +
                           " ranks per node, and cluster " + cluster.name + " has " + std::to_string(g.devices_per_node) +
                           " devices per node (group " + g.name + "): ranks share a host's cores and memory, so the "
                           "rates depend on how many there are; calibrate with mpirun -np " +
                           std::to_string(g.devices_per_node) + " on one host",
                       where);
        if (profile.has_compute) {
            DeviceKind& d = g.device;
            d.measured = compute;
            d.launch_overhead = profile.compute.dispatch;
            if (profile.compute.comm_slowdown >= 1) d.comm_slowdown = profile.compute.comm_slowdown;
            if (gpu) d.sms = profile.compute.sms;   // the measured GPU's, which its NCCL calls share
            if (!profile.compute.stream.empty()) {
                d.memory_bandwidth = Bandwidth::bytes_per_s(profile.compute.stream.y.back());
                d.memory_efficiency = 1.0;
            }
        }
        if (profile.has_memory) {
            g.host_memory_bandwidth = profile.memcpy;
            if (g.nvme_capacity) {
                g.nvme_read = profile.file_read;
                g.nvme_write = profile.file_write;
            }
        }
        if (!profile.h2d.empty() && !profile.d2h.empty()) {
            // Offload's copies go both ways over the one link: the slower direction prices both.
            const auto [l1, b1] = fit(profile.h2d);
            const auto [l2, b2] = fit(profile.d2h);
            g.host_link = {std::min(b1, b2), std::max(l1, l2)};
        }
        if (intra && g.intra != IntraKind::none) {
            // A message between two ranks of a host crosses two intra links (rank → shm → rank).
            const auto [latency, bandwidth] = fit(intra->time);
            g.intra_link = {bandwidth, latency * 0.5};
        }
        if (inter) {
            // rank → NIC → switch → NIC → rank: the NIC links carry it; the switch adds its latency.
            const auto [latency, bandwidth] = fit(inter->time);
            const Time wire = std::max(Time::zero(), latency - out.network.switch_latency);
            g.nic_link = {bandwidth, wire * 0.5};
        }
    }
    out.measured_network = std::make_shared<const MeasuredNetwork>(profile.network);
    out.profile = file;
    return out;
}

}  // namespace smol::topo

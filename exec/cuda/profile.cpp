// GPU calibration figures as a profile (measure.hpp fill_profile). Pure C++: built and tested
// with or without CUDA.
#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "core/error.hpp"
#include "exec/cuda/measure.hpp"

namespace smol::exec::cuda {

namespace {

[[noreturn]] void incomplete(const std::string& what) {
    throw Error(ErrorKind::internal, "GPU calibration figures without " + what + ": measure_device fills every grid point");
}

double positive_seconds(double s, const std::string& what) {
    if (!(s > 0) || !std::isfinite(s)) throw Error(ErrorKind::internal, "GPU calibration timed " + what + " at " + std::to_string(s) + " s");
    return s;
}

std::vector<double> as_doubles(const std::vector<std::int64_t>& v) { return {v.begin(), v.end()}; }

/// The distinct values of `v`, increasing.
std::vector<double> grid(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    return v;
}

/// size → size / seconds (`rate`) or size → seconds, increasing sizes.
topo::Curve curve(std::vector<SizeTime> points, bool rate, const std::string& what) {
    std::sort(points.begin(), points.end(), [](const SizeTime& a, const SizeTime& b) { return a.size < b.size; });
    topo::Curve c;
    for (const SizeTime& p : points) {
        const double s = positive_seconds(p.seconds, what + " of " + std::to_string(p.size));
        if (!c.x.empty() && static_cast<double>(p.size) <= c.x.back()) continue;   // one point per size
        c.x.push_back(static_cast<double>(p.size));
        c.y.push_back(rate ? static_cast<double>(p.size) / s : s);
    }
    return c;
}

topo::ShapeTable gemm_table(const GpuFigures& f, DType dtype) {
    topo::ShapeTable t;
    t.m = t.n = t.k = as_doubles(f.gemm_dims);
    std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, double> rate;
    for (const GemmRate& g : f.gemm)
        if (g.dtype == dtype && !g.tf32) rate[{g.m, g.n, g.k}] = g.flops_per_s;
    for (std::int64_t m : f.gemm_dims)
        for (std::int64_t n : f.gemm_dims)
            for (std::int64_t k : f.gemm_dims) {   // k fastest, as ShapeTable wants
                const auto it = rate.find({m, n, k});
                if (it == rate.end() || !(it->second > 0))
                    incomplete(std::string(to_string(dtype)) + " GEMM " + std::to_string(m) + "×" + std::to_string(n) + "×" +
                               std::to_string(k));
                t.rate.push_back(it->second);
            }
    return t;
}

topo::ShapeTable flash_table(const GpuFigures& f, bool backward, bool causal) {
    std::vector<double> q, kv, d;
    for (const FlashRate& r : f.flash) {
        q.push_back(static_cast<double>(r.q));
        kv.push_back(static_cast<double>(r.kv));
        d.push_back(static_cast<double>(r.d));
    }
    topo::ShapeTable t;
    t.m = grid(q);
    t.n = grid(kv);
    t.k = grid(d);
    std::map<std::tuple<double, double, double>, double> rate;
    for (const FlashRate& r : f.flash)
        if (r.backward == backward && r.causal == causal)
            rate[{static_cast<double>(r.q), static_cast<double>(r.kv), static_cast<double>(r.d)}] = r.flops_per_s;
    for (double m : t.m)
        for (double n : t.n)
            for (double k : t.k) {
                const auto it = rate.find({m, n, k});
                if (it == rate.end() || !(it->second > 0))
                    incomplete(std::string("flash attention ") + (backward ? "backward" : "forward") + (causal ? ", causal," : "") +
                               " at " + std::to_string(static_cast<std::int64_t>(m)) + " queries, " +
                               std::to_string(static_cast<std::int64_t>(n)) + " keys, head dim " +
                               std::to_string(static_cast<std::int64_t>(k)));
                t.rate.push_back(it->second);
            }
    return t;
}

}  // namespace

void fill_profile(const GpuFigures& f, topo::Profile& p) {
    if (f.device.empty()) incomplete("the GPU's name");
    if (f.sms < 1) incomplete("the GPU's streaming multiprocessors");
    if (f.gemm_dims.empty()) incomplete("GEMMs");
    if (f.flash.empty()) incomplete("flash attention");
    topo::MeasuredCompute& c = p.compute;
    c = topo::MeasuredCompute{};
    c.gpu = f.device;
    c.sms = f.sms;
    c.gemm = gemm_table(f, DType::fp32);
    c.gemm_bf16 = gemm_table(f, DType::bf16);
    c.gemm_fp16 = gemm_table(f, DType::fp16);
    c.flash_fwd = flash_table(f, false, false);
    c.flash_bwd = flash_table(f, true, false);
    c.flash_fwd_causal = flash_table(f, false, true);
    c.flash_bwd_causal = flash_table(f, true, true);
    c.stream = curve(f.stream, true, "the streaming pass");
    c.softmax = curve(f.softmax, true, "softmax");
    c.adam = curve(f.adam, true, "Adam");
    if (c.stream.empty() || c.softmax.empty() || c.adam.empty()) incomplete("streaming, softmax and Adam sizes");
    c.dispatch = Time::seconds(positive_seconds(f.launch.to_seconds(), "the launch interval"));
    c.arithmetic = 0;      // not measured on a GPU: extra arithmetic runs at the device's vector peak
    c.comm_slowdown = 0;   // not measured on a GPU: the cluster keeps its lead
    p.has_compute = true;
    p.has_memory = false;  // memcpy and file I/O are the CPU calibration's; a GPU's copies are its host link
    p.h2d = curve(f.h2d, false, "a host-to-device copy");
    p.d2h = curve(f.d2h, false, "a device-to-host copy");

    // NCCL: one curve per (collective, group size); a group of the first `ranks` ranks spans
    // ranks / ranks_per_node hosts (rounded up), as mpirun fills hosts in order.
    std::map<std::pair<CollectiveKind, int>, std::vector<SizeTime>> groups;
    for (const NcclTime& n : f.nccl) groups[{n.kind, n.ranks}].push_back({n.bytes, n.seconds});
    p.network.transfers.clear();
    const int per_node = std::max(1, p.ranks_per_node);
    for (const auto& [key, points] : groups) {
        topo::MeasuredTransfer t;
        t.kind = key.first;
        t.ranks = key.second;
        t.nodes = (key.second + per_node - 1) / per_node;
        t.time = curve(points, false, std::string("NCCL ") + to_string(key.first) + " over " + std::to_string(key.second) + " GPUs");
        p.network.transfers.push_back(std::move(t));
    }
}

}  // namespace smol::exec::cuda

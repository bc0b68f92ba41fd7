// Frontier scale: how simulation time and memory grow with the cluster, from 1,024 to 131,072
// GPUs, for three plans, each size simulated in a child process of its own so its peak memory is
// its own:
//
//   3d     GPT-3 175B, tp 8 · pp 16 · dp GPUs/128, 1F1B, full recompute, micro-batch 1, global
//          batch = GPUs (128 micro-batches per replica); data-parallel replicas folded
//   dp     GPT-2 XL, PyTorch DDP over every GPU, micro-batch 1, global batch = GPUs; folded
//   zero3  GPT-3 175B, DeepSpeed ZeRO-3 over every GPU, full recompute (without it the activations
//          of micro-batch 1 overflow an 80 GB A100), micro-batch 1, global batch = GPUs; folded
//   dp-pi5 GPT-2 small, PyTorch DDP over one Raspberry Pi 5 per node (pi5-1gbe, MPI's algorithms
//          over 1 GbE), micro-batch 1, global batch = boards; folded
//   zero3-offload  the zero3 plan with parameters and optimizer in host memory (ZeRO-Infinity's
//          --offload cpu); folded node by node (the first node's 8 replicas share its host)
//
// the GPU plans on dgx-a100 up to 16,384 GPUs and dgx-h100 beyond (the table: 131,072 GPUs are
// dgx-h100 × 16,384 nodes). Flow-level network, no trace recording (as `smolcluster simulate`
// without --trace). Per run: wall time of the whole (topology, graph, simulation, summary) and of
// each part, CPU time, peak resident memory, events and events per second; per plan the growth
// exponent fitted (least squares of log wall time against log GPUs) across the sizes.
//
// Usage: bench_scale [--plans 3d,dp,zero3,dp-pi5,zero3-offload] [--sizes 1024,4096,16384,65536,131072] [--repeats R]
//        bench_scale --child PLAN GPUS      (one run; prints one line of figures)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <sys/resource.h>

#include "bench_util.hpp"
#include "sim/simulator.hpp"
#include "strategies/plan.hpp"
#include "tools/simulation.hpp"

using namespace smol;
using namespace smol::strategies;

namespace {

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream in(s);
    for (std::string item; std::getline(in, item, ',');) out.push_back(item);
    return out;
}

const char* cluster_for(const std::string& plan, int gpus) {
    if (plan == "dp-pi5") return "pi5-1gbe";
    return gpus <= 16384 ? "dgx-a100" : "dgx-h100";
}

Plan plan_for(const std::string& name, int gpus, std::string& model) {
    Plan p;
    p.global_batch = gpus;
    p.micro_batch = 1;
    if (name == "3d") {
        model = "gpt3-175b";
        p.tp = 8;
        p.pp = 16;
        p.dp = gpus / 128;
        p.schedule = Schedule::one_f_one_b;
        p.recompute = Recompute::full;
    } else if (name == "dp") {
        model = "gpt2-xl";
        p.strategy = DataParallel::ddp;
    } else if (name == "zero3") {
        model = "gpt3-175b";
        p.strategy = DataParallel::zero3;
        p.recompute = Recompute::full;
    } else if (name == "dp-pi5") {
        model = "gpt2-small";
        p.strategy = DataParallel::ddp;
    } else if (name == "zero3-offload") {
        model = "gpt3-175b";
        p.strategy = DataParallel::zero3;
        p.recompute = Recompute::full;
        p.offload = Offload::cpu;
    } else {
        std::fprintf(stderr, "bench_scale: unknown plan '%s' (3d, dp, zero3, dp-pi5, zero3-offload)\n", name.c_str());
        std::exit(2);
    }
    return p;
}

double cpu_seconds() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

/// One run, in this process: prints "wall cpu topology build simulate summary rss_mb events step ops folded".
int child(const std::string& name, int gpus) {
    std::string model_name;
    const Plan p = plan_for(name, gpus, model_name);
    const auto t0 = std::chrono::steady_clock::now();
    const Model model = model_preset(model_name);
    const topo::Cluster base = topo::cluster_preset(cluster_for(name, gpus));
    const topo::Cluster cluster = base.with_nodes(gpus / base.groups.front().devices_per_node);
    const topo::Topology topology(cluster);
    const double topo_s = bench::seconds_since(t0);
    auto t = std::chrono::steady_clock::now();
    const Built built = build(model, cluster, p);
    const double build_s = bench::seconds_since(t);
    sim::SimOptions opt;
    opt.record_memory = false;
    t = std::chrono::steady_clock::now();
    const Timeline tl = sim::simulate(built.graph, cluster, topology, opt);
    const double sim_s = bench::seconds_since(t);
    t = std::chrono::steady_clock::now();
    const traces::StepInfo info = tools::step_info(model, cluster, p, built, "flow");
    const traces::Summary summary = tools::summarize_plan(built, tl, info, p);
    const double summary_s = bench::seconds_since(t);
    std::printf("%.4f %.4f %.4f %.4f %.4f %.4f %.1f %llu %.9f %zu %d\n", bench::seconds_since(t0), cpu_seconds(), topo_s,
                build_s, sim_s, summary_s, bench::peak_rss_mb(), static_cast<unsigned long long>(tl.events),
                summary.iteration.to_seconds(), built.graph.size(), built.graph.folded() ? 1 : 0);
    return 0;
}

struct Run {
    double wall = 0, cpu = 0, topo = 0, build = 0, sim = 0, summary = 0, rss_mb = 0, step = 0;
    unsigned long long events = 0;
    std::size_t ops = 0;
    int folded = 0;
    bool ok = false;
};

Run run_child(const std::string& self, const std::string& name, int gpus) {
    const std::string cmd = "'" + self + "' --child " + name + " " + std::to_string(gpus);
    Run r;
    FILE* pipe = popen(cmd.c_str(), "r");
    if (!pipe) return r;
    r.ok = std::fscanf(pipe, "%lf %lf %lf %lf %lf %lf %lf %llu %lf %zu %d", &r.wall, &r.cpu, &r.topo, &r.build, &r.sim,
                       &r.summary, &r.rss_mb, &r.events, &r.step, &r.ops, &r.folded) == 11;
    r.ok = pclose(pipe) == 0 && r.ok;
    return r;
}

/// Slope of log(y) against log(x), least squares.
double exponent(const std::vector<double>& x, const std::vector<double>& y) {
    const double n = static_cast<double>(x.size());
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double lx = std::log(x[i]), ly = std::log(y[i]);
        sx += lx;
        sy += ly;
        sxx += lx * lx;
        sxy += lx * ly;
    }
    return (n * sxy - sx * sy) / (n * sxx - sx * sx);
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> plans{"3d", "dp", "zero3", "dp-pi5", "zero3-offload"};
    std::vector<int> sizes{1024, 4096, 16384, 65536, 131072};
    int repeats = 1;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--child" && i + 2 < argc) return child(argv[i + 1], std::atoi(argv[i + 2]));
        if (a == "--plans" && i + 1 < argc) {
            plans = split(argv[++i]);
        } else if (a == "--sizes" && i + 1 < argc) {
            sizes.clear();
            for (const std::string& s : split(argv[++i])) sizes.push_back(std::atoi(s.c_str()));
        } else if (a == "--repeats" && i + 1 < argc) {
            repeats = std::max(1, std::atoi(argv[++i]));
        } else {
            std::fprintf(stderr, "usage: bench_scale [--plans 3d,dp,zero3,dp-pi5,zero3-offload] [--sizes 1024,...] [--repeats R]\n");
            return 2;
        }
    }
    for (int g : sizes)
        if (g < 1024 || g % 1024 != 0) {
            std::fprintf(stderr, "bench_scale: sizes must be multiples of 1,024 GPUs (8-GPU nodes, dp = GPUs / 128), found %d\n", g);
            return 2;
        }
    const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
    std::printf("Each row: the median (by wall time) of %d run(s), each in a child process of its own.\n\n", repeats);
    std::printf("| plan | GPUs | cluster | ops | events | step (s) | wall (s) | CPU (s) | topology | graph | simulate | summary | peak RSS (MB) | M events/s |\n");
    std::printf("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const std::string& name : plans) {
        std::vector<double> xs, walls, cpus;
        for (int g : sizes) {
            std::vector<Run> runs;
            for (int k = 0; k < repeats; ++k) runs.push_back(run_child(self, name, g));
            std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) { return a.wall < b.wall; });
            const Run& r = runs[runs.size() / 2];
            if (!r.ok) {
                std::printf("| %s | %d | %s | failed | | | | | | | | | | |\n", name.c_str(), g, cluster_for(name, g));
                std::fflush(stdout);
                continue;
            }
            xs.push_back(g);
            walls.push_back(r.wall);
            cpus.push_back(r.cpu);
            std::printf("| %s | %d | %s × %d%s | %zu | %llu | %.3f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f | %.2f |\n",
                        name.c_str(), g, cluster_for(name, g), g / (name == "dp-pi5" ? 1 : 8), r.folded ? ", folded" : "", r.ops, r.events, r.step, r.wall,
                        r.cpu, r.topo, r.build, r.sim, r.summary, r.rss_mb, static_cast<double>(r.events) / r.sim * 1e-6);
            std::fflush(stdout);
        }
        if (xs.size() >= 2)
            std::printf("| %s | growth exponent %.2f (wall), %.2f (CPU) | | | | | | | | | | | | |\n", name.c_str(),
                        exponent(xs, walls), exponent(xs, cpus));
        std::fflush(stdout);
    }
    return 0;
}

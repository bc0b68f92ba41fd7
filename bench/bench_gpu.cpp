// bench_gpu: the GPU figures bench/gpu_validate.sh prints, run under mpirun (one process per GPU).
//
//   bench_gpu gemm [--size N] [--kernels K]
//       a bf16 N×N×N GEMM (default 8192) as the executor runs it — an op of K such kernels through
//       the runner and the CUDA backend, timed by the op's CUDA events after two warm-up steps —
//       against bare cuBLASLt calls of that shape timed with events around each call (median):
//       TFLOP/s of both and the ratio. Exit 1 when the executor reaches under 90 % of the bare
//       call (the target).
//   bench_gpu calibrate --out FILE [--quick] [--force]
//       the GPU calibration figures (exec/cuda/measure.hpp: GEMM grid per dtype, HBM, softmax,
//       flash attention, Adam, launch overhead, pinned copies, NCCL over every group size) as
//       JSON, and a summary on stdout.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "exec/cuda/backend.hpp"
#include "exec/cuda/check.hpp"
#include "exec/cuda/gemm.hpp"
#include "exec/cuda/kernels.hpp"
#include "exec/cuda/measure.hpp"
#include "exec/runner.hpp"
#include "topologies/cluster.hpp"

using namespace smol;
using namespace smol::exec::cuda;

namespace {

int gemm_check(exec::Session& session, std::int64_t size, int kernels) {
    if (session.size() != 1) fail_input("bench_gpu gemm runs as one process: mpirun -np 1");
    // Through the executor: one compute op of `kernels` GEMMs.
    OpGraph g(1);
    const Kernel k = gemm_kernel(KernelName::mlp_up, KernelClass::gemm, size, size, size, 1, 2, true);
    const std::vector<Kernel> recipe(static_cast<std::size_t>(kernels), k);
    const OpId op = g.add_kernels(0, Phase::fwd, 0, 0, g.intern_recipe(recipe), DType::bf16);
    g.finalize();
    exec::ExecOptions o;
    o.warmup = 2;
    o.timeout = Time::seconds(120);
    exec::cuda::CudaBackend backend(g, session.mpi(), o);
    exec::Measured m;
    {
        exec::Runner runner(g, topo::cluster_preset("hgx-h200").first_devices(1), session.mpi(), backend, o);
        m = runner.run();
    }
    const double flops = k.flops;
    const double executor_s = m.timeline.duration(op).to_seconds() / kernels;

    // Bare: the same matmul, each call between two events, the median.
    check(cudaSetDevice(backend.device()), "cudaSetDevice");
    int major = 0, minor = 0;
    check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, backend.device()), "attribute");
    check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, backend.device()), "attribute");
    const std::int64_t bytes = size * size * 2;
    void *a = nullptr, *b = nullptr, *c = nullptr, *ws = nullptr;
    for (void** p : {&a, &b, &c}) check(cudaMalloc(p, static_cast<std::size_t>(bytes)), "cudaMalloc");
    check(cudaMalloc(&ws, kLtWorkspaceBytes), "cudaMalloc");
    check(fill_uniform(a, size * size, Element::bf16, -1.0f, 1.0f, 1, nullptr), "fill");
    check(fill_uniform(b, size * size, Element::bf16, -1.0f, 1.0f, 2, nullptr), "fill");
    cudaStream_t s = nullptr;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    double bare_s = 0;
    {
        Matmuls matmuls;
        const Matmul& mm = matmuls.get(gemm_shape(k, DType::bf16, false, major + 0.1 * minor), kLtWorkspaceBytes);
        std::vector<cudaEvent_t> ev(static_cast<std::size_t>(2 * kernels));
        for (cudaEvent_t& e : ev) check(cudaEventCreate(&e), "cudaEventCreate");
        for (int w = 0; w < 3; ++w) mm.run(b, a, c, ws, s);
        for (int r = 0; r < kernels; ++r) {
            check(cudaEventRecord(ev[static_cast<std::size_t>(2 * r)], s), "cudaEventRecord");
            mm.run(b, a, c, ws, s);
            check(cudaEventRecord(ev[static_cast<std::size_t>(2 * r + 1)], s), "cudaEventRecord");
        }
        check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
        std::vector<double> t;
        for (int r = 0; r < kernels; ++r) {
            float ms = 0;
            check(cudaEventElapsedTime(&ms, ev[static_cast<std::size_t>(2 * r)], ev[static_cast<std::size_t>(2 * r + 1)]), "elapsed");
            t.push_back(ms * 1e-3);
        }
        for (cudaEvent_t e : ev) cudaEventDestroy(e);
        bare_s = median(t);
    }
    cudaStreamDestroy(s);
    for (void* p : {a, b, c, ws}) cudaFree(p);

    const double ratio = bare_s / executor_s;
    std::printf("bf16 GEMM %lld×%lld×%lld on %s\n", static_cast<long long>(size), static_cast<long long>(size),
                static_cast<long long>(size), device_description(backend.device()).c_str());
    std::printf("  executor (op of %d kernels, CUDA events)  %8.1f TFLOP/s  %.3f ms per GEMM\n", kernels,
                flops / executor_s * 1e-12, executor_s * 1e3);
    std::printf("  bare cuBLASLt (median of %d calls)         %8.1f TFLOP/s  %.3f ms\n", kernels, flops / bare_s * 1e-12,
                bare_s * 1e3);
    std::printf("  executor / bare                            %8.1f %%  (target >= 90 %%: %s)\n", 100 * ratio,
                ratio >= 0.9 ? "met" : "MISSED");
    return ratio >= 0.9 ? 0 : 1;
}

int calibrate(exec::Session& session, const std::string& out, bool quick, bool force) {
    if (session.root() && std::filesystem::exists(out) && !force)
        fail_input("--out " + out + " exists; pass --force to overwrite it");
    exec::Mpi& mpi = session.mpi();
    const int device = device_for_rank(mpi.local_rank(), mpi.local_size(), visible_gpus(mpi.host_name()), mpi.host_name());
    MeasureOptions o;
    o.quick = quick;
    GpuFigures f;
    if (session.root()) f = measure_device(device, o);
    f.nccl = measure_nccl(session, device, o);
    if (!session.root()) return 0;
    std::ofstream file(out);
    file << to_json(f).dump(2) << '\n';
    if (!file) fail_input("cannot write " + out);
    std::printf("GPU calibration on %s (%s)\n", f.device.c_str(), quick ? "quick" : "full");
    double best_bf16 = 0, best_fp32 = 0;
    for (const GemmRate& g : f.gemm) {
        if (g.dtype == DType::bf16) best_bf16 = std::max(best_bf16, g.flops_per_s);
        if (g.dtype == DType::fp32 && !g.tf32) best_fp32 = std::max(best_fp32, g.flops_per_s);
    }
    double hbm = 0, h2d = 0, d2h = 0;
    for (const SizeTime& p : f.stream) hbm = std::max(hbm, static_cast<double>(p.size) / p.seconds);
    for (const SizeTime& p : f.h2d) h2d = std::max(h2d, static_cast<double>(p.size) / p.seconds);
    for (const SizeTime& p : f.d2h) d2h = std::max(d2h, static_cast<double>(p.size) / p.seconds);
    std::printf("  GEMM bf16 best     %8.1f TFLOP/s   fp32 best %6.1f TFLOP/s (%zu shapes)\n", best_bf16 * 1e-12,
                best_fp32 * 1e-12, f.gemm.size());
    std::printf("  HBM (stream pass)  %8.1f GB/s (read + write)\n", hbm * 1e-9);
    std::printf("  launch overhead    %8.2f us per kernel\n", f.launch.to_us());
    std::printf("  pinned H2D / D2H   %8.1f / %.1f GB/s\n", h2d * 1e-9, d2h * 1e-9);
    std::printf("  NCCL points        %8zu (%d ranks)\n", f.nccl.size(), session.size());
    std::printf("  written to %s\n", out.c_str());
    return 0;
}

const char* kUsage =
    "usage: mpirun -np 1 bench_gpu gemm [--size N] [--kernels K]\n"
    "       mpirun -np G bench_gpu calibrate --out FILE [--quick] [--force]\n";

/// The value after flag `argv[i]` as a positive integer; exits 2 naming the flag otherwise.
std::int64_t positive(int argc, char** argv, int& i) {
    char* end = nullptr;
    const long long v = i + 1 < argc ? std::strtoll(argv[i + 1], &end, 10) : 0;
    if (i + 1 >= argc || *end != '\0' || v <= 0) {
        std::fprintf(stderr, "bench_gpu: %s needs a positive integer\n%s", argv[i], kUsage);
        std::exit(2);
    }
    ++i;
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    std::int64_t size = 8192;
    int kernels = 10;
    std::string out;
    bool quick = false, force = false;
    for (int i = 2; i < argc; ++i) {
        const std::string a = argv[i];
        if (mode == "gemm" && a == "--size") size = positive(argc, argv, i);
        else if (mode == "gemm" && a == "--kernels") kernels = static_cast<int>(std::min<std::int64_t>(positive(argc, argv, i), 1000));
        else if (mode == "calibrate" && a == "--out" && i + 1 < argc) out = argv[++i];
        else if (mode == "calibrate" && a == "--quick") quick = true;
        else if (mode == "calibrate" && a == "--force") force = true;
        else {
            std::fprintf(stderr, "bench_gpu: unexpected '%s'\n%s", a.c_str(), kUsage);
            return 2;
        }
    }
    if ((mode != "gemm" && mode != "calibrate") || (mode == "calibrate" && out.empty())) {
        std::fprintf(stderr, "%s", kUsage);
        return 2;
    }
    if (!exec::launched_by_mpirun()) {
        std::fprintf(stderr, "bench_gpu runs under mpirun:\n%s", kUsage);
        return 2;
    }
    exec::Session session;
    try {
        return mode == "gemm" ? gemm_check(session, size, kernels) : calibrate(session, out, quick, force);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_gpu: error: %s\n", e.what());
        session.leave_with_error(1);
        return 1;
    }
}

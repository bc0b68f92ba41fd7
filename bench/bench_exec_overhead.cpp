// Executor overhead: a graph of one GEMM and one all-reduce (the all-reduce waits for the GEMM, on
// another stream) run by the executor, against the bare calls — cblas_sgemm then MPI_Allreduce on
// one thread — of the same sizes, on 2 ranks. The executor's step is measured as `run` measures
// it (from the step's start to its last op's end); the bare one from a barrier. Medians of
// `repeats` steps each, the two alternating. Without mpirun it starts itself under mpirun -np 2.
//
//   bench_exec_overhead [gemm=1024] [allreduce_mib=64] [repeats=15]
#include <mpi.h>

#include <cblas.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "exec/cpu/backend.hpp"
#include "exec/cpu/kernels.hpp"
#include "exec/executor.hpp"
#include "exec/mpi.hpp"
#include "exec/runner.hpp"
#include "topologies/localhost.hpp"

using namespace smol;

int main(int argc, char** argv) {
    const std::int64_t d = argc > 1 ? std::atoll(argv[1]) : 1024;
    const std::int64_t bytes = (argc > 2 ? std::atoll(argv[2]) : 64) << 20;
    const int repeats = argc > 3 ? std::atoi(argv[3]) : 15;
    if (!exec::launched_by_mpirun()) {
        std::string cmd = "mpirun --oversubscribe -np 2";
        if (geteuid() == 0) cmd += " --allow-run-as-root";
        for (int i = 0; i < argc; ++i) cmd += std::string(" ") + argv[i];
        return std::system(cmd.c_str()) == 0 ? 0 : 1;
    }
    exec::Session session;
    exec::Mpi& mpi = session.mpi();
    exec::cpu::set_blas_threads(exec::cpu::blas_threads_per_rank(mpi.local_size()));

    // The executor: one compute op of that GEMM, then the all-reduce on the comm stream.
    OpGraph g(mpi.size());
    const Kernel k = gemm_kernel(KernelName::other, KernelClass::gemm, d, d, d, 1, 4, false);
    const std::int32_t recipe = g.intern_recipe({&k, 1});
    std::vector<int> all;
    for (int r = 0; r < mpi.size(); ++r) all.push_back(r);
    std::vector<OpId> gemm_ops;
    for (int r = 0; r < mpi.size(); ++r) gemm_ops.push_back(g.add_kernels(r, Phase::fwd, 0, 0, recipe, DType::fp32));
    const auto ar = g.add_collective(CollectiveKind::all_reduce, all, Bytes(bytes), Stream::comm, Phase::bwd);
    for (int r = 0; r < mpi.size(); ++r) g.depend(gemm_ops[static_cast<std::size_t>(r)], ar[static_cast<std::size_t>(r)]);
    g.finalize();
    const topo::Cluster cluster =
        topo::cluster_from_json(JsonView(topo::localhost_json(topo::read_host_facts(), mpi.size()), "localhost"));
    exec::cpu::CpuBackend backend(g, mpi, "");
    exec::ExecOptions options;
    options.warmup = 0;
    exec::Runner runner(g, cluster, mpi, backend, options);

    // Bare: the same BLAS and MPI calls on one thread, on buffers of the same sizes. The two
    // alternate, so a machine shared with other work slows both alike.
    const std::int64_t n = bytes / 4;
    std::vector<float> a(static_cast<std::size_t>(3 * d * d), 0.01f), send(static_cast<std::size_t>(n), 1.0f),
        recv(static_cast<std::size_t>(n));
    std::vector<double> bare, executor, bare_gemm, bare_ar, exec_gemm, exec_ar;
    for (int i = 0; i <= repeats; ++i) {
        MPI_Barrier(mpi.world());
        const std::int64_t t0 = exec::now_ns();
        exec::cpu::gemm(a.data(), a.data() + d * d, a.data() + 2 * d * d, d, d, d);
        const std::int64_t t1 = exec::now_ns();
        MPI_Allreduce(send.data(), recv.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, mpi.world());
        const std::int64_t t2 = exec::now_ns();
        const exec::Measured m = runner.run();
        if (i > 0) {   // the first of each is a warm-up
            bare.push_back(static_cast<double>(t2 - t0) * 1e-9);
            bare_gemm.push_back(static_cast<double>(t1 - t0) * 1e-9);
            bare_ar.push_back(static_cast<double>(t2 - t1) * 1e-9);
            if (mpi.rank() == 0) {
                executor.push_back(m.timeline.makespan.to_seconds());
                exec_gemm.push_back(m.timeline.duration(gemm_ops[0]).to_seconds());
                exec_ar.push_back(m.timeline.duration(ar[0]).to_seconds());
            }
        }
    }
    if (mpi.rank() == 0) {
        const double b = bench::median(bare), e = bench::median(executor);
        std::printf("one %lld³ sgemm then a %lld MiB all-reduce on %d ranks, median of %d:\n", static_cast<long long>(d),
                    static_cast<long long>(bytes >> 20), mpi.size(), repeats);
        std::printf("  bare cblas_sgemm + MPI_Allreduce   %8.3f ms  (%.3f + %.3f)\n", b * 1e3, bench::median(bare_gemm) * 1e3,
                    bench::median(bare_ar) * 1e3);
        std::printf("  executor (graph of the two ops)    %8.3f ms  (ops %.3f + %.3f)\n", e * 1e3, bench::median(exec_gemm) * 1e3,
                    bench::median(exec_ar) * 1e3);
        std::printf("  overhead                           %+7.2f %%\n", (e / b - 1) * 100);
    }
    return 0;
}

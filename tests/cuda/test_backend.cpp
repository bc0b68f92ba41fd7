// The CUDA backend under the runner (mpirun -np 1, or -np 2 where two GPUs exist): every op of
// a plan executes exactly once (counted by a backend that wraps the CUDA one), the GPU timeline
// respects every edge of the graph, a compute op's class times add up to its duration, the
// memory pool's peak covers the plan's device peak, and a GEMM op's and a flash op's results, read
// back from the backend's workspace, equal references computed on the host.
#include <catch2/catch.hpp>

#include <cmath>

#include "cuda_support.hpp"
#include "exec/cuda/backend.hpp"
#include "exec/counting_backend.hpp"
#include "exec/runner.hpp"
#include "strategies/plan.hpp"

using namespace smol;

namespace {

using testing::CountingBackend;

topo::Cluster gpus(int n) { return topo::cluster_preset("dgx-h100").first_devices(n); }

exec::ExecOptions options() {
    exec::ExecOptions o;
    o.warmup = 1;
    o.timeout = Time::seconds(60);
    return o;
}

/// Runs `g` on the CUDA backend of this mpirun and checks what every run must satisfy.
void run_and_check(const OpGraph& g) {
    exec::Session& session = test::session();
    const topo::Cluster cluster = gpus(session.size());
    exec::cuda::CudaBackend cuda(g, session.mpi(), options());
    CountingBackend counting(cuda, g);
    exec::Measured m;
    {
        exec::Runner runner(g, cluster, session.mpi(), counting, options());
        m = runner.run();
    }
    // Every op of this rank ran once per step (one warm-up and the measured step).
    int wrong = 0;
    OpId first_wrong = 0;
    for (OpId id = 0; id < g.size(); ++id) {
        const Op& op = g.op(id);
        if (op.rank != session.rank()) continue;
        int times = 2;
        switch (op.kind) {
            case OpKind::compute:
            case OpKind::collective:
            case OpKind::send:
            case OpKind::recv:
            case OpKind::copy: times = counting.ran(id); break;
            case OpKind::alloc: times = counting.allocated(op.ref); break;
            case OpKind::free:
            case OpKind::timer: break;   // the timeline shows them below
        }
        if (times != 2 && wrong++ == 0) first_wrong = id;
    }
    INFO("rank " << session.rank() << ": first op not run once per step: " << (wrong ? g.describe(first_wrong) : "none"));
    CHECK(wrong == 0);
    if (!session.root()) return;

    const Timeline& tl = m.timeline;
    REQUIRE(tl.start.size() == g.size());
    CHECK(tl.events == g.size());
    // Device times on one GPU's clock: each edge within a rank holds exactly.
    std::size_t never = 0, violations = 0, class_mismatch = 0;
    std::string example;
    for (OpId v = 0; v < g.size(); ++v) {
        never += tl.start[v] < Time::zero() || tl.end[v] < tl.start[v];
        for (OpId s : g.successors(v))
            if (g.op(v).rank == g.op(s).rank && tl.end[v] > tl.start[s] && violations++ == 0)
                example = g.describe(v) + " ends at " + to_string(tl.end[v]) + ", after " + g.describe(s) + " starts at " +
                          to_string(tl.start[s]);
        if (g.op(v).kind == OpKind::compute) {
            Time sum;
            for (Time t : tl.kernel_class_time[v]) sum += t;
            class_mismatch += sum != tl.duration(v);   // the class boundaries partition the op
        }
    }
    CHECK(never == 0);
    INFO(example);
    CHECK(violations == 0);
    CHECK(class_mismatch == 0);
    CHECK(tl.makespan > Time::zero());
    CHECK(std::is_sorted(tl.memory.begin(), tl.memory.end(),
                         [](const MemorySample& a, const MemorySample& b) { return a.time < b.time; }));
    for (int r = 0; r < g.ranks(); ++r) {
        const Bytes peak = tl.peak[static_cast<std::size_t>(r)][static_cast<int>(Tier::device)];
        INFO("rank " << r << ": timeline device peak " << to_string(peak));
        REQUIRE(m.device_peak.size() == static_cast<std::size_t>(g.ranks()));
        CHECK(m.device_peak[static_cast<std::size_t>(r)] >= peak);
    }
}

strategies::Built tiny_plan(strategies::Plan p, int devices) {
    p.fold = false;
    p.seq = 128;
    return strategies::build(model_preset("gpt-tiny"), gpus(devices), p);
}

}  // namespace

TEST_CASE("every kind of op runs once on one GPU and the timeline respects the graph", "[cuda][mpi][runner]") {
    if (test::session().size() != 1) {
        WARN("runs under mpirun -np 1");
        return;
    }
    OpGraph g(1);
    const std::vector<Kernel> fwd{gemm_kernel(KernelName::qkv, KernelClass::gemm, 256, 384, 128, 1, 2, true),
                                  gemm_kernel(KernelName::scores, KernelClass::attention, 64, 64, 32, 8, 2, false),
                                  softmax_kernel(8 * 64, 64, 2), stream_kernel(KernelName::norm, KernelClass::elementwise, 1 << 20),
                                  gemm_kernel(KernelName::mlp_up, KernelClass::gemm, 256, 512, 128, 1, 2, true)};
    const std::vector<Kernel> bwd_extra{flash_kernel(4, 100, 130, 64, 2, false), flash_kernel(4, 100, 130, 64, 2, true),
                                        adam_kernel(100000, 58)};
    std::vector<Kernel> bwd = backward_kernels(fwd);
    bwd.insert(bwd.end(), bwd_extra.begin(), bwd_extra.end());
    const std::int32_t act = g.add_buffer(0, Tier::device, Bytes(64 << 20), BufferLabel::activations);
    const std::int32_t host = g.add_buffer(0, Tier::host, Bytes(1 << 20), BufferLabel::optimizer_state);
    const std::int32_t disk = g.add_buffer(0, Tier::nvme, Bytes(1 << 20), BufferLabel::optimizer_state);
    g.add_alloc(act, Stream::compute);
    const OpId f = g.add_kernels(0, Phase::fwd, 0, 0, g.intern_recipe(fwd), DType::bf16);
    const OpId ar = g.add_collective(CollectiveKind::all_reduce, {0}, Bytes(1 << 20), Stream::comm, Phase::comm).front();
    g.depend(f, ar);
    g.add_alloc(host, Stream::copy);
    const OpId d2h = g.add_copy(0, Tier::device, Tier::host, Bytes(1 << 20), Phase::fwd);
    g.depend(f, d2h);
    g.add_alloc(disk, Stream::copy);
    g.add_copy(0, Tier::host, Tier::nvme, Bytes(1 << 20), Phase::fwd);
    g.add_copy(0, Tier::nvme, Tier::host, Bytes(1 << 20), Phase::bwd);
    g.add_copy(0, Tier::device, Tier::nvme, Bytes(1 << 20), Phase::bwd);
    g.add_copy(0, Tier::nvme, Tier::device, Bytes(1 << 20), Phase::bwd);
    const OpId h2d = g.add_copy(0, Tier::host, Tier::device, Bytes(1 << 20), Phase::bwd);
    g.add_free(disk, Stream::copy);
    g.add_free(host, Stream::copy);
    const OpId timer = g.add_timer(0, Time::ms(2), Stream::host, Phase::comm);
    g.depend(ar, timer);
    const OpId host_adam = g.add_compute(0, Phase::opt, -1, -1, Flops(12.0 * 50000), Bytes(28 * 50000), KernelClass::optimizer,
                                         DType::fp32, true, Stream::host);
    const OpId b = g.add_kernels(0, Phase::bwd, 0, 0, g.intern_recipe(bwd), DType::bf16);
    g.depend(h2d, b);
    g.depend(host_adam, b);
    OpId last = b;
    for (CollectiveKind k : {CollectiveKind::broadcast, CollectiveKind::reduce, CollectiveKind::reduce_scatter,
                             CollectiveKind::all_gather, CollectiveKind::all_to_all, CollectiveKind::barrier}) {
        const OpId c = g.add_collective(k, {0}, Bytes(k == CollectiveKind::barrier ? 0 : 1 << 16), Stream::comm, Phase::comm, -1, -1, -1,
                                        k == CollectiveKind::broadcast || k == CollectiveKind::reduce ? 0 : -1).front();
        g.depend(last, c);
        last = c;
    }
    g.add_free(act, Stream::compute);
    g.finalize();
    run_and_check(g);
}

TEST_CASE("gpt-tiny's single-GPU plans run once per op in graph order", "[cuda][mpi][runner]") {
    if (test::session().size() != 1) {
        WARN("runs under mpirun -np 1");
        return;
    }
    for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
        INFO("recompute " << static_cast<int>(r));
        strategies::Plan p;
        p.recompute = r;
        p.global_batch = 2;
        run_and_check(tiny_plan(p, 1).graph);
    }
}

TEST_CASE("plans on two GPUs: ddp, zero3, tp 2, pp 2", "[cuda][mpi][plans]") {
    if (test::session().size() != 2) {
        WARN("runs under mpirun -np 2");
        return;
    }
    using strategies::DataParallel;
    for (DataParallel s : {DataParallel::ddp, DataParallel::zero3, DataParallel::ps_async}) {
        INFO(to_string(s));
        strategies::Plan p;
        p.strategy = s;
        run_and_check(tiny_plan(p, 2).graph);
    }
    strategies::Plan tp;
    tp.tp = 2;
    run_and_check(tiny_plan(tp, 2).graph);
    for (strategies::Schedule s : {strategies::Schedule::gpipe, strategies::Schedule::one_f_one_b}) {
        strategies::Plan pp;
        pp.pp = 2;
        pp.schedule = s;
        pp.global_batch = 4;
        run_and_check(tiny_plan(pp, 2).graph);
    }
}

TEST_CASE("a GEMM op's and a flash op's results equal host references", "[cuda][mpi][runner]") {
    if (test::session().size() != 1) {
        WARN("runs under mpirun -np 1");
        return;
    }
    exec::Session& session = test::session();
    const std::int64_t m = 64, n = 96, k = 80, batch = 2;
    const std::int64_t heads = 2, q = 100, kv = 130, d = 64;
    for (bool flash : {false, true}) {
        INFO((flash ? "flash" : "gemm"));
        OpGraph g(1);
        const Kernel kernel = flash ? flash_kernel(heads, q, kv, d, 2, false)
                                    : gemm_kernel(KernelName::qkv, KernelClass::gemm, m, n, k, batch, 2, true);
        g.add_kernels(0, Phase::fwd, 0, 0, g.intern_recipe({&kernel, 1}), DType::bf16);
        g.finalize();
        exec::ExecOptions o = options();
        o.warmup = 0;
        exec::cuda::CudaBackend cuda(g, session.mpi(), o);
        {
            exec::Runner runner(g, gpus(1), session.mpi(), cuda, o);
            runner.run();
        }
        const auto r = cuda.regions(Stream::compute);
        const auto e = exec::cuda::Element::bf16;
        auto at = [](std::int64_t bytes) { return (bytes + exec::cuda::kOperandAlign - 1) / exec::cuda::kOperandAlign * exec::cuda::kOperandAlign; };
        if (!flash) {
            const auto a = test::download(r.in, static_cast<std::size_t>(batch * m * k), e);
            const auto b = test::download(r.in + at(batch * m * k * 2), static_cast<std::size_t>(batch * k * n), e);
            const auto c = test::download(r.out, static_cast<std::size_t>(batch * m * n), e);
            std::vector<double> ref(c.size(), 0.0);
            for (std::int64_t s = 0; s < batch; ++s)
                for (std::int64_t i = 0; i < m; ++i)
                    for (std::int64_t p = 0; p < k; ++p)
                        for (std::int64_t j = 0; j < n; ++j)
                            ref[static_cast<std::size_t>(s * m * n + i * n + j)] +=
                                static_cast<double>(a[static_cast<std::size_t>(s * m * k + i * k + p)]) * b[static_cast<std::size_t>(s * k * n + p * n + j)];
            CHECK(test::relative_error(c, ref) < 1e-2);
        } else {
            const std::int64_t qb = at(heads * q * d * 2), kb = at(heads * kv * d * 2);
            const auto Q = test::download(r.in, static_cast<std::size_t>(heads * q * d), e);
            const auto K = test::download(r.in + qb, static_cast<std::size_t>(heads * kv * d), e);
            const auto V = test::download(r.in + qb + kb, static_cast<std::size_t>(heads * kv * d), e);
            const auto O = test::download(r.out, static_cast<std::size_t>(heads * q * d), e);
            std::vector<double> ref(O.size(), 0.0);
            const double scale = 1.0 / std::sqrt(static_cast<double>(d));
            for (std::int64_t h = 0; h < heads; ++h)
                for (std::int64_t i = 0; i < q; ++i) {
                    std::vector<double> s(static_cast<std::size_t>(kv));
                    double mx = -1e300, sum = 0;
                    for (std::int64_t j = 0; j < kv; ++j) {
                        double acc = 0;
                        for (std::int64_t c = 0; c < d; ++c)
                            acc += static_cast<double>(Q[static_cast<std::size_t>((h * q + i) * d + c)]) * K[static_cast<std::size_t>((h * kv + j) * d + c)];
                        s[static_cast<std::size_t>(j)] = acc * scale;
                        mx = std::max(mx, acc * scale);
                    }
                    for (double& x : s) sum += (x = std::exp(x - mx));
                    for (std::int64_t j = 0; j < kv; ++j)
                        for (std::int64_t c = 0; c < d; ++c)
                            ref[static_cast<std::size_t>((h * q + i) * d + c)] +=
                                s[static_cast<std::size_t>(j)] / sum * V[static_cast<std::size_t>((h * kv + j) * d + c)];
                }
            CHECK(test::relative_error(O, ref) < 1.5e-2);
        }
    }
}

// What the CUDA backend decides before it touches a GPU (exec/cuda/plan.hpp), checked on any
// machine: device assignment, stream priorities, the events each op records, host work, copy
// routes, the shape → cuBLASLt layout mapping (against a column-major reference product over
// the very memory a row-major product uses), flash attention tiles and their shared memory
// (counted by hand), workspace sizes per kernel, collective element counts, and NCCL's
// point-to-point channels (every strategy's schedule receives a channel's sends in order).
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "core/error.hpp"
#include "exec/cuda/plan.hpp"
#include "exec/executor.hpp"
#include "strategies/plan.hpp"
#include "topologies/cluster.hpp"

using namespace smol;
using namespace smol::exec::cuda;

namespace {

/// The error a call throws, or "".
template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

/// Column-major D = A·B as cuBLASLt computes it from the layouts, in double.
std::vector<double> column_major_product(const GemmShape& g, const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<double> d(static_cast<std::size_t>(g.c.stride * g.c.batch), 0.0);
    for (std::int32_t s = 0; s < g.a.batch; ++s)
        for (std::int64_t i = 0; i < g.m; ++i)
            for (std::int64_t j = 0; j < g.n; ++j) {
                double acc = 0;
                for (std::int64_t p = 0; p < g.k; ++p)
                    acc += static_cast<double>(a[static_cast<std::size_t>(s * g.a.stride + i + p * g.a.ld)]) *
                           b[static_cast<std::size_t>(s * g.b.stride + p + j * g.b.ld)];
                d[static_cast<std::size_t>(s * g.c.stride + i + j * g.c.ld)] = acc;
            }
    return d;
}

std::vector<float> random_floats(std::size_t n, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = u(gen);
    return v;
}

topo::Cluster gpus(int n) { return topo::cluster_preset("dgx-h100").first_devices(n); }

strategies::Built build(strategies::Plan p, int devices) {
    p.fold = false;
    p.seq = 128;
    return strategies::build(model_preset("gpt-tiny"), gpus(devices), p);
}

}  // namespace

TEST_CASE("one GPU per rank of a host, two ranks on one GPU are refused as NCCL refuses them", "[exec][cuda_plan]") {
    CHECK(device_for_rank(0, 1, 1, "h") == 0);
    CHECK(device_for_rank(3, 4, 8, "h") == 3);
    SECTION("more ranks than GPUs") {
        const std::string e = error_of([] { device_for_rank(1, 2, 1, "gpu-box"); });
        CHECK_THAT(e, Catch::Contains("2 ranks on host gpu-box, which has 1 GPU"));
        CHECK_THAT(e, Catch::Contains("Duplicate GPU detected"));
        CHECK_THAT(e, Catch::Contains("--devices 1"));
    }
    SECTION("no GPU") { CHECK_THAT(error_of([] { device_for_rank(0, 1, 0, "cpu-box"); }), Catch::Contains("has none")); }
}

TEST_CASE("communication streams get the high priority, compute and copies the default", "[exec][cuda_plan]") {
    for (Stream s : {Stream::comm, Stream::p2p, Stream::send_next, Stream::recv_next, Stream::send_prev, Stream::recv_prev})
        CHECK(high_priority(s));
    for (Stream s : {Stream::compute, Stream::copy, Stream::host}) CHECK_FALSE(high_priority(s));
}

TEST_CASE("class runs and the events each op records", "[exec][cuda_plan]") {
    const std::vector<Kernel> k{gemm_kernel(KernelName::qkv, KernelClass::gemm, 8, 8, 8, 1, 2, true),
                                gemm_kernel(KernelName::attn_proj, KernelClass::gemm, 8, 8, 8, 1, 2, true),
                                stream_kernel(KernelName::norm, KernelClass::elementwise, 1024),
                                gemm_kernel(KernelName::mlp_up, KernelClass::gemm, 8, 8, 8, 1, 2, true)};
    const auto runs = class_runs(k);
    REQUIRE(runs.size() == 3);
    CHECK((runs[0].cls == KernelClass::gemm && runs[0].kernels == 2));
    CHECK((runs[1].cls == KernelClass::elementwise && runs[1].kernels == 1));
    CHECK((runs[2].cls == KernelClass::gemm && runs[2].kernels == 1));

    OpGraph g(2);
    const std::int32_t recipe = g.intern_recipe(k);
    const OpId c0 = g.add_kernels(0, Phase::fwd, 0, 0, recipe, DType::bf16);
    const std::int32_t buf = g.add_buffer(0, Tier::device, Bytes(1024), BufferLabel::activations);
    const OpId a0 = g.add_alloc(buf, Stream::compute);
    const OpId c1 = g.add_kernels(1, Phase::fwd, 0, 0, recipe, DType::bf16);
    const OpId f0 = g.add_free(buf, Stream::compute);
    g.finalize();

    const EventPlan with = plan_events(g, 0, true);
    REQUIRE(with.ops == std::vector<OpId>{c0, a0, f0});
    // The compute op: its start and one event after each of its 3 runs (the last its end).
    CHECK(with.first == std::vector<std::uint32_t>{0, 4, 6, 8});
    CHECK(with.events() == 8);
    CHECK(with.local[f0] == 2);
    const EventPlan without = plan_events(g, 0, false);
    CHECK(without.first == std::vector<std::uint32_t>{0, 2, 4, 6});
    const EventPlan other = plan_events(g, 1, true);
    CHECK(other.ops == std::vector<OpId>{c1});
    CHECK(other.events() == 4);
}

TEST_CASE("host work and copy routes", "[exec][cuda_plan]") {
    OpGraph g(1);
    const OpId d2h = g.add_copy(0, Tier::device, Tier::host, Bytes(10), Phase::fwd);
    const OpId h2n = g.add_copy(0, Tier::host, Tier::nvme, Bytes(10), Phase::fwd);
    const OpId timer = g.add_timer(0, Time::ms(5), Stream::host, Phase::comm);
    const OpId host_adam = g.add_compute(0, Phase::opt, -1, -1, Flops(1200), Bytes(2800), KernelClass::optimizer, DType::fp32, true);
    const OpId dev_adam = g.add_compute(0, Phase::opt, -1, -1, Flops(1200), Bytes(2800), KernelClass::optimizer, DType::fp32, false);
    g.finalize();
    CHECK_FALSE(host_work(g, d2h));
    CHECK(host_work(g, h2n));
    CHECK(host_work(g, timer));
    CHECK(host_work(g, host_adam));
    CHECK_FALSE(host_work(g, dev_adam));

    CHECK(copy_route(Tier::device, Tier::host) == CopyRoute::device_to_host);
    CHECK(copy_route(Tier::host, Tier::device) == CopyRoute::host_to_device);
    CHECK(copy_route(Tier::host, Tier::nvme) == CopyRoute::host_to_file);
    CHECK(copy_route(Tier::nvme, Tier::host) == CopyRoute::file_to_host);
    CHECK(copy_route(Tier::device, Tier::nvme) == CopyRoute::device_to_file);
    CHECK(copy_route(Tier::nvme, Tier::device) == CopyRoute::file_to_device);
    CHECK_THAT(error_of([] { copy_route(Tier::host, Tier::host); }), Catch::Contains("within the host tier"));
    CHECK(touches_device(CopyRoute::file_to_device));
    CHECK_FALSE(touches_device(CopyRoute::host_to_file));
    CHECK(touches_file(CopyRoute::device_to_file));
    CHECK_FALSE(touches_file(CopyRoute::device_to_host));
}

TEST_CASE("a recipe GEMM maps onto cuBLASLt's column-major layouts over the same memory", "[exec][cuda_plan]") {
    // m = 3, n = 5, k = 7, a batch of 2: odd sizes, so a swapped dimension or stride shows.
    const Kernel k = gemm_kernel(KernelName::qkv, KernelClass::gemm, 3, 5, 7, 2, 2, true);
    const GemmShape g = gemm_shape(k, DType::bf16, false, 9.0);
    CHECK((g.m == 5 && g.n == 3 && g.k == 7));
    CHECK(g.a == MatrixLayout{5, 7, 5, 2, 35});
    CHECK(g.b == MatrixLayout{7, 3, 7, 2, 21});
    CHECK(g.c == MatrixLayout{5, 3, 5, 2, 15});
    CHECK(g.element == Element::bf16);
    CHECK(g.compute == Compute::fp32);
    // Batch members 70, 42 and 30 bytes apart: 2-byte aligned.
    CHECK((g.align_a == 2 && g.align_b == 2 && g.align_c == 2));

    // The product through the layouts, over the recipe's row-major A (m×k) and B (k×n) per batch
    // member, equals the row-major product: the matmul's A is the recipe's B.
    const auto a = random_floats(2 * 3 * 7, 1), b = random_floats(2 * 7 * 5, 2);
    const auto d = column_major_product(g, b, a);
    for (int s = 0; s < 2; ++s)
        for (int i = 0; i < 3; ++i)
            for (int j = 0; j < 5; ++j) {
                double ref = 0;
                for (int p = 0; p < 7; ++p)
                    ref += static_cast<double>(a[static_cast<std::size_t>(s * 21 + i * 7 + p)]) *
                           b[static_cast<std::size_t>(s * 35 + p * 5 + j)];
                CHECK(d[static_cast<std::size_t>(s * 15 + i * 5 + j)] == Approx(ref).margin(1e-12));
            }

    SECTION("dtypes and TF32") {
        CHECK(gemm_shape(k, DType::fp16, false, 9.0).element == Element::fp16);
        CHECK(gemm_shape(k, DType::fp32, true, 9.0).compute == Compute::fp32_fast_tf32);
        CHECK(gemm_shape(k, DType::fp32, true, 8.0).compute == Compute::fp32_fast_tf32);
        CHECK(gemm_shape(k, DType::fp32, true, 7.0).compute == Compute::fp32);   // Volta has no TF32
        CHECK(gemm_shape(k, DType::fp32, false, 9.0).compute == Compute::fp32);
        CHECK(gemm_shape(k, DType::bf16, true, 9.0).compute == Compute::fp32);   // TF32 is for fp32 inputs only
    }
    SECTION("an unbatched GEMM keeps 256-byte alignment") {
        const GemmShape one = gemm_shape(gemm_kernel(KernelName::qkv, KernelClass::gemm, 3, 5, 7, 1, 2, true), DType::bf16, false, 9.0);
        CHECK((one.align_a == 256 && one.align_b == 256 && one.align_c == 256));
    }
    CHECK(alignment_of(0) == 256);
    CHECK(alignment_of(512) == 256);
    CHECK(alignment_of(96) == 32);
    CHECK(alignment_of(70) == 2);
    CHECK(alignment_of(1) == 1);
}

TEST_CASE("flash attention tiles fit the device's shared memory, counted by hand", "[exec][cuda_plan]") {
    // Forward, d = 64, 4 warps (64 query rows, 64-key tiles): K and V 2·64·64·2 = 16384, Q
    // 64·64·2 = 8192, scores 64·64·4 = 16384, P 64·64·2 = 8192, O 64·64·4 = 16384, max and sum
    // 2·64·4 = 512: 66048 bytes.
    CHECK(flash_fwd_smem(64, 4) == 66048);
    // Backward, d = 64, 4 warps (64 × 64 tiles): K, V 16384; Q, dO 16384; S/dP 16384; P, dS
    // 16384; dK, dV 2·64·64·4 = 32768; dQ tiles 4·1024 = 4096; lse, delta 512: 102912.
    CHECK(flash_bwd_smem(64, 4) == 102912);
    constexpr std::int64_t a100 = 163 * 1024, h100 = 227 * 1024;   // cudaDevAttrMaxSharedMemoryPerBlockOptin
    const FlashTiles t64 = flash_tiles(64, a100);
    CHECK((t64.d == 64 && t64.warps == 4 && t64.fwd_smem == 66048 && t64.bwd_smem == 102912));
    // d = 128: the backward needs 168448 bytes with 4 warps, over an A100's 166912.
    CHECK(flash_bwd_smem(128, 4) == 168448);
    CHECK(flash_tiles(128, a100).warps == 2);
    CHECK(flash_tiles(128, h100).warps == 4);
    CHECK(flash_tiles(256, h100).warps == 2);
    CHECK(flash_tiles(72, h100).d == 80);   // padded to a multiple of 16
    CHECK(flash_tiles(80, h100).d == 80);
    SECTION("head dimension above 256") {
        CHECK_THAT(error_of([&] { flash_tiles(320, h100); }), Catch::Contains("up to 256"));
    }
    SECTION("too little shared memory") {
        CHECK_THAT(error_of([&] { flash_tiles(256, 48 * 1024); }), Catch::Contains("shared memory"));
    }
}

TEST_CASE("workspace bytes per kernel: inputs, outputs and Adam's state apart, operands 256-aligned", "[exec][cuda_plan]") {
    // GEMM 3×7 · 7×5, batch 2, bf16: A 84 B, B 140 B, C 60 B, each rounded to 256.
    const KernelBytes g = kernel_bytes(gemm_kernel(KernelName::qkv, KernelClass::gemm, 3, 5, 7, 2, 2, true), DType::bf16);
    CHECK((g.in == 512 && g.out == 256 && g.state == 0));
    const KernelBytes big = kernel_bytes(gemm_kernel(KernelName::qkv, KernelClass::gemm, 1024, 1024, 1024, 1, 2, true), DType::fp32);
    CHECK((big.in == 2 * 4 * 1024 * 1024 && big.out == 4 * 1024 * 1024));
    // Softmax over 4 rows of 1024: forward reads x, backward y and dy.
    const Kernel sm = softmax_kernel(4, 1024, 2);
    CHECK_FALSE(softmax_backward(sm));
    CHECK(kernel_bytes(sm, DType::bf16).in == 8192);
    const Kernel smb = backward_kernels({&sm, 1}).at(0);
    CHECK(softmax_backward(smb));
    CHECK((kernel_bytes(smb, DType::bf16).in == 16384 && kernel_bytes(smb, DType::bf16).out == 8192));
    // An fp32 softmax in a 16-bit run (Megatron's unfused path) runs on fp32 elements.
    const Kernel sm32 = softmax_kernel(4, 1024, 4);
    CHECK(softmax_element(sm32, DType::bf16) == Element::fp32);
    CHECK(softmax_element(sm, DType::bf16) == Element::bf16);
    CHECK(kernel_bytes(sm32, DType::bf16).in == 16384);
    const Kernel sm32b = backward_kernels({&sm32, 1}).at(0);
    CHECK(softmax_backward(sm32b));
    CHECK((kernel_bytes(sm32b, DType::fp16).in == 32768 && kernel_bytes(sm32b, DType::fp16).out == 16384));
    // Flash, 2 heads of 100 queries over 200 keys, head dim 64, bf16: Q 25600, K and V 51200
    // each, O 25600 + lse 800 → 1024.
    const KernelBytes ff = kernel_bytes(flash_kernel(2, 100, 200, 64, 2, false), DType::bf16);
    CHECK((ff.in == 25600 + 2 * 51200 && ff.out == 25600 + 1024));
    // Backward: Q, O, dO 25600 each, K, V, lse; out dQ in fp32 (51200), dK, dV, delta.
    const KernelBytes fb = kernel_bytes(flash_kernel(2, 100, 200, 64, 2, true), DType::bf16);
    CHECK((fb.in == 3 * 25600 + 2 * 51200 + 1024 && fb.out == 51200 + 2 * 51200 + 1024));
    // A streaming pass reads half its bytes and writes half.
    CHECK(kernel_bytes(stream_kernel(KernelName::norm, KernelClass::elementwise, 1000), DType::bf16).in == 512);
    // Adam over 1000 parameters: gradients in, master weights and moments as state.
    const KernelBytes ad = kernel_bytes(adam_kernel(1000, 28), DType::bf16);
    CHECK((ad.in == 4096 && ad.state == 12000 && ad.out == 0));
    CHECK(adam_extra_bytes(adam_kernel(100, 58)) == 3000);
    CHECK(adam_extra_bytes(adam_kernel(100, 28)) == 0);
}

TEST_CASE("collective element counts follow the graph's sizes", "[exec][cuda_plan]") {
    auto eq = [](CollectiveFloats f, std::int64_t send, std::int64_t recv) { return f.send == send && f.recv == recv; };
    // 1000 bytes = 250 floats over 4 ranks: blocks of 63.
    CHECK(eq(collective_floats(CollectiveKind::all_reduce, 1000, 4), 0, 250));
    CHECK(eq(collective_floats(CollectiveKind::broadcast, 1000, 4), 0, 250));
    CHECK(eq(collective_floats(CollectiveKind::reduce, 1000, 4), 0, 250));
    CHECK(eq(collective_floats(CollectiveKind::reduce_scatter, 1000, 4), 252, 63));
    CHECK(eq(collective_floats(CollectiveKind::all_gather, 1000, 4), 63, 252));
    CHECK(eq(collective_floats(CollectiveKind::all_to_all, 1000, 4), 252, 252));
    CHECK(eq(collective_floats(CollectiveKind::barrier, 0, 4), 0, 1));
    CHECK(collective_floats(CollectiveKind::all_gather, 1000, 4).block == 63);
}

TEST_CASE("every stream's workspace covers its largest kernel and transfer", "[exec][cuda_plan]") {
    strategies::Plan p;
    p.strategy = strategies::DataParallel::zero3;
    const strategies::Built b = build(p, 2);
    const OpGraph& g = b.graph;
    const auto needs = stream_needs(g, 0);
    std::array<std::int64_t, kStreams> in{}, out{};
    std::array<bool, kStreams> used{}, gemms{};
    for (OpId id = 0; id < g.size(); ++id) {
        const Op& op = g.op(id);
        if (op.rank != 0) continue;
        const auto s = static_cast<std::size_t>(op.stream);
        used[s] = true;
        if (op.kind == OpKind::compute)
            for (const Kernel& k : exec::kernels_to_run(g, id)) {
                in[s] = std::max(in[s], kernel_bytes(k, op.dtype()).in);
                gemms[s] = gemms[s] || k.op == KernelOp::gemm;
            }
        if (op.kind == OpKind::collective) {
            const Collective& c = g.collectives()[static_cast<std::size_t>(op.ref)];
            const CollectiveFloats f = collective_floats(c.kind, c.bytes, 2);
            out[s] = std::max(out[s], 4 * (f.send + f.recv));
        }
    }
    std::int64_t total = 0;
    for (int s = 0; s < kStreams; ++s) {
        const StreamNeeds& n = needs[static_cast<std::size_t>(s)];
        INFO("stream " << to_string(static_cast<Stream>(s)));
        CHECK(n.used == used[static_cast<std::size_t>(s)]);
        CHECK(n.in == in[static_cast<std::size_t>(s)]);
        CHECK(n.out >= out[static_cast<std::size_t>(s)]);
        CHECK(n.lt_workspace == (gemms[static_cast<std::size_t>(s)] ? kLtWorkspaceBytes : 0));
        total += n.device_total();
    }
    CHECK(needs[static_cast<std::size_t>(Stream::compute)].state > 0);   // the optimizer step
    CHECK(needs[static_cast<std::size_t>(Stream::comm)].out > 0);        // ZeRO-3's gathers and reduce-scatters
    CHECK(device_workspace_bytes(g, 0) == total);
    CHECK(exec::cuda_workspace(g, 0) == Bytes(total));
}

TEST_CASE("NCCL channels group transfers by sender, receiver and streams", "[exec][cuda_plan]") {
    OpGraph g(2);
    g.add_send_recv(0, 1, Bytes(100), Phase::fwd, 0, 0);
    g.add_send_recv(0, 1, Bytes(200), Phase::fwd, 0, 1);
    g.add_send_recv(1, 0, Bytes(300), Phase::bwd, 0, 0);
    g.add_send_recv(0, 1, Bytes(400), Phase::fwd, 0, 2, Stream::send_next, Stream::recv_prev);
    g.finalize();
    // Sorted by (src, dst, send stream, receive stream): p2p (2) before send_next (5).
    const Channels c = plan_channels(g);
    REQUIRE(c.list.size() == 3);
    CHECK((c.list[0].src == 0 && c.list[0].dst == 1 && c.list[0].send_stream == Stream::p2p));
    CHECK(c.list[0].p2ps == std::vector<std::int32_t>{0, 1});
    CHECK((c.list[1].src == 0 && c.list[1].send_stream == Stream::send_next && c.list[1].recv_stream == Stream::recv_prev));
    CHECK((c.list[2].src == 1 && c.list[2].dst == 0));
    CHECK(c.of_p2p == std::vector<std::int32_t>{0, 0, 2, 1});
}

TEST_CASE("every strategy's schedule receives each NCCL channel's sends in order", "[exec][cuda_plan]") {
    using strategies::DataParallel;
    using strategies::Schedule;
    auto pipeline = [](Schedule s, int v, int tp) {
        strategies::Plan p;
        p.pp = 2;
        p.tp = tp;
        p.schedule = s;
        p.virtual_stages = v;
        p.global_batch = 4;
        return p;
    };
    std::vector<std::pair<std::string, strategies::Plan>> plans;
    for (DataParallel s : {DataParallel::ps, DataParallel::ps_async, DataParallel::ddp, DataParallel::zero3}) {
        strategies::Plan p;
        p.strategy = s;
        plans.emplace_back(to_string(s), p);
    }
    plans.emplace_back("gpipe", pipeline(Schedule::gpipe, 1, 1));
    plans.emplace_back("1f1b", pipeline(Schedule::one_f_one_b, 1, 1));
    plans.emplace_back("interleaved", pipeline(Schedule::interleaved, 2, 1));
    plans.emplace_back("zb-h1", pipeline(Schedule::zb_h1, 1, 1));
    plans.emplace_back("tp2-pp2", pipeline(Schedule::one_f_one_b, 1, 2));
    for (const auto& [name, plan] : plans) {
        INFO(name);
        const strategies::Built b = build(plan, 4);
        const OpGraph& g = b.graph;
        const Channels c = plan_channels(g);
        std::size_t covered = 0, out_of_order = 0;
        for (std::size_t i = 0; i < c.list.size(); ++i) {
            const Channel& ch = c.list[i];
            covered += ch.p2ps.size();
            for (std::size_t j = 0; j < ch.p2ps.size(); ++j) {
                const P2P& p = g.p2ps()[static_cast<std::size_t>(ch.p2ps[j])];
                CHECK((p.src == ch.src && p.dst == ch.dst && g.op(p.send).stream == ch.send_stream &&
                       g.op(p.recv).stream == ch.recv_stream));
                CHECK(c.of_p2p[static_cast<std::size_t>(ch.p2ps[j])] == static_cast<std::int32_t>(i));
                if (j > 0) {
                    const P2P& before = g.p2ps()[static_cast<std::size_t>(ch.p2ps[j - 1])];
                    out_of_order += !(before.send < p.send && before.recv < p.recv);
                }
            }
        }
        CHECK(covered == g.p2ps().size());
        // NCCL pairs the k-th send with the k-th receive of a channel: both must be in order.
        CHECK(out_of_order == 0);
    }
}

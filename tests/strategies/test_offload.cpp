// Offload (ZeRO-Offload, ZeRO-Infinity, FSDP's CPU offload) against the papers and the
// frameworks' code: what fits where, what the host holds per parameter (counted from the
// graph's buffers), the bytes every step copies between tiers (counted from the graph's copies,
// against what the strategy implies), unified memory, and the plans refused.
#include <catch2/catch.hpp>

#include <functional>

#include "core/error.hpp"
#include "dp_fixtures.hpp"
#include "strategies/data_parallel.hpp"
#include "strategies/zero.hpp"
#include "test_support.hpp"

using namespace smol;
using namespace smol::strategies;

namespace {

/// A GPT-2-style model of `layers` × `hidden` (heads of 128), as the ZeRO-Offload and
/// ZeRO-Infinity papers size theirs.
Model gpt(const std::string& name, int layers, int hidden, int seq = 1024) {
    TransformerShape s;
    s.layers = layers;
    s.hidden = hidden;
    s.heads = s.kv_heads = hidden / 128;
    s.ffn_hidden = 4 * hidden;
    s.vocab = 50304;
    s.max_seq = seq;
    return Model::transformer(name, s);
}

/// Bytes of `rank`'s buffers in `tier` with `label`, from the graph.
std::int64_t held(const OpGraph& g, int rank, Tier tier, BufferLabel label) {
    std::int64_t n = 0;
    for (const Buffer& b : g.buffers())
        if (b.rank == rank && b.tier == tier && static_cast<BufferLabel>(b.label) == label) n += b.bytes;
    return n;
}

/// Bytes `rank` copies from one tier to another in the step, from the graph.
std::int64_t copied(const OpGraph& g, int rank, Tier from, Tier to) {
    std::int64_t n = 0;
    for (const Op& op : g.ops())
        if (op.kind == OpKind::copy && op.rank == rank && op.copy_from() == from && op.copy_to() == to) n += op.bytes;
    return n;
}

sim::SimOptions analytic() {
    sim::SimOptions o;
    o.network = sim::NetworkMode::analytic;
    o.record_memory = false;
    return o;
}

Plan plan_of(DataParallel s, Offload o = Offload::none) {
    Plan p;
    p.strategy = s;
    p.offload = o;
    p.recompute = Recompute::full;
    return p;
}

}  // namespace

TEST_CASE("ZeRO-Offload: a 10 B GPT on one V100 fits with zero2 and CPU offload, not with DDP", "[strategies][offload]") {
    // Ren et al. 2021 §6: a 10 B GPT-2 (50 layers of 4096, the DeepSpeed tutorial's config) on one
    // 32 GB V100 of a DGX-2. DDP needs 16 bytes a parameter on the device (160 GB).
    const Model m = gpt("gpt-10b", 50, 4096);
    const topo::Cluster c = topo::cluster_preset("dgx2-v100").first_devices(1);
    const double psi = static_cast<double>(m.parameters());
    REQUIRE(psi == Approx(10.3e9).epsilon(0.01));
    const test::DpRun ddp = test::dp_run(m, c, plan_of(DataParallel::ddp), analytic());
    CHECK_FALSE(ddp.summary.fits());
    const test::DpRun off = test::dp_run(m, c, plan_of(DataParallel::zero2, Offload::cpu), analytic());
    CHECK(off.summary.fits());
    const OpGraph& g = off.built.graph;
    // The host holds K = 12 bytes a parameter of optimizer state (fp32 master weights, momentum,
    // variance: Rajbhandari et al. 2020) and the fp32 gradient partition (4 bytes).
    CHECK(static_cast<double>(held(g, 0, Tier::host, BufferLabel::optimizer_state)) == Approx(12 * psi).epsilon(1e-6));
    CHECK(static_cast<double>(held(g, 0, Tier::host, BufferLabel::gradients)) == Approx(4 * psi).epsilon(1e-6));
    // The device keeps the fp16 parameters; no gradient or optimizer state persists there.
    CHECK(static_cast<double>(held(g, 0, Tier::device, BufferLabel::parameters)) == Approx(2 * psi).epsilon(1e-6));
    CHECK(held(g, 0, Tier::device, BufferLabel::optimizer_state) == 0);
    CHECK(held(g, 0, Tier::device, BufferLabel::gradients) == 0);
    // And the timeline's host peak holds at least those.
    CHECK(off.timeline.peak[0][static_cast<int>(Tier::host)].as_double() >= 16 * psi);
}

TEST_CASE("offload copies per step are what the strategy implies", "[strategies][offload]") {
    const Model m = model_preset("gpt2-medium");
    const double psi = static_cast<double>(m.parameters());
    SECTION("ZeRO-Offload on 4 GPUs: each rank's fp32 gradient partition down, its fp16 partition up") {
        // DeepSpeed casts the reduced partition to fp32 on the device before the copy
        // (stage_1_and_2.py async_inplace_copy_grad_to_fp32_buffer_from_gpu), and copies the
        // 16-bit partition the CPU step wrote back in one copy: 4Ψ/N down, 2Ψ/N up.
        const topo::Cluster c = topo::cluster_preset("dgx-a100").first_devices(4);
        const Built b = build(m, c, plan_of(DataParallel::zero2, Offload::cpu));
        const double n = 4;
        for (int r = 0; r < 4; ++r) {
            CHECK(static_cast<double>(copied(b.graph, r, Tier::device, Tier::host)) == Approx(4 * psi / n).epsilon(1e-3));
            CHECK(static_cast<double>(copied(b.graph, r, Tier::host, Tier::device)) == Approx(2 * psi / n).epsilon(1e-3));
        }
    }
    SECTION("ZeRO-Offload with Megatron-DeepSpeed's tp 2 on 8 GPUs: each tensor rank's partition over its 4 replicas") {
        // Each tensor rank holds half of every matrix (Ψ_t, its own parameters) and partitions its
        // gradients and optimizer over the 4 replicas of that tensor rank: 4Ψ_t/4 down, 2Ψ_t/4 up,
        // 12Ψ_t/4 of optimizer state in host memory, at every stage.
        const topo::Cluster c = topo::cluster_preset("dgx-a100");
        for (const DataParallel st : {DataParallel::zero1, DataParallel::zero2, DataParallel::zero3}) {
            Plan p = plan_of(st, Offload::cpu);
            p.tp = 2;
            p.framework = "megatron-deepspeed";
            p.global_batch = 4;   // one micro-batch (accumulation round-trips the partition: above)
            const Built b = build(m, c, p);
            const double psi_t = static_cast<double>(strategies::detail::total_params(strategies::detail::replica_blocks(m, b.layout, p)));
            INFO(to_string(st));
            for (int r = 0; r < 8; ++r) {
                // (zero3 also round-trips each 16-bit partition through the host's flat buffer:
                // stage3_partition_grads, tested below.)
                CHECK(static_cast<double>(copied(b.graph, r, Tier::device, Tier::host)) ==
                      Approx((st == DataParallel::zero3 ? 6 : 4) * psi_t / 4).epsilon(1e-3));
                if (st != DataParallel::zero3)   // zero3 writes the partition where the parameters live (the device)
                    CHECK(static_cast<double>(copied(b.graph, r, Tier::host, Tier::device)) == Approx(2 * psi_t / 4).epsilon(1e-3));
                CHECK(static_cast<double>(held(b.graph, r, Tier::host, BufferLabel::optimizer_state)) == Approx(12 * psi_t / 4).epsilon(1e-3));
            }
        }
    }
    SECTION("ZeRO-Offload with gradient accumulation: the fp16 partition round-trips through the host") {
        // async_accumulate_grad_in_cpu_via_gpu: micro-batch 0 copies its 16-bit partition out,
        // each later one brings the sum back, adds, and copies it out (the last as fp32).
        const topo::Cluster c = topo::cluster_preset("dgx-a100").first_devices(1);
        Plan p = plan_of(DataParallel::zero2, Offload::cpu);
        p.global_batch = 3;
        const Built b = build(m, c, p);
        CHECK(static_cast<double>(copied(b.graph, 0, Tier::device, Tier::host)) == Approx((2 + 2 + 4) * psi).epsilon(1e-3));
        CHECK(static_cast<double>(copied(b.graph, 0, Tier::host, Tier::device)) == Approx((2 + 2 + 2) * psi).epsilon(1e-3));
    }
    SECTION("ZeRO-3 offloaded (DeepSpeed 0.6 on): every micro-batch's 16-bit partition through the host's flat buffer") {
        // stage3.py partition_grads: micro-batch 0 copies the partition to the host and straight
        // back; each later one brings the sum in and copies it out; the boundary also copies the
        // fp32 cast out: 2 + 2 more bytes a parameter each extra micro-batch, per rank of 2.
        const topo::Cluster c = topo::cluster_preset("dgx-a100").first_devices(2);
        Plan p = plan_of(DataParallel::zero3);
        p.offload_optimizer = Offload::cpu;
        p.global_batch = 2;
        const Built one = build(m, c, p);
        p.global_batch = 6;
        const Built three = build(m, c, p);
        const double part = psi / 2;
        CHECK(static_cast<double>(copied(one.graph, 0, Tier::device, Tier::host)) == Approx((2 + 4) * part).epsilon(1e-3));
        CHECK(static_cast<double>(copied(three.graph, 0, Tier::device, Tier::host)) == Approx((2 + 2 + 2 + 4) * part).epsilon(1e-3));
        CHECK(static_cast<double>(copied(three.graph, 0, Tier::host, Tier::device) - copied(one.graph, 0, Tier::host, Tier::device)) ==
              Approx(2 * 2 * part).epsilon(1e-3));
        // The host holds the flat 16-bit buffer and the fp32 gradients (6 bytes), and the state (12).
        CHECK(static_cast<double>(held(one.graph, 0, Tier::host, BufferLabel::gradients)) == Approx(6 * part).epsilon(1e-3));
        CHECK(static_cast<double>(held(one.graph, 0, Tier::host, BufferLabel::optimizer_state)) == Approx(12 * part).epsilon(1e-3));
        // The copies are issued on the reduction's stream (DeepSpeed's reduce_and_partition_stream),
        // not on the copy queues the activation checkpoints use: with those offloaded too
        // (cpu_checkpointing, as the Azure rows of bench/published run) the step still simulates.
        for (const Op& op : three.graph.ops())
            if (op.kind == OpKind::copy && op.phase == Phase::bwd) CHECK(op.stream == Stream::comm);
        p.offload_activations = Offload::cpu;
        CHECK(test::dp_run(m, c, p, analytic()).summary.iteration > Time::zero());
        p.offload_activations = Offload::none;
        // DeepSpeed 0.5 accumulated as stages 1-2 do: the fp32 partition out, once (mbs 1).
        p.global_batch = 2;
        p.framework = "deepspeed@0.5";
        CHECK(static_cast<double>(copied(build(m, c, p).graph, 0, Tier::device, Tier::host)) == Approx(4 * part).epsilon(1e-3));
    }
    SECTION("FSDP's CPU offload: the fp32 shard to the device before each all-gather, the fp32 gradient shard back") {
        // FULL_SHARD gathers every unit in forward and again in backward, but the root's (the
        // embedding and the head), which stay gathered from forward to backward.
        const topo::Cluster c = topo::cluster_preset("dgx-a100");
        const Built b = build(m, c, plan_of(DataParallel::fsdp, Offload::cpu));
        std::int64_t shards = 0, root = 0;
        for (const Block& blk : strategies::detail::replica_blocks(m, b.layout, plan_of(DataParallel::fsdp))) {
            shards += strategies::detail::shard(blk.params, 8);
            if (blk.kind == Block::Kind::embedding || blk.kind == Block::Kind::head) root += strategies::detail::shard(blk.params, 8);
        }
        CHECK(copied(b.graph, 0, Tier::host, Tier::device) == 4 * (2 * shards - root));
        CHECK(copied(b.graph, 0, Tier::device, Tier::host) == 4 * shards);
    }
    SECTION("ZeRO-Infinity: NVMe parameters come through pinned host memory, once in forward and once in backward") {
        const topo::Cluster c = topo::cluster_preset("dgx-a100");
        Plan p = plan_of(DataParallel::zero3);
        p.offload_params = Offload::nvme;
        p.offload_optimizer = Offload::nvme;
        p.framework_overrides.max_reuse_distance = 0;   // every block released after forward
        const Built b = build(m, c, p);
        const std::int64_t read = copied(b.graph, 0, Tier::nvme, Tier::host);
        CHECK(copied(b.graph, 0, Tier::host, Tier::device) > 0);
        // The optimizer's sub-group swaps in 16 bytes a parameter (fp32 weights, moments,
        // gradients) and out 12; the parameters in the two passes add 2 × 2 bytes.
        CHECK(static_cast<double>(read) == Approx((16 + 2 * 2) * psi / 8).epsilon(0.02));
        CHECK(static_cast<double>(copied(b.graph, 0, Tier::host, Tier::nvme)) == Approx((12 + 4 + 2) * psi / 8).epsilon(0.02));
    }
}

TEST_CASE("ZeRO-Infinity: a trillion parameters fit one DGX-2 only with zero3 and NVMe", "[strategies][offload]") {
    // Rajbhandari et al. 2021 (abstract): ZeRO-Infinity fine-tunes trillion-parameter models on a
    // single DGX-2 node. 1 T at 18 bytes a parameter (16 of optimizer state and fp32 gradients,
    // 2 of fp16 weights) is 18 TB: more than the node's 1.5 TiB of DRAM, less than its 30 TB of NVMe.
    const Model m = gpt("gpt-1t", 128, 25600);
    REQUIRE(static_cast<double>(m.parameters()) == Approx(1.0e12).epsilon(0.01));
    const topo::Cluster c = topo::cluster_preset("dgx2-v100");
    auto fits = [&](Plan p) {
        const test::DpRun r = test::dp_run(m, c, p, analytic());
        return r.summary.fits();
    };
    // As DeepSpeed ran then (the paper's v0.3; the 0.5 row's gradient path).
    auto of_its_time = [](Plan p) {
        p.framework = "deepspeed@0.5";
        return p;
    };
    CHECK_FALSE(fits(of_its_time(plan_of(DataParallel::zero3))));
    CHECK_FALSE(fits(of_its_time(plan_of(DataParallel::zero3, Offload::cpu))));   // the host's share is 96 GiB a GPU
    CHECK(fits(of_its_time(plan_of(DataParallel::zero3, Offload::nvme))));
    CHECK_FALSE(fits(of_its_time(plan_of(DataParallel::zero2, Offload::cpu))));    // 2 TB of fp16 weights on every GPU
    // From DeepSpeed 0.6 every gradient partition also accumulates in a flat 16-bit buffer in host
    // memory, NVMe or not (stage3.py grad_partitions_flat_buffer on self.device, the CPU): 2 bytes
    // a parameter, 2 TB, above the node's 1.5 TiB.
    const test::DpRun now = test::dp_run(m, c, plan_of(DataParallel::zero3, Offload::nvme), analytic());
    CHECK_FALSE(now.summary.fits());
    CHECK(static_cast<double>(held(now.built.graph, 0, Tier::host, BufferLabel::gradients)) == Approx(2.0 * m.parameters() / 16).epsilon(1e-3));
}

TEST_CASE("unified memory: offload moves nothing and adds no capacity", "[strategies][offload]") {
    // A Jetson's GPU memory is the board's DRAM: moving a state "to the host" keeps it where it is.
    const Model m = model_preset("gpt2-large");
    const topo::Cluster c = topo::cluster_preset("jetson-orin-nano");
    const test::DpRun plain = test::dp_run(m, c, plan_of(DataParallel::zero2), analytic());
    const test::DpRun off = test::dp_run(m, c, plan_of(DataParallel::zero2, Offload::cpu), analytic());
    CHECK(off.built.layout.offload_ignored);
    CHECK(off.summary.peak_memory == plain.summary.peak_memory);
    CHECK(off.summary.fits() == plain.summary.fits());
    for (const Op& op : off.built.graph.ops()) CHECK(op.kind != OpKind::copy);
    // The host tier has no capacity of its own there.
    CHECK(off.timeline.capacity[0][static_cast<int>(Tier::host)] == Bytes(0));
}

TEST_CASE("the delayed update overlaps the CPU step with forward and backward", "[strategies][offload]") {
    // Ren et al. 2021 §5.2: with a small batch the CPU step is a large part of the step; the
    // one-step delayed parameter update hides it behind the next step's forward and backward.
    const Model m = model_preset("gpt2-xl");
    const topo::Cluster c = topo::cluster_preset("dgx2-v100").first_devices(1);
    Plan p = plan_of(DataParallel::zero2, Offload::cpu);
    const test::DpRun plain = test::dp_run(m, c, p);
    p.delayed_update = true;
    const test::DpRun dpu = test::dp_run(m, c, p);
    CHECK(dpu.summary.iteration < plain.summary.iteration);
    // The host step starts with the step, and this step's last gradient copy waits for it.
    for (OpId id = 0; id < dpu.built.graph.size(); ++id) {
        const Op& op = dpu.built.graph.op(id);
        if (op.kind == OpKind::compute && op.on_host()) CHECK(dpu.timeline.start[id] == Time::zero());
    }
}

TEST_CASE("offload plans that cannot run are refused with the reason", "[strategies][offload]") {
    const Model gpt2 = model_preset("gpt2-small");
    SECTION("offload without ZeRO or FSDP") {
        CHECK_THAT(test::bad_input_message([&] { resolve(gpt2, topo::cluster_preset("dgx-a100"), plan_of(DataParallel::ddp, Offload::cpu)); }),
                   Catch::Contains("--offload needs a strategy that shards model states") && Catch::Contains("ddp"));
    }
    SECTION("NVMe offload on a cluster without NVMe") {
        CHECK_THAT(test::bad_input_message([&] {
                       resolve(gpt2, topo::cluster_preset("jetson-agx-orin"), plan_of(DataParallel::zero3, Offload::nvme));
                   }),
                   Catch::Contains("NVMe offload needs an NVMe drive") && Catch::Contains("jetson-agx-orin"));
    }
    SECTION("parameter offload with stage 2") {
        Plan p = plan_of(DataParallel::zero2);
        p.offload_params = Offload::cpu;
        CHECK_THAT(test::bad_input_message([&] { resolve(gpt2, topo::cluster_preset("dgx-a100"), p); }),
                   Catch::Contains("--offload-params needs --strategy zero3"));
    }
    SECTION("NVMe with stage 2: DeepSpeed keeps it in CPU memory") {
        CHECK_THAT(test::bad_input_message([&] { resolve(gpt2, topo::cluster_preset("dgx-a100"), plan_of(DataParallel::zero2, Offload::nvme)); }),
                   Catch::Contains("whatever the device"));
    }
    SECTION("FSDP to NVMe") {
        CHECK_THAT(test::bad_input_message([&] { resolve(gpt2, topo::cluster_preset("dgx-a100"), plan_of(DataParallel::fsdp, Offload::nvme)); }),
                   Catch::Contains("CPU memory only"));
    }
    SECTION("parameters offloaded with the optimizer on the device") {
        Plan p = plan_of(DataParallel::zero3);
        p.offload_params = Offload::cpu;
        CHECK_THAT(test::bad_input_message([&] { resolve(gpt2, topo::cluster_preset("dgx-a100"), p); }),
                   Catch::Contains("needs the optimizer offloaded too"));
    }
    SECTION("offload with pipeline parallelism: Megatron's CPU offload, and only there") {
        auto refused = [&](const std::function<void(Plan&)>& change) {
            Plan p = plan_of(DataParallel::zero1, Offload::cpu);
            p.pp = 2;
            change(p);
            return test::bad_input_message([&] { resolve(gpt2, topo::cluster_preset("dgx-a100"), p); });
        };
        CHECK_THAT(refused([](Plan& p) { p.framework = "megatron@0.11"; }), Catch::Contains("core 0.12 and later"));
        CHECK_THAT(refused([](Plan& p) { p.strategy = DataParallel::ddp; }), Catch::Contains("--strategy zero1 (its distributed optimizer)"));
        CHECK_THAT(refused([](Plan& p) { p.offload = Offload::nvme; }), Catch::Contains("keeps the optimizer in CPU memory"));
        CHECK_THAT(refused([](Plan& p) { p.offload_params = Offload::cpu; }), Catch::Contains("the parameters stay on the device"));
        CHECK_THAT(refused([](Plan& p) { p.optimizer = Optimizer::lamb; }), Catch::Contains("no CPU implementation"));
        Plan p = plan_of(DataParallel::zero1, Offload::cpu);
        p.pp = 2;
        p.framework = "megatron@0.12";
        CHECK(resolve(gpt2, topo::cluster_preset("dgx-a100"), p).optimizer_offload == Offload::cpu);
    }
    SECTION("the delayed update without ZeRO-Offload") {
        Plan p = plan_of(DataParallel::zero3, Offload::cpu);
        p.delayed_update = true;
        CHECK_THAT(test::bad_input_message([&] { resolve(gpt2, topo::cluster_preset("dgx-a100"), p); }),
                   Catch::Contains("--delayed-update"));
    }
    SECTION("an offloaded step with an optimizer DeepSpeed has no CPU version of") {
        Plan p = plan_of(DataParallel::zero2, Offload::cpu);
        p.optimizer = Optimizer::lamb;
        CHECK_THAT(test::bad_input_message([&] { resolve(gpt2, topo::cluster_preset("dgx-a100"), p); }),
                   Catch::Contains("no CPU implementation"));
    }
}

TEST_CASE("a node's GPUs share its host DRAM for their CPU steps", "[strategies][offload]") {
    // Eight ranks of one DGX A100 each step 1/8 of the model on the host: with the DRAM shared,
    // each step takes as long as one rank stepping everything alone — the node's bytes over
    // the node's bandwidth — not 1/8 of it.
    const Model m = model_preset("gpt2-xl");
    const topo::Cluster one = topo::cluster_preset("dgx-a100").first_devices(1), eight = topo::cluster_preset("dgx-a100");
    auto host_step = [&](const topo::Cluster& c) {
        const test::DpRun r = test::dp_run(m, c, plan_of(DataParallel::zero2, Offload::cpu));
        for (OpId id = 0; id < r.built.graph.size(); ++id) {
            const Op& op = r.built.graph.op(id);
            if (op.kind == OpKind::compute && op.on_host() && op.rank == 0) return std::pair{r.timeline.duration(id), op.bytes};
        }
        FAIL("no host step");
        return std::pair{Time(), std::int64_t{0}};
    };
    const auto [t1, bytes1] = host_step(one);
    const auto [t8, bytes8] = host_step(eight);
    const topo::NodeGroup& g = eight.groups[0];
    const double alone = static_cast<double>(bytes1) / (g.host_memory_bandwidth.bytes_per_second() * g.host_memory_efficiency);
    CHECK(t1.to_seconds() == Approx(alone).epsilon(0.01));
    CHECK(static_cast<double>(bytes8) == Approx(static_cast<double>(bytes1) / 8).epsilon(0.01));
    CHECK(t8.to_seconds() == Approx(alone).epsilon(0.05));
}

TEST_CASE("Megatron's --optimizer-cpu-offload: the shard's state on the host, its step copied out and back",
          "[strategies][offload]") {
    // GPT-2 medium on a DGX A100, tp 2 · pp 2 · dp 2, zero1 (Megatron's distributed optimizer) in
    // bf16. Offloaded as HybridDeviceOptimizer runs it (megatron/core/optimizer/cpu_offloading/
    // hybrid_optimizer.py), each rank's shard of P parameters keeps its fp32 master weights and
    // moments (12P) and a pinned fp32 copy of its gradients (4P) in host memory, nothing of the
    // optimizer on the device; the step copies 4P bytes out (the fp32 main gradients), runs
    // fused AdamW on the host (28P) and the cast to bf16 (6P), and copies 2P back; the device keeps
    // the step's passes over the main gradients, 58 − 28 − 6 = 24P.
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    Plan p = plan_of(DataParallel::zero1);
    p.tp = 2;
    p.pp = 2;
    p.dtype = DType::bf16;
    p.global_batch = 8;
    const test::DpRun on_device = test::dp_run(m, c, p, analytic());
    p.offload = Offload::cpu;
    const test::DpRun offloaded = test::dp_run(m, c, p, analytic());
    const OpGraph& g0 = on_device.built.graph;
    const OpGraph& g = offloaded.built.graph;
    for (int r : {0, 2, 4, 6}) {   // a rank of each (stage, replica)
        INFO("rank " << r);
        const std::int64_t state = held(g0, r, Tier::device, BufferLabel::optimizer_state);
        REQUIRE(state % 12 == 0);
        const std::int64_t shard = state / 12;
        CHECK(held(g, r, Tier::device, BufferLabel::optimizer_state) == 0);
        CHECK(held(g, r, Tier::host, BufferLabel::optimizer_state) == state);
        CHECK(held(g, r, Tier::host, BufferLabel::gradients) == 4 * shard);
        CHECK(copied(g, r, Tier::device, Tier::host) == 4 * shard);
        CHECK(copied(g, r, Tier::host, Tier::device) == 2 * shard);
        std::int64_t host = 0, device = 0;
        for (const Op& op : g.ops())
            if (op.kind == OpKind::compute && op.rank == r && op.phase == Phase::opt) (op.on_host() ? host : device) += op.bytes;
        CHECK(host == 34 * shard);
        CHECK(device == 24 * shard);
    }
    // In order: the device's passes, the copy out, the host's step, the copy back, then the
    // distributed optimizer's all-gather of the updated parameters.
    const Timeline& tl = offloaded.timeline;
    std::map<std::string, std::pair<Time, Time>> at;   // rank 0's step ops: first start, last end
    for (OpId id = 0; id < g.size(); ++id) {
        const Op& op = g.op(id);
        if (op.rank != 0 || op.phase != Phase::opt) continue;
        const std::string what = op.kind == OpKind::copy ? (op.copy_to() == Tier::host ? "out" : "back")
                                 : op.kind == OpKind::compute ? (op.on_host() ? "host" : "device")
                                 : op.kind == OpKind::collective ? "gather" : "other";
        auto [it, fresh] = at.try_emplace(what, tl.start[id], tl.end[id]);
        if (!fresh) it->second = {std::min(it->second.first, tl.start[id]), std::max(it->second.second, tl.end[id])};
    }
    REQUIRE(at.count("device") + at.count("out") + at.count("host") + at.count("back") + at.count("gather") == 5);
    CHECK(at["device"].second <= at["out"].first);
    CHECK(at["out"].second <= at["host"].first);
    CHECK(at["host"].second <= at["back"].first);
    CHECK(at["back"].second <= at["gather"].first);
    CHECK(offloaded.summary.iteration > on_device.summary.iteration);

    SECTION("--optimizer-offload-fraction 0.5: half the shard on the host, the other half stepped on the device") {
        // The device steps its half with the framework's 58 bytes and runs the 24-byte passes over
        // the host's half; the host steps its half (34 bytes); only that half crosses. The device's
        // step queues behind the copy out (the current stream) and the copy back waits for it.
        p.optimizer_offload_fraction = 0.5;
        const test::DpRun half = test::dp_run(m, c, p, analytic());
        const OpGraph& h = half.built.graph;
        const std::int64_t state = held(g0, 0, Tier::device, BufferLabel::optimizer_state), shard = state / 12;
        const std::int64_t cpu = (shard + 1) / 2, gpu = shard - cpu;
        CHECK(held(h, 0, Tier::host, BufferLabel::optimizer_state) == 12 * cpu);
        CHECK(held(h, 0, Tier::device, BufferLabel::optimizer_state) == 12 * gpu);
        CHECK(copied(h, 0, Tier::device, Tier::host) == 4 * cpu);
        CHECK(copied(h, 0, Tier::host, Tier::device) == 2 * cpu);
        std::int64_t host = 0, device = 0;
        OpId out = 0, device_step = 0, back = 0;
        for (OpId id = 0; id < h.size(); ++id) {
            const Op& op = h.op(id);
            if (op.rank != 0 || op.phase != Phase::opt) continue;
            if (op.kind == OpKind::compute) (op.on_host() ? host : device) += op.bytes;
            if (op.kind == OpKind::compute && !op.on_host() && op.bytes == 58 * gpu) device_step = id;
            if (op.kind == OpKind::copy) (op.copy_to() == Tier::host ? out : back) = id;
        }
        CHECK(host == 34 * cpu);
        CHECK(device == 24 * cpu + 58 * gpu);
        REQUIRE(device_step != 0);
        CHECK(half.timeline.end[out] <= half.timeline.start[device_step]);
        CHECK(half.timeline.end[device_step] <= half.timeline.start[back]);
        CHECK(half.summary.iteration < offloaded.summary.iteration);
        CHECK(half.summary.iteration > on_device.summary.iteration);
    }
}

TEST_CASE("DeepSpeed's Twin-Flow: the first int(ratio × sub-groups) of a rank's optimizer on the host, the rest on "
          "the device",
          "[strategies][offload]") {
    // ZeRO-Offload++ (DeepSpeed PR #4636, v0.12.3): stage3.py _create_fp16_sub_groups closes a
    // sub-group of whole parameter tensors once it holds sub_group_size (1e9) partition elements;
    // subgroup_to_device puts the first int(ratio × sub-groups) on the CPU (CPU-Adam), the rest
    // keep their fp32 weights, moments and gradients on the device (FusedAdam); step() walks them
    // in order.
    const topo::Cluster c = topo::cluster_preset("dgx-h100");
    Plan p = plan_of(DataParallel::zero3);
    p.offload_optimizer = Offload::cpu;
    p.dtype = DType::bf16;
    p.global_batch = 8;   // one micro-batch a rank
    SECTION("Llama 3 70B on 8 GPUs: the weights in sub-groups of at least 1e9 elements, each overshooting by less "
            "than a tensor, then the norms in one of their own") {
        const Model m = model_preset("llama3-70b");
        const Built b = build(m, c, p);
        const std::vector<Block> blocks = strategies::detail::replica_blocks(m, b.layout, p);
        // A rank's partition: 70.6 B / 8 = 8.82 B elements; its largest tensor is the 128,256 ×
        // 8,192 embedding, 131.3 M elements a rank. The parameter group without weight decay: two
        // RMSNorm weights of 8,192 in each of 80 layers and the final norm, 1,318,912 elements,
        // an eighth a rank.
        const double largest = 128256.0 * 8192 / 8;
        const double norms = (80.0 * 2 * 8192 + 8192) / 8, weights = m.parameters() / 8.0 - norms;
        for (const double ratio : {0.0, 0.3, 0.5, 0.75, 0.99}) {
            const TwinFlowSplit s = twin_flow_split(blocks, 8, 1'000'000'000, ratio);
            INFO("ratio " << ratio);
            CHECK(static_cast<double>(s.params) == Approx(m.parameters() / 8.0).epsilon(1e-4));
            const int w = s.subgroups - 1;   // the weights' sub-groups
            CHECK(w >= static_cast<int>(std::ceil(weights / (1e9 + largest))));
            CHECK(w <= static_cast<int>(std::ceil(weights / 1e9)));
            CHECK(s.on_cpu == static_cast<int>(ratio * s.subgroups));
            CHECK(static_cast<double>(s.cpu_params) >= 1e9 * std::min(s.on_cpu, w - 1));
            CHECK(static_cast<double>(s.cpu_params) < (1e9 + largest) * s.on_cpu + 1);
            CHECK(static_cast<double>(s.cpu_model) == Approx(8.0 * static_cast<double>(s.cpu_params)).epsilon(1e-4));
        }
        // int(0.99 × sub-groups) leaves one on the device: the norms'.
        const TwinFlowSplit s = twin_flow_split(blocks, 8, 1'000'000'000, 0.99);
        CHECK(static_cast<double>(s.params - s.cpu_params) == norms);
    }
    SECTION("Megatron-DeepSpeed's example (GPT-3 350M, ratio 0.3): two sub-groups, so nothing is stepped on the CPU") {
        // examples_deepspeed/offload_pp/ds_config_gpt_TEMPLATE.json sets ratio 0.3 and leaves
        // sub_group_size at 1e9: a rank's partition is one sub-group per parameter group (the
        // weights, then the biases and norms) and int(0.3 × 2) = 0.
        const Model m = model_preset("gpt2-medium");
        p.optimizer_offload_fraction = 0.3;
        const Built b = build(m, c, p);
        const auto s = twin_flow_split(m, b.layout, p);
        REQUIRE(s);
        CHECK(s->subgroups == 2);
        CHECK(s->on_cpu == 0);
        const std::int64_t part = s->params;
        CHECK(held(b.graph, 0, Tier::host, BufferLabel::optimizer_state) == 0);
        CHECK(static_cast<double>(held(b.graph, 0, Tier::device, BufferLabel::optimizer_state)) == Approx(12.0 * part).epsilon(1e-4));
        // The gradients still pass through the host's flat 16-bit buffer (there and back), but no
        // fp32 gradient leaves for a CPU step.
        CHECK(static_cast<double>(held(b.graph, 0, Tier::host, BufferLabel::gradients)) == Approx(2.0 * part).epsilon(1e-4));
        CHECK(static_cast<double>(copied(b.graph, 0, Tier::device, Tier::host)) == Approx(2.0 * part).epsilon(1e-4));
        CHECK(static_cast<double>(copied(b.graph, 0, Tier::host, Tier::device)) == Approx(2.0 * part).epsilon(1e-4));
        for (const Op& op : b.graph.ops()) CHECK_FALSE((op.phase == Phase::opt && op.on_host()));
    }
    SECTION("Llama 2 7B in sub-groups of 1e8: state, gradients and copies split; the device's step after the host's") {
        const Model m = model_preset("llama2-7b");
        p.framework_overrides.sub_group_size = 100'000'000;
        const test::DpRun all = test::dp_run(m, c, p, analytic());
        p.optimizer_offload_fraction = 0.5;
        const test::DpRun half = test::dp_run(m, c, p, analytic());
        p.optimizer_offload_fraction = 0.0;
        const test::DpRun none = test::dp_run(m, c, p, analytic());
        const auto s = twin_flow_split(m, half.built.layout, [&] {
            Plan q = p;
            q.optimizer_offload_fraction = 0.5;
            return q;
        }());
        REQUIRE(s);
        const std::int64_t gshard = held(all.built.graph, 0, Tier::host, BufferLabel::optimizer_state) / 12;
        const std::int64_t cpu = s->cpu_params, gpu = gshard - cpu;
        INFO(s->on_cpu << " of " << s->subgroups << " sub-groups, " << cpu << " of " << gshard);
        REQUIRE(s->subgroups >= 8);
        CHECK(s->on_cpu == s->subgroups / 2);
        const OpGraph& g = half.built.graph;
        // 12 bytes a parameter of state (fp32 weights, moments) where each sub-group steps; the
        // device's sub-groups keep their fp32 gradients there too (4 bytes).
        CHECK(held(g, 0, Tier::host, BufferLabel::optimizer_state) == 12 * cpu);
        CHECK(held(g, 0, Tier::device, BufferLabel::optimizer_state) == 12 * gpu);
        CHECK(held(g, 0, Tier::device, BufferLabel::gradients) - held(all.built.graph, 0, Tier::device, BufferLabel::gradients) == 4 * gpu);
        // Every partition's bf16 gradient goes to the host's flat buffer and back; only the host's
        // sub-groups' fp32 gradients go down for the step, and their bf16 weights come back.
        CHECK(static_cast<double>(copied(g, 0, Tier::device, Tier::host)) == Approx(2.0 * gshard + 4.0 * cpu).epsilon(0.01));
        CHECK(static_cast<double>(copied(g, 0, Tier::host, Tier::device)) == Approx(2.0 * gshard + 2.0 * cpu).epsilon(0.01));
        // In step()'s order: the host's sub-groups, then the device's.
        Time host_end = Time::zero(), device_start = Time::max();
        for (OpId id = 0; id < g.size(); ++id) {
            const Op& op = g.op(id);
            if (op.rank != 0 || op.phase != Phase::opt || op.kind != OpKind::compute) continue;
            if (op.on_host()) host_end = std::max(host_end, half.timeline.end[id]);
            else device_start = std::min(device_start, half.timeline.start[id]);
        }
        CHECK(host_end > Time::zero());
        CHECK(host_end <= device_start);
        // CPU-Adam is slower than the device's step: the less on the host, the shorter the step.
        CHECK(none.summary.iteration < half.summary.iteration);
        CHECK(half.summary.iteration < all.summary.iteration);
        // A ratio of 1 is plain ZeRO-Offload.
        p.optimizer_offload_fraction = 1.0;
        const test::DpRun one = test::dp_run(m, c, p, analytic());
        CHECK(one.summary.iteration == all.summary.iteration);
        CHECK(one.built.graph.size() == all.built.graph.size());
    }
    SECTION("refused where DeepSpeed does not run it") {
        const Model m = model_preset("gpt2-medium");
        p.optimizer_offload_fraction = 0.5;
        Plan q = p;
        q.strategy = DataParallel::zero2;
        CHECK_THAT(test::bad_input_message([&] { resolve(m, c, q); }), Catch::Contains("Twin-Flow") && Catch::Contains("zero3"));
        q = p;
        q.framework = "deepspeed@0.12";
        CHECK_THAT(test::bad_input_message([&] { resolve(m, c, q); }),
                   Catch::Contains("0.12.3 and later") && Catch::Contains("deepspeed@0.12 does not have it"));
        q = p;
        q.offload_optimizer = Offload::nvme;
        CHECK_THAT(test::bad_input_message([&] { resolve(m, c, q); }), Catch::Contains("--offload-optimizer cpu"));
        q = p;
        q.optimizer_offload_fraction = 1.5;
        CHECK_THAT(test::bad_input_message([&] { resolve(m, c, q); }), Catch::Contains("from 0 to 1") && Catch::Contains("found 1.5"));
        q.optimizer_offload_fraction = 0.0;   // DeepSpeed accepts 0: every sub-group on the device
        CHECK_NOTHROW(resolve(m, c, q));
    }
}

TEST_CASE("Megatron's --overlap-cpu-optimizer-d2h-h2d pipelines the offloaded step block by block", "[strategies][offload]") {
    // The same bytes cross and the same bytes are stepped, in pieces (a block's share of the shard
    // each: the embedding and 12 layers on the first of two stages of GPT-2 medium), so the copies
    // of one piece run beside the CPU step of another: the step phase is shorter than the three
    // phases one after the other, and no shorter than the CPU's part of it.
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    Plan p = plan_of(DataParallel::zero1, Offload::cpu);
    p.tp = 2;
    p.pp = 2;
    p.dtype = DType::bf16;
    p.global_batch = 8;
    const test::DpRun serial = test::dp_run(m, c, p, analytic());
    p.overlap_cpu_optimizer_d2h_h2d = true;
    const test::DpRun overlapped = test::dp_run(m, c, p, analytic());
    struct Phase3 {
        int copies_out = 0;
        std::int64_t out = 0, back = 0, host = 0;
        Time first, last, host_time;
    };
    auto step_of = [](const test::DpRun& run) {
        Phase3 s{0, 0, 0, 0, Time::seconds(1e6), Time(), Time()};
        const OpGraph& g = run.built.graph;
        for (OpId id = 0; id < g.size(); ++id) {
            const Op& op = g.op(id);
            if (op.rank != 0 || op.phase != Phase::opt) continue;
            const bool out = op.kind == OpKind::copy && op.copy_to() == Tier::host;
            const bool back = op.kind == OpKind::copy && op.copy_to() == Tier::device;
            const bool host = op.kind == OpKind::compute && op.on_host();
            if (!(out || back || host)) continue;
            s.copies_out += out;
            (out ? s.out : back ? s.back : s.host) += op.bytes;
            if (host) s.host_time += run.timeline.duration(id);
            s.first = std::min(s.first, run.timeline.start[id]);
            s.last = std::max(s.last, run.timeline.end[id]);
        }
        return s;
    };
    const Phase3 a = step_of(serial), b = step_of(overlapped);
    CHECK(a.copies_out == 1);
    CHECK(b.copies_out == 13);
    CHECK(b.out == a.out);
    CHECK(b.back == a.back);
    CHECK(b.host == a.host);
    CHECK(b.last - b.first < a.last - a.first);
    CHECK(b.last - b.first >= b.host_time);
    CHECK(overlapped.summary.iteration < serial.summary.iteration);
    // Without Megatron's offload the flag has nothing to overlap.
    Plan q = plan_of(DataParallel::zero2, Offload::cpu);
    q.overlap_cpu_optimizer_d2h_h2d = true;
    CHECK_THAT(test::bad_input_message([&] { resolve(m, c, q); }), Catch::Contains("needs --offload cpu with --strategy zero1"));
    q.overlap_cpu_optimizer_d2h_h2d = false;
    q.optimizer_offload_fraction = 0.5;
    CHECK_THAT(test::bad_input_message([&] { resolve(m, c, q); }),
               Catch::Contains("--optimizer-offload-fraction is Megatron's") && Catch::Contains("Twin-Flow") &&
                   Catch::Contains("this plan has neither"));
    p.optimizer_offload_fraction = 0;
    CHECK_THAT(test::bad_input_message([&] { resolve(m, c, p); }), Catch::Contains("above 0 and at most 1") && Catch::Contains("found 0"));
    p.optimizer_offload_fraction = 1.5;
    CHECK_THAT(test::bad_input_message([&] { resolve(m, c, p); }), Catch::Contains("found 1.5"));
}

TEST_CASE("FSDP's CPU offload with tensor parallelism: each tensor rank's shard of its slices on its host",
          "[strategies][offload][fsdp]") {
    // FSDP2's CPUOffloadPolicy on a 2-D mesh (torchtitan's enable_cpu_offload with TP, NeMo RL's
    // DTensor policy with cpu_offload and tensor_parallel_size): fully_shard shards each tensor
    // rank's slices over the data-parallel ranks of that tensor rank, and the offload moves those
    // shards as it does without TP. GPT-2 medium on a DGX A100, tp 2 · dp 4 against tp 1 · dp 4
    // on half of it.
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    Plan p = plan_of(DataParallel::fsdp, Offload::cpu);
    p.dtype = DType::bf16;
    p.global_batch = 8;
    p.tp = 2;
    const test::DpRun tp2 = test::dp_run(m, c, p, analytic());
    p.tp = 1;
    const test::DpRun tp1 = test::dp_run(m, c.first_devices(4), p, analytic());
    const OpGraph& g = tp2.built.graph;
    REQUIRE(tp2.built.layout.tp == 2);
    REQUIRE(tp2.built.layout.dp == tp1.built.layout.dp);
    // A rank's shard: Σ over its blocks (one tensor rank's slices) of ⌈params / dp⌉.
    const std::vector<Block> blocks = strategies::detail::replica_blocks(m, tp2.built.layout, p);
    std::int64_t expected = 0;
    for (const Block& b : blocks) expected += (b.params + 3) / 4;
    const std::int64_t one = held(tp1.built.graph, 0, Tier::host, BufferLabel::parameters) / 4;
    for (int r : {0, 1}) {   // the two tensor ranks of the first replica
        INFO("rank " << r);
        const std::int64_t shard = held(g, r, Tier::host, BufferLabel::parameters) / 4;
        CHECK(shard == expected);
        CHECK(held(g, r, Tier::host, BufferLabel::gradients) == 4 * shard);
        CHECK(held(g, r, Tier::host, BufferLabel::optimizer_state) == 8 * shard);
        for (const BufferLabel b : {BufferLabel::parameters, BufferLabel::gradients, BufferLabel::optimizer_state})
            CHECK(held(g, r, Tier::device, b) == 0);
        // Half of tp 1's shard, but for what each tensor rank holds whole (norms, biases of the
        // row-parallel layers, position embeddings): between a half and two thirds of it.
        CHECK(static_cast<double>(shard) > 0.5 * static_cast<double>(one));
        CHECK(static_cast<double>(shard) < 0.67 * static_cast<double>(one));
        // The same gathers and reductions as tp 1, each moving this rank's shard: the copies in
        // and out scale with the shard.
        const double in = static_cast<double>(copied(g, r, Tier::host, Tier::device)) / static_cast<double>(shard);
        const double out = static_cast<double>(copied(g, r, Tier::device, Tier::host)) / static_cast<double>(shard);
        CHECK(in == Approx(static_cast<double>(copied(tp1.built.graph, 0, Tier::host, Tier::device)) / static_cast<double>(one)).epsilon(0.02));
        CHECK(out == Approx(static_cast<double>(copied(tp1.built.graph, 0, Tier::device, Tier::host)) / static_cast<double>(one)).epsilon(0.02));
        // PyTorch's foreach Adam moves 72 bytes a parameter on the host.
        std::int64_t host = 0;
        for (const Op& op : g.ops())
            if (op.kind == OpKind::compute && op.rank == r && op.on_host()) host += op.bytes;
        CHECK(host == 72 * shard);
    }
    // Megatron's tensor-parallel all-reduces still run in each replica: per micro-batch the
    // embedding's, two a layer and the head's in forward and in backward, and the layers' two
    // again in the full recompute; FSDP's collectives over each tensor rank's replicas.
    const test::RankCollectives rc = test::rank_collectives(g, tp2.built.layout, 1, 0);
    CHECK(rc.tp.at(CollectiveKind::all_reduce) == tp2.built.layout.microbatches * (2 * (1 + 2 * 24 + 1) + 2 * 24));
    CHECK(rc.dp_groups_one_tensor_rank);
    CHECK(tp2.summary.fits());
}

TEST_CASE("FSDP's CPU offload under pipeline stages: one copy in and one out a unit per step, the step on the host",
          "[strategies][offload][fsdp]") {
    // GPT-2 medium on a DGX A100, pp 2 · dp 4, two micro-batches a replica, FSDP offloaded as
    // torchtitan runs it (CPUOffloadPolicy; reshard_after_forward off under pipeline stages, so
    // each unit is gathered once a step and reduced once, after the stage's last backward). A
    // rank's shard of P parameters keeps 4P of fp32 weights, 4P of gradients and 8P of Adam's
    // moments on the host; each step copies 4P in (the fp32 shard, cast to bf16 on the device
    // before the gather) and 4P out (the reduced shard, cast to fp32), and PyTorch's foreach Adam
    // moves 72P on the host.
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    Plan p = plan_of(DataParallel::fsdp, Offload::cpu);
    p.pp = 2;
    p.dtype = DType::bf16;
    p.global_batch = 8;
    const test::DpRun run = test::dp_run(m, c, p, analytic());
    const OpGraph& g = run.built.graph;
    REQUIRE(run.built.layout.microbatches == 2);
    for (int r : {0, 4}) {   // the first replica's rank of each stage
        INFO("rank " << r);
        const std::int64_t shard = held(g, r, Tier::host, BufferLabel::parameters) / 4;
        REQUIRE(shard > 0);
        CHECK(held(g, r, Tier::host, BufferLabel::gradients) == 4 * shard);
        CHECK(held(g, r, Tier::host, BufferLabel::optimizer_state) == 8 * shard);
        for (const BufferLabel b : {BufferLabel::parameters, BufferLabel::gradients, BufferLabel::optimizer_state})
            CHECK(held(g, r, Tier::device, b) == 0);
        // Whole units shard with rounding up: within one element a unit.
        CHECK(copied(g, r, Tier::host, Tier::device) == Approx(4.0 * static_cast<double>(shard)).margin(4 * 16));
        CHECK(copied(g, r, Tier::device, Tier::host) == Approx(4.0 * static_cast<double>(shard)).margin(4 * 16));
        std::int64_t host = 0;
        for (const Op& op : g.ops())
            if (op.kind == OpKind::compute && op.rank == r && op.on_host()) host += op.bytes;
        CHECK(host == 72 * shard);
    }
    CHECK(run.summary.fits());
    // Refused where it is not modelled.
    p.pp = 1;
    p.cp = 2;
    CHECK_THAT(test::bad_input_message([&] { resolve(m, c, p); }), Catch::Contains("Megatron's --optimizer-cpu-offload"));
    p.cp = 1;
    p.pp = 2;
    p.finetune = parse_finetune("lora:8");
    CHECK_THAT(test::bad_input_message([&] { resolve(m, c, p); }), Catch::Contains("not with --finetune"));
}

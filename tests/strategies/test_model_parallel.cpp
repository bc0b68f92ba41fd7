// Model parallelism against independent expectations: pipeline bubbles and in-flight activations
// measured from simulated timelines, tensor-parallel traffic and activation memory counted from
// the graph, and bad plans.
#include <catch2/catch.hpp>

#include <limits>

#include <cstdio>
#include <set>
#include <numeric>
#include <map>
#include <tuple>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

#include "core/error.hpp"
#include "sim/sim_fixtures.hpp"
#include "sim/simulator.hpp"
#include "strategies/model_parallel.hpp"
#include "strategies/plan.hpp"
#include "traces/summary.hpp"
#include "test_support.hpp"

using namespace smol;
using namespace smol::strategies;

namespace {

/// `n` identical fully-connected layers: 1 GFLOP forward per sample, 1 MB of activations, 1 MB
/// output, fp32, and 10,000 parameters — enough for a weight gradient as costly as the input
/// gradient (each is the forward's FLOPs), so few that the optimizer takes microseconds.
Model equal_layers(int n) {
    std::vector<LayerSpec> layers;
    for (int i = 0; i < n; ++i)
        layers.push_back({"fc" + std::to_string(i), "fc", 10000, Flops(1e9), Bytes::mb(1), Bytes::mb(1)});
    return Model::layer_list("equal", std::move(layers), 1000000);
}

/// Boards whose network is free: 1e6 GB/s links, no latency anywhere.
topo::Cluster free_network(int devices) { return test::uniform_switch_cluster(devices, 1e6, 0, 0); }

struct Stage {
    Time busy;   // compute time
    Bytes peak;  // device memory at its peak, less the model states (which live all step)
};
struct Measured {
    Built built;
    Timeline tl;
    std::vector<Stage> stages;   // one rank per stage (dp = tp = 1)
};

Measured simulate_pipeline(const Model& m, int p, Plan plan) {
    const topo::Cluster c = free_network(p);
    plan.pp = p;
    Measured out{build(m, c, plan), {}, {}};
    out.tl = sim::simulate(out.built.graph, c);
    for (int s = 0; s < p; ++s) {
        Stage st;
        for (OpId id = 0; id < out.built.graph.size(); ++id) {
            const Op& op = out.built.graph.op(id);
            if (op.rank == s && op.kind == OpKind::compute) st.busy += out.tl.duration(id);
        }
        st.peak = out.tl.peak[static_cast<std::size_t>(s)][static_cast<int>(Tier::device)];
        for (const Buffer& b : out.built.graph.buffers()) {
            const auto label = static_cast<BufferLabel>(b.label);
            if (b.rank == s && (label == BufferLabel::parameters || label == BufferLabel::gradients ||
                                label == BufferLabel::optimizer_state))
                st.peak -= Bytes(b.bytes);
        }
        out.stages.push_back(st);
    }
    return out;
}

/// Ring traffic each rank sends for one collective of buffer S over t ranks (nccl-tests'
/// bus-bandwidth factors): 2(t−1)/t·S for all-reduce, (t−1)/t·S for reduce-scatter / all-gather.
double ring_bytes(CollectiveKind k, double s, int t) {
    const double f = static_cast<double>(t - 1) / t;
    return k == CollectiveKind::all_reduce ? 2 * f * s : f * s;
}

int run_cli(const std::string& args, std::string& err) {
    // One file per process: ctest runs this file's test cases side by side.
    const std::string log = "test_model_parallel." + std::to_string(getpid()) + ".stderr";
    const std::string cmd = std::string(SMOLCLUSTER_BIN) + " simulate " + args + " > /dev/null 2> " + log;
    const int status = std::system(cmd.c_str());
    std::ifstream in(log);
    std::stringstream ss;
    ss << in.rdbuf();
    err = ss.str();
    in.close();
    std::remove(log.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("GPipe and 1F1B bubbles are (p − 1)/(m + p − 1) of the step with free communication",
          "[strategies][pipeline]") {
    const Schedule kind = GENERATE(Schedule::gpipe, Schedule::one_f_one_b);
    const int p = GENERATE(2, 4);
    const int m = GENERATE(4, 8, 16);
    INFO(to_string(kind) << " p " << p << " m " << m);
    Plan plan;
    plan.schedule = kind;
    plan.global_batch = m;
    const Measured r = simulate_pipeline(equal_layers(8), p, plan);
    const double step = r.tl.makespan.to_seconds();
    const double expected = double(p - 1) / (m + p - 1);
    for (const Stage& st : r.stages) CHECK((step - st.busy.to_seconds()) / step == Approx(expected).epsilon(0.02));

    // The summary reports the same bubble (mean over ranks).
    traces::StepInfo info;
    info.pp = p;
    const traces::Summary s = traces::summarize(r.built.graph, r.tl, info);
    CHECK(s.bubble_fraction == Approx(expected).epsilon(0.02));

    // Activations in flight on the first stage, from the simulated memory peak: one micro-batch
    // of the stage's layers is 8/p layers × 1 MB.
    const double per_mb = Bytes::mb(8.0 / p).as_double();
    const double held = r.stages[0].peak.as_double() / per_mb;
    if (kind == Schedule::gpipe) CHECK(held == Approx(m));
    if (kind == Schedule::one_f_one_b) CHECK(held == Approx(std::min(p, m)));
    CHECK(s.per_stage.size() == static_cast<std::size_t>(p));
}

TEST_CASE("interleaved bubble is (p − 1)/(v·m) of the ideal time, ZB-H1's about (p − 1)/(3m)",
          "[strategies][pipeline]") {
    const int p = GENERATE(2, 4);
    const int m = GENERATE(8, 16);
    Plan plan;
    plan.global_batch = m;
    SECTION("interleaved") {
        const int v = GENERATE(2, 4);
        INFO("p " << p << " m " << m << " v " << v);
        plan.schedule = Schedule::interleaved;
        plan.virtual_stages = v;
        const Measured r = simulate_pipeline(equal_layers(16), p, plan);
        for (const Stage& st : r.stages) {
            const double ideal = st.busy.to_seconds();
            CHECK((r.tl.makespan.to_seconds() - ideal) / ideal == Approx(double(p - 1) / (v * m)).epsilon(0.02));
        }
    }
    SECTION("zb-h1") {
        INFO("p " << p << " m " << m);
        plan.schedule = Schedule::zb_h1;
        const Measured r = simulate_pipeline(equal_layers(16), p, plan);
        for (const Stage& st : r.stages) {
            const double ideal = st.busy.to_seconds();
            // "About": Megatron posts each step's receives after the previous step, which adds a
            // few per cent to the drain.
            CHECK((r.tl.makespan.to_seconds() - ideal) / ideal == Approx(double(p - 1) / (3 * m)).epsilon(0.05));
            // Activations are held until the weight pass; still at most p micro-batches.
            CHECK(st.peak.as_double() <= Bytes::mb(16.0 / p).as_double() * p * 1.0001);
        }
        // And better than 1F1B's bubble on the same pipeline.
        plan.schedule = Schedule::one_f_one_b;
        const Measured f = simulate_pipeline(equal_layers(16), p, plan);
        CHECK(r.tl.makespan < f.tl.makespan);
    }
}

TEST_CASE("tensor-parallel traffic per layer and micro-batch is 8·b·s·h·(t − 1)/t elements per device, 10 with sp",
          "[strategies][tp]") {
    const int t = GENERATE(2, 4, 8);
    const bool sp = GENERATE(false, true);
    INFO("t " << t << (sp ? " with sp" : ""));
    const Model m = model_preset("gpt2-medium");  // 16 heads, h 1024, s 1024
    const topo::Cluster c = topo::cluster_preset("dgx-a100").first_devices(t);
    Plan plan;
    plan.tp = t;
    plan.sequence_parallel = sp;
    plan.micro_batch = 2;
    plan.global_batch = 4;  // two micro-batches
    const Built b = build(m, c, plan);
    const double bsh = 2.0 * 1024 * 1024;
    double bytes = 0;
    std::map<std::tuple<Phase, CollectiveKind, Stream>, int> ops;
    const int layer = 5;  // a transformer layer (block 0 is the embedding)
    for (const Op& op : b.graph.ops()) {
        if (op.kind != OpKind::collective || op.rank != 0 || op.layer != layer || op.microbatch != 1) continue;
        const Collective& col = b.graph.collectives()[static_cast<std::size_t>(op.ref)];
        CHECK(b.graph.communicators()[static_cast<std::size_t>(col.communicator)].size() == static_cast<std::size_t>(t));
        bytes += ring_bytes(col.kind, static_cast<double>(op.bytes), t);
        ++ops[{op.phase, col.kind, op.stream}];
    }
    // Megatron's f and g operators (Shoeybi et al. 2019, Fig. 3): an all-reduce after attention
    // and after the MLP in forward, and one for each column-parallel linear's input gradient in
    // backward, launched before the weight gradient (async_grad_allreduce). With sp (Korthikanti
    // et al. 2022 §4.2.2) each forward all-reduce is an all-gather and a reduce-scatter; backward
    // gathers each row-parallel linear's gradient (blocking), and each column-parallel linear
    // re-gathers its input and reduce-scatters its input gradient, both async.
    using Key = std::tuple<Phase, CollectiveKind, Stream>;
    const std::map<Key, int> expected =
        sp ? std::map<Key, int>{{{Phase::fwd, CollectiveKind::all_gather, Stream::compute}, 2},
                                {{Phase::fwd, CollectiveKind::reduce_scatter, Stream::compute}, 2},
                                {{Phase::bwd, CollectiveKind::all_gather, Stream::compute}, 2},
                                {{Phase::bwd, CollectiveKind::all_gather, Stream::tp}, 2},
                                {{Phase::bwd, CollectiveKind::reduce_scatter, Stream::tp}, 2}}
           : std::map<Key, int>{{{Phase::fwd, CollectiveKind::all_reduce, Stream::compute}, 2},
                                {{Phase::bwd, CollectiveKind::all_reduce, Stream::tp}, 2}};
    CHECK(ops == expected);
    CHECK(bytes == Approx((sp ? 10 : 8) * bsh * (t - 1) / t * 2));  // 2 bytes per bf16 element
}

TEST_CASE("a column-parallel linear's backward collectives run beside its weight gradient, and the next kernels wait for them",
          "[strategies][tp]") {
    const bool sp = GENERATE(false, true);
    INFO((sp ? "with sp" : "without sp"));
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").first_devices(2);
    Plan plan;
    plan.tp = 2;
    plan.sequence_parallel = sp;
    const Built b = build(m, c, plan);
    const Timeline tl = sim::simulate(b.graph, c);
    const int layer = 5;
    // Rank 0's backward of the layer, in program order: compute segments and collectives.
    std::vector<OpId> compute, async;
    for (OpId id = 0; id < b.graph.size(); ++id) {
        const Op& op = b.graph.op(id);
        if (op.rank != 0 || op.layer != layer || op.phase != Phase::bwd) continue;
        if (op.kind == OpKind::compute) compute.push_back(id);
        if (op.kind == OpKind::collective && op.stream == Stream::tp) async.push_back(id);
    }
    // Five segments: before the MLP's up projection's window, the window, up to the QKV
    // projection's window, that window, the rest.
    REQUIRE(compute.size() == 5);
    REQUIRE(async.size() == (sp ? 4u : 2u));
    auto holds = [&](OpId id, KernelName name, bool weight) {
        for (const Kernel& k : b.graph.kernels_of(id))
            if (k.op == KernelOp::gemm && k.name == name && k.weight == weight) return true;
        return false;
    };
    const KernelName windows[2] = {KernelName::mlp_up, KernelName::qkv};
    for (int w = 0; w < 2; ++w) {
        const OpId window = compute[static_cast<std::size_t>(1 + 2 * w)], next = compute[static_cast<std::size_t>(2 + 2 * w)];
        const OpId before = compute[static_cast<std::size_t>(2 * w)];
        CHECK(holds(window, windows[w], true));            // the weight gradient
        CHECK(holds(window, windows[w], false) == sp);     // and with sp the data gradient
        CHECK(holds(before, windows[w], false) == !sp);    // else it comes before
        for (std::size_t k = 0; k < async.size() / 2; ++k) {
            const OpId a = async[static_cast<std::size_t>(w) * async.size() / 2 + k];
            // Launched after the segment before the window, beside it, and waited for by the next.
            CHECK(tl.start[a] >= tl.end[before]);
            CHECK(tl.start[a] < tl.end[window]);
            CHECK(tl.start[next] >= tl.end[a]);
        }
    }
}

TEST_CASE("Megatron's tp-comm-overlap runs every tensor-parallel collective beside its GEMM as Transformer Engine's userbuffers do",
          "[strategies][tp]") {
    const Model m = model_preset("gpt2-medium");   // h 1024, s 1024
    const topo::Cluster c = topo::cluster_preset("dgx-h100").first_devices(4);
    Plan plan;
    plan.tp = 4;
    plan.sequence_parallel = true;
    plan.framework = "megatron";
    const Built blocking = build(m, c, plan);
    plan.tp_comm_overlap = true;
    const Built b = build(m, c, plan);
    const Timeline tl = sim::simulate(b.graph, c), before = sim::simulate(blocking.graph, c);
    const int layer = 5;
    const std::int64_t sbh = 1024 * 1024 * 2;   // one sample's b·s·h in bf16
    for (const Phase phase : {Phase::fwd, Phase::bwd}) {
        INFO(to_string(phase));
        std::vector<OpId> compute;
        std::map<std::tuple<CollectiveKind, Stream, std::int64_t, int>, int> collectives;   // kind, stream, bytes, SMs
        for (OpId id = 0; id < b.graph.size(); ++id) {
            const Op& op = b.graph.op(id);
            if (op.rank != 0 || op.layer != layer || op.phase != phase) continue;
            if (op.kind == OpKind::compute) compute.push_back(id);
            if (op.kind != OpKind::collective) continue;
            const Collective& col = b.graph.collectives()[static_cast<std::size_t>(op.ref)];
            ++collectives[{col.kind, op.stream, col.bytes, col.sms}];
        }
        // Four windows (the QKV, output, up and down projections' GEMMs) and the segments around them.
        CHECK(compute.size() == 9);
        using Key = std::tuple<CollectiveKind, Stream, std::int64_t, int>;
        // TE's defaults (module/base.py get_default_config): ring exchange on the copy engines
        // (0 SMs); the pipelined reduce-scatter in 4 splits, the last after its GEMM, and the bulk
        // overlaps on 16 SMs.
        const std::map<Key, int> expected =
            phase == Phase::fwd ? std::map<Key, int>{{{CollectiveKind::all_gather, Stream::tp, sbh, 0}, 2},
                                                     {{CollectiveKind::reduce_scatter, Stream::tp, sbh * 3 / 4, 16}, 2},
                                                     {{CollectiveKind::reduce_scatter, Stream::compute, sbh / 4, 16}, 2}}
                                : std::map<Key, int>{{{CollectiveKind::all_gather, Stream::tp, sbh, 0}, 2},
                                                     {{CollectiveKind::all_gather, Stream::tp, sbh, 16}, 2},
                                                     {{CollectiveKind::reduce_scatter, Stream::tp, sbh, 16}, 2}};
        CHECK(collectives == expected);
    }
    // Every forward collective launched async runs beside a compute op of its layer (here each
    // is shorter than its GEMM; in backward the bulk reduce-scatter waits for the re-gather on
    // the same queue and may outlast the window), and the step is shorter than with the blocking
    // forward.
    for (OpId id = 0; id < b.graph.size(); ++id) {
        const Op& op = b.graph.op(id);
        if (op.rank != 0 || op.kind != OpKind::collective || op.stream != Stream::tp || op.phase != Phase::fwd) continue;
        bool beside = false;
        for (OpId f = 0; f < b.graph.size(); ++f) {
            const Op& u = b.graph.op(f);
            if (u.rank == 0 && u.kind == OpKind::compute && u.layer == op.layer && u.microbatch == op.microbatch &&
                tl.start[f] < tl.end[id] && tl.start[id] < tl.end[f])
                beside = true;
        }
        CHECK(beside);
    }
    CHECK(tl.makespan < before.makespan);
}

TEST_CASE("a context-parallel layer's tensor-parallel collectives run around its ring as without context parallelism",
          "[strategies][tp][cp]") {
    // Megatron's linears are the same on either side of Transformer Engine's context-parallel
    // attention: the layer's collectives are those of the traffic test above (Megatron's f and g,
    // the backward's column-parallel pairs async beside their GEMMs), on each rank's 1 / cp of the
    // sequence; with --tp-comm-overlap those of the userbuffers test.
    const bool ub = GENERATE(false, true);
    const bool sp = ub || GENERATE(false, true);
    const int tp = 2, cp = 2;
    INFO((ub ? "userbuffers" : sp ? "sp" : "no sp"));
    const Model m = model_preset("gpt2-medium");   // h 1024, s 1024: 512 tokens a rank
    const topo::Cluster c = topo::cluster_preset("dgx-h100").first_devices(tp * cp);
    Plan plan;
    plan.tp = tp;
    plan.cp = cp;
    plan.sequence_parallel = sp;
    plan.framework = "megatron";
    const Built blocking = build(m, c, plan);
    plan.tp_comm_overlap = ub;
    const Built b = build(m, c, plan);
    REQUIRE(b.layout.cp == cp);
    const Timeline tl = sim::simulate(b.graph, c);
    const int layer = 5;
    const std::int64_t sbh = 512 * 1024 * 2;   // b·(s / cp)·h in bf16
    using Key = std::tuple<Phase, CollectiveKind, Stream, std::int64_t>;
    std::map<Key, int> ops;
    std::vector<OpId> async;
    for (OpId id = 0; id < b.graph.size(); ++id) {
        const Op& op = b.graph.op(id);
        if (op.kind != OpKind::collective || op.rank != 0 || op.layer != layer || op.microbatch != 0) continue;
        const Collective& col = b.graph.collectives()[static_cast<std::size_t>(op.ref)];
        const std::vector<int>& group = b.graph.communicators()[static_cast<std::size_t>(col.communicator)];
        if (group != std::vector<int>{0, 1}) continue;   // the tensor group (the ring's are sends)
        ++ops[{op.phase, col.kind, op.stream, col.bytes}];
        if (op.stream == Stream::tp) async.push_back(id);
    }
    const std::map<Key, int> expected =
        ub   ? std::map<Key, int>{{{Phase::fwd, CollectiveKind::all_gather, Stream::tp, sbh}, 2},
                                  {{Phase::fwd, CollectiveKind::reduce_scatter, Stream::tp, sbh * 3 / 4}, 2},
                                  {{Phase::fwd, CollectiveKind::reduce_scatter, Stream::compute, sbh / 4}, 2},
                                  {{Phase::bwd, CollectiveKind::all_gather, Stream::tp, sbh}, 4},
                                  {{Phase::bwd, CollectiveKind::reduce_scatter, Stream::tp, sbh}, 2}}
        : sp ? std::map<Key, int>{{{Phase::fwd, CollectiveKind::all_gather, Stream::compute, sbh}, 2},
                                  {{Phase::fwd, CollectiveKind::reduce_scatter, Stream::compute, sbh}, 2},
                                  {{Phase::bwd, CollectiveKind::all_gather, Stream::compute, sbh}, 2},
                                  {{Phase::bwd, CollectiveKind::all_gather, Stream::tp, sbh}, 2},
                                  {{Phase::bwd, CollectiveKind::reduce_scatter, Stream::tp, sbh}, 2}}
             : std::map<Key, int>{{{Phase::fwd, CollectiveKind::all_reduce, Stream::compute, sbh}, 2},
                                  {{Phase::bwd, CollectiveKind::all_reduce, Stream::tp, sbh}, 2}};
    CHECK(ops == expected);
    // Each async collective runs beside a compute op of its layer (launched before it, not after
    // the pass) and a later compute op of the layer waits for it.
    REQUIRE(!async.empty());
    for (const OpId a : async) {
        const Op& op = b.graph.op(a);
        bool beside = false, waited = false;
        for (OpId f = 0; f < b.graph.size(); ++f) {
            const Op& u = b.graph.op(f);
            if (u.rank != 0 || u.kind != OpKind::compute || u.layer != layer || u.microbatch != 0 || u.phase != op.phase) continue;
            beside |= tl.start[f] < tl.end[a] && tl.start[a] < tl.end[f];
            waited |= tl.start[f] >= tl.end[a];
        }
        CHECK(beside);
        CHECK(waited);
    }
    // The QKV projection's backward needs the ring's last receive, each rank's own dK and dV
    // (context_parallel.py:2718-2727), and the ring's steps need K and V from the projection.
    Time received = Time::zero(), qkv_backward = Time::max(), qkv_forward = Time::zero(), first_step = Time::max();
    for (OpId id = 0; id < b.graph.size(); ++id) {
        const Op& op = b.graph.op(id);
        if (op.rank != 0 || op.layer != layer || op.microbatch != 0) continue;
        if (op.kind == OpKind::recv && op.phase == Phase::bwd) received = std::max(received, tl.end[id]);
        if (op.kind != OpKind::compute) continue;
        bool qkv = false, core = false;
        for (const Kernel& k : b.graph.kernels_of(id)) {
            qkv |= k.op == KernelOp::gemm && k.name == KernelName::qkv;
            core |= k.op == KernelOp::flash;
        }
        if (qkv && op.phase == Phase::bwd) qkv_backward = std::min(qkv_backward, tl.start[id]);
        if (qkv && op.phase == Phase::fwd) qkv_forward = std::max(qkv_forward, tl.end[id]);
        if (core && op.phase == Phase::fwd) first_step = std::min(first_step, tl.start[id]);
    }
    CHECK(received > Time::zero());
    CHECK(qkv_backward >= received);
    CHECK(first_step >= qkv_forward);
    // Beside their GEMMs, not blocking: the step is shorter than with every collective blocking
    // after its pass (the userbuffers' forward against the plan without them).
    if (ub) CHECK(tl.makespan < sim::simulate(blocking.graph, c).makespan);
}

TEST_CASE("Megatron's tp-comm-overlap is refused where Megatron refuses it or the graph does not model it", "[strategies][tp][cli]") {
    std::string err;
    const std::string base = "--model gpt2-medium --cluster dgx-h100 --framework megatron ";
    CHECK(run_cli(base + "--tp 4 --tp-comm-overlap", err) == 2);
    CHECK_THAT(err, Catch::Contains("--tp-comm-overlap") && Catch::Contains("needs --sp"));
    CHECK(run_cli(base + "--tp-comm-overlap", err) == 2);
    CHECK_THAT(err, Catch::Contains("with --tp 1 there are none"));
    CHECK(run_cli("--model gpt2-medium --cluster dgx-h100 --framework megatron@0.3 --tp 4 --sp --tp-comm-overlap", err) == 2);
    CHECK_THAT(err, Catch::Contains("Megatron core 0.4"));
    CHECK(run_cli(base + "--nodes 2 --tp 16 --sp --tp-comm-overlap", err) == 2);
    CHECK_THAT(err, Catch::Contains("spans nodes"));
    CHECK(run_cli("--model " + std::string(SMOL_TEST_DATA) + "/hf/Mixtral-8x7B-v0.1.json --cluster dgx-h100 --nodes 2 "
                  "--framework megatron --tp 2 --ep 8 --sp --strategy zero1 --seq 1024 --tp-comm-overlap",
                  err) == 2);
    CHECK_THAT(err, Catch::Contains("--tp-comm-overlap") && Catch::Contains("mixture of experts"));
    CHECK(run_cli(base + "--tp 4 --sp --tp-comm-overlap", err) == 0);
    CHECK(run_cli(base + "--tp 2 --cp 2 --sp --tp-comm-overlap", err) == 0);
}

TEST_CASE("activation memory per layer matches Korthikanti et al. 2022 (eager) and FlashAttention (flash)",
          "[strategies][tp][memory]") {
    const int t = GENERATE(1, 2, 4);
    const bool sp = t > 1 ? GENERATE(false, true) : false;
    const Recompute rc = GENERATE(Recompute::none, Recompute::selective);
    const Attention attn = GENERATE(Attention::eager, Attention::flash);
    INFO("t " << t << (sp ? " sp " : " ") << to_string(rc) << " " << to_string(attn));
    const Model m = model_preset("gpt2-medium");
    const double s = 1024, b = 1, h = 1024, a = 16;
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2).first_devices(4 * t);
    Plan plan;
    plan.tp = t;
    plan.pp = 4;
    plan.sequence_parallel = sp;
    plan.recompute = rc;
    plan.stage_layers = {6, 6, 6, 6};
    plan.attention = attn;
    const Built built = build(m, c, plan);
    // A middle stage holds six transformer layers and nothing else: its activation buffer per
    // micro-batch is six layers' worth.
    const int rank = built.layout.rank(0, 0, 1);
    std::int64_t per_mb = -1;
    for (const Buffer& buf : built.graph.buffers())
        if (buf.rank == rank && buf.label == static_cast<std::int32_t>(BufferLabel::activations)) per_mb = buf.bytes;
    REQUIRE(per_mb > 0);
    // Eager keeps Korthikanti's 5as²b (softmax, its dropout mask and output); FlashAttention-2
    // keeps none of it, only the log-sum-exp, one fp32 per query and head (Dao 2023, Algorithm 1).
    // Selective recompute keeps neither.
    const double attention = rc == Recompute::selective ? 0 : attn == Attention::eager ? 5 * a * s / h : 4 * a / h;
    double expected = s * b * h * (34 + attention);                               // no parallelism
    if (t > 1 && !sp) expected = s * b * h * (10 + 24.0 / t + attention / t);   // tensor parallel
    if (t > 1 && sp) expected = s * b * h * (34 + attention) / t;                // tensor + sequence parallel
    CHECK(static_cast<double>(per_mb) / 6 == Approx(expected).epsilon(0.02));
}

TEST_CASE("3D layout: pipelines run between ranks of one (t, d), dp syncs gradients per stage", "[strategies][3d]") {
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100").with_nodes(2);  // 16 GPUs
    Plan plan;
    plan.tp = 2;
    plan.pp = 4;
    plan.global_batch = 16;   // dp 2, 8 micro-batches each
    const DataParallel flavour = GENERATE(DataParallel::ddp, DataParallel::zero1);
    plan.strategy = flavour;
    const Built b = build(m, c, plan);
    const Layout& l = b.layout;
    REQUIRE(l.dp == 2);
    // rank(t, d, p) = t + tp·(d + dp·p): every send goes to the same (t, d) on the next or previous stage.
    for (const P2P& p2p : b.graph.p2ps()) {
        CHECK(p2p.src % (l.tp * l.dp) == p2p.dst % (l.tp * l.dp));
        CHECK(std::abs(p2p.src / (l.tp * l.dp) - p2p.dst / (l.tp * l.dp)) == 1);
    }
    // Gradient sync over dp groups {t + tp·(d + dp·s)} for d = 0, 1; reduce-scatter with zero1.
    std::int64_t grad_bytes = 0;
    bool gathers = false;
    for (const Collective& col : b.graph.collectives()) {
        const auto& members = b.graph.communicators()[static_cast<std::size_t>(col.communicator)];
        if (members.size() != 2 || members[1] - members[0] != l.tp) continue;   // dp groups only
        if (members[0] == l.rank(0, 0, 1)) {
            if (col.kind == CollectiveKind::all_gather) gathers = true;
            else {
                CHECK(col.kind == (flavour == DataParallel::zero1 ? CollectiveKind::reduce_scatter : CollectiveKind::all_reduce));
                grad_bytes += col.bytes;
            }
        }
    }
    CHECK(gathers == (flavour == DataParallel::zero1));
    // Each parameter of stage 1's layers has its bf16 gradient synced once.
    Workload w;
    w.tp = 2;
    const auto blocks = m.blocks(w);
    const auto parts = partition_layers(blocks, 4, {}, Partition::equal);
    CHECK(parts == std::vector<int>(4, 6));   // Megatron's equal split of 24 layers
    std::int64_t params = 0;
    for (const Block& blk : blocks)
        if (blk.index > parts[0] && blk.index <= parts[0] + parts[1]) params += blk.params;
    CHECK(grad_bytes == params * 2);
    // It simulates end to end.
    const Timeline tl = sim::simulate(b.graph, c);
    CHECK(tl.makespan > Time::zero());
    CHECK_FALSE(tl.oom);
}

TEST_CASE("stages are balanced by cost, embedding first and head last", "[strategies][pipeline]") {
    Workload w;
    const auto blocks = model_preset("gpt3-175b").blocks(w);
    CHECK(partition_layers(blocks, 16, {}) == std::vector<int>(16, 6));
    // gpt2-small: the head (50257-wide projection) costs about a third of a layer... more for
    // short stages: with 3 stages of 12 layers the last stage gets fewer layers.
    const auto small = model_preset("gpt2-small").blocks(w);
    const auto parts = partition_layers(small, 3, {});
    CHECK(parts.size() == 3);
    CHECK(parts[0] + parts[1] + parts[2] == 12);
    CHECK(parts[2] < parts[0]);
    CHECK(partition_layers(small, 3, {5, 5, 2}) == std::vector<int>{5, 5, 2});
}

TEST_CASE("the min-max split takes per-stage costs and leaves out what is not allowed", "[strategies][pipeline]") {
    // Unit layers: stage 1 twice as slow. Best of 6 layers over 2 stages: 4 + 2 (max 4).
    const auto slow_second = [](int k, int a, int b) { return (k == 1 ? 2.0 : 1.0) * (b - a); };
    CHECK(min_max_split(6, 2, slow_second) == std::vector<int>{4, 2});
    // Stage 0 may hold at most one layer (a memory limit): 1 + 5.
    const auto small_first = [](int k, int a, int b) {
        return k == 0 && b - a > 1 ? std::numeric_limits<double>::infinity() : double(b - a);
    };
    CHECK(min_max_split(6, 2, small_first) == std::vector<int>{1, 5});
    // Nothing allowed: no split.
    CHECK(min_max_split(6, 2, [](int, int, int) { return std::numeric_limits<double>::infinity(); }).empty());
}

TEST_CASE("bad model-parallel plans exit 2 with a reason", "[strategies][pipeline][cli]") {
    std::string err;
    SECTION("tp not dividing the heads") {
        CHECK(run_cli("--model gpt2-small --cluster dgx-a100 --tp 8", err) == 2);
        CHECK_THAT(err, Catch::Contains("does not divide the 12 attention heads"));
    }
    SECTION("tp not dividing the key-value heads") {
        CHECK(run_cli("--model llama3-8b --cluster dgx-a100 --nodes 2 --tp 16", err) == 2);
        CHECK_THAT(err, Catch::Contains("does not divide the 8 key-value heads"));
    }
    SECTION("pp larger than the layers") {
        CHECK(run_cli("--model gpt2-small --cluster dgx-a100 --nodes 2 --pp 16", err) == 2);
        CHECK_THAT(err, Catch::Contains("larger than the 12 layers"));
    }
    SECTION("interleaved with layers not divisible by p·v") {
        CHECK(run_cli("--model gpt2-small --cluster dgx-a100 --pp 4 --dp 2 --schedule interleaved --virtual-stages 2 "
                      "--global-batch 16",
                      err) == 2);
        CHECK_THAT(err, Catch::Contains("pp × virtual stages = 8 equal chunks"));
    }
    SECTION("interleaved with micro-batches not a multiple of p") {
        CHECK(run_cli("--model gpt2-medium --cluster dgx-a100 --pp 4 --dp 2 --schedule interleaved --virtual-stages 2 "
                      "--global-batch 12",
                      err) == 2);
        CHECK_THAT(err, Catch::Contains("multiple of --pp 4"));
    }
    SECTION("tp·pp·dp not the device count") {
        CHECK(run_cli("--model gpt2-small --cluster dgx-a100 --tp 2 --pp 2 --dp 3", err) == 2);
        CHECK_THAT(err, Catch::Contains("but the cluster has 8 devices"));
    }
    SECTION("zero3 with a pipeline") {
        CHECK(run_cli("--model gpt2-small --cluster dgx-a100 --pp 2 --strategy zero3 --framework megatron-deepspeed", err) == 2);
        CHECK_THAT(err, Catch::Contains("DeepSpeed's pipeline engine refuses ZeRO stages 2 and 3"));
    }
    SECTION("fsdp with a pipeline and no sharding") {
        CHECK(run_cli("--model gpt2-small --cluster dgx-a100 --pp 2 --strategy fsdp --fsdp-sharding none", err) == 2);
        CHECK_THAT(err, Catch::Contains("--fsdp-sharding none with pipeline parallelism is not modelled") &&
                            Catch::Contains("--strategy ddp"));
    }
    SECTION("stage layers not adding up") {
        CHECK(run_cli("--model gpt2-small --cluster dgx-a100 --pp 2 --stage-layers 5,6", err) == 2);
        CHECK_THAT(err, Catch::Contains("adds up to 11 layers, but the model has 12"));
    }
}

TEST_CASE("Megatron's equal partition: the same layers per stage, or a clear error", "[strategies][pipeline]") {
    const Model m = model_preset("gpt2-medium");   // 24 layers
    const auto blocks = m.blocks(Workload{});
    CHECK(partition_layers(blocks, 8, {}, Partition::equal) == std::vector<int>(8, 3));
    CHECK(partition_rule(m, Plan{}) == Partition::equal);
    CHECK(partition_rule(equal_layers(4), Plan{}) == Partition::balanced);
    const std::string msg = test::bad_input_message([&] { partition_layers(blocks, 5, {}, Partition::equal); });
    CHECK_THAT(msg, Catch::Contains("--pp") && Catch::Contains("do not split equally") && Catch::Contains("--partition balanced"));
    // Balanced accepts it.
    const auto five = partition_layers(blocks, 5, {}, Partition::balanced);
    CHECK(std::accumulate(five.begin(), five.end(), 0) == 24);
}

TEST_CASE("on a balanced model with 16 micro-batches interleaving beats 1F1B", "[strategies][pipeline]") {
    Plan plan;
    plan.global_batch = 16;
    const Measured one = simulate_pipeline(equal_layers(16), 4, plan);
    plan.schedule = Schedule::interleaved;
    plan.virtual_stages = 2;
    const Measured inter = simulate_pipeline(equal_layers(16), 4, plan);
    INFO("1f1b " << to_string(one.tl.makespan) << ", interleaved " << to_string(inter.tl.makespan));
    CHECK(inter.tl.makespan < one.tl.makespan);
}

TEST_CASE("batched point to point: sends to different peers never wait for each other", "[strategies][pipeline]") {
    // A middle stage of a Megatron pipeline sends activations forward and gradients backward;
    // each direction to each neighbour has its own queue, so no send is queued behind one to the
    // other neighbour (or behind a receive).
    const Model m = model_preset("gpt2-medium");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    Plan plan;
    plan.pp = 4;
    plan.global_batch = 8;
    plan.framework = "megatron";
    const Built b = build(m, c, plan);
    std::map<std::pair<int, Stream>, std::set<int>> peers;   // (rank, stream) → ranks it sends to or receives from
    for (const P2P& p : b.graph.p2ps()) {
        peers[{p.src, b.graph.op(p.send).stream}].insert(p.dst);
        peers[{p.dst, b.graph.op(p.recv).stream}].insert(p.src);
        CHECK(b.graph.op(p.send).stream != b.graph.op(p.recv).stream);
    }
    for (const auto& [where, who] : peers) CHECK(who.size() == 1);
    // DeepSpeed's pipeline engine keeps one in-order queue per rank.
    plan.framework = "megatron-deepspeed";
    const Built d = build(m, c, plan);
    for (const P2P& p : d.graph.p2ps()) CHECK(d.graph.op(p.send).stream == Stream::p2p);
}

#include "strategies/model_parallel.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <tuple>

#include "core/error.hpp"
#include "strategies/context_parallel.hpp"
#include "strategies/data_parallel.hpp"
#include "strategies/fsdp.hpp"
#include "strategies/moe.hpp"
#include "strategies/offload.hpp"
#include "strategies/optimizer.hpp"
#include "strategies/schedule.hpp"

namespace smol::strategies {

namespace {

constexpr OpId kNoOp = std::numeric_limits<OpId>::max();
/// The tensor group's async collectives' communicator tag (tp_collectives); moe.hpp and
/// context_parallel.cpp hold 1 to 3.
constexpr int kAsyncTensorGroup = 4;
/// Transformer Engine's userbuffers defaults (transformer_engine/pytorch/module/base.py:375-395,
/// get_default_config, at d0067d0): the pipelined and bulk overlaps' communication kernels run on
/// num_sm 16 SMs, the pipelined reduce-scatter in num_splits 4 (ring exchange: the copy engines).
constexpr int kUbBulkSms = 16;
constexpr int kUbPipelineSms = 16;
constexpr int kUbPipelineSplits = 4;

bool is_layer(const Block& b) { return b.kind == Block::Kind::transformer || b.kind == Block::Kind::layer; }
double cost(const Block& b) { return (b.fwd + b.bwd + b.recompute).count(); }

/// What one virtual stage holds and costs, per tensor rank and micro-batch.
struct Chunk {
    int first = 0, last = 0;      // block indices [first, last)
    Flops fwd, bwd, recompute;
    Bytes activations;
    Bytes send_fwd;               // the activation sent to the next virtual stage, per tensor rank
    std::int64_t params = 0;      // including the tied-embedding copy on the last stage
};

}  // namespace

Partition partition_rule(const Model& model, const Plan& plan) {
    return plan.partition ? *plan.partition : model.is_transformer() ? Partition::equal : Partition::balanced;
}

std::vector<int> partition_layers(const std::vector<Block>& blocks, int stages, const std::vector<int>& by_hand,
                                  Partition rule) {
    std::vector<double> layer_cost;
    double head = 0, first = 0;
    for (const Block& b : blocks) {
        if (is_layer(b))
            layer_cost.push_back(cost(b));
        else if (b.kind == Block::Kind::embedding)
            first += cost(b);
        else
            head += cost(b);
    }
    const int n = static_cast<int>(layer_cost.size());
    if (!by_hand.empty()) {
        if (static_cast<int>(by_hand.size()) != stages)
            fail_input("--stage-layers lists " + std::to_string(by_hand.size()) + " stages, but the pipeline has " +
                           std::to_string(stages) + " (pp × virtual stages)",
                       {"", "", "--stage-layers"});
        for (int k : by_hand)
            if (k < 1) fail_input("every stage needs at least one layer, found " + std::to_string(k), {"", "", "--stage-layers"});
        const std::int64_t sum = std::accumulate(by_hand.begin(), by_hand.end(), std::int64_t{0});   // int64: entries up to 2^31 - 1
        if (sum != n)
            fail_input("--stage-layers adds up to " + std::to_string(sum) + " layers, but the model has " + std::to_string(n),
                       {"", "", "--stage-layers"});
        return by_hand;
    }
    if (stages > n)
        fail_input(std::to_string(stages) + " pipeline stages need at least as many layers; the model has " + std::to_string(n),
                   {"", "", "--pp"});
    if (rule == Partition::equal) {
        if (n % stages != 0)
            fail_input("the " + std::to_string(n) + " layers do not split equally into " + std::to_string(stages) +
                           " pipeline stages (Megatron requires it); choose a --pp (× --virtual-stages) dividing " +
                           std::to_string(n) + ", or --partition balanced, or --stage-layers",
                       {"", "", "--pp"});
        return std::vector<int>(static_cast<std::size_t>(stages), n / stages);
    }
    std::vector<double> prefix(static_cast<std::size_t>(n) + 1, 0);
    for (int i = 0; i < n; ++i) prefix[static_cast<std::size_t>(i) + 1] = prefix[static_cast<std::size_t>(i)] + layer_cost[static_cast<std::size_t>(i)];
    return min_max_split(n, stages, [&](int k, int from, int to) {
        double c = prefix[static_cast<std::size_t>(to)] - prefix[static_cast<std::size_t>(from)];
        if (k == 0) c += first;
        if (k == stages - 1) c += head;
        return c;
    });
}

std::vector<int> min_max_split(int n, int stages, const std::function<double(int, int, int)>& stage_cost) {
    // best[k][i]: the smallest possible costliest stage when the first i layers fill k + 1 stages.
    const double inf = std::numeric_limits<double>::infinity();
    std::vector<std::vector<double>> best(static_cast<std::size_t>(stages), std::vector<double>(static_cast<std::size_t>(n) + 1, inf));
    std::vector<std::vector<int>> cut(static_cast<std::size_t>(stages), std::vector<int>(static_cast<std::size_t>(n) + 1, 0));
    for (int i = 1; i <= n; ++i) best[0][static_cast<std::size_t>(i)] = stage_cost(0, 0, i);
    for (int k = 1; k < stages; ++k)
        for (int i = k + 1; i <= n; ++i)
            for (int j = k; j < i; ++j) {
                const double c = std::max(best[static_cast<std::size_t>(k) - 1][static_cast<std::size_t>(j)], stage_cost(k, j, i));
                // Ties go to the later cut: earlier stages hold more in-flight activations, so
                // they get no more layers than they need.
                if (c < inf && c <= best[static_cast<std::size_t>(k)][static_cast<std::size_t>(i)] * (1 + 1e-12)) {
                    best[static_cast<std::size_t>(k)][static_cast<std::size_t>(i)] = c;
                    cut[static_cast<std::size_t>(k)][static_cast<std::size_t>(i)] = j;
                }
            }
    if (best[static_cast<std::size_t>(stages) - 1][static_cast<std::size_t>(n)] == inf) return {};
    std::vector<int> sizes(static_cast<std::size_t>(stages));
    int end = n;
    for (int k = stages - 1; k >= 0; --k) {
        const int begin = k == 0 ? 0 : cut[static_cast<std::size_t>(k)][static_cast<std::size_t>(end)];
        sizes[static_cast<std::size_t>(k)] = end - begin;
        end = begin;
    }
    return sizes;
}

void check_model_parallel(const Model& model, const Plan& plan, const Layout& l, const std::vector<Block>& blocks) {
    const ErrorContext pp_flag{"", "", "--pp"}, strategy_flag{"", "", "--strategy"};
    auto dense_only = [&](const char* what, const char* instead = "use ddp or zero1 with --tp and --pp") {
        for (const Block& b : blocks)
            if (b.moe)
                fail_input(std::string(what) + " is modelled for dense models; " + model.name() + " routes tokens to experts: " +
                               instead,
                           strategy_flag);
    };
    switch (plan.strategy) {
        case DataParallel::ddp: break;
        case DataParallel::zero1:
            // On DeepSpeed's engine with tensor parallelism alone, DeepSpeed's ZeRO-1 (build_zero).
            if (sharded_with_tp(plan, l)) {
                dense_only("zero1 with tensor parallelism on DeepSpeed's engine");
                if (plan.finetune.kind != FineTuneKind::full)
                    fail_input("--finetune " + to_string(plan.finetune) + " with tensor parallelism is modelled on Megatron "
                                   "(its distributed optimizer for zero1): --framework megatron",
                               {"", "", "--framework"});
            }
            break;
        case DataParallel::fsdp:
            // FSDP with tensor parallelism (torchtitan's 2-D mesh: FSDP over data-parallel
            // replicas of tensor-parallel shards) runs on the sharded engine (strategies/zero.hpp);
            // under pipeline stages (torchtitan's 3-D FSDP + TP + PP), with context parallelism
            // (FSDP over the data- and context-parallel ranks) or with expert parallelism
            // (torchtitan's FSDP + EP, check_expert_parallel) on this builder, whose MoE passes
            // the sharded engine does not have.
            if (sharded_with_tp(plan, l)) {
                dense_only("fsdp with tensor parallelism alone",
                           "add --ep or --pp (FSDP of a mixture of experts runs with them), or use ddp or zero1 with --tp");
                break;
            }
            if (l.pp > 1 || l.cp > 1 || l.ep > 1) break;
            [[fallthrough]];
        case DataParallel::zero2:
        case DataParallel::zero3:
            // ZeRO-2 and ZeRO-3 with tensor parallelism (Megatron-DeepSpeed's layers on DeepSpeed's
            // engine; zero.Init(mpu=…) for stage 3) run on DeepSpeed's engines (strategies/zero.hpp).
            if (sharded_with_tp(plan, l)) {
                dense_only(plan.strategy == DataParallel::zero2 ? "zero2 with tensor parallelism" : "zero3 with tensor parallelism");
                break;
            }
            if (l.pp > 1)
                fail_input(std::string(to_string(plan.strategy)) +
                               " with pipeline parallelism is not supported: DeepSpeed's pipeline engine refuses ZeRO "
                               "stages 2 and 3 (\"ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism\", "
                               "runtime/pipe/engine.py); use zero1 (Megatron's distributed optimizer), ddp, or fsdp "
                               "(torchtitan's FSDP under pipeline stages)",
                           strategy_flag);
            [[fallthrough]];
        default:
            fail_input(std::string(to_string(plan.strategy)) +
                           " is not modelled with tensor or pipeline parallelism; with --tp or --pp use ddp or zero1 "
                           "(Megatron's distributed optimizer)" +
                           (plan.strategy == DataParallel::zero2 || plan.strategy == DataParallel::zero3
                                ? ", or fsdp (torchtitan's FSDP with pipeline parallelism)"
                                : ""),
                       strategy_flag);
    }
    int layers = 0;
    for (const Block& b : blocks) layers += is_layer(b);
    if (l.pp > layers)
        fail_input("--pp " + std::to_string(l.pp) + " is larger than the " + std::to_string(layers) + " layers of " +
                       model.name() + ": every stage needs at least one layer",
                   pp_flag);
    int stages = l.pp;
    if (plan.schedule == Schedule::interleaved) {
        const int v = plan.virtual_stages;
        if (l.pp < 2) fail_input("the interleaved schedule needs --pp of at least 2", {"", "", "--schedule"});
        if (v < 1)
            fail_input("--virtual-stages must be at least 1, found " + std::to_string(v), {"", "", "--virtual-stages"});
        if (plan.stage_layers.empty() && layers % (l.pp * v) != 0)
            fail_input("the interleaved schedule needs the " + std::to_string(layers) + " layers of " + model.name() +
                           " to divide into pp × virtual stages = " + std::to_string(l.pp * v) + " equal chunks",
                       {"", "", "--virtual-stages"});
        if (l.microbatches % l.pp != 0)
            fail_input("the interleaved schedule needs the micro-batches per replica (" + std::to_string(l.microbatches) +
                           ") to be a multiple of --pp " + std::to_string(l.pp) +
                           " (Megatron-LM's constraint); change --global-batch or --micro-batch",
                       {"", "", "--schedule"});
        stages *= v;
    } else if (plan.virtual_stages != 1) {
        fail_input("--virtual-stages " + std::to_string(plan.virtual_stages) + " needs --schedule interleaved",
                   {"", "", "--virtual-stages"});
    }
    partition_layers(blocks, stages, plan.stage_layers, partition_rule(model, plan));
}

namespace {

class Builder {
public:
    Builder(const Model& model, const Layout& layout, const Plan& plan)
        : model_(model), l_(layout), plan_(plan), g_(layout.devices) {
        blocks_ = detail::replica_blocks(model, layout, plan);
        // LoRA / QLoRA (strategies/finetune.hpp): the passes train the adapters only, the blocks'
        // params become theirs, and the frozen weights are held beside them.
        training_ = apply_finetune(model, layout, blocks_);
        recipes_ = detail::intern_block_recipes(g_, blocks_, &training_.kernels);
        moe_ = ExpertParallel(g_, l_, blocks_, plan.recompute, training_.kernels);
        sb_ = state_bytes(l_.dtype);
        sp_ = plan.sequence_parallel && l_.tp > 1;
        emit_dp_ = l_.folded ? l_.cp * l_.fold_width : l_.dp_cp();   // folded: the kept replicas' slots
        emit_tp_ = l_.folded_tp ? 1 : l_.tp;
        cp_ = ContextParallel(g_, l_, blocks_, plan.recompute, emit_tp_);
        // Zero-bubble H1 splits backward to fill pipeline bubbles; one stage has none (the command
        // line refuses the schedule there as having no effect), so it runs as 1F1B, unsplit.
        schedule_kind_ = plan.schedule == Schedule::zb_h1 && l_.pp == 1 ? Schedule::one_f_one_b : plan.schedule;
        split_ = schedule_kind_ == Schedule::zb_h1;
        fsdp_ = plan.strategy == DataParallel::fsdp;   // under pipeline stages or with --cp (check_model_parallel)
        // CPU offload (plan.cpp resolve_training): zero1 under Megatron, or FSDP's under pipeline stages.
        offload_ = l_.optimizer_offload == Offload::cpu && plan.strategy == DataParallel::zero1;
        fsdp_offload_ = fsdp_ && l_.param_offload == Offload::cpu;
        // Without pipeline stages (context parallelism alone) FSDP gathers per micro-batch.
        fsdp_per_mb_ = fsdp_ && l_.pp == 1;
        // FSDP's shard groups: every data- and context-parallel slot of a stage, or with hybrid
        // sharding shard_group replicas' slots (consecutive), replicated across the groups.
        shard_slots_ = fsdp_ && plan.fsdp_sharding == FsdpSharding::hybrid ? l_.shard_group * l_.cp : l_.dp_cp();
        schedule_ = make_schedule(schedule_kind_, l_.pp, l_.microbatches,
                                  plan.schedule == Schedule::interleaved ? plan.virtual_stages : 1);
        make_chunks();
        // ddp and zero1 (Megatron's distributed optimizer) keep a gradient per parameter through
        // the step: accumulated as the framework does (Framework::grad_accumulation), the last
        // stage's copy of a tied table with the head.
        accumulate_ = detail::intern_accumulation_recipes(g_, blocks_, l_.dtype, l_.framework.grad_accumulation, tied_params_);
        fp8_cast_ = detail::intern_fp8_weight_recipes(g_, blocks_, l_.dtype, l_.fp8_param_gather);
        make_segments();
    }

    /// A block's passes split at its linears' GEMMs, where the tensor group's collectives run
    /// beside them as the frameworks run them.
    ///
    /// Backward, always (tp > 1): Megatron's and Transformer Engine's column-parallel linears (the
    /// QKV projection, the MLP's up projection, the logits)
    /// (LinearWithGradAccumulationAndAsyncCommunication.backward, megatron/core/tensor_parallel/
    /// layers.py; transformer_engine/pytorch/module/layernorm_linear.py:773-791, 890-910,
    /// 1126-1129 at d0067d0): without sp the data gradient's all-reduce is launched async before
    /// the weight-gradient GEMM; with sp the input's re-gather before the data-gradient GEMM and
    /// the data gradient's reduce-scatter before the weight gradient's, and the linear waits for
    /// them at its end. Each window is that GEMM (the pair with sp); each row-parallel linear's
    /// gradient gather (sp) blocks before its segment.
    ///
    /// With --tp-comm-overlap, Transformer Engine's userbuffers as initialize_ub sets them up by
    /// default (module/base.py:349-395): the forward's input gathers before the QKV and up
    /// projections and the backward's gradient gathers before the output and down projections'
    /// data gradients by ring exchange, chunk by chunk beside the GEMM, on the copy engines
    /// (use_ce; no SMs); the forward's reduce-scatters after the output and down projections
    /// pipelined with the GEMM in num_splits 4, the last split's after it, on 16 SMs; the
    /// backward's column-parallel pairs in bulk beside the GEMMs, on 16 SMs.
    ///
    /// A context-parallel layer is cut the same way on each side of its ring, as ContextParallel
    /// cuts its kernels (the part before the core, the core's steps, the part after): its
    /// segments run around the ring (Segments::core, ContextParallel::Hooks), as Megatron's
    /// linears run the same code on either side of Transformer Engine's context-parallel
    /// attention.
    ///
    /// Blocks whose windows do not match their collectives (the embedding's, cross- or latent
    /// attention, MoE layers, LoRA's passes), and zero-bubble or FSDP plans, keep their
    /// collectives blocking after the pass.
    void make_segments() {
        bwd_segments_.assign(blocks_.size(), {});
        fwd_segments_.assign(blocks_.size(), {});
        if (l_.tp == 1 || split_ || fsdp_ || !training_.kernels.empty()) return;
        const bool ub = plan_.tp_comm_overlap;
        const auto column = [](KernelName n) { return n == KernelName::qkv || n == KernelName::mlp_up || n == KernelName::logits; };
        const auto row = [](KernelName n) { return n == KernelName::attn_proj || n == KernelName::mlp_down; };
        const auto is_row = [](Window w) { return w == Window::row_forward || w == Window::row_backward; };
        struct Cut {
            std::size_t from, to;
            Window window;
        };
        const auto backward_cuts = [&](std::span<const Kernel> bwd) {
            std::vector<Cut> cuts;
            for (std::size_t j = 0; j + 1 < bwd.size(); ++j) {
                const Kernel &da = bwd[j], &db = bwd[j + 1];
                if (da.op != KernelOp::gemm || da.weight || db.op != KernelOp::gemm || !db.weight || db.name != da.name) continue;
                if (column(da.name)) {
                    cuts.push_back({sp_ ? j : j + 1, j + 2, Window::column_backward});
                    ++j;
                } else if (ub && row(da.name)) {
                    cuts.push_back({j, j + 1, Window::row_backward});
                }
            }
            return cuts;
        };
        const auto forward_cuts = [&](std::span<const Kernel> fwd) {
            std::vector<Cut> cuts;
            for (std::size_t j = 0; j < fwd.size(); ++j) {
                const Kernel& k = fwd[j];
                if (k.op != KernelOp::gemm || !k.weight) continue;
                if (column(k.name)) cuts.push_back({j, j + 1, Window::column_forward});
                if (row(k.name)) cuts.push_back({j, j + 1, Window::row_forward});
            }
            return cuts;
        };
        // Appends to `out` the segments of `kernels` around `cuts` (in order), numbering the
        // pairs on from `columns` and `rows`; false when a window would start the pass (`opens`)
        // or follow another at once: nothing to launch its collectives after. In backward with
        // sp, a segment that holds a row-parallel linear's backward gathers its gradient first.
        const auto split = [&](std::span<const Kernel> kernels, const std::vector<Cut>& cuts, bool backward, bool opens,
                               int& columns, int& rows, Segments& out) {
            const auto gathers = [&](std::span<const Kernel> part) {
                return backward && sp_ && !ub &&
                       std::any_of(part.begin(), part.end(), [&](const Kernel& k) { return k.op == KernelOp::gemm && row(k.name); });
            };
            std::size_t at = 0;
            for (const Cut& c : cuts) {
                if (c.from == at && (opens || at > 0)) return false;
                const int pair = is_row(c.window) ? rows++ : columns++;
                if (c.from > at) {
                    const std::span<const Kernel> before = kernels.subspan(at, c.from - at);
                    out.recipes.push_back(g_.intern_recipe(before));
                    out.parts.push_back({gathers(before) ? Window::gather_before : Window::none, pair});
                }
                out.recipes.push_back(g_.intern_recipe(kernels.subspan(c.from, c.to - c.from)));
                out.parts.push_back({c.window, pair});
                at = c.to;
            }
            if (at < kernels.size()) {
                const std::span<const Kernel> rest = kernels.subspan(at);
                out.recipes.push_back(g_.intern_recipe(rest));
                // A row-parallel linear's gradient gather before it: the next column pair's.
                out.parts.push_back({gathers(rest) ? Window::gather_before : Window::none, gathers(rest) ? columns : 0});
            }
            return true;
        };
        // Each block's windows must be its collectives: one column-parallel linear per pair, and
        // with userbuffers one row-parallel linear per pair (none in the head's).
        const auto matches = [&](const std::vector<Cut>& cuts, int count, bool rows_too) {
            int columns = 0, rows = 0;
            for (const Cut& c : cuts) (is_row(c.window) ? rows : columns)++;
            return columns == count && (!rows_too || rows == count || (rows == 0 && count == 1));
        };
        // A pass whose kernels are `first` then `second` (a context-parallel layer's, around its
        // ring: `core` set), or `first` alone.
        const auto segments = [&](std::span<const Kernel> first, std::span<const Kernel> second, bool core, bool backward,
                                  int count) {
            const auto cuts_of = [&](std::span<const Kernel> k) { return backward ? backward_cuts(k) : forward_cuts(k); };
            const std::vector<Cut> a = cuts_of(first), b = cuts_of(second);
            std::vector<Cut> all = a;
            all.insert(all.end(), b.begin(), b.end());
            Segments out;
            if (!matches(all, count, !backward || ub)) return out;
            int columns = 0, rows = 0;
            bool ok = split(first, a, backward, true, columns, rows, out);
            if (core) out.core = static_cast<int>(out.recipes.size());
            ok = ok && split(second, b, backward, false, columns, rows, out);
            return ok ? out : Segments{};
        };
        for (const Block& b : blocks_) {
            if (b.moe || b.tp_collectives_fwd == 0 || b.tp_adapter_bwd > 0) continue;
            const auto i = static_cast<std::size_t>(b.index);
            const std::span<const Kernel> fwd(b.fwd_kernels);
            if (b.cp && l_.cp > 1) {
                // Around the ring, as ContextParallel cuts them: the kernels before the core and
                // after it (its backward: the part after first, then the part before).
                const ContextPass& c = *b.cp;
                const std::span<const Kernel> pre = fwd.subspan(0, static_cast<std::size_t>(c.core_at));
                const std::span<const Kernel> post = fwd.subspan(static_cast<std::size_t>(c.core_end(c.core_at)));
                const std::vector<Kernel> bwd_post = backward_kernels(post), bwd_pre = backward_kernels(pre);
                bwd_segments_[i] = segments(bwd_post, bwd_pre, true, true, b.tp_collectives_fwd);
                if (ub) fwd_segments_[i] = segments(pre, post, true, false, b.tp_collectives_fwd);
                continue;
            }
            const std::vector<Kernel> bwd = block_backward(b);
            bwd_segments_[i] = segments(bwd, {}, false, true, b.tp_collectives_fwd);
            if (ub) fwd_segments_[i] = segments(fwd, {}, false, false, b.tp_collectives_fwd);
        }
    }

    OpGraph build() {
        // Model states live for the whole step.
        for (int s = 0; s < l_.pp; ++s)
            for (int d = 0; d < emit_dp_; ++d)
                for (int t = 0; t < emit_tp_; ++t) {
                    const int r = l_.rank(t, d, s);
                    // FSDP keeps only its shard of every state between steps; the unsharded
                    // parameters and gradients are transient (emit_step, fsdp_reduce).
                    const std::int64_t p = fsdp_ ? fsdp_shard(s) : device_params(s);
                    const std::int64_t state = optimizer_state_bytes(l_, p).count();
                    const std::int64_t opt =
                        plan_.strategy == DataParallel::zero1
                            ? zero1_shard(state, optimizer_state_bytes(l_, device_expert_params(s)).count(), l_)
                            : state;
                    if (fsdp_offload_) {
                        // CPUOffloadPolicy: the fp32 shard is the master copy, its gradient and the
                        // optimizer's own state beside it in host memory; nothing stays on the device.
                        for (auto [bytes, label] : {std::pair{Bytes(p * 4), BufferLabel::parameters},
                                                    std::pair{Bytes(p * 4), BufferLabel::gradients},
                                                    std::pair{optimizer_state_bytes(l_.optimizer, DType::fp32, p),
                                                              BufferLabel::optimizer_state}})
                            g_.add_alloc(g_.add_buffer(r, Tier::host, bytes, label), Stream::compute);
                        continue;
                    }
                    for (auto [bytes, label] : {std::pair{p * sb_.params, BufferLabel::parameters},
                                                std::pair{p * sb_.grads, BufferLabel::gradients}})
                        g_.add_alloc(g_.add_buffer(r, Tier::device, Bytes(bytes), label), Stream::compute);
                    // Offloaded (Megatron's --optimizer-cpu-offload): the fp32 master weights and
                    // moments in pinned host memory, with the pinned fp32 copy of the rank's
                    // gradient shard the step reads (HybridDeviceOptimizer pin_cpu_params,
                    // pin_cpu_grads, both on by default).
                    // --optimizer-offload-fraction keeps the rest of the shard's state on the device.
                    const std::int64_t shard = step_shard(s), cpu = offload_ ? offloaded_part(shard) : 0;
                    const std::int64_t host_opt =
                        shard > 0 ? static_cast<std::int64_t>(static_cast<__int128>(opt) * cpu / shard) : 0;
                    if (host_opt > 0) {
                        g_.add_alloc(g_.add_buffer(r, Tier::host, Bytes(host_opt), BufferLabel::optimizer_state), Stream::compute);
                        g_.add_alloc(g_.add_buffer(r, Tier::host, Bytes(cpu * 4), BufferLabel::gradients), Stream::compute);
                    }
                    if (opt - host_opt > 0)
                        g_.add_alloc(g_.add_buffer(r, Tier::device, Bytes(opt - host_opt), BufferLabel::optimizer_state),
                                     Stream::compute);
                    if (const Bytes w = device_fp8_weight_bytes(s); w > Bytes(0) && !l_.fp8_param_gather)
                        g_.add_alloc(g_.add_buffer(r, Tier::device, w, BufferLabel::parameters), Stream::compute);
                    if (const Bytes w = device_frozen_bytes(s); w > Bytes(0))
                        g_.add_alloc(g_.add_buffer(r, Tier::device, w, BufferLabel::parameters), Stream::compute);
                }
        emit_pipeline();
        emit_optimizer();
        if (l_.folded) {
            // Replica d of every (t, stage) mirrors replica d mod fold_width (at its context-
            // parallel rank c); with tensor ranks folded too, every rank of a stage mirrors its
            // tensor rank 0 of replica 0.
            std::vector<int> rep(static_cast<std::size_t>(l_.devices));
            for (int s = 0; s < l_.pp; ++s)
                for (int d = 0; d < l_.dp_cp(); ++d)
                    for (int t = 0; t < l_.tp; ++t)
                        rep[static_cast<std::size_t>(l_.rank(t, d, s))] = l_.rank(l_.folded_tp ? 0 : t, d % emit_dp_, s);
            g_.set_representatives(std::move(rep));
        }
        return std::move(g_);
    }

private:
    static std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
    int groups() const { return l_.tp * l_.dp_cp(); }                 // ranks per stage
    int slot(int t, int d) const { return t + l_.tp * d; }

    void make_chunks() {
        const int vstages = schedule_.virtual_stages();
        const std::vector<int> sizes = partition_layers(blocks_, vstages, plan_.stage_layers, partition_rule(model_, plan_));
        chunks_.resize(static_cast<std::size_t>(vstages));
        int b = 0;
        for (int vs = 0; vs < vstages; ++vs) {
            Chunk& c = chunks_[static_cast<std::size_t>(vs)];
            c.first = b;
            if (vs == 0)
                while (b < static_cast<int>(blocks_.size()) && !is_layer(blocks_[static_cast<std::size_t>(b)])) ++b;
            int layers = 0;
            while (layers < sizes[static_cast<std::size_t>(vs)]) layers += is_layer(blocks_[static_cast<std::size_t>(b++)]);
            if (vs == vstages - 1) b = static_cast<int>(blocks_.size());
            c.last = b;
            for (int i = c.first; i < c.last; ++i) {
                const Block& blk = blocks_[static_cast<std::size_t>(i)];
                c.fwd += blk.fwd;
                c.bwd += blk.bwd;
                c.recompute += blk.recompute;
                c.activations += blk.activations;
                c.params += blk.params;
            }
            const Bytes out = blocks_[static_cast<std::size_t>(c.last) - 1].output;
            c.send_fwd = l_.tp > 1 && !sp_ ? Bytes(ceil_div(out.count(), l_.tp)) : out;
        }
        // Tied embeddings: the head on another stage keeps its own copy of the table (Megatron);
        // frozen when fine-tuning adapters, then nothing to sum between the stages.
        if (model_.is_transformer() && model_.shape().tied_embeddings && vstages > 1) {
            if (training_.frozen_by_block.empty()) {
                tied_params_ = model_.tied_table_params(l_.tp, l_.framework.vocab_multiple);
                chunks_.back().params += tied_params_;
            } else {
                tied_frozen_ = Bytes(model_.tied_table_params(l_.tp, l_.framework.vocab_multiple) * dtype_bytes(l_.dtype));
            }
        }
    }

    std::int64_t device_params(int s) const {
        std::int64_t p = 0;
        for (int c = 0; c < schedule_.chunks; ++c) p += chunks_[static_cast<std::size_t>(schedule_.virtual_stage(s, c))].params;
        return p;
    }
    /// The FP8 weight copies of device s's chunks (detail::fp8_weight_bytes).
    Bytes device_fp8_weight_bytes(int s) const {
        Bytes b;
        for (int c = 0; c < schedule_.chunks; ++c) {
            const Chunk& k = chunks_[static_cast<std::size_t>(schedule_.virtual_stage(s, c))];
            b += detail::fp8_weight_bytes(blocks_, k.first, k.last);
        }
        return b;
    }
    /// The frozen weights device s holds (LoRA / QLoRA; 0 in full training), its copy of a tied
    /// table included.
    Bytes device_frozen_bytes(int s) const {
        if (training_.frozen_by_block.empty()) return Bytes(0);
        Bytes b;
        for (int c = 0; c < schedule_.chunks; ++c) {
            const int vs = schedule_.virtual_stage(s, c);
            const Chunk& k = chunks_[static_cast<std::size_t>(vs)];
            for (int i = k.first; i < k.last; ++i) b += training_.frozen_by_block[static_cast<std::size_t>(i)];
            if (vs == schedule_.virtual_stages() - 1) b += tied_frozen_;
        }
        return b;
    }
    /// FSDP's shard of device s's parameters: over its shard group, the experts' over their
    /// expert shard group (FSDP + EP, expert_shard_ranks).
    std::int64_t fsdp_shard(int s) const {
        const std::int64_t experts = device_expert_params(s);
        return detail::shard(device_params(s) - experts, shard_slots_) + (experts > 0 ? detail::shard(experts, expert_shard_ranks()) : 0);
    }
    /// FSDP + EP: the local experts' parameters of unit i, an FSDP unit of their own (0 without
    /// expert parallelism: every expert is then part of its block's unit).
    std::int64_t unit_expert_params(int i) const {
        const Block& b = blocks_[static_cast<std::size_t>(i)];
        return l_.ep > 1 && b.moe ? b.moe->expert_params : 0;
    }
    /// FSDP + EP: the ranks an expert shard group spans — the replicas of a shard group (every
    /// replica, or a hybrid shard group's) holding the same experts: shard group / ep. With one,
    /// the experts stay whole on their rank: neither gathered nor reduce-scattered.
    int expert_shard_ranks() const { return shard_slots_ / l_.ep; }
    /// Of device_params, the experts' (reduced and sharded over the expert-data-parallel group).
    std::int64_t device_expert_params(int s) const {
        std::int64_t p = 0;
        for (int c = 0; c < schedule_.chunks; ++c) {
            const Chunk& k = chunks_[static_cast<std::size_t>(schedule_.virtual_stage(s, c))];
            p += moe_.expert_params(k.first, k.last);
        }
        return p;
    }

    std::vector<int> tp_group(int d, int s) const {
        std::vector<int> out;
        for (int t = 0; t < l_.tp; ++t) out.push_back(l_.rank(t, d, s));
        return out;
    }
    std::vector<int> dp_group(int t, int s) const {
        std::vector<int> out;
        for (int d = 0; d < l_.dp_cp(); ++d) out.push_back(l_.rank(t, d, s));
        return out;
    }

    /// The tensor group of replica slot d on stage s, made once.
    const std::vector<int>& tensor_group(int d, int s) {
        if (tp_groups_.empty()) tp_groups_.resize(static_cast<std::size_t>(l_.pp) * static_cast<std::size_t>(l_.dp_cp()));
        std::vector<int>& group = tp_groups_[static_cast<std::size_t>(s) * static_cast<std::size_t>(l_.dp_cp()) + static_cast<std::size_t>(d)];
        if (group.empty()) group = tp_group(d, s);
        return group;
    }

    /// One tensor-parallel collective over the group of (d, s), on every rank of it. On the
    /// compute stream it blocks; on Stream::tp it is launched async (async_op=True) after
    /// `last[t]` and left in `async[t]` for the compute stream's next op to wait for (join_async).
    /// PyTorch runs a group's async and blocking calls on its one NCCL stream; the blocking ones
    /// sit here on the compute stream (which waits for them at once), so the async ones are their
    /// own communicator (kAsyncTensorGroup), ordered apart.
    /// `sms`: the SMs its kernels hold, where they are not NCCL's (Transformer Engine's
    /// userbuffers); -1: NCCL's choice.
    void tensor_collective(CollectiveKind kind, Bytes bytes, int d, int s, Phase phase, int layer, int mb, int k,
                           std::vector<OpId>& last, std::vector<std::vector<OpId>>* async = nullptr, int sms = -1) {
        const std::vector<int>& group = tensor_group(d, s);
        const auto cid = g_.declare_collective(kind, group, bytes, -1, async ? kAsyncTensorGroup : 0, sms);
        for (int t = 0; t < emit_tp_; ++t) {
            const OpId op = g_.add_collective_op(cid, group[static_cast<std::size_t>(t)], async ? Stream::tp : Stream::compute,
                                                 phase, layer, mb, k);
            if (!async) {
                last[static_cast<std::size_t>(t)] = op;
                continue;
            }
            g_.depend(last[static_cast<std::size_t>(t)], op);
            (*async)[static_cast<std::size_t>(t)].push_back(op);
        }
    }

    /// Bytes of sequence parallelism's gather of a linear's input: with FP8 linears the FP8 copy
    /// of the norm's output, one byte an element (Transformer Engine quantizes before it gathers:
    /// gather_along_first_dim(ln_out, tp_group, quantizer=…), module/layernorm_linear.py:294-313,
    /// and again for the weight gradient, :773-791, at NVIDIA/TransformerEngine d0067d0); the
    /// reduce-scatters stay 16-bit, and the gradients' gathers too but through userbuffers
    /// (row_backward).
    Bytes input_gather_bytes(const Block& blk) const {
        return blk.fp8_params > 0 ? Bytes(blk.tp_bytes_per_collective.count() / dtype_bytes(l_.dtype)) : blk.tp_bytes_per_collective;
    }

    /// The tensor-parallel collectives after one block's pass, for every rank of the group, each
    /// blocking: a linear pair's all-reduce, or with sp its all-gather and reduce-scatter (in
    /// backward the gradient's gather and the data gradient's scatter). A backward whose block
    /// has windows (make_segments) runs them beside its GEMMs instead.
    void tp_collectives(const Block& blk, int d, int s, Phase phase, int mb, std::vector<OpId>& last) {
        if (l_.tp == 1) return;
        const bool gathers_input = phase == Phase::fwd || phase == Phase::recompute;
        const int count = phase == Phase::recompute ? blk.tp_collectives_recompute : blk.tp_collectives_fwd;
        for (int k = 0; k < count; ++k) {
            if (!sp_) {
                tensor_collective(CollectiveKind::all_reduce, blk.tp_bytes_per_collective, d, s, phase, blk.index, mb, k, last);
                continue;
            }
            tensor_collective(CollectiveKind::all_gather, gathers_input ? input_gather_bytes(blk) : blk.tp_bytes_per_collective, d, s,
                              phase, blk.index, mb, k, last);
            tensor_collective(CollectiveKind::reduce_scatter, blk.tp_bytes_per_collective, d, s, phase, blk.index, mb, k, last);
        }
        const std::vector<int>& group = tensor_group(d, s);
        // LoRA's tensor-parallel adapters (Block::tp_adapter_fwd, tp_adapter_bwd).
        // (A recompute redoes the adapters' only with the whole layer: full recompute.)
        const bool forward = phase == Phase::fwd || (phase == Phase::recompute && plan_.recompute == Recompute::full);
        const int adapters = forward ? blk.tp_adapter_fwd : phase == Phase::recompute || phase == Phase::bwd_weight ? 0 : blk.tp_adapter_bwd;
        for (int k = 0; k < adapters; ++k) {
            const auto cid = g_.declare_collective(CollectiveKind::all_reduce, group, blk.tp_adapter_bytes);
            for (int t = 0; t < emit_tp_; ++t)
                last[static_cast<std::size_t>(t)] = g_.add_collective_op(cid, group[static_cast<std::size_t>(t)], Stream::compute,
                                                                         phase, blk.index, mb, blk.tp_collectives_fwd + k);
        }
    }

    /// The gradient accumulation pass of `blk` after micro-batch `mb`'s weight gradients, on every
    /// tensor rank of the context-parallel group starting at replica g (detail::accumulates).
    void accumulate(const Block& blk, int g, int s, int mb, std::vector<std::vector<OpId>>& last) {
        const std::int32_t recipe = accumulate_[static_cast<std::size_t>(blk.index)];
        if (recipe < 0 || !detail::accumulates(l_.framework.grad_accumulation, mb)) return;
        for (int d = g; d < g + l_.cp; ++d)
            for (int t = 0; t < emit_tp_; ++t)
                last[static_cast<std::size_t>(d)][static_cast<std::size_t>(t)] =
                    g_.add_kernels(l_.rank(t, d, s), Phase::bwd, blk.index, mb, recipe, l_.dtype);
    }

    /// The FP8 weight cast of `blk` before the step's first micro-batch runs it, on every tensor
    /// rank of the context-parallel group starting at replica g (detail::intern_fp8_weight_recipes).
    void cast_fp8_weights(const Block& blk, int g, int s, int mb, std::vector<std::vector<OpId>>& last) {
        const std::int32_t recipe = fp8_cast_[static_cast<std::size_t>(blk.index)];
        if (recipe < 0 || mb != 0) return;
        for (int d = g; d < g + l_.cp; ++d)
            for (int t = 0; t < emit_tp_; ++t)
                last[static_cast<std::size_t>(d)][static_cast<std::size_t>(t)] =
                    g_.add_kernels(l_.rank(t, d, s), Phase::fwd, blk.index, mb, recipe, l_.dtype);
    }

    /// One block's compute op on each tensor rank of (d, s), running `recipe`.
    void compute(const Block& blk, int d, int s, Phase phase, int mb, std::int32_t recipe, std::vector<OpId>& last) {
        if (moe_.runs(blk, phase)) return moe_.pass(blk, d, s, phase, mb, last);  // its all-to-alls (strategies/moe.hpp)
        for (int t = 0; t < emit_tp_; ++t)
            last[static_cast<std::size_t>(t)] = g_.add_kernels(l_.rank(t, d, s), phase, blk.index, mb, recipe, l_.dtype);
    }

    /// Emits a step of the table on device s for every (t, d); returns the last op per rank slot.
    /// Slots go a context-parallel group at a time (one slot without context parallelism), and
    /// within a group block by block, since a layer's ring joins the group's ranks.
    void emit_step(int s, const Step& st, const std::vector<OpId>& wait_for, std::vector<OpId>& last_out,
                   bool last_of_chunk) {
        const int vs = schedule_.virtual_stage(s, st.chunk);
        const Chunk& c = chunks_[static_cast<std::size_t>(vs)];
        const int mb = st.microbatch;
        const int cp = l_.cp;
        const Pass release = split_ ? Pass::bwd_weight : Pass::bwd;
        auto& bufs = act_[static_cast<std::size_t>(vs)];   // the activation buffer of each (micro-batch, rank slot)
        auto buffer = [&](int t, int d) -> std::int32_t& {
            return bufs[static_cast<std::size_t>(mb) * static_cast<std::size_t>(groups()) + static_cast<std::size_t>(slot(t, d))];
        };
        auto waiting = [&](int t, int d) {
            return wait_for.empty() ? kNoOp : wait_for[static_cast<std::size_t>(slot(t, d))];
        };
        std::vector<std::vector<OpId>> last(static_cast<std::size_t>(emit_dp_), std::vector<OpId>(static_cast<std::size_t>(l_.tp)));
        // Per (replica slot, tensor rank): the tensor-parallel collectives a backward launched
        // async (tp_collectives), which the compute stream's next op waits for.
        std::vector<std::vector<std::vector<OpId>>> async;
        if (l_.tp > 1) async.assign(static_cast<std::size_t>(emit_dp_), std::vector<std::vector<OpId>>(static_cast<std::size_t>(l_.tp)));
        auto join_async = [&](int d, int t, OpId next) {
            if (async.empty()) return;
            auto& ops = async[static_cast<std::size_t>(d)][static_cast<std::size_t>(t)];
            for (const OpId op : ops) g_.depend(op, next);
            ops.clear();
        };
        if (fsdp_ && !fsdp_per_mb_ && st.pass == Pass::fwd && mb == 0) fsdp_gather(s, c, vs, wait_for);
        // --overlap-param-gather: this chunk's gathers, waited for in its first forward.
        ParamGathers* pg = nullptr;
        const bool aligned = schedule_.chunks > 1;   // Megatron's --align-param-gather (ParamGathers)
        // --overlap-param-gather-with-optimizer-step: the first chunk's were dispatched after its
        // optimizer step (emit_optimizer), which the forward of the next step follows.
        const bool with_step = l_.framework.overlap_param_gather_with_optimizer_step;
        if (l_.framework.overlap_param_gather && st.pass == Pass::fwd && l_.dp_cp() > 1) {
            if (mb == 0 && (!with_step || st.chunk > 0)) pg = &param_gathers(vs);
            if (aligned) {
                const auto dispatch_chunk = [&](int chunk, bool after_receive) {
                    ParamGathers& q = param_gathers(schedule_.virtual_stage(s, chunk));
                    for (int d = 0; d < emit_dp_; ++d)
                        for (int t = 0; t < emit_tp_; ++t) dispatch_param_gathers(q, t, d, s, after_receive ? waiting(t, d) : kNoOp);
                };
                // This forward's virtual micro-batch (the schedule's k: strategies/schedule.cpp).
                const int k = forwards_[static_cast<std::size_t>(s)]++;
                if (k == 0) {
                    if (!with_step) dispatch_chunk(0, false);
                    dispatch_chunk(1, false);
                }
                // Chunk c + 1's when the forward pp-rank ahead is chunk c's first micro-batch, so
                // that every stage dispatches it at about the same time (forward_step_helper_preprocess,
                // megatron/core/pipeline_parallel/schedules.py:1341-1353 at d98e8a6).
                const int ahead = k + s, group = l_.pp * schedule_.chunks;
                if (ahead < std::min(group, l_.microbatches * schedule_.chunks) && ahead % l_.pp == 0) {
                    const int next = ahead / l_.pp + 1;
                    if (next > 1 && next < schedule_.chunks) dispatch_chunk(next, true);
                }
            }
        }
        FsdpPass* hooked = nullptr;   // FSDP per micro-batch: this pass's ops per (rank slot, unit)
        if (fsdp_per_mb_) {
            if (fsdp_mb_.empty()) fsdp_mb_.resize(static_cast<std::size_t>(l_.microbatches));
            FsdpMicrobatch& m = fsdp_mb_[static_cast<std::size_t>(mb)];
            hooked = st.pass == Pass::fwd ? &m.fwd : &m.bwd;
            if (st.pass != Pass::bwd_weight)
                for (auto* v : {&hooked->first, &hooked->last})
                    v->assign(static_cast<std::size_t>(groups()), std::vector<OpId>(blocks_.size(), kNoOp));
        }
        for (int g = 0; g < emit_dp_; g += cp) {
            if (st.pass == Pass::fwd)
                for (int d = g; d < g + cp; ++d)
                    for (int t = 0; t < emit_tp_; ++t) {
                        buffer(t, d) = g_.add_buffer(l_.rank(t, d, s), Tier::device, c.activations, BufferLabel::activations);
                        const OpId a = g_.add_alloc(buffer(t, d), Stream::compute, c.first, mb);
                        if (waiting(t, d) != kNoOp) g_.depend(waiting(t, d), a);
                    }
            // Backward waits for its receive before its first op (forward waited at its alloc).
            std::vector<char> first(static_cast<std::size_t>(cp), st.pass != Pass::fwd);
            const bool forward = st.pass == Pass::fwd;
            for (int i = forward ? c.first : c.last - 1; forward ? i < c.last : i >= c.first; i += forward ? 1 : -1) {
                const Block& blk = blocks_[static_cast<std::size_t>(i)];
                const detail::BlockRecipes& rc = recipes_[static_cast<std::size_t>(i)];
                auto run = [&](Phase phase, std::int32_t recipe) {
                    if (cp_.runs(blk, phase) && moe_.runs(blk, phase)) {
                        // The ring up to the attention core's end, then the experts' all-to-alls.
                        ContextParallel::Hooks experts;
                        experts.after_core = [&](int d, std::vector<OpId>& tail) {
                            moe_.pass(blk, d, s, phase, mb, tail);
                            std::vector<OpId> firsts;
                            for (const OpId op : tail) firsts.push_back(moe_.first_of(op));
                            return firsts;
                        };
                        cp_.pass(blk, g, s, phase, mb, last, experts);
                    } else if (cp_.runs(blk, phase)) {
                        cp_.pass(blk, g, s, phase, mb, last);
                    } else {
                        for (int d = g; d < g + cp; ++d) compute(blk, d, s, phase, mb, recipe, last[static_cast<std::size_t>(d)]);
                    }
                    for (int d = g; d < g + cp; ++d)
                        for (int t = 0; t < emit_tp_; ++t)
                            join_async(d, t, moe_.first_of(cp_.first_of(last[static_cast<std::size_t>(d)][static_cast<std::size_t>(t)])));
                    for (int d = g; d < g + cp; ++d) {
                        if (!first[static_cast<std::size_t>(d - g)]) continue;
                        for (int t = 0; t < emit_tp_; ++t)
                            if (waiting(t, d) != kNoOp)
                                g_.depend(waiting(t, d), moe_.first_of(cp_.first_of(last[static_cast<std::size_t>(d)][static_cast<std::size_t>(t)])));
                        first[static_cast<std::size_t>(d - g)] = false;
                    }
                };
                auto collectives = [&](Phase phase) {
                    for (int d = g; d < g + cp; ++d) tp_collectives(blk, d, s, phase, mb, last[static_cast<std::size_t>(d)]);
                };
                // A pass in segments (make_segments): each window's collectives launched async
                // on the tensor group's queue before it and waited for by the compute stream's
                // next op; sp's blocking gradient gathers before their segments; Transformer
                // Engine's pipelined reduce-scatter's last split after its window. Segments
                // [from, to) of `sg` on slot d; returns each tensor rank's first compute op.
                auto segmented_on = [&](int d, const Block& b, Phase phase, const Segments& sg, std::size_t from, std::size_t to) {
                    const Bytes full = b.tp_bytes_per_collective;
                    const Bytes head(full.count() * (kUbPipelineSplits - 1) / kUbPipelineSplits);
                    auto& mine = last[static_cast<std::size_t>(d)];
                    auto& pending = async[static_cast<std::size_t>(d)];
                    std::vector<OpId> firsts(static_cast<std::size_t>(emit_tp_), kNoOp);
                    bool opened = false;
                    // A new op on the compute stream: the pass's first waits for its receive,
                    // and each but a window waits for the collectives launched before it.
                    auto issued = [&](bool window) {
                        for (int t = 0; t < emit_tp_; ++t) {
                            const OpId op = mine[static_cast<std::size_t>(t)];
                            if (first[static_cast<std::size_t>(d - g)] && waiting(t, d) != kNoOp) g_.depend(waiting(t, d), op);
                            if (!window) join_async(d, t, op);
                            if (!opened) firsts[static_cast<std::size_t>(t)] = op;
                        }
                        first[static_cast<std::size_t>(d - g)] = false;
                        opened = true;
                    };
                    auto launch = [&](CollectiveKind kind, Bytes bytes, int k, int sms) {
                        tensor_collective(kind, bytes, d, s, phase, b.index, mb, k, mine, &pending, sms);
                    };
                    for (std::size_t j = from; j < to; ++j) {
                        const Segments::Part& part = sg.parts[j];
                        const int k = part.pair;
                        switch (part.window) {
                            case Window::none: break;
                            case Window::gather_before:
                                tensor_collective(CollectiveKind::all_gather, full, d, s, phase, b.index, mb, k, mine);
                                issued(false);
                                break;
                            case Window::column_backward:
                                if (!sp_) {
                                    launch(CollectiveKind::all_reduce, full, k, -1);
                                    break;
                                }
                                launch(CollectiveKind::all_gather, input_gather_bytes(b), k, plan_.tp_comm_overlap ? kUbBulkSms : -1);
                                launch(CollectiveKind::reduce_scatter, full, k, plan_.tp_comm_overlap ? kUbBulkSms : -1);
                                break;
                            case Window::row_backward:
                                // With FP8, userbuffers gather the gradient's FP8 copy too
                                // (fp8_buf: layers_all_gather_overlap, module/base.py:335-344).
                                launch(CollectiveKind::all_gather, input_gather_bytes(b), k, 0);
                                break;
                            case Window::column_forward: launch(CollectiveKind::all_gather, input_gather_bytes(b), k, 0); break;
                            case Window::row_forward: launch(CollectiveKind::reduce_scatter, head, k, kUbPipelineSms); break;
                        }
                        for (int t = 0; t < emit_tp_; ++t)
                            mine[static_cast<std::size_t>(t)] = g_.add_kernels(l_.rank(t, d, s), phase, b.index, mb, sg.recipes[j], l_.dtype);
                        issued(part.window != Window::none && part.window != Window::gather_before);
                        if (part.window == Window::row_forward) {
                            // The last split's reduce-scatter, after the GEMM's last split.
                            tensor_collective(CollectiveKind::reduce_scatter, full - head, d, s, phase, b.index, mb, k, mine, nullptr,
                                              kUbPipelineSms);
                            issued(false);
                        }
                    }
                    return firsts;
                };
                // The whole pass in segments on every slot; `firsts`, when given, gets each rank's
                // first op of the pass. A context-parallel layer's segments go around its ring
                // (ContextParallel::Hooks): those before Segments::core in this pass's order, then
                // the ring, then the rest; the ring's own compute ops wait for the collectives
                // launched before them.
                auto segmented = [&](const Block& b, Phase phase, const Segments& sg, std::vector<std::vector<OpId>>* firsts = nullptr) {
                    if (sg.core >= 0) {
                        const auto at = static_cast<std::size_t>(sg.core);
                        const bool forward = phase == Phase::fwd;
                        ContextParallel::Part before = [&](int d, std::vector<OpId>&) { return segmented_on(d, b, phase, sg, 0, at); };
                        ContextParallel::Part after = [&](int d, std::vector<OpId>&) {
                            return segmented_on(d, b, phase, sg, at, sg.recipes.size());
                        };
                        ContextParallel::Hooks hooks;
                        // Backward runs the forward's part after the core first.
                        hooks.before_core = forward ? before : after;
                        hooks.after_core = forward ? after : before;
                        hooks.on_compute = [&](int d, int t, OpId op) { join_async(d, t, op); };
                        cp_.pass(b, g, s, phase, mb, last, hooks);
                        return;
                    }
                    for (int d = g; d < g + cp; ++d) {
                        const std::vector<OpId> f = segmented_on(d, b, phase, sg, 0, sg.recipes.size());
                        if (firsts) (*firsts)[static_cast<std::size_t>(d - g)] = f;
                    }
                };
                // FSDP per micro-batch: the op a unit's gather must precede, and its pass's last.
                auto mark = [&](bool first_op) {
                    if (hooked == nullptr) return;
                    for (int d = g; d < g + cp; ++d)
                        for (int t = 0; t < emit_tp_; ++t) {
                            const OpId op = last[static_cast<std::size_t>(d)][static_cast<std::size_t>(t)];
                            auto& at = (first_op ? hooked->first : hooked->last)[static_cast<std::size_t>(slot(t, d))];
                            at[static_cast<std::size_t>(i)] = first_op ? moe_.first_of(cp_.first_of(op)) : op;
                        }
                };
                switch (st.pass) {
                    case Pass::fwd: {
                        std::vector<std::vector<OpId>> waits;   // --overlap-param-gather, per (d - g) · tp + t
                        if (pg)
                            for (int d = g; d < g + cp; ++d)
                                for (int t = 0; t < emit_tp_; ++t)
                                    waits.push_back(aligned ? param_gather_waits(*pg, i, t, d)
                                                            : param_gather_hook(*pg, i, t, d, s,
                                                                                i == c.first ? waiting(t, d)
                                                                                             : last[static_cast<std::size_t>(d)][static_cast<std::size_t>(t)]));
                        const bool cast = fp8_cast_[static_cast<std::size_t>(i)] >= 0 && mb == 0;
                        cast_fp8_weights(blk, g, s, mb, last);
                        std::vector<OpId> casts;   // the weight casts, which read the parameters first
                        for (int d = g; d < g + cp && cast; ++d)
                            for (int t = 0; t < emit_tp_; ++t) casts.push_back(last[static_cast<std::size_t>(d)][static_cast<std::size_t>(t)]);
                        const Segments& segments = fwd_segments_[static_cast<std::size_t>(i)];
                        std::vector<std::vector<OpId>> firsts;   // the segmented pass's first op per rank
                        if (!segments.recipes.empty()) {
                            // Context-parallel segments: the pass's first op is ContextParallel's to say.
                            if (segments.core < 0)
                                firsts.assign(static_cast<std::size_t>(cp), std::vector<OpId>(static_cast<std::size_t>(emit_tp_), kNoOp));
                            segmented(blk, Phase::fwd, segments, segments.core < 0 ? &firsts : nullptr);
                        } else {
                            run(Phase::fwd, rc.fwd);
                        }
                        for (std::size_t w = 0; w < waits.size(); ++w) {
                            const int d = g + static_cast<int>(w) / emit_tp_, t = static_cast<int>(w) % emit_tp_;
                            const OpId first_op = cast ? casts[w]
                                                  : !firsts.empty() ? firsts[static_cast<std::size_t>(d - g)][static_cast<std::size_t>(t)]
                                                                    : cp_.first_of(last[static_cast<std::size_t>(d)][static_cast<std::size_t>(t)]);
                            for (const OpId gather : waits[w]) g_.depend(gather, first_op);
                        }
                        mark(true);
                        // The step's first forward of a unit waits for its all-gather (under stages).
                        if (fsdp_ && !fsdp_per_mb_ && mb == 0)
                            for (int d = g; d < g + cp; ++d)
                                for (int t = 0; t < emit_tp_; ++t)
                                    g_.depend(fsdp_ag_[static_cast<std::size_t>(i)][static_cast<std::size_t>(slot(t, d))],
                                              cp_.first_of(last[static_cast<std::size_t>(d)][static_cast<std::size_t>(t)]));
                        if (segments.recipes.empty()) collectives(Phase::fwd);
                        mark(false);
                        break;
                    }
                    case Pass::bwd:
                    case Pass::bwd_input: {
                        // The unit's unsharded gradient, from its first backward to its reduce-scatter
                        // (per micro-batch without pipeline stages).
                        if (fsdp_ && (mb == 0 || (fsdp_per_mb_ && !plan_.fsdp_no_sync)))
                            for (int d = g; d < g + cp; ++d)
                                for (int t = 0; t < emit_tp_; ++t) {
                                    const int r = l_.rank(t, d, s);
                                    const std::int32_t buf = g_.add_buffer(r, Tier::device,
                                                                           Bytes(unit_params(i, vs) * l_.fsdp_reduce_bytes),
                                                                           BufferLabel::bucket);
                                    g_.add_alloc(buf, Stream::compute, i, mb);
                                    fsdp_grad_[static_cast<std::size_t>(i)][static_cast<std::size_t>(slot(t, d))] = buf;
                                }
                        if (rc.recompute >= 0) {
                            run(Phase::recompute, rc.recompute);
                            mark(true);
                            // Full recompute redoes the forward, its collectives included; selective
                            // recompute of the MLP its row-parallel linear's.
                            if (plan_.recompute == Recompute::full || blk.tp_collectives_recompute > 0) collectives(Phase::recompute);
                        }
                        // Zero-bubble schedules split backward into input and weight gradients.
                        const bool split = st.pass == Pass::bwd_input;
                        const Segments& segments = bwd_segments_[static_cast<std::size_t>(i)];
                        if (!split && !segments.recipes.empty()) {
                            segmented(blk, Phase::bwd, segments);
                        } else {
                            run(split ? Phase::bwd_input : Phase::bwd, split ? rc.bwd_input : rc.bwd);
                            if (rc.recompute < 0) mark(true);
                            collectives(split ? Phase::bwd_input : Phase::bwd);
                        }
                        // FSDP per micro-batch reduce-scatters each micro-batch's gradient (its
                        // shard's accumulation is not charged, as in build_sharded), unless it
                        // accumulates them unsharded under no_sync.
                        const bool accumulated = !fsdp_per_mb_ || plan_.fsdp_no_sync;
                        if (!split && accumulated) {
                            // The accumulation follows the linear's wait for its async collectives.
                            const auto prior = last;
                            accumulate(blk, g, s, mb, last);
                            for (int d = g; d < g + cp; ++d)
                                for (int t = 0; t < emit_tp_; ++t)
                                    if (last[static_cast<std::size_t>(d)][static_cast<std::size_t>(t)] !=
                                        prior[static_cast<std::size_t>(d)][static_cast<std::size_t>(t)])
                                        join_async(d, t, last[static_cast<std::size_t>(d)][static_cast<std::size_t>(t)]);
                        }
                        if (!split) mark(false);
                        break;
                    }
                    case Pass::bwd_weight:
                        run(Phase::bwd_weight, rc.bwd_weight);
                        if (!fsdp_per_mb_ || plan_.fsdp_no_sync) accumulate(blk, g, s, mb, last);
                        mark(false);
                        break;
                }
                if (last_of_chunk && st.pass == release)
                    for (int d = g; d < g + cp; ++d)
                        for (int t = 0; t < emit_tp_; ++t)
                            grad_ready_[static_cast<std::size_t>(slot(t, d))][static_cast<std::size_t>(i)] =
                                last[static_cast<std::size_t>(d)][static_cast<std::size_t>(t)];
            }
            for (int d = g; d < g + cp; ++d) {
                auto& mine = last[static_cast<std::size_t>(d)];
                if (st.pass == release)
                    for (int t = 0; t < emit_tp_; ++t) {
                        mine[static_cast<std::size_t>(t)] = g_.add_free(buffer(t, d), Stream::compute, c.first, mb);
                        join_async(d, t, mine[static_cast<std::size_t>(t)]);   // the pass's gradient, sent on
                    }
                for (int t = 0; t < emit_tp_; ++t) {
                    last_out[static_cast<std::size_t>(slot(t, d))] = mine[static_cast<std::size_t>(t)];
                    final_compute_[static_cast<std::size_t>(l_.rank(t, d, s))] = mine[static_cast<std::size_t>(t)];
                }
            }
        }
        if (fsdp_per_mb_) {
            if (st.pass == Pass::fwd) fsdp_hooks(mb, true);
            if (st.pass == release) fsdp_hooks(mb, false);
        }
        if (last_of_chunk && st.pass == release) {
            if (fsdp_per_mb_)
                ;   // reduced every micro-batch (fsdp_hooks)
            else if (fsdp_)
                fsdp_reduce(s, c, vs);
            else if (l_.framework.grad_reduce == GradReduce::after_backward)
                deferred_syncs_.emplace_back(s, vs);   // after the rank's whole backward (emit_pipeline)
            else
                grad_sync(s, c);
        }
    }

    /// Parameters of FSDP unit i (a block) on its rank: the last virtual stage's head also holds
    /// the copy of a tied table (make_chunks).
    std::int64_t unit_params(int i, int vs) const {
        const bool head = vs == schedule_.virtual_stages() - 1 && i == chunks_[static_cast<std::size_t>(vs)].last - 1;
        return blocks_[static_cast<std::size_t>(i)].params + (head ? tied_params_ : 0);
    }

    /// FSDP under pipeline stages, as torchtitan runs it (torchtitan/models/llama3/infra/
    /// parallelize.py apply_fsdp: reshard_after_forward False when pipeline parallelism is on, "to
    /// avoid per-microbatch all-gathers"; torch/distributed/pipelining/stage.py: every backward
    /// runs with set_requires_gradient_sync(False) and set_reshard_after_backward(False), and
    /// perform_reduce_grad, the REDUCE_GRAD action "scheduled after all microbatches W, B
    /// actions", runs FSDP's post-backward). Each unit (block) of a stage is all-gathered once per
    /// step, at the stage's first forward — the root's pre-forward makes the all-gather streams
    /// wait for the current stream, so the first waits for the stage's receive, the others
    /// follow on the comm stream while earlier units compute — and stays unsharded through every
    /// micro-batch; its gradient accumulates unsharded; after the stage's last backward every
    /// unit's gradient is reduce-scattered and the unit resharded. With hybrid sharding (HSDP)
    /// the gathers and reduce-scatters stay within shard groups (shard_group), and fsdp_reduce
    /// all-reduces each shard across them.
    /// With expert parallelism (torchtitan's FSDP + EP under pipeline stages) an MoE unit's local
    /// experts are gathered after its dense part, over their expert shard group (expert_shard_ranks).
    void fsdp_gather(int s, const Chunk& c, int vs, const std::vector<OpId>& wait_for) {
        for (int t = 0; t < emit_tp_; ++t) {
            const std::vector<int> group = dp_group(t, s);
            for (int i = c.first; i < c.last; ++i) {
                const Bytes experts(unit_expert_params(i) * sb_.params), dense(Bytes(unit_params(i, vs) * sb_.params) - experts);
                const std::vector<std::int32_t> expert_cids = declare_expert_collectives(CollectiveKind::all_gather, t, s, experts);
                const Bytes unsharded = expert_cids.empty() ? dense : dense + experts;
                std::int32_t cid = -1;
                for (int d = 0; d < emit_dp_; ++d) {
                    if (d % shard_slots_ == 0 && shard_slots_ > 1)   // each shard group's gather
                        cid = g_.declare_collective(CollectiveKind::all_gather, shard_group(group, d), dense);
                    const int sl = slot(t, d), r = group[static_cast<std::size_t>(d)];
                    const std::int32_t buf = g_.add_buffer(r, Tier::device, unsharded, BufferLabel::staging);
                    OpId op = g_.add_alloc(buf, Stream::comm, i, 0);
                    if (i == c.first && !wait_for.empty() && wait_for[static_cast<std::size_t>(sl)] != kNoOp)
                        g_.depend(wait_for[static_cast<std::size_t>(sl)], op);
                    if (fsdp_offload_) {
                        // The fp32 shard to the device, cast to the 16-bit dtype there, before the
                        // gather sends it (as build_sharded's offloaded unshard).
                        const std::int64_t sh = detail::shard(unit_params(i, vs), shard_slots_);
                        const std::int32_t f32 = g_.add_buffer(r, Tier::device, Bytes(sh * 4), BufferLabel::staging);
                        const OpId fa = g_.add_alloc(f32, Stream::comm, i, 0);
                        const OpId in = g_.add_copy(r, Tier::host, Tier::device, Bytes(sh * 4), Phase::fwd, i, 0);
                        g_.depend(op, in);
                        g_.depend(fa, in);
                        const Kernel cast = stream_kernel(KernelName::other, KernelClass::elementwise, sh * (4 + sb_.params));
                        op = g_.add_kernels(r, Phase::fwd, i, 0, g_.intern_recipe({&cast, 1}), l_.dtype, false, Stream::comm);
                        g_.depend(in, op);
                        g_.add_free(f32, Stream::comm, i, 0);
                    }
                    if (cid >= 0) op = g_.add_collective_op(cid, r, Stream::comm, Phase::fwd, i, 0);
                    if (!expert_cids.empty())   // after the dense gather on the comm stream
                        op = g_.add_collective_op(expert_cids[expert_cid(d)], r, Stream::comm, Phase::fwd, i, 0);
                    fsdp_unsharded_[static_cast<std::size_t>(i)][static_cast<std::size_t>(sl)] = buf;
                    fsdp_ag_[static_cast<std::size_t>(i)][static_cast<std::size_t>(sl)] = op;
                }
            }
        }
    }

    /// FSDP + EP: one collective of `kind` moving `bytes` per expert shard group of tensor rank t
    /// and stage s — per shard group, the replicas holding one expert set (d mod ep) — indexed by
    /// expert_cid; none for no bytes or one-rank groups. Without hybrid sharding these are the
    /// expert-data-parallel groups (strategies/moe.hpp).
    std::vector<std::int32_t> declare_expert_collectives(CollectiveKind kind, int t, int s, Bytes bytes) {
        std::vector<std::int32_t> cids;
        if (bytes <= Bytes(0) || expert_shard_ranks() == 1) return cids;
        for (int first = 0; first < l_.dp_cp(); first += shard_slots_)
            for (int e = 0; e < l_.ep; ++e) {
                std::vector<int> members;
                for (int d = first + e; d < first + shard_slots_; d += l_.ep) members.push_back(l_.rank(t, d, s));
                cids.push_back(g_.declare_collective(kind, members, bytes, -1, kExpertDataParallelGroup));
            }
        return cids;
    }
    /// Replica d's collective among declare_expert_collectives'.
    std::size_t expert_cid(int d) const { return static_cast<std::size_t>(d / shard_slots_ * l_.ep + d % l_.ep); }

    /// FSDP without pipeline stages (with context parallelism; build_sharded runs it without):
    /// torchtitan reshards after forward when pipeline parallelism is off (parallelize.py
    /// apply_fsdp) and reduces every micro-batch of its gradient accumulation, so each micro-batch
    /// runs FSDP's hooks (detail::FsdpHooks) over the sharding's groups — every data- and
    /// context-parallel slot (torchtitan's dp_shard_cp mesh), or hybrid's shard groups — on the
    /// ops its pass left in fsdp_mb_: the forward's after the forward, the backward's after it.
    void fsdp_hooks(int mb, bool forward) {
        FsdpMicrobatch& m = fsdp_mb_[static_cast<std::size_t>(mb)];
        const int units = static_cast<int>(blocks_.size());
        const int groups_of_shards = l_.dp_cp() / shard_slots_;
        const bool reshard = plan_.fsdp_sharding != FsdpSharding::grad_op;
        auto at = [](const std::vector<std::vector<OpId>>& ops, int sl, int i) {
            return ops[static_cast<std::size_t>(sl)][static_cast<std::size_t>(i)];
        };
        for (int t = 0; t < emit_tp_; ++t) {
            const std::vector<int> group = dp_group(t, 0);
            // One collective of `kind` per shard group; `before(d, op)` wires slot d's op.
            auto over_shards = [&](CollectiveKind kind, Bytes bytes, Phase phase, int i, const std::function<OpId(int)>& issue,
                                   const std::function<void(int, OpId)>& wired) {
                std::int32_t cid = -1;
                for (int d = 0; d < emit_dp_; ++d) {
                    if (d % shard_slots_ == 0) cid = g_.declare_collective(kind, shard_group(group, d), bytes);
                    const int r = group[static_cast<std::size_t>(d)];
                    const OpId before = issue(d);
                    const OpId op = g_.add_collective_op(cid, r, Stream::comm, phase, i, mb);
                    if (before != kNoOp) g_.depend(before, op);
                    wired(d, op);
                }
            };
            // FSDP + EP: unit i's experts, one collective of `kind` per expert-data-parallel group
            // (MoE layers never fold: every replica is emitted), after each slot's dense one on
            // the comm stream; `wired(d, op)` as above.
            auto over_experts = [&](CollectiveKind kind, Bytes bytes, Phase phase, int i, const std::function<void(int, OpId)>& wired) {
                const std::vector<std::int32_t> cids = declare_expert_collectives(kind, t, 0, bytes);
                if (cids.empty()) return;
                for (int d = 0; d < emit_dp_; ++d)
                    wired(d, g_.add_collective_op(cids[expert_cid(d)], group[static_cast<std::size_t>(d)], Stream::comm, phase, i, mb));
            };
            const detail::FsdpHooks hooks{
                units,
                [&](int i) { return detail::fsdp_reshards_after_forward(blocks_[static_cast<std::size_t>(i)], reshard); },
                [&](int i, Phase phase, int after) {
                    const Bytes experts(unit_expert_params(i) * sb_.params), dense(Bytes(unit_params(i, 0) * sb_.params) - experts);
                    const Bytes unsharded = expert_shard_ranks() > 1 ? dense + experts : dense;   // else resident
                    auto before_use = [&](int d, OpId op) {
                        g_.depend(op, at(phase == Phase::fwd ? m.fwd.first : m.bwd.first, slot(t, d), i));
                    };
                    over_shards(
                        CollectiveKind::all_gather, dense, phase, i,
                        [&](int d) {
                            const int sl = slot(t, d), r = group[static_cast<std::size_t>(d)];
                            const std::int32_t buf = g_.add_buffer(r, Tier::device, unsharded, BufferLabel::staging);
                            const OpId a = g_.add_alloc(buf, Stream::comm, i, mb);
                            if (after >= 0) g_.depend(at(m.bwd.last, sl, after), a);
                            fsdp_unsharded_[static_cast<std::size_t>(i)][static_cast<std::size_t>(sl)] = buf;
                            return a;
                        },
                        before_use);
                    if (experts > Bytes(0)) over_experts(CollectiveKind::all_gather, experts, phase, i, before_use);
                },
                [&](int i, Phase phase) {
                    for (int d = 0; d < emit_dp_; ++d) {
                        const int sl = slot(t, d);
                        const OpId f = g_.add_free(fsdp_unsharded_[static_cast<std::size_t>(i)][static_cast<std::size_t>(sl)],
                                                   Stream::comm, i, mb);
                        g_.depend(at(phase == Phase::fwd ? m.fwd.last : m.bwd.last, sl, i), f);
                    }
                },
                [&](int i) {
                    if (plan_.fsdp_no_sync && mb < l_.microbatches - 1) return;   // held until the last micro-batch
                    const std::int64_t unit = unit_params(i, 0), experts = unit_expert_params(i);
                    std::vector<OpId> done(static_cast<std::size_t>(emit_dp_), kNoOp);
                    auto finished = [&](int d, OpId op) { done[static_cast<std::size_t>(d)] = op; };
                    over_shards(
                        CollectiveKind::reduce_scatter, Bytes((unit - experts) * l_.fsdp_reduce_bytes), Phase::comm, i,
                        [&](int d) { return at(m.bwd.last, slot(t, d), i); }, finished);
                    // The experts' after the dense reduce-scatter, on the comm stream.
                    over_experts(CollectiveKind::reduce_scatter, Bytes(experts * l_.fsdp_reduce_bytes), Phase::comm, i, finished);
                    if (groups_of_shards > 1) reduce_across_shard_groups(group, unit - experts, experts, i, mb, done);
                    for (int d = 0; d < emit_dp_; ++d) {
                        const int sl = slot(t, d);
                        last_comm_[static_cast<std::size_t>(group[static_cast<std::size_t>(d)])] = done[static_cast<std::size_t>(d)];
                        const OpId f = g_.add_free(fsdp_grad_[static_cast<std::size_t>(i)][static_cast<std::size_t>(sl)],
                                                   Stream::comm, i, mb);
                        g_.depend(done[static_cast<std::size_t>(d)], f);
                    }
                }};
            if (forward)
                detail::fsdp_forward_order(hooks);
            else
                detail::fsdp_backward_order(hooks, plan_.fsdp_backward_prefetch);
        }
        if (!forward) m = {};   // the micro-batch's ops are wired
    }

    /// Hybrid sharding's replicate dimension: each position's gradient shard of unit i (its
    /// `dense` parameters' shard, then the shard of its `experts` over their expert shard group,
    /// FSDP + EP) all-reduced with the same shard of the other shard groups among `group` (a
    /// tensor rank's slots of a stage), after after[d], which becomes the last all-reduce.
    void reduce_across_shard_groups(const std::vector<int>& group, std::int64_t dense, std::int64_t experts, int i, int mb,
                                    std::vector<OpId>& after) {
        const int groups_of_shards = l_.dp_cp() / shard_slots_;
        for (const std::int64_t shard : {detail::shard(dense, shard_slots_), experts > 0 ? detail::shard(experts, expert_shard_ranks()) : 0}) {
            if (shard == 0) continue;
            for (int p = 0; p < shard_slots_; ++p) {
                std::vector<int> members;
                for (int q = 0; q < groups_of_shards; ++q) members.push_back(group[static_cast<std::size_t>(q * shard_slots_ + p)]);
                const std::int32_t ar = g_.declare_collective(CollectiveKind::all_reduce, members, Bytes(shard * l_.fsdp_reduce_bytes));
                for (int q = 0; q < groups_of_shards; ++q) {
                    const int d = q * shard_slots_ + p;
                    const int r = group[static_cast<std::size_t>(d)];
                    const OpId op = g_.add_collective_op(ar, r, Stream::comm, Phase::comm, i, mb);
                    g_.depend(after[static_cast<std::size_t>(d)], op);
                    after[static_cast<std::size_t>(d)] = op;
                    last_comm_[static_cast<std::size_t>(r)] = op;
                }
            }
        }
    }

    /// The members of slot d's shard group among `group` (a tensor rank's slots of a stage).
    std::vector<int> shard_group(const std::vector<int>& group, int d) const {
        const auto first = group.begin() + d / shard_slots_ * shard_slots_;
        return {first, first + shard_slots_};
    }

    /// FSDP's post-backward of one stage (fsdp_gather): after its last backward, every unit's
    /// gradient reduce-scattered over its shard group (with hybrid sharding the shard then
    /// all-reduced with the same shard of the other groups: HSDP's replicate dimension), then its
    /// unsharded parameters and gradient freed.
    void fsdp_reduce(int s, const Chunk& c, int vs) {
        const int groups_of_shards = l_.dp_cp() / shard_slots_;
        for (int t = 0; t < emit_tp_; ++t) {
            const std::vector<int> group = dp_group(t, s);
            for (int i = c.first; i < c.last; ++i) {
                const std::int64_t unit = unit_params(i, vs), experts = unit_expert_params(i);
                const Bytes bytes((unit - experts) * l_.fsdp_reduce_bytes);
                const std::vector<std::int32_t> expert_cids =
                    declare_expert_collectives(CollectiveKind::reduce_scatter, t, s, Bytes(experts * l_.fsdp_reduce_bytes));
                std::vector<OpId> after(static_cast<std::size_t>(emit_dp_), kNoOp);
                std::int32_t cid = -1;
                for (int d = 0; d < emit_dp_; ++d) {
                    if (d % shard_slots_ == 0 && shard_slots_ > 1)
                        cid = g_.declare_collective(CollectiveKind::reduce_scatter, shard_group(group, d), bytes);
                    const int sl = slot(t, d), r = group[static_cast<std::size_t>(d)];
                    const OpId done = grad_ready_[static_cast<std::size_t>(sl)][static_cast<std::size_t>(c.first)];
                    after[static_cast<std::size_t>(d)] = done;
                    if (cid >= 0) {
                        after[static_cast<std::size_t>(d)] = g_.add_collective_op(cid, r, Stream::comm, Phase::comm, i, -1);
                        g_.depend(done, after[static_cast<std::size_t>(d)]);
                        last_comm_[static_cast<std::size_t>(r)] = after[static_cast<std::size_t>(d)];
                    }
                    if (!expert_cids.empty()) {   // the experts' shard, after the dense reduce-scatter
                        const OpId op = g_.add_collective_op(expert_cids[expert_cid(d)], r, Stream::comm, Phase::comm, i, -1);
                        g_.depend(after[static_cast<std::size_t>(d)], op);
                        after[static_cast<std::size_t>(d)] = last_comm_[static_cast<std::size_t>(r)] = op;
                    }
                }
                if (groups_of_shards > 1) reduce_across_shard_groups(group, unit - experts, experts, i, -1, after);
                if (fsdp_offload_) {
                    // The reduced shard, cast to fp32 if it is not, to the host's gradient shard.
                    const detail::GradientOffload how{l_.fsdp_reduce_bytes, 4, Tier::host, l_.dtype};
                    for (int d = 0; d < emit_dp_; ++d) {
                        const auto r = static_cast<std::size_t>(group[static_cast<std::size_t>(d)]);
                        fsdp_out_[r] = detail::offload_gradient(g_, group[static_cast<std::size_t>(d)], detail::shard(unit, shard_slots_),
                                                                how, 0, 1, Stream::comm, after[static_cast<std::size_t>(d)], kNoOp,
                                                                fsdp_out_prev_[r], i)
                                           .done;
                    }
                }
                for (int d = 0; d < emit_dp_; ++d) {
                    const int sl = slot(t, d);
                    for (const std::int32_t buf : {fsdp_unsharded_[static_cast<std::size_t>(i)][static_cast<std::size_t>(sl)],
                                                   fsdp_grad_[static_cast<std::size_t>(i)][static_cast<std::size_t>(sl)]}) {
                        const OpId f = g_.add_free(buf, Stream::comm, i, -1);
                        g_.depend(after[static_cast<std::size_t>(d)], f);
                    }
                }
            }
        }
    }

    /// The gradient buckets of one chunk's dense parameters, in reverse block order (as backward
    /// fills them); zero1 gathers its parameters in the same buckets.
    std::vector<Bucket> chunk_buckets(const Chunk& c) const {
        const std::vector<Block> dense = moe_.dense_part(blocks_, c.first, c.last);
        return l_.fp8_param_gather ? make_fp8_param_buckets(dense, sb_.grads, l_.bucket)
                                   : make_buckets(dense, sb_.grads, l_.bucket, l_.first_bucket);
    }

    /// Megatron's --overlap-param-gather in a chunk's first forward: block i's pre-hook dispatches
    /// the gathers param_gather_dispatch_block puts there (after the compute before block i) and
    /// waits for the buckets whose first block it is: one bucket runs ahead of the compute.
    /// Under the interleaved schedule Megatron aligns the gathers instead (--align-param-gather, its
    /// default there; megatron/core/pipeline_parallel/schedules.py:1219-1221, 1341-1353): the first
    /// two chunks' buckets are all dispatched when the step's schedule starts, and chunk c + 1's
    /// pp-rank forwards before chunk c's first micro-batch (once that forward's receive is done),
    /// aligned across the stages; the pre-hooks only wait (skip_next_bucket_dispatch).
    /// The dense parameters and the experts' are two chains of buckets, each one bucket ahead on its
    /// own (megatron/core/distributed/distributed_data_parallel.py:374-380 at d98e8a6: bucket_groups
    /// and expert_parallel_bucket_groups), the experts' gathered over the expert-data-parallel groups.
    struct ParamGathers {
        struct Chain {
            std::vector<Bucket> buckets;
            bool experts = false;
            std::size_t communicators = 1;               // tp, or tp · ep for the experts' groups
            std::vector<std::int32_t> cid;               // [bucket · communicators + communicator], declared at first use
            std::vector<std::vector<OpId>> op;           // [bucket][rank slot]
        };
        std::array<Chain, 2> chains;                     // the dense parameters', the experts'
        bool made = false;
    };
    /// The gathers of virtual stage vs, its buckets made on first use.
    ParamGathers& param_gathers(int vs) {
        if (param_gathers_.empty()) param_gathers_.resize(chunks_.size());
        ParamGathers& pg = param_gathers_[static_cast<std::size_t>(vs)];
        if (!pg.made) {
            pg.made = true;
            const Chunk& c = chunks_[static_cast<std::size_t>(vs)];
            pg.chains[0].buckets = chunk_buckets(c);
            pg.chains[1].buckets = moe_.expert_buckets(c.first, c.last, l_.bucket, sb_.grads);
            pg.chains[1].experts = true;
            for (ParamGathers::Chain& chain : pg.chains) {
                chain.communicators = static_cast<std::size_t>(l_.tp * (chain.experts ? l_.ep : 1));
                chain.cid.assign(chain.buckets.size() * chain.communicators, -1);
                chain.op.assign(chain.buckets.size(), std::vector<OpId>(static_cast<std::size_t>(groups()), kNoOp));
            }
        }
        return pg;
    }
    /// The dispatched gathers block i's first op waits for on (t, d): the buckets whose first block it is.
    std::vector<OpId> param_gather_waits(const ParamGathers& pg, int i, int t, int d) const {
        std::vector<OpId> waits;
        for (const ParamGathers::Chain& chain : pg.chains)
            for (std::size_t k = chain.buckets.size(); k-- > 0;)
                if (chain.buckets[k].ready_after_block == i) waits.push_back(chain.op[k][static_cast<std::size_t>(slot(t, d))]);
        return waits;
    }
    /// Dispatches bucket k of `chain` on (t, d) of stage s after `after` (kNoOp: nothing): over the
    /// data-parallel group of (t, s), or the experts' over the expert-data-parallel group of d.
    void dispatch_param_gather(ParamGathers::Chain& chain, std::size_t k, int t, int d, int s, OpId after,
                               Phase phase = Phase::fwd) {
        const int communicator = chain.experts ? t * l_.ep + d % l_.ep : t;
        std::int32_t& cid = chain.cid[k * chain.communicators + static_cast<std::size_t>(communicator)];
        const Bytes params = gathered_bytes(chain.buckets[k], sb_.grads, sb_.params);
        if (cid < 0)
            cid = chain.experts ? g_.declare_collective(CollectiveKind::all_gather, expert_data_parallel_group(l_, t, d, s), params,
                                                        -1, kExpertDataParallelGroup)
                                : g_.declare_collective(CollectiveKind::all_gather, dp_group(t, s), params);
        const OpId op = g_.add_collective_op(cid, l_.rank(t, d, s), Stream::comm, phase, chain.buckets[k].ready_after_block,
                                             0, static_cast<int>(k));
        if (after != kNoOp) g_.depend(after, op);
        chain.op[k][static_cast<std::size_t>(slot(t, d))] = op;
    }
    /// Every gather of virtual stage vs on (t, d) of stage s, after `after`, in forward order
    /// (the interleaved schedule's aligned dispatch).
    void dispatch_param_gathers(ParamGathers& pg, int t, int d, int s, OpId after, Phase phase = Phase::fwd) {
        for (ParamGathers::Chain& chain : pg.chains)
            for (std::size_t k = chain.buckets.size(); k-- > 0;) dispatch_param_gather(chain, k, t, d, s, after, phase);
    }
    /// Block i's pre-hook on (t, d): the gathers it dispatches after `before` (the compute up to the
    /// block), and those the block's first op must wait for.
    std::vector<OpId> param_gather_hook(ParamGathers& pg, int i, int t, int d, int s, OpId before) {
        for (ParamGathers::Chain& chain : pg.chains)
            for (std::size_t k = chain.buckets.size(); k-- > 0;)   // forward order
                if (param_gather_dispatch_block(chain.buckets, k) == i) dispatch_param_gather(chain, k, t, d, s, before);
        return param_gather_waits(pg, i, t, d);
    }

    /// Data-parallel gradient synchronisation of one chunk, after its last backward: buckets in
    /// reverse block order, each waiting for the backward that completes it.
    void grad_sync(int s, const Chunk& c) {
        if (l_.dp_cp() == 1) return;
        const Bytes cap = l_.bucket;
        const std::vector<Bucket> buckets = chunk_buckets(c);
        const bool zero1 = plan_.strategy == DataParallel::zero1;
        for (int t = 0; t < emit_tp_; ++t) {
            const std::vector<int> group = dp_group(t, s);
            for (std::size_t k = 0; k < buckets.size(); ++k) {
                const auto cid = g_.declare_collective(zero1 ? CollectiveKind::reduce_scatter : CollectiveKind::all_reduce,
                                                       group, buckets[k].bytes);
                for (int d = 0; d < emit_dp_; ++d) {
                    const OpId op = g_.add_collective_op(cid, group[static_cast<std::size_t>(d)], Stream::comm, Phase::comm, -1,
                                                         -1, static_cast<int>(k));
                    g_.depend(grad_ready_[static_cast<std::size_t>(slot(t, d))]
                                         [static_cast<std::size_t>(buckets[k].ready_after_block)],
                              op);
                    last_comm_[static_cast<std::size_t>(group[static_cast<std::size_t>(d)])] = op;
                }
                if (zero1 && t == 0) gathers_[static_cast<std::size_t>(s)].push_back(buckets[k]);
            }
        }
        moe_.grad_sync(s, c.first, c.last, cap, sb_.grads, zero1, grad_ready_, last_comm_);
    }

    /// Runs the table in estimated time (FLOPs as duration) to get one global order in which to
    /// add every step and transfer. Adding ops in an order consistent with time keeps every edge
    /// pointing forward (so the graph is acyclic) and puts each rank's sends and receives on its
    /// in-order p2p stream in the order they happen.
    void emit_pipeline() {
        const auto duration = [&](int s, const Step& st) {
            const Chunk& c = chunks_[static_cast<std::size_t>(schedule_.virtual_stage(s, st.chunk))];
            const double eps = 1.0;  // every step takes some time, so a send follows its step
            switch (st.pass) {
                case Pass::fwd: return c.fwd.count() + eps;
                case Pass::bwd: return (c.bwd + c.recompute).count() + eps;
                case Pass::bwd_input: return (c.bwd * 0.5 + c.recompute).count() + eps;
                case Pass::bwd_weight: return (c.bwd * 0.5).count() + eps;
            }
            return eps;
        };
        const auto times = run_schedule(schedule_, duration);
        // Items: (time, 0 = transfer | 1 = step, device, step index).
        std::vector<std::tuple<double, int, int, int>> items;
        const int last_vs = schedule_.virtual_stages() - 1;
        for (int s = 0; s < l_.pp; ++s)
            for (std::size_t k = 0; k < schedule_.steps[static_cast<std::size_t>(s)].size(); ++k) {
                const Step& st = schedule_.steps[static_cast<std::size_t>(s)][k];
                const auto& tm = times[static_cast<std::size_t>(s)][k];
                items.emplace_back(tm.start, 1, s, static_cast<int>(k));
                const int vs = schedule_.virtual_stage(s, st.chunk);
                const bool sends = (st.pass == Pass::fwd && vs < last_vs) ||
                                   ((st.pass == Pass::bwd || st.pass == Pass::bwd_input) && vs > 0);
                if (sends) items.emplace_back(tm.end, 0, s, static_cast<int>(k));
            }
        std::sort(items.begin(), items.end());

        // Position of each (device, micro-batch, chunk, pass) in its device's table, and whether a
        // step is the last backward of its chunk.
        const int m = schedule_.microbatches, v = schedule_.chunks;
        auto key = [&](int s, int mb, int c, Pass p) {
            return ((static_cast<std::size_t>(s) * static_cast<std::size_t>(v) + static_cast<std::size_t>(c)) * 4 +
                    static_cast<std::size_t>(p)) * static_cast<std::size_t>(m) + static_cast<std::size_t>(mb);
        };
        std::vector<int> pos(static_cast<std::size_t>(l_.pp * v * 4 * m), -1);
        for (int s = 0; s < l_.pp; ++s)
            for (std::size_t k = 0; k < schedule_.steps[static_cast<std::size_t>(s)].size(); ++k) {
                const Step& st = schedule_.steps[static_cast<std::size_t>(s)][k];
                pos[key(s, st.microbatch, st.chunk, st.pass)] = static_cast<int>(k);
            }
        const Pass release = split_ ? Pass::bwd_weight : Pass::bwd;
        std::vector<std::vector<int>> released(static_cast<std::size_t>(l_.pp), std::vector<int>(static_cast<std::size_t>(v), 0));

        act_.assign(chunks_.size(), std::vector<std::int32_t>(static_cast<std::size_t>(m) * static_cast<std::size_t>(groups()), -1));
        grad_ready_.assign(static_cast<std::size_t>(groups()), std::vector<OpId>(blocks_.size(), kNoOp));
        gathers_.assign(static_cast<std::size_t>(l_.pp), {});
        param_gathers_.clear();
        forwards_.assign(static_cast<std::size_t>(l_.pp), 0);
        if (fsdp_) {
            fsdp_ag_.assign(blocks_.size(), std::vector<OpId>(static_cast<std::size_t>(groups()), kNoOp));
            for (auto* v : {&fsdp_unsharded_, &fsdp_grad_})
                v->assign(blocks_.size(), std::vector<std::int32_t>(static_cast<std::size_t>(groups()), -1));
        }
        last_comm_.assign(static_cast<std::size_t>(l_.devices), kNoOp);
        fsdp_out_.assign(static_cast<std::size_t>(l_.devices), kNoOp);
        fsdp_out_prev_.assign(static_cast<std::size_t>(l_.devices), kNoOp);
        final_compute_.assign(static_cast<std::size_t>(l_.devices), kNoOp);
        // Last op of each emitted step per rank slot, and the receive each step waits for.
        std::vector<std::vector<std::vector<OpId>>> last_op(static_cast<std::size_t>(l_.pp)), recv(static_cast<std::size_t>(l_.pp));
        for (int s = 0; s < l_.pp; ++s) {
            last_op[static_cast<std::size_t>(s)].resize(schedule_.steps[static_cast<std::size_t>(s)].size());
            recv[static_cast<std::size_t>(s)].resize(schedule_.steps[static_cast<std::size_t>(s)].size());
        }
        // Point to point as the framework runs it. Batched (Megatron, torch batch_isend_irecv):
        // one queue per neighbour and direction, so a ready send never waits behind a receive
        // from another peer; unless --overlap-p2p-comm, a step's receives are posted with its
        // neighbour exchange after the previous step's compute (Megatron's
        // send_forward_recv_backward and friends block between steps), with it they are posted
        // early and waited for just before use. Not batched (DeepSpeed's pipeline engine): one
        // in-order queue per rank, in the order the transfers happen by the schedule's estimate.
        const bool batched = l_.framework.p2p_batched;
        const bool post_after_previous = batched && !l_.framework.overlap_p2p;
        // Receives whose posting waits for a step of their device not emitted yet: by (device, step).
        std::vector<std::vector<std::vector<std::vector<OpId>>>> posted_after(static_cast<std::size_t>(l_.pp));
        for (int s = 0; s < l_.pp; ++s) posted_after[static_cast<std::size_t>(s)].resize(schedule_.steps[static_cast<std::size_t>(s)].size());
        auto post_after = [&](const std::vector<OpId>& tail, const std::vector<OpId>& receives) {
            for (std::size_t i = 0; i < receives.size(); ++i)
                if (tail[i] != kNoOp && receives[i] != kNoOp) g_.depend(tail[i], receives[i]);
        };
        const Pass back = split_ ? Pass::bwd_input : Pass::bwd;
        for (const auto& [time, kind, s, k] : items) {
            const Step& st = schedule_.steps[static_cast<std::size_t>(s)][static_cast<std::size_t>(k)];
            auto& mine = last_op[static_cast<std::size_t>(s)][static_cast<std::size_t>(k)];
            if (kind == 1) {
                mine.assign(static_cast<std::size_t>(groups()), kNoOp);
                bool last_of_chunk = false;
                if (st.pass == release)
                    last_of_chunk = ++released[static_cast<std::size_t>(s)][static_cast<std::size_t>(st.chunk)] == m;
                auto& wait = recv[static_cast<std::size_t>(s)][static_cast<std::size_t>(k)];
                emit_step(s, st, wait, mine, last_of_chunk);
                wait.clear();
                wait.shrink_to_fit();
                for (const auto& receives : posted_after[static_cast<std::size_t>(s)][static_cast<std::size_t>(k)]) post_after(mine, receives);
                posted_after[static_cast<std::size_t>(s)][static_cast<std::size_t>(k)].clear();
                continue;
            }
            // A transfer from this step to the neighbouring virtual stage.
            const int vs = schedule_.virtual_stage(s, st.chunk);
            const bool grad = st.pass != Pass::fwd;
            const int to_vs = grad ? vs - 1 : vs + 1;
            const int ds = schedule_.device_of(to_vs), dc = schedule_.chunk_of(to_vs);
            const int consumer = pos[key(ds, st.microbatch, dc, grad ? back : Pass::fwd)];
            auto& wait = recv[static_cast<std::size_t>(ds)][static_cast<std::size_t>(consumer)];
            wait.assign(static_cast<std::size_t>(groups()), kNoOp);
            // Activations of virtual stage vs going forward; their gradient (same size) back.
            const Bytes bytes = chunks_[static_cast<std::size_t>(grad ? to_vs : vs)].send_fwd;
            const int layer = chunks_[static_cast<std::size_t>(grad ? vs : to_vs)].first;
            const Stream send_stream = !batched ? Stream::p2p : grad ? Stream::send_prev : Stream::send_next;
            const Stream recv_stream = !batched ? Stream::p2p : grad ? Stream::recv_next : Stream::recv_prev;
            for (int d = 0; d < emit_dp_; ++d)
                for (int t = 0; t < emit_tp_; ++t) {
                    const auto [snd, rcv] = g_.add_send_recv(l_.rank(t, d, s), l_.rank(t, d, ds), bytes,
                                                             grad ? Phase::bwd : Phase::fwd, layer, st.microbatch,
                                                             send_stream, recv_stream);
                    g_.depend(mine[static_cast<std::size_t>(slot(t, d))], snd);
                    wait[static_cast<std::size_t>(slot(t, d))] = rcv;
                }
            if (post_after_previous && consumer > 0) {
                const auto& tail = last_op[static_cast<std::size_t>(ds)][static_cast<std::size_t>(consumer) - 1];
                if (!tail.empty())
                    post_after(tail, wait);
                else
                    posted_after[static_cast<std::size_t>(ds)][static_cast<std::size_t>(consumer) - 1].push_back(wait);
            }
        }
        // Gradients reduced after backward (Megatron without --overlap-grad-reduce): every chunk's
        // buckets wait for the rank's last backward op.
        for (const auto& [s, vs] : deferred_syncs_) {
            const Chunk& c = chunks_[static_cast<std::size_t>(vs)];
            for (int d = 0; d < emit_dp_; ++d)
                for (int t = 0; t < emit_tp_; ++t)
                    for (int i = c.first; i < c.last; ++i)
                        grad_ready_[static_cast<std::size_t>(slot(t, d))][static_cast<std::size_t>(i)] =
                            final_compute_[static_cast<std::size_t>(l_.rank(t, d, s))];
            grad_sync(s, c);
        }
    }

    /// The parameters whose optimizer step a rank of stage `s` runs: its zero1 shard (Megatron's
    /// distributed optimizer), its FSDP shard, or all it holds.
    std::int64_t step_shard(int s) const {
        const std::int64_t p = device_params(s);
        return plan_.strategy == DataParallel::zero1 ? zero1_shard(p, device_expert_params(s), l_) : fsdp_ ? fsdp_shard(s) : p;
    }

    /// Megatron's --optimizer-cpu-offload on rank `r` over `shard` parameters, after `after`
    /// (HybridDeviceOptimizer.step: megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py;
    /// offload fraction 1 unless --optimizer-offload-fraction, overlap_cpu_optimizer_d2h_h2d off
    /// unless its flag, as optimizer_config.py). The distributed optimizer's passes over the fp32
    /// main-gradient shard stay on the device — the framework's step less Adam's 28 bytes and, in
    /// 16-bit training, the
    /// copy into the 16-bit weights (read 4, write 2): of Megatron's 58, the unscale and check (8),
    /// the norm (4), the clip (8) and the zeroing for the next step (4) — then the shard crosses
    /// to its pinned host copy (4 bytes a parameter, _set_sub_optimizer_grads on the current
    /// stream), the CPU steps it once the copy is done (its event synchronised), and the post-step
    /// hook copies the updated weights back, cast to 16 bits on the host (optimizer.hpp). With
    /// --overlap-cpu-optimizer-d2h-h2d each parameter has its own CPU optimizer
    /// (build_cpu_optimizer_list): its copy out, step and copy back follow one another while the
    /// next parameter's copy is in flight, on side streams; here a block's share of the shard
    /// stands for its parameters (step_pieces). Returns the last copy back, or the device's step.
    /// With --optimizer-offload-fraction F, HybridDeviceOptimizer takes parameters for the CPU
    /// until F of them are there (_get_sub_optimizer_param_groups) and steps the rest on the device
    /// first (step(): the GPU optimizer, then the CPU ones): the device's part runs the device
    /// step, queued behind the copies out on the current stream (beside them with the overlap),
    /// and the copies back wait for it (the h2d stream waits for the current stream).
    OpId offloaded_step(int r, int s, std::int64_t shard, OpId after) {
        const std::int64_t cpu = offloaded_part(shard), gpu = shard - cpu;
        OpId last = after;
        const int copy = sb_.params < 4 ? 4 + sb_.params : 0;
        if (const int bytes = detail::optimizer_bytes_per_param(l_) - detail::kAdamBytesPerParam - copy; bytes > 0 && cpu > 0) {
            const Kernel passes = stream_kernel(KernelName::optimizer, KernelClass::optimizer,
                                                checked_mul(cpu, bytes, "bytes of the device's step passes"));
            last = g_.add_kernels(r, Phase::opt, -1, -1, g_.intern_recipe({&passes, 1}), l_.dtype, false, Stream::compute);
            if (after != kNoOp) g_.depend(after, last);
        }
        std::vector<OpId> downs, ups;
        if (cpu > 0)
            for (const std::int64_t piece : plan_.overlap_cpu_optimizer_d2h_h2d ? step_pieces(s, cpu) : std::vector{cpu}) {
                const OpId down = g_.add_copy(r, Tier::device, Tier::host, Bytes(piece * 4), Phase::opt);
                if (last != kNoOp) g_.depend(last, down);
                const OpId step = add_optimizer_steps(g_, l_, StepRunner::megatron_cpu, {r}, piece, {}, false, {down}).front();
                ups.push_back(g_.add_copy(r, Tier::host, Tier::device, Bytes(piece * sb_.params), Phase::opt));
                g_.depend(step, ups.back());
                downs.push_back(down);
            }
        if (gpu > 0) {
            const OpId device = add_optimizer_steps(g_, l_, StepRunner::device, {r}, gpu, {}, false, {last}).front();
            if (!plan_.overlap_cpu_optimizer_d2h_h2d)
                for (const OpId d : downs) g_.depend(d, device);
            for (const OpId u : ups) g_.depend(device, u);
            if (ups.empty()) return device;
        }
        return ups.back();
    }

    /// The share of a rank's optimizer shard Megatron steps on the host.
    std::int64_t offloaded_part(std::int64_t shard) const {
        const double f = plan_.optimizer_offload_fraction.value_or(1.0);
        return std::clamp<std::int64_t>(std::llround(f * static_cast<double>(shard)), 0, shard);
    }

    /// `shard` split over stage s's blocks in proportion to their parameters (the last piece takes
    /// the rounding), empty pieces left out.
    std::vector<std::int64_t> step_pieces(int s, std::int64_t shard) const {
        std::vector<std::int64_t> weights;
        for (int c = 0; c < schedule_.chunks; ++c) {
            const Chunk& k = chunks_[static_cast<std::size_t>(schedule_.virtual_stage(s, c))];
            for (int b = k.first; b < k.last; ++b) weights.push_back(blocks_[static_cast<std::size_t>(b)].params);
        }
        const std::int64_t total = std::accumulate(weights.begin(), weights.end(), std::int64_t{0});
        if (total <= 0) return {shard};
        std::vector<std::int64_t> out;
        std::int64_t given = 0;
        for (std::size_t i = 0; i < weights.size(); ++i) {
            const std::int64_t piece = i + 1 == weights.size()
                                           ? shard - given
                                           : static_cast<std::int64_t>(static_cast<__int128>(shard) * weights[i] / total);
            given += piece;
            if (piece > 0) out.push_back(piece);
        }
        return out;
    }

    /// Tied embeddings, the optimizer step, and zero1's parameter all-gather, per rank.
    void emit_optimizer() {
        const bool zero1 = plan_.strategy == DataParallel::zero1;
        // The tied table's two gradients summed between the first and the last stage; FSDP's
        // are shards by then (fsdp_reduce), each rank's with its peer's.
        const Bytes tied = fsdp_ ? Bytes(detail::shard(tied_params_, shard_slots_) * l_.fsdp_reduce_bytes)
                                 : Bytes(tied_params_ * sb_.grads);
        if (tied_params_ > 0 && l_.pp > 1)
            for (int d = 0; d < emit_dp_; ++d)
                for (int t = 0; t < emit_tp_; ++t) {
                    const auto ops = g_.add_collective(CollectiveKind::all_reduce, {l_.rank(t, d, 0), l_.rank(t, d, l_.pp - 1)},
                                                       tied, Stream::comm, Phase::comm);
                    last_comm_[static_cast<std::size_t>(l_.rank(t, d, 0))] = ops[0];
                    last_comm_[static_cast<std::size_t>(l_.rank(t, d, l_.pp - 1))] = ops[1];
                }
        for (int s = 0; s < l_.pp; ++s) {
            const std::int64_t shard = step_shard(s);
            std::vector<OpId> opt(static_cast<std::size_t>(groups()));
            // Device s's virtual stages, its first one apart (the chained optimizer's split).
            std::vector<int> chunks;
            for (int c = 0; c < schedule_.chunks; ++c) chunks.push_back(schedule_.virtual_stage(s, c));
            const std::vector<int> rest(chunks.begin() + 1, chunks.end());
            for (int d = 0; d < emit_dp_; ++d)
                for (int t = 0; t < emit_tp_; ++t) {
                    const int r = l_.rank(t, d, s);
                    const OpId after = last_comm_[static_cast<std::size_t>(r)];
                    // Adam, 8-bit AdamW or SGD (LAMB is refused with tp or pp: its norms span groups).
                    // The optimizer follows the rank's backward (compute stream order) and its last
                    // gradient collective (the comm stream keeps those in order).
                    // FSDP offloaded: PyTorch's optimizer steps the host shard once its last gradient
                    // shard is there; the next step's gathers copy it in.
                    if (l_.framework.overlap_param_gather_with_optimizer_step && l_.dp_cp() > 1) {
                        // Megatron's chained optimizer steps the first model chunk's shard alone,
                        // then dispatches that chunk's all-gathers, which run under the other
                        // chunks' step (megatron/core/optimizer/optimizer.py:1668-1675, __init__.py:1062-1068
                        // at d98e8a6); the next step's first forward waits for them.
                        const int first_vs = schedule_.virtual_stage(s, 0);
                        const Chunk& k = chunks_[static_cast<std::size_t>(first_vs)];
                        const std::int64_t first = zero1_shard(k.params, moe_.expert_params(k.first, k.last), l_);
                        const OpId stepped =
                            cast_fp8_params(t, s, {first_vs}, add_optimizer_steps(g_, l_, StepRunner::device, {r}, first, {}, false, {after}).front());
                        dispatch_param_gathers(param_gathers(first_vs), t, d, s, stepped, Phase::opt);
                        opt[static_cast<std::size_t>(slot(t, d))] = cast_fp8_params(
                            t, s, rest, add_optimizer_steps(g_, l_, StepRunner::device, {r}, shard - first, {}, false, {stepped}).front());
                        continue;
                    }
                    opt[static_cast<std::size_t>(slot(t, d))] =
                        offload_        ? offloaded_step(r, s, shard, after)
                        : fsdp_offload_ ? add_optimizer_steps(g_, l_, StepRunner::torch_cpu, {r}, shard, {}, false,
                                                              {fsdp_out_[static_cast<std::size_t>(r)]}).front()
                                        : cast_fp8_params(t, s, chunks,
                                                          add_optimizer_steps(g_, l_, StepRunner::device, {r}, shard, {}, false, {after}).front());
                }
            if (zero1 && l_.dp_cp() > 1 && !l_.framework.overlap_param_gather)   // else in the forward (ParamGathers)
                for (int t = 0; t < emit_tp_; ++t) {
                    const std::vector<int> group = dp_group(t, s);
                    for (const Bucket& b : gathers_[static_cast<std::size_t>(s)]) {
                        const auto cid = g_.declare_collective(CollectiveKind::all_gather, group, gathered_bytes(b, sb_.grads, sb_.params));
                        for (int d = 0; d < emit_dp_; ++d) {
                            const OpId op = g_.add_collective_op(cid, group[static_cast<std::size_t>(d)], Stream::comm, Phase::opt);
                            g_.depend(opt[static_cast<std::size_t>(slot(t, d))], op);
                        }
                    }
                }
            if (zero1 && !l_.framework.overlap_param_gather) moe_.gather_experts(s, sb_.params, sb_.grads, opt);
        }
    }

    /// --fp8-param-gather after rank (t, ·, s)'s optimizer step `stepped` over the shard of virtual
    /// stages `vs`: its FP8 weights cast from the fp32 ones (detail::fp8_master_cast_kernels), then
    /// their amaxes all-reduced over the data-parallel group, one fp32 per weight tensor (Megatron's
    /// _copy_main_params_to_model_params → quantize_param_shard, per chained optimizer; the
    /// experts' amaxes, which Megatron reduces over their expert-data-parallel group, ride in the
    /// same all-reduce here). Returns what the gathers follow: `stepped` without the flag.
    OpId cast_fp8_params(int t, int s, const std::vector<int>& vs, OpId stepped) {
        if (!l_.fp8_param_gather || vs.empty()) return stepped;
        const int r = g_.op(stepped).rank;
        std::int64_t fp8 = 0, experts = 0, tensors = 0;
        for (int v : vs) {
            const Chunk& k = chunks_[static_cast<std::size_t>(v)];
            fp8 += detail::fp8_weight_params(blocks_, k.first, k.last);
            experts += moe_.expert_params(k.first, k.last, true);
            tensors += detail::fp8_weight_tensors(blocks_, k.first, k.last);
        }
        const std::int32_t recipe =
            g_.intern_recipe(detail::fp8_master_cast_kernels(zero1_shard(fp8, experts, l_), l_.dtype, l_.fp8));
        const OpId cast = g_.add_kernels(r, Phase::opt, -1, -1, recipe, l_.dtype);
        g_.depend(stepped, cast);
        if (l_.dp_cp() == 1) return cast;
        std::int32_t& cid = amax_cid_[{s, t, vs.front()}];
        if (cid == 0) cid = g_.declare_collective(CollectiveKind::all_reduce, dp_group(t, s), Bytes(tensors * 4)) + 1;
        const OpId amax = g_.add_collective_op(cid - 1, r, Stream::comm, Phase::opt);
        g_.depend(cast, amax);
        return amax;
    }

    const Model& model_;
    const Layout& l_;
    const Plan& plan_;
    OpGraph g_;
    std::vector<Block> blocks_;
    std::vector<detail::BlockRecipes> recipes_;   // by block index
    std::vector<std::int32_t> accumulate_;        // the gradient accumulation recipe by block index (-1: none)
    std::vector<std::int32_t> fp8_cast_;          // the FP8 weight cast recipe by block index (-1: none)
    ExpertParallel moe_;                            // MoE layers' all-to-alls and expert gradients
    ContextParallel cp_;                            // context parallelism's ring attention
    StateBytes sb_{};
    bool sp_ = false, split_ = false;
    Schedule schedule_kind_ = Schedule::one_f_one_b;   // the plan's, but 1F1B for zb-h1 on one stage
    bool fsdp_ = false;                                 // FSDP under pipeline stages (fsdp_gather) or with --cp
    bool offload_ = false;                              // Megatron's --optimizer-cpu-offload (offloaded_step)
    bool fsdp_offload_ = false;                         // FSDP's CPUOffloadPolicy (fsdp_gather, fsdp_reduce)
    std::vector<OpId> fsdp_out_;                        // per rank: its last gradient shard's copy to the host
    std::vector<OpId> fsdp_out_prev_;                   // per rank: offload_gradient's device buffer chain
    bool fsdp_per_mb_ = false;                          // FSDP without pipeline stages: hooks per micro-batch
    /// One pass of a micro-batch, per rank slot, per unit: the op FSDP's gather must precede (its
    /// first: the recompute's in backward) and its last (after its tensor-parallel collectives).
    struct FsdpPass {
        std::vector<std::vector<OpId>> first, last;
    };
    struct FsdpMicrobatch {
        FsdpPass fwd, bwd;
    };
    std::vector<FsdpMicrobatch> fsdp_mb_;               // FSDP per micro-batch, until its hooks are emitted
    int shard_slots_ = 1;                               // FSDP: slots of a stage one shard group holds
    // FSDP, per block, per rank slot: the unit's all-gather (or its buffer's alloc without data
    // parallelism), its unsharded parameters and its unsharded gradient.
    std::vector<std::vector<OpId>> fsdp_ag_;
    std::vector<std::vector<std::int32_t>> fsdp_unsharded_, fsdp_grad_;
    int emit_dp_ = 1;                                   // replica slots with ops: cp · fold_width when folded
    int emit_tp_ = 1;                                   // tensor ranks with ops: 1 when they fold too
    PipelineSchedule schedule_;
    std::vector<Chunk> chunks_;
    std::int64_t tied_params_ = 0;   // parameters of the tied table's copy on the last stage
    Bytes tied_frozen_;              // that copy when fine-tuning freezes it
    Training training_;              // LoRA / QLoRA's passes and frozen weights (full: empty)
    std::vector<std::vector<std::int32_t>> act_;        // per virtual stage: buffer per (micro-batch, rank slot)
    std::vector<std::vector<OpId>> grad_ready_;         // per rank slot of the current stage: per block
    std::vector<std::vector<Bucket>> gathers_;          // zero1: per device, the buckets to all-gather
    std::map<std::tuple<int, int, int>, std::int32_t> amax_cid_;   // --fp8-param-gather: (stage, tensor rank, chunk) → cid + 1
    std::vector<OpId> last_comm_;                       // per rank: its last gradient collective
    std::vector<OpId> final_compute_;                   // per rank: its latest compute-stream op
    std::vector<std::pair<int, int>> deferred_syncs_;   // (device, virtual stage) reduced after backward
    std::vector<ParamGathers> param_gathers_;           // --overlap-param-gather: per virtual stage
    std::vector<int> forwards_;                         // per device: the forwards emitted so far (aligned gathers)
    std::vector<std::vector<int>> tp_groups_;           // per (stage, replica): tp_group, made when first used
    /// Where a segment of a pass stands (make_segments): `none` runs on its own;
    /// `gather_before` after a blocking gather of the gradient (a row-parallel linear's, sp);
    /// the others are windows whose collectives run beside them: a column-parallel linear's
    /// backward pair (all-reduce, or re-gather and reduce-scatter with sp), and with userbuffers
    /// a row-parallel linear's gradient gather, a column-parallel linear's input gather, a
    /// row-parallel linear's pipelined reduce-scatter.
    enum class Window : std::uint8_t { none, gather_before, column_backward, row_backward, column_forward, row_forward };
    struct Segments {
        struct Part {
            Window window;
            int pair;   // the linear pair the collectives belong to (their op index)
        };
        std::vector<std::int32_t> recipes;
        std::vector<Part> parts;
        /// A context-parallel layer's: the segments before its ring in this pass's order (those of
        /// the kernels before the core in forward, after it in backward); -1: not cut at a core.
        int core = -1;
    };
    std::vector<Segments> bwd_segments_, fwd_segments_;   // by block index; empty: one op per pass
};

}  // namespace

OpGraph build_model_parallel(const Model& model, const Layout& layout, const Plan& plan) {
    return Builder(model, layout, plan).build();
}

}  // namespace smol::strategies

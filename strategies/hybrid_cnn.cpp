#include "strategies/hybrid_cnn.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.hpp"
#include "strategies/data_parallel.hpp"
#include "strategies/optimizer.hpp"

namespace smol::strategies {

namespace {

const ErrorContext kStrategyFlag{"", "", "--strategy"};
constexpr std::int64_t kFloatBytes = 4;   // LayerSpec sizes are fp32 per sample

/// Output neurons of an fc layer (its per-sample output, in fp32).
std::int64_t fc_outputs(const LayerSpec& l) { return l.output.count() / kFloatBytes; }

/// Input features of an fc layer: its forward FLOPs are 2 · in · out per sample.
std::int64_t fc_inputs(const LayerSpec& l) {
    const std::int64_t out = fc_outputs(l);
    return out > 0 ? static_cast<std::int64_t>(std::llround(l.fwd_flops.count() / (2.0 * static_cast<double>(out)))) : 0;
}

}  // namespace

const char* to_string(HybridVariant v) {
    switch (v) {
        case HybridVariant::all_gather: return "all-gather";
        case HybridVariant::broadcast: return "broadcast";
        case HybridVariant::chunked: return "chunked";
    }
    return "?";
}

HybridVariant parse_hybrid_variant(const std::string& text) {
    std::vector<std::string> names;
    for (HybridVariant v : {HybridVariant::all_gather, HybridVariant::broadcast, HybridVariant::chunked}) {
        if (text == to_string(v)) return v;
        names.emplace_back(to_string(v));
    }
    fail_input("one of all-gather, broadcast, chunked (Krizhevsky 2014's schemes a, b, c)",
               "'" + text + "'" + did_you_mean(text, names), {"", "", "--hybrid-variant"});
}

int hybrid_first_fc(const Model& model) {
    if (model.is_transformer())
        fail_input("--strategy hybrid-cnn splits a CNN's fully connected layers (Krizhevsky 2014); " + model.name() +
                       " is a transformer, whose layers have no such split: use --tp for tensor parallelism",
                   kStrategyFlag);
    const auto& layers = model.layers();
    const auto fc = std::find_if(layers.begin(), layers.end(), [](const LayerSpec& l) { return l.kind == "fc"; });
    if (fc == layers.end())
        fail_input("--strategy hybrid-cnn runs the fully connected layers model-parallel, and " + model.name() +
                       " has no fc layer: use --strategy ddp",
                   kStrategyFlag);
    const int first = static_cast<int>(fc - layers.begin());
    bool conv_params = false;
    for (int i = 0; i < first; ++i) conv_params = conv_params || layers[static_cast<std::size_t>(i)].params > 0;
    if (!conv_params)
        fail_input("--strategy hybrid-cnn runs the layers before the first fully connected one data-parallel, and " +
                       model.name() + " has no layer with parameters before '" + fc->name +
                       "' (an MLP): use --strategy ddp",
                   kStrategyFlag);
    for (auto it = fc; it != layers.end(); ++it) {
        if (it->kind != "fc")
            fail_input("--strategy hybrid-cnn splits the stack of fully connected layers that ends a CNN; layer '" +
                           it->name + "' of " + model.name() + " is a " + it->kind + " layer after fc layer '" +
                           fc->name + "'",
                       kStrategyFlag);
        if (fc_outputs(*it) < 1 || fc_inputs(*it) < 1 || fc_inputs(*it) > std::numeric_limits<int>::max() / kFloatBytes)
            fail_input("fc layers with an output and forward FLOPs (2 · inputs · outputs per sample, inputs below 2^29); layer '" +
                           it->name + "' of " + model.name() + " has output " + to_string(it->output) +
                           " and forward FLOPs " + std::to_string(it->fwd_flops.count()),
                       kStrategyFlag);
    }
    return first;
}

Model hybrid_fc_shard(const Model& model, int ranks) {
    const int first = hybrid_first_fc(model);
    std::vector<LayerSpec> shard;
    for (std::size_t i = static_cast<std::size_t>(first); i < model.layers().size(); ++i) {
        const LayerSpec& l = model.layers()[i];
        LayerSpec s = l;
        const std::int64_t out = detail::shard(fc_outputs(l), ranks);
        // Weights and bias of the worker's neurons: (in + 1) · out / K with a bias.
        s.params = detail::shard(l.params, ranks);
        s.fwd_flops = Flops(2.0 * static_cast<double>(fc_inputs(l)) * static_cast<double>(out));
        s.activations = l.activations;   // the layer's whole input, gathered
        s.output = Bytes(out * kFloatBytes);
        shard.push_back(std::move(s));
    }
    const std::int64_t input = fc_inputs(model.layers()[static_cast<std::size_t>(first)]) * kFloatBytes;
    return Model::layer_list(model.name() + " fc shard", std::move(shard), static_cast<int>(input));
}

void check_hybrid_cnn(const Model& model, const Plan& plan, const Layout& l) {
    hybrid_first_fc(model);
    for (const auto& [flag, n] : {std::pair{"--tp", l.tp}, {"--pp", l.pp}})
        if (n > 1)
            fail_input(std::string("--strategy hybrid-cnn splits the fully connected layers over all its workers itself; ") +
                           flag + " " + std::to_string(n) + " is not modelled with it (leave it out)",
                       {"", "", flag});
    if (plan.hybrid_variant == HybridVariant::chunked && l.micro_batch % l.dp != 0)
        fail_input("--hybrid-variant chunked sends 1/K of each worker's samples per round: the micro-batch " +
                       std::to_string(l.micro_batch) + " must be a multiple of the " + std::to_string(l.dp) + " workers",
                   {"", "", "--micro-batch"});
    // All-gather runs the FC layers once over every worker's micro-batch: dp × micro-batch
    // samples, a count of the layout's int.
    if (plan.hybrid_variant == HybridVariant::all_gather &&
        static_cast<std::int64_t>(l.dp) * l.micro_batch > std::numeric_limits<int>::max())
        fail_input("--hybrid-variant all-gather runs the fully connected layers on the " + std::to_string(l.dp) +
                       " workers' micro-batches of " + std::to_string(l.micro_batch) + " at once, " +
                       std::to_string(static_cast<std::int64_t>(l.dp) * l.micro_batch) + " samples, more than the " +
                       std::to_string(std::numeric_limits<int>::max()) + " a pass can hold; a smaller --micro-batch",
                   {"", "", "--micro-batch"});
    if (plan.optimizer == Optimizer::lamb)
        fail_input("--optimizer lamb needs each layer's norms, which would span the workers holding the fully connected "
                       "layers' shards; with hybrid-cnn use adam, adamw-8bit or sgd",
                   {"", "", "--optimizer"});
}

std::int64_t hybrid_extra_ops(const Model& model, const Layout& layout, const Plan& plan) {
    const auto fc = static_cast<std::int64_t>(model.layers().size()) - hybrid_first_fc(model);
    const std::int64_t rounds = plan.hybrid_variant == HybridVariant::all_gather ? 1 : layout.dp;
    // Per round and fc layer: alloc, forward, all-gather, backward, free, reduce-scatter (and a
    // recompute); per round the exchange and the return, with the logits' buffer.
    const double ops = static_cast<double>(layout.devices) * layout.microbatches * static_cast<double>(rounds * (fc * 7 + 6));
    return ops >= 9.2e18 ? std::numeric_limits<std::int64_t>::max() : static_cast<std::int64_t>(ops);
}

OpGraph build_hybrid_cnn(const Model& model, const Layout& layout, const Plan& plan) {
    const int first = hybrid_first_fc(model);
    const int K = layout.dp;
    const std::vector<int> ranks = detail::replica_ranks(layout);
    const std::vector<Block> all = detail::replica_blocks(model, layout, plan);
    const std::vector<Block> conv(all.begin(), all.begin() + first);
    const HybridVariant variant = plan.hybrid_variant;
    // Samples of one FC pass: the whole batch (a), or b per round over K rounds (b, c).
    const int rounds = variant == HybridVariant::all_gather || K == 1 ? 1 : K;
    Layout fc_layout = layout;
    fc_layout.micro_batch = rounds == 1 ? K * layout.micro_batch : layout.micro_batch;
    const Model shard_model = hybrid_fc_shard(model, K);
    const std::vector<Block> fc = detail::replica_blocks(shard_model, fc_layout, plan);
    const int L = static_cast<int>(fc.size());
    const std::int64_t e = dtype_bytes(layout.dtype);
    const std::int64_t pass = fc_layout.micro_batch;   // samples per FC pass
    // Collective sizes are the whole buffer (nccl-tests' convention, sim/collectives.hpp): the
    // gathered output of an all-gather, the input of a reduce-scatter.
    const std::int64_t in0 = fc_inputs(model.layers()[static_cast<std::size_t>(first)]);
    const Bytes exchange = Bytes(e) * pass * in0;   // the first FC layer's input for one pass
    std::vector<Bytes> gathered;                     // after FC layer i: every worker's neurons
    for (const LayerSpec& s : shard_model.layers()) gathered.push_back(Bytes(e) * pass * fc_outputs(s) * std::int64_t{K});

    const StateBytes sb = state_bytes(layout.dtype);
    const std::int64_t conv_params = detail::total_params(conv), fc_params = detail::total_params(fc);
    const std::int64_t params = conv_params + fc_params;
    std::vector<std::int64_t> layer_params = detail::layer_params(conv, 1);
    for (const Block& b : fc) layer_params.push_back(b.params);
    // DDP's buckets over the convolutional gradients alone (PyTorch's bucket_cap_mb, 1 MiB first).
    const std::vector<Bucket> buckets =
        K < 2 ? std::vector<Bucket>{} : make_buckets(conv, sb.grads, layout.bucket, layout.first_bucket);

    OpGraph g(layout.devices);
    const std::vector<detail::BlockRecipes> conv_recipes = detail::intern_block_recipes(g, conv);
    const std::vector<detail::BlockRecipes> fc_recipes = detail::intern_block_recipes(g, fc);
    // Every rank declares the same collectives in the same order: the first rank declares them,
    // the others join by sequence number.
    std::vector<std::int32_t> declared;
    std::size_t next = 0;
    // One worker exchanges nothing: its collectives are left out (kNoOp), and so are edges to them.
    auto collective = [&](int rank, CollectiveKind kind, Bytes bytes, Stream stream, int layer, int mb, int round,
                          int root = -1) {
        if (K < 2) return OpGraph::kNoOp;
        // (b) and (c) exchange the convolutional activations on a communicator of their own
        // (group 1), so its transfers overlap the inter-FC collectives on the comm stream.
        const int group = stream == Stream::p2p ? 1 : 0;
        if (rank == ranks.front()) declared.push_back(g.declare_collective(kind, ranks, bytes, root, group));
        return g.add_collective_op(declared[next++], rank, stream, Phase::comm, layer, mb, round);
    };
    auto depend = [&](OpId before, OpId after) {
        if (before != OpGraph::kNoOp && after != OpGraph::kNoOp) g.depend(before, after);
    };
    const Stream exchange_stream = rounds == 1 ? Stream::comm : Stream::p2p;
    // Buffers filled by a collective are allocated on its stream, ahead of it; with one worker
    // there is none, and they are allocated where they are used.
    const Stream exchange_alloc = K < 2 ? Stream::compute : exchange_stream;
    const Stream gather_alloc = K < 2 ? Stream::compute : Stream::comm;
    const int last_mb = layout.microbatches - 1;
    std::vector<OpId> synced(ranks.size(), OpGraph::kNoOp);

    for (std::size_t d = 0; d < ranks.size(); ++d) {
        const int r = ranks[d];
        next = 0;
        detail::alloc_model_states(g, r, Bytes(params) * std::int64_t{sb.params}, Bytes(params) * std::int64_t{sb.grads},
                                   optimizer_state_bytes(layout, params));
        for (int mb = 0; mb < layout.microbatches; ++mb) {
            // Convolutional forward on the worker's own samples.
            std::vector<std::int32_t> conv_act(conv.size());
            OpId conv_done = OpGraph::kNoOp;
            for (const Block& b : conv) {
                conv_act[b.index] = g.add_buffer(r, Tier::device, b.activations, BufferLabel::activations);
                g.add_alloc(conv_act[b.index], Stream::compute, b.index, mb);
                conv_done = g.add_kernels(r, Phase::fwd, b.index, mb, conv_recipes[b.index].fwd, layout.dtype);
            }
            // The FC rounds. FC layer i's activations are its whole input: allocated before the
            // collective that fills it (the exchange for layer 0, layer i − 1's all-gather).
            const CollectiveKind gather = variant == HybridVariant::broadcast ? CollectiveKind::broadcast : CollectiveKind::all_gather;
            const CollectiveKind give_back = variant == HybridVariant::broadcast ? CollectiveKind::reduce : CollectiveKind::reduce_scatter;
            std::vector<std::int32_t> input(static_cast<std::size_t>(rounds));
            std::vector<OpId> arrived(static_cast<std::size_t>(rounds)), freed(static_cast<std::size_t>(rounds), OpGraph::kNoOp);
            auto post_exchange = [&](int j) {
                input[j] = g.add_buffer(r, Tier::device, exchange, BufferLabel::activations);
                const OpId a = g.add_alloc(input[j], exchange_alloc, first, mb);
                // Double buffering: round j's input takes the buffer round j − 2 freed.
                if (j >= 2) depend(freed[j - 2], a);
                arrived[j] = collective(r, gather, exchange, exchange_stream, first, mb, j,
                                        variant == HybridVariant::broadcast ? ranks[static_cast<std::size_t>(j)] : -1);
                depend(conv_done, arrived[j]);
            };
            for (int j = 0; j < std::min(rounds, 2); ++j) post_exchange(j);
            OpId returned_own = OpGraph::kNoOp;   // this worker's samples' gradient, back
            for (int j = 0; j < rounds; ++j) {
                const int fc_layer0 = first;
                std::vector<std::int32_t> act(static_cast<std::size_t>(L));
                act[0] = input[j];
                OpId ready = arrived[j];
                std::int32_t logits = -1;
                for (int i = 0; i < L; ++i) {
                    const OpId f = g.add_kernels(r, Phase::fwd, fc_layer0 + i, mb, fc_recipes[i].fwd, layout.dtype);
                    depend(ready, f);
                    // Its neurons to every worker: the next layer's input, or the softmax's logits.
                    const std::int32_t buf = g.add_buffer(r, Tier::device, gathered[i], BufferLabel::activations);
                    if (i + 1 < L) act[i + 1] = buf;
                    else logits = buf;
                    g.add_alloc(buf, gather_alloc, fc_layer0 + i, mb);
                    ready = collective(r, CollectiveKind::all_gather, gathered[i], Stream::comm, fc_layer0 + i, mb, j);
                    depend(f, ready);
                }
                for (int i = L - 1; i >= 0; --i) {
                    OpId first_op = OpGraph::kNoOp;
                    if (fc_recipes[i].recompute >= 0)
                        first_op = g.add_kernels(r, Phase::recompute, fc_layer0 + i, mb, fc_recipes[i].recompute, layout.dtype);
                    const OpId b = g.add_kernels(r, Phase::bwd, fc_layer0 + i, mb, fc_recipes[i].bwd, layout.dtype);
                    depend(ready, first_op != OpGraph::kNoOp ? first_op : b);
                    if (i == L - 1) g.add_free(logits, Stream::compute, fc_layer0 + i, mb);
                    const OpId free = g.add_free(act[i], Stream::compute, fc_layer0 + i, mb);
                    // The partial gradient of the layer's whole input, summed over workers.
                    if (i > 0) {
                        ready = collective(r, CollectiveKind::reduce_scatter, gathered[i - 1], Stream::comm, fc_layer0 + i, mb, j);
                        depend(b, ready);
                    } else {
                        freed[j] = free;
                        const OpId back = collective(r, give_back, exchange, exchange_stream, fc_layer0, mb, j,
                                                     variant == HybridVariant::broadcast ? ranks[static_cast<std::size_t>(j)] : -1);
                        depend(b, back);
                        // (b): round d carries this worker's samples; (a), (c): every round does.
                        if (variant != HybridVariant::broadcast || j == static_cast<int>(d)) returned_own = back;
                        if (j + 2 < rounds) post_exchange(j + 2);
                    }
                }
            }
            // Convolutional backward; in the last micro-batch its gradient buckets are
            // all-reduced as backward fills them (DDP), the earlier ones under no_sync.
            std::size_t k = 0;
            for (auto it = conv.rbegin(); it != conv.rend(); ++it) {
                const Block& b = *it;
                OpId first_op = OpGraph::kNoOp;
                if (conv_recipes[b.index].recompute >= 0)
                    first_op = g.add_kernels(r, Phase::recompute, b.index, mb, conv_recipes[b.index].recompute, layout.dtype);
                const OpId back = g.add_kernels(r, Phase::bwd, b.index, mb, conv_recipes[b.index].bwd, layout.dtype);
                if (b.index == first - 1) depend(returned_own, first_op != OpGraph::kNoOp ? first_op : back);
                g.add_free(conv_act[b.index], Stream::compute, b.index, mb);
                if (mb != last_mb) continue;
                for (; k < buckets.size() && buckets[k].ready_after_block == b.index; ++k) {
                    synced[d] = collective(r, CollectiveKind::all_reduce, buckets[k].bytes, Stream::comm, -1, -1, static_cast<int>(k));
                    depend(back, synced[d]);
                }
            }
        }
    }
    // The optimizer step over the worker's parameters: all its convolutional ones and its FC shards.
    add_optimizer_steps(g, layout, StepRunner::device, ranks, params, layer_params, false, synced);
    return g;
}

}  // namespace smol::strategies

// --strategy hybrid-cnn: Krizhevsky 2014, "One weird trick for parallelizing convolutional neural
// networks" (arXiv:1404.5997). The convolutional layers do 90–95 % of a CNN's computation with
// about 5 % of its parameters, the fully connected layers the reverse (the paper's introduction;
// VGG-16 here: 14.7 M of 138.4 M parameters are convolutional), so the paper runs the first
// data-parallel and the second model-parallel:
//
//  * layers before the first fully connected one ("conv" part: conv, pool, …) are replicated;
//    each of the K workers runs them on its own b samples and their weight gradients are
//    all-reduced as DDP does (strategies/data_parallel.hpp: 25 MiB buckets, a 1 MiB first,
//    in reverse layer order, overlapping the convolutional backward; last micro-batch only);
//  * each fully connected layer is split by output neurons (columns): a worker holds
//    ceil(out/K) neurons, their weights, gradients and optimizer state — 1/K of the FC states,
//    never exchanged. To compute its neurons a worker needs the layer's whole input, so:
//      - the last convolutional activations are exchanged (one of the paper's three schemes,
//        --hybrid-variant, below);
//      - after every FC layer its outputs are all-gathered (each worker contributes its
//        neurons for the samples of the pass), as the next layer — or the softmax of the last —
//        needs every neuron;
//      - in backward a worker's slice of a layer yields a partial gradient for the layer's whole
//        input; the partial sums are reduce-scattered, each worker keeping the slice of the
//        layer below it owns (or, below the first FC layer, its own samples' gradient).
//
// The paper's three schemes for the exchange of the last convolutional activations (all three
// move the same bytes; they differ in how much of it overlaps compute):
//  (a) all-gather: every worker sends its b samples' activations to every other; each worker
//      runs its FC slice on the whole batch of K·b samples, and the input gradients go back by a
//      reduce-scatter over the batch.
//  (b) broadcast: K rounds; in round j worker j broadcasts its b samples' activations, every
//      worker runs its FC slice forward and backward on those b samples, and the gradient with
//      respect to worker j's activations is reduced to worker j. The next round's broadcast
//      runs while this round computes (double-buffered here: two rounds' inputs in flight).
//  (c) chunked: K rounds; in each every worker sends b/K of its samples to all (an all-gather of
//      b samples in all), then as (b), the gradients going back by a reduce-scatter.
// In (b) and (c) the exchange of the convolutional activations runs on its own communicator
// (PyTorch's new_group over the same ranks) on the p2p stream, so the next round's transfer
// overlaps this round's FC compute and its inter-FC collectives on the comm stream.
//
// Per step (one micro-batch), with e bytes per element, the first FC layer's input of i0
// features and FC outputs o_1 … o_L, each worker sends on a ring (K − 1)·b·e·(2·i0 + o_L +
// 2·Σ_{l<L} o_l) bytes of activations and activation gradients, plus the convolutional
// gradients' all-reduce, 2·(K − 1)/K · P_conv · e — in place of DDP's 2·(K − 1)/K · P · e.
#pragma once

#include "core/model.hpp"
#include "core/op_graph.hpp"
#include "strategies/plan.hpp"

namespace smol::strategies {

/// The index of the first "fc" layer of a layer list (the start of the model-parallel part).
/// Throws bad_input (--strategy) when the model is a transformer, has no fc layer, has no
/// layer with parameters before it, or has a layer other than fc after it.
int hybrid_first_fc(const Model& model);

/// The fully connected layers as one of `ranks` workers holds them: ceil(out/ranks) output
/// neurons of each, with its weights and bias, and the layer's whole input (what it saves for
/// backward). A layer list of the fc layers alone, per sample.
Model hybrid_fc_shard(const Model& model, int ranks);

/// resolve's checks for --strategy hybrid-cnn: a layer list with a trailing FC stack, no
/// tensor or pipeline parallelism, micro-batches the chunked variant can split, an optimizer
/// whose step needs no global norms.
void check_hybrid_cnn(const Model& model, const Plan& plan, const Layout& layout);

/// Ops the builder adds per rank beyond estimated_ops's data-parallel figure (the FC rounds and
/// their collectives), for resolve's estimate.
std::int64_t hybrid_extra_ops(const Model& model, const Layout& layout, const Plan& plan);

OpGraph build_hybrid_cnn(const Model& model, const Layout& layout, const Plan& plan);

}  // namespace smol::strategies

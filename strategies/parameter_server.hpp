// Parameter servers (Dean et al. 2012, DistBelief; Li et al. 2014).
//
// Parameters are sharded over S server processes (--ps-servers). With --ps-placement dedicated
// the servers are the last S devices of the cluster and the workers the first devices − S
// (Layout::servers); with colocated, shard s lives on worker s. Servers are CPU processes: their
// update is a host-side Adam step (KernelClass::optimizer, host DRAM-bound), and their fp32
// master weights, gradient accumulator and Adam moments live in host memory (16 bytes per
// parameter of the shard).
//
// Gradients are pushed and parameters pulled as point-to-point transfers, in buckets of
// --bucket-mb (reverse block order, as backward produces them), each bucket split evenly over
// the S shards. Pushes run on the p2p stream, pulls on the comm stream; every stream adds its
// transfers in one global order (iteration, worker, bucket, shard), which keeps the rendezvous
// free of deadlock. A colocated server's update runs on its rank's copy stream — a server
// thread beside the worker's compute — so it never waits behind the worker's backward.
//
//  ps        synchronous: in the last micro-batch each worker pushes every bucket to every shard;
//            a shard sums the W pushes of a bucket and steps Adam on it; then every worker pulls
//            the bucket. One server's link carries W × Ψ each way: the step grows with W, and S
//            shards divide that load by S.
//  ps-async  Downpour SGD: each micro-batch is an iteration of one worker: forward, backward, push,
//            the shard applies that worker's gradient alone, pull; the next iteration waits only
//            for the worker's own pulls. Bounded staleness (--staleness K): a worker's iteration j
//            starts only after every worker's updates of iteration j − K − 1 are applied (graph
//            edges; K = 0 is bulk-synchronous). The graph lists a server's pushes in a fixed
//            round-robin order (iteration, worker) — what executors run, and what first come,
//            first served gives on identical workers; the simulator serves them as they arrive
//            (OpGraph::serve_in_arrival_order), so a slow worker (--slow) does not hold the
//            others' turns and only the staleness bound ties them to it.
//            Each shard-bucket update ops carries labels (layer = bucket, microbatch = iteration,
//            index = worker rank) that mean_staleness() reads.
//  ps-async --hogwild   Hogwild! (Niu et al. 2011): the workers are processes of one node and the
//            parameters one store in its shared memory (host DRAM; the device memory itself on
//            unified-memory boards). As backward fills a bucket, the worker applies it to the store
//            itself (an Adam step over the bucket, host-side, on its own host stream), without a
//            lock and without a server; on a GPU node the gradient is copied down first and the
//            updated parameters back up, before the worker's next iteration reads them. No edge
//            joins two workers: no staleness bound (a slow worker never holds the others), and the
//            updates that overlap share the node's DRAM bandwidth (sim/simulator.cpp HostCpu), the
//            contention Hogwild! trades for having no locks. strategies::resolve refuses it across
//            nodes, which share no memory.
#pragma once

#include <optional>

#include "core/model.hpp"
#include "core/op_graph.hpp"
#include "core/timeline.hpp"
#include "strategies/plan.hpp"

namespace smol::strategies {

OpGraph build_parameter_server(const Model& model, const Layout& layout, const Plan& plan);
OpGraph build_parameter_server_async(const Model& model, const Layout& layout, const Plan& plan);
OpGraph build_hogwild(const Model& model, const Layout& layout, const Plan& plan);

/// Mean staleness of the updates of a ps-async graph, from its timeline: for the update of
/// worker w's iteration j on a shard-bucket, the number of updates (by other workers) applied
/// to that shard-bucket after the parameters w computed with were read (the start of the pull
/// after w's update of iteration j − 1; the start of the step for j = 0) and before this update
/// starts. nullopt when the graph has no such updates. With `shared_store` (--hogwild) every
/// worker's updates go to one store, whatever rank applies them.
std::optional<double> mean_staleness(const OpGraph& graph, const Timeline& timeline, bool shared_store = false);

/// Updates per second of a ps-async graph's timeline, each worker at its own pace, summed:
/// Σ over workers w of (w's iterations / the end of w's last update), from the update ops' labels
/// (index = worker, microbatch = iteration). What an asynchronous run sustains: a worker at half
/// speed costs half of its own share, not the others' (Dean et al. 2012, Downpour SGD). nullopt
/// when the graph has no per-worker updates.
std::optional<double> update_rate(const OpGraph& graph, const Timeline& timeline);

}  // namespace smol::strategies

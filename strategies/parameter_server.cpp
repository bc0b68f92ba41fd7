#include "strategies/parameter_server.hpp"

#include <algorithm>
#include <map>
#include <tuple>

#include "strategies/data_parallel.hpp"

namespace smol::strategies {

using namespace detail;

namespace {

/// Where workers and servers sit, and what they hold.
struct PsLayout {
    std::vector<int> workers, servers;
    bool colocated = false;
    Stream update_stream = Stream::compute;
};

PsLayout ps_layout(const Layout& layout, const Plan& plan) {
    PsLayout p;
    p.workers = replica_ranks(layout);
    p.colocated = plan.ps_placement == PsPlacement::colocated;
    for (int s = 0; s < plan.ps_servers; ++s)
        p.servers.push_back(p.colocated ? p.workers[static_cast<std::size_t>(s)] : layout.devices - layout.servers + s);
    p.update_stream = p.colocated ? Stream::host : Stream::compute;
    return p;
}

/// A shard's update of `params` parameters summing `pushes` gradients: host-side, DRAM-bound.
/// Labels: layer = bucket, microbatch = iteration, index = worker rank (−1: all workers).
OpId add_update(OpGraph& g, int server, Stream stream, std::int64_t params, int pushes, int grad_bytes, DType dtype,
                int bucket, int iteration, int worker) {
    // Summing the other pushes into the accumulator (read both, write one: 3 × grad bytes per
    // parameter, one add), then Adam over the shard.
    std::vector<Kernel> kernels;
    if (pushes > 1)
        kernels.push_back(stream_kernel(KernelName::optimizer, KernelClass::optimizer,
                                        static_cast<std::int64_t>(pushes - 1) * params * grad_bytes * 3,
                                        static_cast<double>(pushes - 1) * static_cast<double>(params)));
    kernels.push_back(adam_kernel(params, kAdamBytesPerParam));
    const OpId id = g.add_kernels(server, Phase::opt, bucket, iteration, g.intern_recipe(kernels), dtype, true, stream);
    g.set_index(id, worker);
    return id;
}

/// Worker and server buffers; returns the workers' passes.
std::vector<Passes> add_programs(OpGraph& g, const PsLayout& p, const std::vector<Block>& blocks, std::int64_t params,
                                 const Layout& layout) {
    const StateBytes sb = state_bytes(layout.dtype);
    const std::int64_t per_server = shard(params, static_cast<int>(p.servers.size()));
    for (int s : p.servers) {
        // fp32 master weights, a gradient accumulator and Adam's two moments: 4 + 4 + 8 bytes.
        alloc_model_states(g, s, Bytes(per_server * 4), Bytes(per_server * 4), Bytes(per_server * 8), Tier::host);
    }
    std::vector<Passes> passes;
    for (int w : p.workers) {
        alloc_state(g, w, Bytes(params * sb.params), BufferLabel::parameters);
        alloc_state(g, w, Bytes(params * sb.grads), BufferLabel::gradients);
        passes.push_back(add_passes(g, w, blocks, layout.microbatches, layout.dtype));
    }
    return passes;
}

}  // namespace

OpGraph build_parameter_server(const Model& model, const Layout& layout, const Plan& plan) {
    const std::vector<Block> blocks = replica_blocks(model, layout, plan);
    const StateBytes sb = state_bytes(layout.dtype);
    const std::int64_t params = total_params(blocks);
    const PsLayout p = ps_layout(layout, plan);
    const int S = static_cast<int>(p.servers.size());
    const int W = static_cast<int>(p.workers.size());
    const std::vector<Bucket> buckets = make_buckets(blocks, sb.grads, layout.bucket, layout.bucket);

    OpGraph g(layout.devices);
    const std::vector<Passes> passes = add_programs(g, p, blocks, params, layout);
    const int mb = layout.microbatches - 1;

    // Pushes, (bucket, shard, worker) order; a shard's update waits for its W pushes.
    std::vector<std::vector<std::vector<OpId>>> arrived(buckets.size(), std::vector<std::vector<OpId>>(static_cast<std::size_t>(S)));
    for (std::size_t k = 0; k < buckets.size(); ++k) {
        const std::int64_t slice = shard(buckets[k].bytes.count() / sb.grads, S);
        for (int s = 0; s < S; ++s)
            for (int w = 0; w < W; ++w) {
                const OpId ready = passes[static_cast<std::size_t>(w)].bwd[static_cast<std::size_t>(mb)]
                                       [static_cast<std::size_t>(buckets[k].ready_after_block)];
                if (p.workers[static_cast<std::size_t>(w)] == p.servers[static_cast<std::size_t>(s)]) {
                    arrived[k][static_cast<std::size_t>(s)].push_back(ready);  // its own gradient: no transfer
                    continue;
                }
                const auto [send, recv] = g.add_send_recv(p.workers[static_cast<std::size_t>(w)], p.servers[static_cast<std::size_t>(s)],
                                                          Bytes(slice * sb.grads), Phase::bwd, static_cast<int>(k), mb, Stream::p2p, Stream::p2p);
                g.depend(ready, send);
                arrived[k][static_cast<std::size_t>(s)].push_back(recv);
            }
    }
    // Updates, then pulls in (bucket, shard, worker) order.
    std::vector<std::vector<OpId>> update(buckets.size(), std::vector<OpId>(static_cast<std::size_t>(S)));
    for (std::size_t k = 0; k < buckets.size(); ++k) {
        const std::int64_t slice = shard(buckets[k].bytes.count() / sb.grads, S);
        for (int s = 0; s < S; ++s) {
            const OpId u = add_update(g, p.servers[static_cast<std::size_t>(s)], p.update_stream, slice, W, sb.grads,
                                      layout.dtype, static_cast<int>(k), mb, -1);
            for (OpId a : arrived[k][static_cast<std::size_t>(s)]) g.depend(a, u);
            update[k][static_cast<std::size_t>(s)] = u;
        }
    }
    for (std::size_t k = 0; k < buckets.size(); ++k) {
        const std::int64_t slice = shard(buckets[k].bytes.count() / sb.grads, S);
        for (int s = 0; s < S; ++s)
            for (int w = 0; w < W; ++w) {
                if (p.workers[static_cast<std::size_t>(w)] == p.servers[static_cast<std::size_t>(s)]) continue;
                const auto [send, recv] = g.add_send_recv(p.servers[static_cast<std::size_t>(s)], p.workers[static_cast<std::size_t>(w)],
                                                          Bytes(slice * sb.params), Phase::fwd, static_cast<int>(k), mb, Stream::comm, Stream::comm);
                g.depend(update[k][static_cast<std::size_t>(s)], send);
                (void)recv;
            }
    }
    return g;
}

OpGraph build_parameter_server_async(const Model& model, const Layout& layout, const Plan& plan) {
    const std::vector<Block> blocks = replica_blocks(model, layout, plan);
    const StateBytes sb = state_bytes(layout.dtype);
    const std::int64_t params = total_params(blocks);
    const PsLayout p = ps_layout(layout, plan);
    const int S = static_cast<int>(p.servers.size());
    const int W = static_cast<int>(p.workers.size());
    const int J = layout.microbatches;  // iterations per worker
    const int K = plan.staleness;
    const std::vector<Bucket> buckets = make_buckets(blocks, sb.grads, layout.bucket, layout.bucket);
    const auto nk = buckets.size();

    OpGraph g(layout.devices);
    // A server serves whichever worker's push comes first (OpGraph::serve_in_arrival_order): with
    // a slow worker the others' updates do not queue behind its turn. A dedicated server's pushes
    // in, updates and pulls out; a colocated one's updates (its p2p and comm streams carry its
    // own worker's transfers too, in program order).
    for (int server : p.servers) {
        g.serve_in_arrival_order(server, p.update_stream);
        if (!p.colocated) {
            g.serve_in_arrival_order(server, Stream::p2p);
            g.serve_in_arrival_order(server, Stream::comm);
        }
    }
    const std::vector<Passes> passes = add_programs(g, p, blocks, params, layout);
    auto slice_of = [&](std::size_t k) { return shard(buckets[k].bytes.count() / sb.grads, S); };
    // update[j][w][k][s], and the last pull of (j, w) per worker.
    std::vector<std::vector<std::vector<std::vector<OpId>>>> update(
        static_cast<std::size_t>(J), std::vector<std::vector<std::vector<OpId>>>(
                                         static_cast<std::size_t>(W), std::vector<std::vector<OpId>>(nk, std::vector<OpId>(static_cast<std::size_t>(S)))));
    std::vector<std::vector<OpId>> pulled(static_cast<std::size_t>(J), std::vector<OpId>(static_cast<std::size_t>(W), static_cast<OpId>(-1)));

    for (int j = 0; j < J; ++j) {
        // Pushes in (worker, bucket, shard) order, then each shard applies them one by one.
        std::vector<std::vector<std::vector<OpId>>> arrived(static_cast<std::size_t>(W), std::vector<std::vector<OpId>>(nk, std::vector<OpId>(static_cast<std::size_t>(S))));
        for (int w = 0; w < W; ++w)
            for (std::size_t k = 0; k < nk; ++k)
                for (int s = 0; s < S; ++s) {
                    const OpId ready = passes[static_cast<std::size_t>(w)].bwd[static_cast<std::size_t>(j)]
                                           [static_cast<std::size_t>(buckets[k].ready_after_block)];
                    if (p.workers[static_cast<std::size_t>(w)] == p.servers[static_cast<std::size_t>(s)]) {
                        arrived[static_cast<std::size_t>(w)][k][static_cast<std::size_t>(s)] = ready;
                        continue;
                    }
                    const auto [send, recv] =
                        g.add_send_recv(p.workers[static_cast<std::size_t>(w)], p.servers[static_cast<std::size_t>(s)],
                                        Bytes(slice_of(k) * sb.grads), Phase::bwd, static_cast<int>(k), j, Stream::p2p, Stream::p2p);
                    g.depend(ready, send);
                    arrived[static_cast<std::size_t>(w)][k][static_cast<std::size_t>(s)] = recv;
                }
        for (int w = 0; w < W; ++w)
            for (std::size_t k = 0; k < nk; ++k)
                for (int s = 0; s < S; ++s) {
                    const OpId u = add_update(g, p.servers[static_cast<std::size_t>(s)], p.update_stream, slice_of(k), 1, sb.grads,
                                              layout.dtype, static_cast<int>(k), j, p.workers[static_cast<std::size_t>(w)]);
                    g.depend(arrived[static_cast<std::size_t>(w)][k][static_cast<std::size_t>(s)], u);
                    update[static_cast<std::size_t>(j)][static_cast<std::size_t>(w)][k][static_cast<std::size_t>(s)] = u;
                }
        // Pulls in (worker, bucket, shard) order: the worker's next iteration waits for them.
        for (int w = 0; w < W; ++w)
            for (std::size_t k = 0; k < nk; ++k)
                for (int s = 0; s < S; ++s) {
                    const OpId u = update[static_cast<std::size_t>(j)][static_cast<std::size_t>(w)][k][static_cast<std::size_t>(s)];
                    if (p.workers[static_cast<std::size_t>(w)] == p.servers[static_cast<std::size_t>(s)]) {
                        pulled[static_cast<std::size_t>(j)][static_cast<std::size_t>(w)] = u;  // local (comm stream order not needed)
                        if (j + 1 < J) g.depend(u, passes[static_cast<std::size_t>(w)].fwd[static_cast<std::size_t>(j + 1)][0]);
                        continue;
                    }
                    const auto [send, recv] =
                        g.add_send_recv(p.servers[static_cast<std::size_t>(s)], p.workers[static_cast<std::size_t>(w)],
                                        Bytes(slice_of(k) * sb.params), Phase::fwd, static_cast<int>(k), j, Stream::comm, Stream::comm);
                    g.depend(u, send);
                    if (j + 1 < J) g.depend(recv, passes[static_cast<std::size_t>(w)].fwd[static_cast<std::size_t>(j + 1)][0]);
                }
        // Bounded staleness: iteration j + K + 1 of every worker waits for all of iteration j's updates.
        if (j + K + 1 < J)
            for (int w = 0; w < W; ++w)
                for (int v = 0; v < W; ++v)
                    for (int s = 0; s < S; ++s)
                        g.depend(update[static_cast<std::size_t>(j)][static_cast<std::size_t>(v)][nk - 1][static_cast<std::size_t>(s)],
                                 passes[static_cast<std::size_t>(w)].fwd[static_cast<std::size_t>(j + K + 1)][0]);
    }
    return g;
}

OpGraph build_hogwild(const Model& model, const Layout& layout, const Plan& plan) {
    const std::vector<Block> blocks = replica_blocks(model, layout, plan);
    const StateBytes sb = state_bytes(layout.dtype);
    const std::int64_t params = total_params(blocks);
    const std::vector<int> workers = replica_ranks(layout);
    const int J = layout.microbatches;  // iterations per worker
    const std::vector<Bucket> buckets = make_buckets(blocks, sb.grads, layout.bucket, layout.bucket);
    // On unified memory (a CPU board, a Jetson) the store is the memory the device computes in:
    // no copies. On a GPU node it is in host DRAM, reached over PCIe.
    const bool unified = layout.unified_memory;

    OpGraph g(layout.devices);
    // The shared store, once for the node: fp32 master weights and Adam's two moments (4 + 8 bytes
    // per parameter), in host memory; each worker keeps its working copy and its gradients.
    alloc_state(g, workers.front(), Bytes(params * 4), BufferLabel::parameters, Tier::host);
    alloc_state(g, workers.front(), Bytes(params * 8), BufferLabel::optimizer_state, Tier::host);
    std::vector<Passes> passes;
    for (int w : workers) {
        if (!unified) alloc_state(g, w, Bytes(params * sb.params), BufferLabel::parameters);
        alloc_state(g, w, Bytes(params * sb.grads), BufferLabel::gradients);
        passes.push_back(add_passes(g, w, blocks, J, layout.dtype));
    }
    // Each worker, as backward fills a bucket, applies it to the store itself on its host stream
    // (its own thread): no lock, no server, no edge to any other worker — the workers' updates
    // overlap and share the node's DRAM (the simulator's host model). Its next iteration reads
    // the store as it is then (copies it back to the device first on a GPU node).
    for (std::size_t wi = 0; wi < workers.size(); ++wi) {
        const int w = workers[wi];
        for (int j = 0; j < J; ++j) {
            std::vector<OpId> read;
            for (std::size_t k = 0; k < buckets.size(); ++k) {
                const std::int64_t n = buckets[k].bytes.count() / sb.grads;
                OpId last = passes[wi].bwd[static_cast<std::size_t>(j)][static_cast<std::size_t>(buckets[k].ready_after_block)];
                if (!unified) {
                    const OpId down = g.add_copy(w, Tier::device, Tier::host, Bytes(n * sb.grads), Phase::bwd, static_cast<int>(k), j);
                    g.depend(last, down);
                    last = down;
                }
                const OpId u = add_update(g, w, Stream::host, n, 1, sb.grads, layout.dtype, static_cast<int>(k), j, w);
                g.depend(last, u);
                last = u;
                if (!unified) {
                    const OpId up = g.add_copy(w, Tier::host, Tier::device, Bytes(n * sb.params), Phase::fwd, static_cast<int>(k), j);
                    g.depend(last, up);
                    last = up;
                }
                read.push_back(last);
            }
            if (j + 1 < J)
                for (OpId r : read) g.depend(r, passes[wi].fwd[static_cast<std::size_t>(j + 1)][0]);
        }
    }
    return g;
}

std::optional<double> mean_staleness(const OpGraph& graph, const Timeline& tl, bool shared_store) {
    // Updates: (server, bucket) → (end, start, worker, iteration).
    struct Update {
        Time start, end;
        int worker, iteration;
    };
    std::map<std::pair<int, int>, std::vector<Update>> updates;
    for (OpId id = 0; id < graph.size(); ++id) {
        const Op& op = graph.op(id);
        if (op.kind != OpKind::compute || op.phase != Phase::opt || op.index < 0 || op.layer < 0 || tl.start[id] < Time::zero())
            continue;
        updates[{shared_store ? 0 : op.rank, op.layer}].push_back({tl.start[id], tl.end[id], op.index, op.microbatch});
    }
    if (updates.empty()) return std::nullopt;
    // Reads: (server, bucket, worker, iteration) → when the pull after that update started.
    std::map<std::tuple<int, int, int, int>, Time> reads;
    for (const P2P& p : graph.p2ps()) {
        const Op& send = graph.op(p.send);
        if (send.phase != Phase::fwd) continue;
        reads[{p.src, send.layer, p.dst, send.microbatch}] = tl.start[p.send];
    }
    double sum = 0;
    std::size_t n = 0;
    for (auto& [key, list] : updates) {
        std::vector<Time> ends;
        for (const Update& u : list) ends.push_back(u.end);
        std::sort(ends.begin(), ends.end());
        for (const Update& u : list) {
            Time read = Time::ps(-1);
            if (u.iteration > 0) {
                const auto it = reads.find({key.first, key.second, u.worker, u.iteration - 1});
                if (it != reads.end()) {
                    read = it->second;
                } else {  // a colocated shard of the worker itself: read right after its own update
                    for (const Update& v : list)
                        if (v.worker == u.worker && v.iteration == u.iteration - 1) read = v.end;
                }
            }
            // Updates that ended after the read and no later than this update's start.
            const auto lo = std::upper_bound(ends.begin(), ends.end(), read);
            const auto hi = std::upper_bound(ends.begin(), ends.end(), u.start);
            sum += static_cast<double>(std::max<std::ptrdiff_t>(0, hi - lo));
            ++n;
        }
    }
    return sum / static_cast<double>(n);
}

std::optional<double> update_rate(const OpGraph& graph, const Timeline& tl) {
    // Per worker: the iterations it updated and when its last update ended.
    std::map<int, std::pair<int, Time>> workers;
    for (OpId id = 0; id < graph.size(); ++id) {
        const Op& op = graph.op(id);
        if (op.kind != OpKind::compute || op.phase != Phase::opt || op.index < 0 || op.microbatch < 0 || tl.end[id] < Time::zero())
            continue;
        auto& [iterations, last] = workers[op.index];
        iterations = std::max(iterations, op.microbatch + 1);
        last = std::max(last, tl.end[id]);
    }
    if (workers.empty()) return std::nullopt;
    double rate = 0;
    for (const auto& [_, w] : workers)
        if (w.second > Time::zero()) rate += w.first / w.second.to_seconds();
    return rate;
}

}  // namespace smol::strategies

// The op graph: what a strategy emits and what both backends (simulator, real executor) run.
//
// A DAG of ops. Each op is a small value record (40 bytes, no strings, no heap blocks) so a plan
// with millions of ops stays cheap; names are derived from labels when printed.
//
// Streams are in-order queues, as CUDA streams are: an op waits for the op added before it on the
// same (rank, stream), and that is recorded as an ordinary edge. So the order in which a strategy
// adds ops to a stream *is* the schedule, and every ordering constraint is visible in the graph
// (critical path, cycle check). Explicit edges (`depend`) add the cross-stream and cross-rank
// dependencies.
//
// finalize() freezes the graph into a Boost compressed-sparse-row graph and checks the invariants
// of the op graph (README.md), throwing an Error that names the ops: acyclic; every collective has one op on each
// rank of its communicator, all of the same size; on every rank the collectives of one
// communicator run on one stream, in the same order on all ranks (what NCCL needs to not
// deadlock); every Free follows its Alloc; every send has its receive.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include <boost/graph/compressed_sparse_row_graph.hpp>

#include "core/kernel.hpp"
#include "core/model.hpp"
#include "core/units.hpp"

namespace smol {

using OpId = std::uint32_t;

/// `timer` waits for the next tick of a periodic clock that starts with the step (a framework's
/// background cycle, such as Horovod's negotiation every 5 ms); its period is in `bytes`, in ps.
enum class OpKind : std::uint8_t { compute, collective, send, recv, copy, alloc, free, timer };
/// Per-rank in-order queues: the device's compute stream, its communication streams (collectives;
/// point to point), its copy engine, and a host thread for framework background work (Horovod's
/// cycle, a colocated parameter server's updates). A pipeline's batched point-to-point gets one
/// queue per neighbour and direction (send_next … recv_prev), as PyTorch gives each peer pair its
/// own NCCL communicator and batch_isend_irecv posts a step's sends and receives together.
/// Copies between tiers go on the device's two copy engines by direction — `copy` out of the
/// device (device → host, NVMe), `copy_in` into it — as a GPU runs device-to-host and
/// host-to-device DMA concurrently; host ↔ NVMe transfers on `io`, the host's asynchronous I/O
/// queue (DeepSpeed's aio handle). Context parallelism's ring (strategies/context_parallel.hpp)
/// sends on `cp_send` and receives on `cp_recv`, the queues of its own communicator. `tp` holds
/// the tensor-parallel collectives a linear layer launches asynchronously (async_op=True) beside
/// its GEMMs, on the tensor group's communicator, which the compute stream waits for
/// (handle.wait()) before its next kernel.
enum class Stream : std::uint8_t { compute, comm, p2p, copy, host, send_next, recv_next, send_prev, recv_prev, copy_in, io, cp_send, cp_recv, tp };
inline constexpr int kStreams = 14;
enum class Phase : std::uint8_t { none, fwd, bwd, bwd_input, bwd_weight, recompute, opt, comm };
enum class CollectiveKind : std::uint8_t { all_reduce, reduce_scatter, all_gather, broadcast, reduce, all_to_all, barrier };
enum class Tier : std::uint8_t { device, host, nvme };
inline constexpr int kTiers = 3;

const char* to_string(OpKind k);
const char* to_string(Stream s);
const char* to_string(Phase p);
const char* to_string(CollectiveKind k);
const char* to_string(Tier t);

struct Op {
    double flops = 0;          // compute: FLOPs
    std::int64_t bytes = 0;    // compute: bytes moved; collective: bytes per rank; send/recv/copy/alloc/free: size
    std::int32_t rank = 0;
    std::int32_t layer = -1;   // label: block index, -1 when none
    std::int32_t microbatch = -1;
    std::int32_t index = -1;   // label: bucket, chunk or stage, by op
    std::int32_t ref = -1;     // compute: recipe id (-1: none) | collective id | p2p id | buffer id | copy: -1
    OpKind kind = OpKind::compute;
    Stream stream = Stream::compute;
    Phase phase = Phase::none;
    std::uint8_t sub = 0;      // compute: KernelClass | DType << 3 | on host << 6; copy: from tier << 4 | to tier

    KernelClass kernel() const { return static_cast<KernelClass>(sub & 7); }
    DType dtype() const { return static_cast<DType>((sub >> 3) & 7); }
    bool on_host() const { return (sub >> 6) & 1; }
    Tier copy_from() const { return static_cast<Tier>(sub >> 4); }
    Tier copy_to() const { return static_cast<Tier>(sub & 15); }
    Time period() const { return Time::ps(bytes); }   // timer
};
static_assert(sizeof(Op) <= 40, "an op is a small value record");

struct Collective {
    CollectiveKind kind;
    std::int32_t communicator;   // index into communicators()
    std::int64_t bytes;          // per rank: the buffer each rank contributes / receives
    std::int32_t root = -1;      // broadcast / reduce: the root rank
    std::uint32_t members;       // offset of its member ops in the graph's member table
    /// The SMs its kernels hold on each member while it runs, where they are not NCCL's
    /// (Transformer Engine's userbuffers: 0 on the copy engines); -1: NCCL's thread blocks.
    std::int16_t sms = -1;
};

struct P2P {
    OpId send, recv;
    std::int32_t src, dst;
    std::int64_t bytes;
};

struct Buffer {
    std::int32_t rank;
    Tier tier;
    std::int64_t bytes;
    std::int32_t label;        // a BufferLabel
};

/// What a buffer holds, for people reading a trace or an out-of-memory message.
/// `bucket`: transient gradient buffers (DDP and ZeRO buckets, a unit's full gradient);
/// `staging`: gathered parameters and pinned transfer buffers.
/// error_feedback: gradient compression's residuals (strategies/compression.hpp).
enum class BufferLabel : std::int32_t { parameters, gradients, optimizer_state, activations, workspace, bucket, staging, error_feedback };
inline constexpr int kBufferLabels = 8;
const char* to_string(BufferLabel b);
/// What a buffer holds, for people: "optimizer state", "gathered parameters", "gradient buckets".
const char* describe(BufferLabel b);

class OpGraph {
public:
    explicit OpGraph(int ranks);

    int ranks() const { return ranks_; }
    std::size_t size() const { return ops_.size(); }
    const Op& op(OpId id) const { return ops_[id]; }
    const std::vector<Op>& ops() const { return ops_; }

    // ---- building ------------------------------------------------------------------------------
    /// Appends an op; it follows the previous op on its (rank, stream).
    OpId add(const Op& op);
    /// `after` waits for `before`.
    void depend(OpId before, OpId after);

    /// A compute op that runs the kernels of `recipe` (intern_recipe); its FLOPs and bytes are
    /// the recipe's totals and its class the class of the kernels with the most FLOPs (bytes when
    /// none has FLOPs). `on_host`: runs on the node's CPU instead of the device (offloaded
    /// optimizer steps, a parameter server's update).
    OpId add_kernels(int rank, Phase phase, int layer, int microbatch, std::int32_t recipe, DType dtype,
                     bool on_host = false, Stream stream = Stream::compute);
    /// A compute op with totals but no kernel list (synthetic graphs in tests and benchmarks): it
    /// is priced as one kernel of its class and executed as one.
    OpId add_compute(int rank, Phase phase, int layer, int microbatch, Flops flops, Bytes traffic,
                     KernelClass kernel, DType dtype, bool on_host = false, Stream stream = Stream::compute);
    /// Sets an op's `index` label (bucket, chunk, worker) after it was added.
    void set_index(OpId id, int index);
    /// The id of a kernel list, shared by every op that runs the same kernels (content-interned).
    std::int32_t intern_recipe(std::span<const Kernel> kernels);
    /// Declares a collective whose member ops are added one rank at a time with
    /// add_collective_op (a strategy emitting per-rank programs, such as a pipeline schedule).
    /// `group` tells apart process groups with the same members (Megatron builds separate
    /// expert-parallel and data-parallel groups even when they hold the same ranks): each
    /// (members, group) is its own communicator, with its own order of collectives.
    /// `sms` (Collective::sms): the SMs it holds where its kernels are not NCCL's.
    std::int32_t declare_collective(CollectiveKind kind, const std::vector<int>& communicator, Bytes bytes_per_rank,
                                    int root = -1, int group = 0, int sms = -1);
    OpId add_collective_op(std::int32_t collective, int rank, Stream stream, Phase phase, int layer = -1,
                           int microbatch = -1, int index = -1);
    /// Declares a collective and adds one op per member of `communicator` (ranks, in ring order),
    /// returned in that order.
    std::vector<OpId> add_collective(CollectiveKind kind, const std::vector<int>& communicator, Bytes bytes_per_rank,
                                     Stream stream, Phase phase, int layer = -1, int microbatch = -1, int index = -1,
                                     int root = -1);
    /// A send on `src` (on `send_stream`) and its receive on `dst` (on `recv_stream`); returns {send, recv}.
    std::pair<OpId, OpId> add_send_recv(int src, int dst, Bytes bytes, Phase phase, int layer, int microbatch,
                                        Stream send_stream = Stream::p2p, Stream recv_stream = Stream::p2p);
    /// A copy between tiers, on the queue its direction uses (see Stream): into the device on
    /// copy_in, out of it on copy, between host and NVMe on io.
    OpId add_copy(int rank, Tier from, Tier to, Bytes bytes, Phase phase, int layer = -1, int microbatch = -1);
    /// The same copy issued on `stream` (a framework's non_blocking copy on the stream it runs on,
    /// in order with that stream's kernels and collectives).
    OpId add_copy_on(Stream stream, int rank, Tier from, Tier to, Bytes bytes, Phase phase, int layer = -1,
                     int microbatch = -1);
    /// Waits until the next multiple of `period` since the step began (now, if on a tick).
    OpId add_timer(int rank, Time period, Stream stream, Phase phase, int index = -1);
    std::int32_t add_buffer(int rank, Tier tier, Bytes bytes, BufferLabel label);
    OpId add_alloc(std::int32_t buffer, Stream stream, int layer = -1, int microbatch = -1);
    OpId add_free(std::int32_t buffer, Stream stream, int layer = -1, int microbatch = -1);

    /// A server's queue: ops added on (rank, stream) from now on are not chained to the
    /// op before them. The simulator runs them one at a time in the order they become ready — a
    /// send or receive when both its sides are (the rendezvous) — ties by id: first come, first
    /// served, as a parameter server serves workers of unequal speed. Executors run a stream's ops
    /// in id order (exec/runner.cpp), the order the strategy added them. Call it before any op is
    /// added on the stream; at most one side of a send / receive may be arrival-ordered.
    void serve_in_arrival_order(int rank, Stream stream);
    bool has_arrival_order() const { return !arrival_order_.empty(); }
    bool arrival_ordered(int rank, Stream stream) const {
        return !arrival_order_.empty() && arrival_order_[static_cast<std::size_t>(rank) * kStreams + static_cast<int>(stream)];
    }

    /// Folding: where data-parallel replicas run identical programs, a strategy may emit ops for
    /// one replica only. `representative[r]` is the rank whose program rank r mirrors (r itself
    /// for ranks that have ops). A mirror rank has no ops; it joins its representative's
    /// collectives (the representative must be in the same communicator), and the simulator
    /// replays the representative's inter-node transfers for it so shared links see all traffic.
    /// Mirrors are listed in rank order, so the i-th mirrors of two ranks belong to one replica.
    void set_representatives(std::vector<int> representative);
    bool folded() const { return !representative_.empty(); }
    int representative(int rank) const { return folded() ? representative_[static_cast<std::size_t>(rank)] : rank; }
    bool materialized(int rank) const { return representative(rank) == rank; }
    std::span<const int> mirrors(int rank) const;

    /// The framework's host time per GPU kernel before the driver's launch (Python, the
    /// dispatcher, autograd: strategies/framework.hpp Framework::dispatch_per_kernel); the
    /// simulator adds it to each kernel's issue on a GPU (sim/compute.hpp). Executors measure.
    void set_dispatch_overhead(Time per_kernel) { dispatch_overhead_ = per_kernel; }
    Time dispatch_overhead() const { return dispatch_overhead_; }

    /// Freezes the graph and checks the invariants; throws Error naming the offending ops.
    void finalize();
    bool finalized() const { return finalized_; }

    // ---- reading (after finalize) --------------------------------------------------------------
    std::span<const OpId> successors(OpId id) const;
    /// Number of ops `id` waits for.
    std::uint32_t in_degree(OpId id) const { return in_degree_[id]; }
    /// Ops `id` waits for. Scans the graph: for error messages, not for hot paths.
    std::vector<OpId> predecessors(OpId id) const;
    std::size_t num_edges() const;
    const std::vector<OpId>& topological_order() const { return topo_order_; }

    const std::vector<Collective>& collectives() const { return collectives_; }
    const std::vector<std::vector<int>>& communicators() const { return communicators_; }
    const std::vector<P2P>& p2ps() const { return p2ps_; }
    const std::vector<Buffer>& buffers() const { return buffers_; }
    std::size_t recipes() const { return recipe_begin_.size() - 1; }
    std::span<const Kernel> recipe(std::int32_t id) const {
        const auto i = static_cast<std::size_t>(id);
        return {kernels_.data() + recipe_begin_[i], recipe_begin_[i + 1] - recipe_begin_[i]};
    }
    /// The kernels a compute op runs: its recipe, or empty for an op made by add_compute.
    std::span<const Kernel> kernels_of(OpId id) const {
        const Op& o = ops_[id];
        return o.kind == OpKind::compute && o.ref >= 0 ? recipe(o.ref) : std::span<const Kernel>{};
    }

    /// The ops of a collective, in communicator order; a mirror rank's slot holds kNoOp.
    std::span<const OpId> collective_ops(std::int32_t collective) const;
    static constexpr OpId kNoOp = 0xffffffffu;
    /// "bwd L3 mb0", "all_reduce bucket 2 [0,1,2,3]", "send L11 mb2 r3->r4", "alloc activations L3".
    std::string op_name(OpId id) const;
    /// op_name plus the rank: "rank 3: bwd L3 mb0".
    std::string describe(OpId id) const;

    /// The longest chain of ops by `duration`, from a source to a sink, in order.
    std::vector<OpId> critical_path(const std::function<Time(OpId)>& duration) const;

private:
    using Csr = boost::compressed_sparse_row_graph<boost::directedS, boost::no_property, boost::no_property,
                                                   boost::no_property, OpId, std::uint32_t>;

    std::int32_t intern_communicator(const std::vector<int>& members, int group);
    /// Sorts pending_edges_ by (source, target) and drops duplicates (finalize).
    void sort_unique_edges();
    void check_acyclic();
    void check_collectives() const;
    void check_buffers() const;
    void check_p2p() const;

    int ranks_;
    bool finalized_ = false;
    std::vector<Op> ops_;
    std::vector<std::pair<OpId, OpId>> pending_edges_;   // until finalize
    std::vector<OpId> last_on_stream_;                   // rank * kStreams + stream → op, or max
    Csr csr_;
    std::vector<std::uint32_t> in_degree_;
    std::vector<OpId> topo_order_;
    std::vector<Collective> collectives_;
    std::vector<OpId> member_ops_;                       // per collective, per member
    std::vector<std::vector<int>> communicators_;
    std::vector<int> communicator_groups_;               // per communicator: its declare_collective group
    std::unordered_multimap<std::uint64_t, std::int32_t> communicator_index_;   // (group, members) hash → communicator
    std::vector<P2P> p2ps_;
    std::vector<Buffer> buffers_;
    std::vector<Kernel> kernels_;                        // every recipe's kernels, back to back
    std::vector<std::uint32_t> recipe_begin_{0};         // per recipe, into kernels_ (size recipes + 1)
    std::vector<double> recipe_flops_;
    std::vector<std::int64_t> recipe_bytes_;
    std::vector<KernelClass> recipe_class_;
    std::unordered_multimap<std::uint64_t, std::int32_t> recipe_index_;   // content hash → recipe
    std::vector<int> representative_;                    // empty unless folded
    Time dispatch_overhead_;
    std::vector<bool> arrival_order_;                    // rank * kStreams + stream; empty: none
    std::vector<std::uint32_t> mirror_begin_;            // per rank, into mirror_list_ (size ranks + 1)
    std::vector<int> mirror_list_;
};

}  // namespace smol

// MLCommons Chakra execution traces of an op graph, the input ASTRA-sim replays.
//
// One file per rank, as ASTRA-sim reads them (astra-sim/workload/Workload.cc opens
// `<prefix>.<rank>.et`): a stream of protobuf messages of Chakra's schema (proto/et_def.proto),
// each preceded by its length as a varint — the framing of Chakra's encodeMessage
// (src/third_party/utils/protolib.py) and of its C++ ProtoOutputStream::write
// (src/third_party/utils/protoio.cc, CodedOutputStream::WriteVarint32) — GlobalMetadata first,
// then the rank's nodes in a topological order of the graph, so every dependency precedes its node.
//
// Op → node (attribute names and value types as Chakra's ETFeederNode reads them,
// src/feeder/et_feeder_node.cpp):
//   compute    → COMP_NODE       is_cpu_op (bool), num_ops (int64: FLOPs), tensor_size (uint64: bytes moved)
//   collective → COMM_COLL_NODE  comm_type (int64: CollectiveCommType), comm_size (int64), pg_name (string)
//   send, recv → COMM_SEND_NODE, COMM_RECV_NODE  comm_src, comm_dst, comm_tag (int32), comm_size (int64)
//   copy       → MEM_LOAD_NODE towards the device (NVMe → host → device), MEM_STORE_NODE away
//                from it; tensor_size (uint64: bytes)
//   alloc, free, timer → no node: Chakra has no node for them; their dependencies pass through.
// Every node carries is_cpu_op (false but for host compute). comm_size is the size ASTRA-sim
// expects: a collective's buffer per rank, except all-gather, whose size ASTRA-sim takes as each
// rank's input (Ring.cc: final_data_size = data_size × nodes) while the graph holds the gathered
// buffer, so it is divided by the members (rounded up).
//
// Dependencies: a node's `ctrl_deps` hold the op before it on its (rank, stream) — the in-order
// queue a stream is; its `data_deps` every other edge of the graph into it from the same rank.
// ASTRA-sim's feeder (astra-sim/chakra, branch feederv3 at f37c2bb, src/feeder_v3/common.h:
// RESOLVE_DATA_DEPS and RESOLVE_CTRL_DEPS both true; astra-sim 518bd51's Workload.cc uses it)
// waits for both lists; Chakra's older ETFeeder (src/feeder/et_feeder.cpp) for data_deps only. Edges between ranks cannot be written (a
// file names only its own nodes); sends, receives and collectives are what tie ranks together.
//
// Communicators: each distinct communicator is a process group numbered from 1 in the order of
// its member list (0 and "" mean "all ranks" to ASTRA-sim, Workload::extract_comm_group), written
// as ASTRA-sim's --comm-group-configuration JSON: {"1": [0, 1], "2": [0, 2, 4, 6], …}.
//
// Folded graphs (OpGraph::folded): a mirror rank's file holds its representative's program with
// its own rank numbers — its peers and communicators are those of its replica (the i-th mirror of
// each rank of the representative's replica, OpGraph::mirrors) — so a folded and an unfolded
// build of one plan export the same traces, up to node ids.
//
// Durations: given a Timeline of the graph (the simulator's), every node carries its op's
// duration in `duration_micros` (rounded to the nearest microsecond, Chakra's unit), which
// ASTRA-sim replays for compute nodes when its roofline model is off (Workload::issue_replay)
// and for broadcasts; a mirror takes its representative's durations.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "core/op_graph.hpp"
#include "core/timeline.hpp"

namespace smol::traces {

/// What one rank's file holds.
struct ChakraRankStats {
    std::int64_t nodes = 0;
    std::int64_t ctrl_deps = 0;
    std::int64_t data_deps = 0;
    std::int64_t without_node = 0;   // allocs, frees and timers, whose dependencies pass through
};

class ChakraWriter {
public:
    /// Prepares the export of a finalized graph: its process groups, each op's stream
    /// predecessor and the ops of each materialized rank in topological order.
    /// `timeline`, when given, a timeline of `graph` whose durations the nodes carry.
    explicit ChakraWriter(const OpGraph& graph, const Timeline* timeline = nullptr);

    /// Writes rank `rank`'s trace (GlobalMetadata, then its nodes) to `out`, a binary stream.
    ChakraRankStats write_rank(std::ostream& out, int rank) const;
    /// The communicator groups as ASTRA-sim's --comm-group-configuration JSON.
    std::string comm_group_json() const;
    /// The process groups; group id g (its pg_name) is members()[g - 1].
    const std::vector<std::vector<int>>& groups() const { return groups_; }
    /// The pg_name rank `rank` gives collective op `id` (an op of `rank`, or of the rank it mirrors).
    int group_of(OpId id, int rank) const;
    /// Rank `rank`'s counterpart of `peer`, a rank of the replica `rank` mirrors (itself unfolded).
    int counterpart(int peer, int rank) const;
    /// Edges of the graph from one rank to another, which no file can hold.
    std::size_t cross_rank_edges() const { return cross_rank_edges_; }

private:
    struct GroupKey {
        std::vector<int> members;
        int ordinal;   // among the graph's communicators with the same members (Megatron's groups)
        auto operator<=>(const GroupKey&) const = default;
    };
    GroupKey group_key(std::int32_t communicator, int rank) const;

    const OpGraph& g_;
    const Timeline* timeline_;
    std::vector<OpId> stream_prev_;               // per op: the op before it on its (rank, stream), or kNoOp
    std::vector<std::uint32_t> pred_begin_;       // per op, into preds_ (size ops + 1)
    std::vector<OpId> preds_;
    std::vector<std::vector<OpId>> ops_of_rank_;  // materialized ranks: their ops in topological order
    std::vector<int> ordinal_;                    // per communicator: GroupKey::ordinal
    std::vector<std::vector<int>> groups_;
    std::vector<GroupKey> keys_;                  // sorted; keys_[g - 1] is group g
    std::size_t cross_rank_edges_ = 0;
};

}  // namespace smol::traces

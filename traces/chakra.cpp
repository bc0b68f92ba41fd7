#include "traces/chakra.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>

#include "core/error.hpp"
#include "et_def.pb.h"

namespace smol::traces {

namespace {

namespace pb = ChakraProtoMsg;

[[noreturn]] void fail_export(const std::string& message) {
    throw Error(ErrorKind::internal, "chakra export: " + message);
}

/// Ops that become nodes; alloc, free and timer have no Chakra node type.
bool exported(OpKind k) {
    return k == OpKind::compute || k == OpKind::collective || k == OpKind::send || k == OpKind::recv ||
           k == OpKind::copy;
}

pb::CollectiveCommType comm_type(CollectiveKind k) {
    switch (k) {
        case CollectiveKind::all_reduce: return pb::ALL_REDUCE;
        case CollectiveKind::reduce_scatter: return pb::REDUCE_SCATTER;
        case CollectiveKind::all_gather: return pb::ALL_GATHER;
        case CollectiveKind::broadcast: return pb::BROADCAST;
        case CollectiveKind::reduce: return pb::REDUCE;
        case CollectiveKind::all_to_all: return pb::ALL_TO_ALL;
        case CollectiveKind::barrier: return pb::BARRIER;
    }
    fail_export("unknown collective kind");
}

void add_bool(pb::Node& n, const char* name, bool v) {
    auto* a = n.add_attr();
    a->set_name(name);
    a->set_bool_val(v);
}
void add_int64(pb::Node& n, const char* name, std::int64_t v) {
    auto* a = n.add_attr();
    a->set_name(name);
    a->set_int64_val(v);
}
void add_uint64(pb::Node& n, const char* name, std::int64_t v) {
    auto* a = n.add_attr();
    a->set_name(name);
    a->set_uint64_val(static_cast<std::uint64_t>(v));
}
void add_int32(pb::Node& n, const char* name, std::int32_t v) {
    auto* a = n.add_attr();
    a->set_name(name);
    a->set_int32_val(v);
}
void add_string(pb::Node& n, const char* name, const std::string& v) {
    auto* a = n.add_attr();
    a->set_name(name);
    a->set_string_val(v);
}

/// One length-delimited message: its size as a varint (7 bits a byte, low bits first, the high
/// bit set on all but the last byte), then its bytes — Chakra's _EncodeVarint32 and encodeMessage
/// (src/third_party/utils/protolib.py), which its C++ ProtoOutputStream::write matches.
void write_message(std::ostream& out, const google::protobuf::MessageLite& m) {
    const std::string body = m.SerializeAsString();
    if (body.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
        fail_export("a message of " + std::to_string(body.size()) + " bytes is past protobuf's 2 GiB limit");
    auto size = static_cast<std::uint32_t>(body.size());
    char varint[5];
    int n = 0;
    do {
        varint[n] = static_cast<char>(size & 0x7f);
        size >>= 7;
        if (size) varint[n] = static_cast<char>(varint[n] | 0x80);
        ++n;
    } while (size);
    out.write(varint, n);
    out.write(body.data(), static_cast<std::streamsize>(body.size()));
}

/// op_name without its last word (" [0,1,2,3]", " r3->r4"), which names the representative's ranks.
std::string name_without(const std::string& name, const char* tail) {
    const auto at = name.rfind(tail);
    return at == std::string::npos ? name : name.substr(0, at);
}

}  // namespace

ChakraWriter::ChakraWriter(const OpGraph& graph, const Timeline* timeline) : g_(graph), timeline_(timeline) {
    if (!g_.finalized()) fail_export("the graph is not finalized");
    const std::size_t n = g_.size();
    if (timeline_ && (timeline_->start.size() != n || timeline_->end.size() != n))
        fail_export("the timeline has " + std::to_string(timeline_->start.size()) + " ops, the graph " + std::to_string(n));

    // The stream predecessor, as OpGraph::add records it: the op added before on (rank, stream).
    stream_prev_.assign(n, OpGraph::kNoOp);
    std::vector<OpId> last(static_cast<std::size_t>(g_.ranks()) * kStreams, OpGraph::kNoOp);
    for (OpId id = 0; id < n; ++id) {
        const Op& o = g_.op(id);
        OpId& l = last[static_cast<std::size_t>(o.rank) * kStreams + static_cast<std::size_t>(o.stream)];
        stream_prev_[id] = l;
        l = id;
    }

    // Predecessor lists (the graph keeps successors only).
    pred_begin_.assign(n + 1, 0);
    for (OpId id = 0; id < n; ++id) pred_begin_[id + 1] = pred_begin_[id] + g_.in_degree(id);
    preds_.resize(pred_begin_[n]);
    std::vector<std::uint32_t> fill(pred_begin_.begin(), pred_begin_.end() - 1);
    for (OpId u = 0; u < n; ++u)
        for (OpId v : g_.successors(u)) {
            preds_[fill[v]++] = u;
            if (g_.op(u).rank != g_.op(v).rank) ++cross_rank_edges_;
        }

    ops_of_rank_.resize(static_cast<std::size_t>(g_.ranks()));
    for (OpId id : g_.topological_order()) ops_of_rank_[static_cast<std::size_t>(g_.op(id).rank)].push_back(id);

    // Communicators with equal members told apart in declaration order (OpGraph's `group`).
    std::map<std::vector<int>, int> seen;
    for (const auto& members : g_.communicators()) ordinal_.push_back(seen[members]++);

    // Every process group some rank's file names, numbered in key order.
    std::set<GroupKey> keys;
    std::vector<std::vector<std::int32_t>> comms_of_rank(static_cast<std::size_t>(g_.ranks()));
    for (const Op& o : g_.ops())
        if (o.kind == OpKind::collective)
            comms_of_rank[static_cast<std::size_t>(o.rank)].push_back(
                g_.collectives()[static_cast<std::size_t>(o.ref)].communicator);
    for (auto& c : comms_of_rank) {
        std::sort(c.begin(), c.end());
        c.erase(std::unique(c.begin(), c.end()), c.end());
    }
    for (int r = 0; r < g_.ranks(); ++r)
        for (std::int32_t c : comms_of_rank[static_cast<std::size_t>(g_.representative(r))]) keys.insert(group_key(c, r));
    keys_.assign(keys.begin(), keys.end());
    for (const GroupKey& k : keys_) groups_.push_back(k.members);
}

int ChakraWriter::counterpart(int peer, int rank) const {
    const int rep = g_.representative(rank);
    if (rep == rank) return peer;
    const std::span<const int> mine = g_.mirrors(rep);
    const auto i = static_cast<std::size_t>(std::find(mine.begin(), mine.end(), rank) - mine.begin());
    const std::span<const int> theirs = g_.mirrors(peer);
    if (i >= theirs.size())
        fail_export("rank " + std::to_string(rank) + " mirrors rank " + std::to_string(rep) + " but rank " +
                    std::to_string(peer) + " has no mirror in its replica");
    return theirs[i];
}

ChakraWriter::GroupKey ChakraWriter::group_key(std::int32_t communicator, int rank) const {
    const std::vector<int>& members = g_.communicators()[static_cast<std::size_t>(communicator)];
    GroupKey k{members, ordinal_[static_cast<std::size_t>(communicator)]};
    // A communicator that holds the mirror itself (data-parallel) is its own; one within the
    // representative's replica (tensor, pipeline) is the mirror's replica's counterpart.
    if (std::find(members.begin(), members.end(), rank) == members.end())
        for (int& m : k.members) m = counterpart(m, rank);
    return k;
}

int ChakraWriter::group_of(OpId id, int rank) const {
    const Op& o = g_.op(id);
    if (o.kind != OpKind::collective) fail_export(g_.describe(id) + " is not a collective");
    const GroupKey k = group_key(g_.collectives()[static_cast<std::size_t>(o.ref)].communicator, rank);
    const auto it = std::lower_bound(keys_.begin(), keys_.end(), k);
    if (it == keys_.end() || *it != k) fail_export(g_.describe(id) + ": no process group for rank " + std::to_string(rank));
    return static_cast<int>(it - keys_.begin()) + 1;
}

ChakraRankStats ChakraWriter::write_rank(std::ostream& out, int rank) const {
    if (rank < 0 || rank >= g_.ranks()) fail_export("rank " + std::to_string(rank) + " is not in the graph");
    const int rep = g_.representative(rank);

    pb::GlobalMetadata meta;
    meta.set_version("1.0.0");   // what Chakra's own generator writes (src/generator/generator.py)
    for (auto [name, value] : {std::pair{"rank", rank}, std::pair{"ranks", g_.ranks()}, std::pair{"representative", rep}}) {
        auto* a = meta.add_attr();
        a->set_name(name);
        a->set_int64_val(value);
    }
    auto* source = meta.add_attr();
    source->set_name("source");
    source->set_string_val("smolcluster op graph");
    write_message(out, meta);

    std::vector<int> pg_of_comm(g_.communicators().size(), 0);   // this rank's group per communicator
    // For ops without a node: the exported ops they wait for, and whether each is reached by
    // stream-order edges only (then it is a ctrl dep of the op after them on the stream).
    std::unordered_map<OpId, std::vector<std::pair<OpId, bool>>> through;
    std::vector<std::pair<OpId, bool>> deps;
    ChakraRankStats stats;
    pb::Node node;
    for (OpId v : ops_of_rank_[static_cast<std::size_t>(rep)]) {
        const Op& o = g_.op(v);
        deps.clear();
        for (std::uint32_t e = pred_begin_[v]; e < pred_begin_[v + 1]; ++e) {
            const OpId u = preds_[e];
            if (g_.op(u).rank != rep) continue;   // cross-rank: not expressible (cross_rank_edges)
            const bool stream_edge = u == stream_prev_[v];
            if (exported(g_.op(u).kind))
                deps.emplace_back(u, stream_edge);
            else
                for (auto [w, stream_only] : through.at(u)) deps.emplace_back(w, stream_only && stream_edge);
        }
        // One entry per op; a stream-order path makes it a ctrl dep.
        std::sort(deps.begin(), deps.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        std::size_t kept = 0;
        for (std::size_t i = 0; i < deps.size(); ++i) {
            if (kept && deps[kept - 1].first == deps[i].first)
                deps[kept - 1].second = deps[kept - 1].second || deps[i].second;
            else
                deps[kept++] = deps[i];
        }
        deps.resize(kept);
        if (!exported(o.kind)) {
            through.emplace(v, deps);
            ++stats.without_node;
            continue;
        }

        node.Clear();
        node.set_id(v);
        for (auto [w, ctrl] : deps) {
            if (ctrl) {
                node.add_ctrl_deps(w);
                ++stats.ctrl_deps;
            } else {
                node.add_data_deps(w);
                ++stats.data_deps;
            }
        }
        if (timeline_ && timeline_->start[v] >= Time::zero() && timeline_->end[v] > timeline_->start[v])
            node.set_duration_micros(static_cast<std::uint64_t>(std::llround((timeline_->end[v] - timeline_->start[v]).to_us())));
        const std::string name = g_.op_name(v);
        switch (o.kind) {
            case OpKind::compute:
                node.set_name(name);
                node.set_type(pb::COMP_NODE);
                add_bool(node, "is_cpu_op", o.on_host());
                if (!(o.flops >= 0 && o.flops < 9.2e18)) fail_export(g_.describe(v) + ": FLOPs out of int64 range");
                add_int64(node, "num_ops", std::llround(o.flops));
                add_uint64(node, "tensor_size", o.bytes);
                break;
            case OpKind::collective: {
                const Collective& c = g_.collectives()[static_cast<std::size_t>(o.ref)];
                int& pg = pg_of_comm[static_cast<std::size_t>(c.communicator)];
                if (pg == 0) pg = group_of(v, rank);
                const auto members = static_cast<std::int64_t>(groups_[static_cast<std::size_t>(pg - 1)].size());
                node.set_name(name_without(name, " [") + " pg " + std::to_string(pg));
                node.set_type(pb::COMM_COLL_NODE);
                add_bool(node, "is_cpu_op", false);
                add_int64(node, "comm_type", comm_type(c.kind));
                add_int64(node, "comm_size", c.kind == CollectiveKind::all_gather ? (o.bytes + members - 1) / members : o.bytes);
                add_string(node, "pg_name", std::to_string(pg));
                break;
            }
            case OpKind::send:
            case OpKind::recv: {
                const P2P& p = g_.p2ps()[static_cast<std::size_t>(o.ref)];
                const int src = counterpart(p.src, rank), dst = counterpart(p.dst, rank);
                node.set_name(name_without(name, " r") + " r" + std::to_string(src) + "->r" + std::to_string(dst));
                node.set_type(o.kind == OpKind::send ? pb::COMM_SEND_NODE : pb::COMM_RECV_NODE);
                add_bool(node, "is_cpu_op", false);
                add_int32(node, "comm_src", src);
                add_int32(node, "comm_dst", dst);
                add_int32(node, "comm_tag", o.ref);   // the pair's id: one tag per send and its receive
                add_int64(node, "comm_size", o.bytes);
                break;
            }
            case OpKind::copy:
                node.set_name(name);
                // Tier order device < host < nvme: towards the device is a load.
                node.set_type(o.copy_to() < o.copy_from() ? pb::MEM_LOAD_NODE : pb::MEM_STORE_NODE);
                add_bool(node, "is_cpu_op", false);
                add_uint64(node, "tensor_size", o.bytes);
                break;
            default: fail_export("unexported op kind");
        }
        write_message(out, node);
        ++stats.nodes;
    }
    return stats;
}

std::string ChakraWriter::comm_group_json() const {
    // Written by hand: the keys in group order ("2" before "10"), one group a line.
    std::string s = "{";
    for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
        s += (gi ? ",\n  \"" : "\n  \"") + std::to_string(gi + 1) + "\": [";
        for (std::size_t m = 0; m < groups_[gi].size(); ++m) s += (m ? ", " : "") + std::to_string(groups_[gi][m]);
        s += "]";
    }
    s += groups_.empty() ? "}\n" : "\n}\n";
    return s;
}

}  // namespace smol::traces

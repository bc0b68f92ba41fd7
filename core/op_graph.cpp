#include "core/op_graph.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <sstream>

#include "core/error.hpp"

namespace smol {

namespace {
constexpr OpId kNone = std::numeric_limits<OpId>::max();

std::string list_ranks(const std::vector<int>& members) {
    std::ostringstream s;
    s << '[';
    for (std::size_t i = 0; i < members.size(); ++i) {
        if (i == 4 && members.size() > 6) {
            s << ",…," << members.back();
            break;
        }
        s << (i ? "," : "") << members[i];
    }
    s << ']';
    return s.str();
}

[[noreturn]] void fail_graph(const std::string& message) { throw Error(ErrorKind::internal, "op graph: " + message); }
}  // namespace

const char* to_string(OpKind k) {
    switch (k) {
        case OpKind::compute: return "compute";
        case OpKind::collective: return "collective";
        case OpKind::send: return "send";
        case OpKind::recv: return "recv";
        case OpKind::copy: return "copy";
        case OpKind::alloc: return "alloc";
        case OpKind::free: return "free";
        case OpKind::timer: return "timer";
    }
    return "?";
}
const char* to_string(Stream s) {
    switch (s) {
        case Stream::compute: return "compute";
        case Stream::comm: return "comm";
        case Stream::p2p: return "p2p";
        case Stream::copy: return "copy";
        case Stream::host: return "host";
        case Stream::send_next: return "send_next";
        case Stream::recv_next: return "recv_next";
        case Stream::send_prev: return "send_prev";
        case Stream::recv_prev: return "recv_prev";
        case Stream::copy_in: return "copy_in";
        case Stream::io: return "io";
        case Stream::cp_send: return "cp_send";
        case Stream::cp_recv: return "cp_recv";
        case Stream::tp: return "tp";
    }
    return "?";
}
const char* to_string(Phase p) {
    switch (p) {
        case Phase::none: return "";
        case Phase::fwd: return "fwd";
        case Phase::bwd: return "bwd";
        case Phase::bwd_input: return "bwd_input";
        case Phase::bwd_weight: return "bwd_weight";
        case Phase::recompute: return "recompute";
        case Phase::opt: return "opt";
        case Phase::comm: return "comm";
    }
    return "?";
}
const char* to_string(CollectiveKind k) {
    switch (k) {
        case CollectiveKind::all_reduce: return "all_reduce";
        case CollectiveKind::reduce_scatter: return "reduce_scatter";
        case CollectiveKind::all_gather: return "all_gather";
        case CollectiveKind::broadcast: return "broadcast";
        case CollectiveKind::reduce: return "reduce";
        case CollectiveKind::all_to_all: return "all_to_all";
        case CollectiveKind::barrier: return "barrier";
    }
    return "?";
}
const char* to_string(Tier t) {
    switch (t) {
        case Tier::device: return "device";
        case Tier::host: return "host";
        case Tier::nvme: return "nvme";
    }
    return "?";
}
const char* to_string(BufferLabel b) {
    switch (b) {
        case BufferLabel::parameters: return "parameters";
        case BufferLabel::gradients: return "gradients";
        case BufferLabel::optimizer_state: return "optimizer_state";
        case BufferLabel::activations: return "activations";
        case BufferLabel::workspace: return "workspace";
        case BufferLabel::bucket: return "bucket";
        case BufferLabel::staging: return "staging";
        case BufferLabel::error_feedback: return "error_feedback";
    }
    return "?";
}

const char* describe(BufferLabel b) {
    switch (b) {
        case BufferLabel::parameters: return "parameters";
        case BufferLabel::gradients: return "gradients";
        case BufferLabel::optimizer_state: return "optimizer state";
        case BufferLabel::activations: return "activations";
        case BufferLabel::workspace: return "workspace";
        case BufferLabel::bucket: return "gradient buckets";
        case BufferLabel::staging: return "staging buffers";
        case BufferLabel::error_feedback: return "error-feedback residuals";
    }
    return "?";
}

OpGraph::OpGraph(int ranks) : ranks_(ranks), last_on_stream_(static_cast<std::size_t>(ranks) * kStreams, kNone) {
    if (ranks < 1) fail_graph("a graph needs at least one rank");
}

OpId OpGraph::add(const Op& op) {
    if (finalized_) fail_graph("cannot add ops after finalize()");
    if (op.rank < 0 || op.rank >= ranks_)
        fail_graph("op on rank " + std::to_string(op.rank) + " outside 0.." + std::to_string(ranks_ - 1));
    if (ops_.size() >= kNone - 1) fail_graph("too many ops");
    const OpId id = static_cast<OpId>(ops_.size());
    ops_.push_back(op);
    OpId& last = last_on_stream_[static_cast<std::size_t>(op.rank) * kStreams + static_cast<int>(op.stream)];
    if (last != kNone && !arrival_ordered(op.rank, op.stream)) pending_edges_.emplace_back(last, id);
    last = id;
    return id;
}

void OpGraph::serve_in_arrival_order(int rank, Stream stream) {
    if (finalized_) fail_graph("cannot change a stream after finalize()");
    if (rank < 0 || rank >= ranks_) fail_graph("stream on rank " + std::to_string(rank) + " outside 0.." + std::to_string(ranks_ - 1));
    const std::size_t key = static_cast<std::size_t>(rank) * kStreams + static_cast<int>(stream);
    if (last_on_stream_[key] != kNone)
        fail_graph(std::string("stream ") + to_string(stream) + " of rank " + std::to_string(rank) +
                   " already has ops: serve it in arrival order before adding any");
    if (arrival_order_.empty()) arrival_order_.assign(static_cast<std::size_t>(ranks_) * kStreams, false);
    arrival_order_[key] = true;
}

void OpGraph::depend(OpId before, OpId after) {
    if (finalized_) fail_graph("cannot add edges after finalize()");
    if (before >= ops_.size() || after >= ops_.size()) fail_graph("edge to an op that does not exist");
    if (before == after) fail_graph("op " + describe(before) + " cannot wait for itself");
    if (pending_edges_.size() >= kNone - 1) fail_graph("too many edges");   // the CSR numbers them in 32 bits
    pending_edges_.emplace_back(before, after);
}

void OpGraph::set_index(OpId id, int index) {
    if (finalized_) fail_graph("cannot relabel ops after finalize()");
    ops_.at(id).index = index;
}

std::int32_t OpGraph::intern_recipe(std::span<const Kernel> kernels) {
    if (finalized_) fail_graph("cannot add recipes after finalize()");
    // FNV-1a over the fields that make kernels differ.
    std::uint64_t h = 1469598103934665603ull;
    auto mix = [&h](std::uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    for (const Kernel& k : kernels) {
        mix(static_cast<std::uint64_t>(k.op) | static_cast<std::uint64_t>(k.cls) << 8 | static_cast<std::uint64_t>(k.name) << 16 |
            static_cast<std::uint64_t>(k.backward) << 24 | static_cast<std::uint64_t>(k.weight) << 25 | static_cast<std::uint64_t>(k.dispatched) << 26 |
            static_cast<std::uint64_t>(k.causal) << 27 | static_cast<std::uint64_t>(k.backend) << 28 |
            static_cast<std::uint64_t>(k.elem_bytes) << 32);
        for (std::int64_t v : {std::int64_t{k.batch}, k.m, k.n, k.k, k.elements, k.bytes}) mix(static_cast<std::uint64_t>(v));
        std::uint64_t bits;
        std::memcpy(&bits, &k.flops, sizeof bits);
        mix(bits);
    }
    const auto [first, last] = recipe_index_.equal_range(h);
    for (auto it = first; it != last; ++it) {
        const std::span<const Kernel> r = recipe(it->second);
        if (std::equal(r.begin(), r.end(), kernels.begin(), kernels.end())) return it->second;
    }
    const auto id = static_cast<std::int32_t>(recipe_begin_.size() - 1);
    kernels_.insert(kernels_.end(), kernels.begin(), kernels.end());
    recipe_begin_.push_back(static_cast<std::uint32_t>(kernels_.size()));
    // The op's class: the kernels' class with the most FLOPs, or the most bytes when none computes.
    std::array<double, kKernelClasses> flops{}, bytes{};
    for (const Kernel& k : kernels) {
        flops[static_cast<std::size_t>(k.cls)] += k.flops;
        bytes[static_cast<std::size_t>(k.cls)] += static_cast<double>(k.bytes);
    }
    const auto& by = *std::max_element(flops.begin(), flops.end()) > 0 ? flops : bytes;
    recipe_class_.push_back(static_cast<KernelClass>(std::max_element(by.begin(), by.end()) - by.begin()));
    recipe_flops_.push_back(total_flops(kernels));
    recipe_bytes_.push_back(total_bytes(kernels));
    recipe_index_.emplace(h, id);
    return id;
}

std::int32_t OpGraph::intern_communicator(const std::vector<int>& members, int group) {
    // FNV-1a over (group, members): a 3D plan declares each of its thousands of communicators
    // again for every bucket and micro-batch, so finding it must not scan them all.
    std::uint64_t h = 1469598103934665603ull;
    const auto mix = [&h](std::uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(static_cast<std::uint64_t>(static_cast<std::uint32_t>(group)));
    for (int r : members) mix(static_cast<std::uint64_t>(static_cast<std::uint32_t>(r)));
    const auto [first, last] = communicator_index_.equal_range(h);
    for (auto it = first; it != last; ++it) {
        const auto i = static_cast<std::size_t>(it->second);
        if (communicator_groups_[i] == group && communicators_[i] == members) return it->second;
    }
    // A new communicator: its ranks are checked once, not at every collective declared on it.
    if (members.empty()) fail_graph("a collective needs at least one rank");
    std::vector<int> sorted = members;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
        fail_graph("communicator " + list_ranks(members) + " names a rank twice");
    if (sorted.front() < 0 || sorted.back() >= ranks_)
        fail_graph("communicator " + list_ranks(members) + " names a rank outside 0.." + std::to_string(ranks_ - 1));
    communicators_.push_back(members);
    communicator_groups_.push_back(group);
    const auto id = static_cast<std::int32_t>(communicators_.size() - 1);
    communicator_index_.emplace(h, id);
    return id;
}

OpId OpGraph::add_compute(int rank, Phase phase, int layer, int microbatch, Flops flops, Bytes traffic,
                          KernelClass kernel, DType dtype, bool on_host, Stream stream) {
    if (flops.count() < 0 || traffic.count() < 0) fail_graph("compute op with negative FLOPs or traffic");
    Op op;
    op.kind = OpKind::compute;
    op.rank = rank;
    op.phase = phase;
    op.layer = layer;
    op.microbatch = microbatch;
    op.flops = flops.count();
    op.bytes = traffic.count();
    op.sub = static_cast<std::uint8_t>(static_cast<int>(kernel) | static_cast<int>(dtype) << 3 | (on_host ? 64 : 0));
    op.stream = stream;
    return add(op);
}

OpId OpGraph::add_kernels(int rank, Phase phase, int layer, int microbatch, std::int32_t recipe, DType dtype,
                          bool on_host, Stream stream) {
    if (recipe < 0 || static_cast<std::size_t>(recipe) >= recipes()) fail_graph("compute op with an unknown recipe");
    const auto r = static_cast<std::size_t>(recipe);
    const OpId id = add_compute(rank, phase, layer, microbatch, Flops(recipe_flops_[r]), Bytes(recipe_bytes_[r]),
                                recipe_class_[r], dtype, on_host, stream);
    ops_[id].ref = recipe;
    return id;
}

std::int32_t OpGraph::declare_collective(CollectiveKind kind, const std::vector<int>& communicator,
                                        Bytes bytes_per_rank, int root, int group, int sms) {
    if (bytes_per_rank < Bytes(0)) fail_graph(std::string(to_string(kind)) + " of negative size");
    const std::int32_t comm = intern_communicator(communicator, group);   // checks a new communicator's ranks
    if ((kind == CollectiveKind::broadcast || kind == CollectiveKind::reduce) &&
        std::find(communicator.begin(), communicator.end(), root) == communicator.end())
        fail_graph(std::string(to_string(kind)) + " root " + std::to_string(root) + " is not in " + list_ranks(communicator));
    if (sms < -1 || sms > 32767) fail_graph(std::string(to_string(kind)) + " holding " + std::to_string(sms) + " SMs");
    collectives_.push_back({kind, comm, bytes_per_rank.count(), root, static_cast<std::uint32_t>(member_ops_.size()),
                            static_cast<std::int16_t>(sms)});
    member_ops_.resize(member_ops_.size() + communicator.size(), kNone);
    return static_cast<std::int32_t>(collectives_.size() - 1);
}

OpId OpGraph::add_collective_op(std::int32_t collective, int rank, Stream stream, Phase phase, int layer,
                                int microbatch, int index) {
    const Collective& c = collectives_.at(static_cast<std::size_t>(collective));
    const std::vector<int>& members = communicators_[static_cast<std::size_t>(c.communicator)];
    const auto pos = static_cast<std::size_t>(std::find(members.begin(), members.end(), rank) - members.begin());
    if (pos == members.size()) fail_graph("rank " + std::to_string(rank) + " is not in " + list_ranks(members));
    OpId& slot = member_ops_[c.members + pos];
    if (slot != kNone) fail_graph(describe(slot) + " is added twice");
    Op op;
    op.kind = OpKind::collective;
    op.rank = rank;
    op.stream = stream;
    op.phase = phase;
    op.layer = layer;
    op.microbatch = microbatch;
    op.index = index;
    op.bytes = c.bytes;
    op.ref = collective;
    slot = add(op);
    return slot;
}

std::vector<OpId> OpGraph::add_collective(CollectiveKind kind, const std::vector<int>& communicator,
                                          Bytes bytes_per_rank, Stream stream, Phase phase, int layer,
                                          int microbatch, int index, int root) {
    const std::int32_t cid = declare_collective(kind, communicator, bytes_per_rank, root);
    std::vector<OpId> ids;
    ids.reserve(communicator.size());
    for (int r : communicator) ids.push_back(add_collective_op(cid, r, stream, phase, layer, microbatch, index));
    return ids;
}

std::pair<OpId, OpId> OpGraph::add_send_recv(int src, int dst, Bytes bytes, Phase phase, int layer, int microbatch,
                                             Stream send_stream, Stream recv_stream) {
    if (src == dst) fail_graph("send from rank " + std::to_string(src) + " to itself");
    if (bytes < Bytes(0)) fail_graph("send of negative size");
    const auto pid = static_cast<std::int32_t>(p2ps_.size());
    Op s;
    s.kind = OpKind::send;
    s.rank = src;
    s.stream = send_stream;
    s.phase = phase;
    s.layer = layer;
    s.microbatch = microbatch;
    s.bytes = bytes.count();
    s.ref = pid;
    Op r = s;
    r.kind = OpKind::recv;
    r.rank = dst;
    r.stream = recv_stream;
    const OpId sid = add(s);
    const OpId rid = add(r);
    p2ps_.push_back({sid, rid, src, dst, bytes.count()});
    return {sid, rid};
}

OpId OpGraph::add_copy(int rank, Tier from, Tier to, Bytes bytes, Phase phase, int layer, int microbatch) {
    return add_copy_on(to == Tier::device ? Stream::copy_in : from == Tier::device ? Stream::copy : Stream::io, rank, from, to,
                       bytes, phase, layer, microbatch);
}

OpId OpGraph::add_copy_on(Stream stream, int rank, Tier from, Tier to, Bytes bytes, Phase phase, int layer, int microbatch) {
    if (from == to) fail_graph("copy within one tier");
    if (bytes < Bytes(0)) fail_graph("copy of negative size");
    Op op;
    op.kind = OpKind::copy;
    op.rank = rank;
    op.stream = stream;
    op.phase = phase;
    op.layer = layer;
    op.microbatch = microbatch;
    op.bytes = bytes.count();
    op.sub = static_cast<std::uint8_t>((static_cast<int>(from) << 4) | static_cast<int>(to));
    return add(op);
}

OpId OpGraph::add_timer(int rank, Time period, Stream stream, Phase phase, int index) {
    if (period <= Time::zero()) fail_graph("a timer needs a positive period");
    Op op;
    op.kind = OpKind::timer;
    op.rank = rank;
    op.stream = stream;
    op.phase = phase;
    op.index = index;
    op.bytes = period.count_ps();
    return add(op);
}

std::int32_t OpGraph::add_buffer(int rank, Tier tier, Bytes bytes, BufferLabel label) {
    if (rank < 0 || rank >= ranks_) fail_graph("buffer on rank " + std::to_string(rank) + " out of range");
    if (bytes < Bytes(0)) fail_graph("buffer of negative size");
    buffers_.push_back({rank, tier, bytes.count(), static_cast<std::int32_t>(label)});
    return static_cast<std::int32_t>(buffers_.size() - 1);
}

OpId OpGraph::add_alloc(std::int32_t buffer, Stream stream, int layer, int microbatch) {
    const Buffer& b = buffers_.at(static_cast<std::size_t>(buffer));
    Op op;
    op.kind = OpKind::alloc;
    op.rank = b.rank;
    op.stream = stream;
    op.layer = layer;
    op.microbatch = microbatch;
    op.bytes = b.bytes;
    op.ref = buffer;
    op.sub = static_cast<std::uint8_t>(b.tier);
    return add(op);
}

OpId OpGraph::add_free(std::int32_t buffer, Stream stream, int layer, int microbatch) {
    OpId id = add_alloc(buffer, stream, layer, microbatch);
    ops_[id].kind = OpKind::free;
    return id;
}

void OpGraph::set_representatives(std::vector<int> representative) {
    if (finalized_) fail_graph("cannot fold after finalize()");
    if (representative.size() != static_cast<std::size_t>(ranks_)) fail_graph("one representative per rank is needed");
    for (int r = 0; r < ranks_; ++r) {
        const int rep = representative[static_cast<std::size_t>(r)];
        if (rep < 0 || rep >= ranks_ || representative[static_cast<std::size_t>(rep)] != rep)
            fail_graph("rank " + std::to_string(r) + " mirrors rank " + std::to_string(rep) + ", which is not materialized");
    }
    mirror_begin_.assign(static_cast<std::size_t>(ranks_) + 1, 0);
    for (int r = 0; r < ranks_; ++r)
        if (representative[static_cast<std::size_t>(r)] != r) ++mirror_begin_[static_cast<std::size_t>(representative[static_cast<std::size_t>(r)]) + 1];
    for (int r = 0; r < ranks_; ++r) mirror_begin_[static_cast<std::size_t>(r) + 1] += mirror_begin_[static_cast<std::size_t>(r)];
    mirror_list_.assign(mirror_begin_.back(), 0);
    std::vector<std::uint32_t> next(mirror_begin_.begin(), mirror_begin_.end() - 1);
    for (int r = 0; r < ranks_; ++r) {
        const int rep = representative[static_cast<std::size_t>(r)];
        if (rep != r) mirror_list_[next[static_cast<std::size_t>(rep)]++] = r;
    }
    representative_ = std::move(representative);
}

std::span<const int> OpGraph::mirrors(int rank) const {
    if (!folded()) return {};
    const auto r = static_cast<std::size_t>(rank);
    return {mirror_list_.data() + mirror_begin_[r], mirror_begin_[r + 1] - mirror_begin_[r]};
}

// ---- finalize ----------------------------------------------------------------------------------

void OpGraph::sort_unique_edges() {
    // What std::sort and std::unique give, in linear time: a counting sort by source (edges are
    // about three per op, so a comparison sort of them dominated finalize), then each source's
    // few targets sorted and duplicates dropped.
    std::vector<std::uint32_t> start(ops_.size() + 1, 0);
    for (const auto& e : pending_edges_) ++start[e.first + 1];
    for (std::size_t v = 0; v < ops_.size(); ++v) start[v + 1] += start[v];
    std::vector<OpId> targets(pending_edges_.size());
    {
        std::vector<std::uint32_t> next(start.begin(), start.end() - 1);
        for (const auto& e : pending_edges_) targets[next[e.first]++] = e.second;
    }
    std::size_t n = 0;
    for (OpId v = 0; v < ops_.size(); ++v) {
        const auto first = targets.begin() + start[v], last = targets.begin() + start[v + 1];
        std::sort(first, last);
        for (auto it = first; it != last; ++it)
            if (it == first || *it != *(it - 1)) pending_edges_[n++] = {v, *it};
    }
    pending_edges_.resize(n);
}

void OpGraph::finalize() {
    if (finalized_) return;
    if (!arrival_order_.empty())
        for (const P2P& p : p2ps_)
            if (arrival_ordered(p.src, ops_[p.send].stream) && arrival_ordered(p.dst, ops_[p.recv].stream))
                fail_graph(describe(p.send) + ": both sides of a send / receive are served in arrival order");
    sort_unique_edges();
    csr_ = Csr(boost::edges_are_sorted, pending_edges_.begin(), pending_edges_.end(), static_cast<OpId>(ops_.size()));
    in_degree_.assign(ops_.size(), 0);
    for (const auto& e : pending_edges_) ++in_degree_[e.second];
    std::vector<std::pair<OpId, OpId>>().swap(pending_edges_);
    std::vector<OpId>().swap(last_on_stream_);
    finalized_ = true;
    if (folded())
        for (OpId id = 0; id < ops_.size(); ++id)
            if (!materialized(ops_[id].rank)) fail_graph(describe(id) + ": rank " + std::to_string(ops_[id].rank) + " is a mirror");
    check_acyclic();
    check_collectives();
    check_p2p();
    check_buffers();
}

std::span<const OpId> OpGraph::successors(OpId id) const {
    auto [first, last] = boost::adjacent_vertices(id, csr_);
    return {first, last};
}

std::size_t OpGraph::num_edges() const { return boost::num_edges(csr_); }

std::vector<OpId> OpGraph::predecessors(OpId id) const {
    std::vector<OpId> out;
    for (OpId v = 0; v < ops_.size(); ++v)
        for (OpId s : successors(v))
            if (s == id) out.push_back(v);
    return out;
}

void OpGraph::check_acyclic() {
    // Kahn's algorithm; the order it yields is kept for critical-path queries.
    std::vector<std::uint32_t> indeg = in_degree_;
    topo_order_.clear();
    topo_order_.reserve(ops_.size());
    for (OpId v = 0; v < ops_.size(); ++v)
        if (indeg[v] == 0) topo_order_.push_back(v);
    for (std::size_t i = 0; i < topo_order_.size(); ++i)
        for (OpId s : successors(topo_order_[i]))
            if (--indeg[s] == 0) topo_order_.push_back(s);
    if (topo_order_.size() == ops_.size()) return;

    // Walk backwards along unfinished predecessors from a stuck op until an op repeats: a cycle.
    OpId v = 0;
    while (indeg[v] == 0) ++v;
    std::vector<OpId> walk;
    std::vector<std::int64_t> seen_at(ops_.size(), -1);
    while (seen_at[v] < 0) {
        seen_at[v] = static_cast<std::int64_t>(walk.size());
        walk.push_back(v);
        for (OpId p : predecessors(v))
            if (indeg[p] > 0) {
                v = p;
                break;
            }
    }
    std::string cycle;
    for (auto i = static_cast<std::size_t>(seen_at[v]); i < walk.size() && i < static_cast<std::size_t>(seen_at[v]) + 8; ++i)
        cycle += "\n  " + describe(walk[i]);
    fail_graph("the graph has a cycle (each op below waits for the next):" + cycle);
}

void OpGraph::check_collectives() const {
    // Per communicator and rank: the sequence of collectives in stream order, and its stream.
    struct Seen {
        std::vector<std::int32_t> order;
        int stream = -1;
        OpId first_op = 0;
    };
    // One slot per (communicator, member position), communicators one after another.
    std::vector<std::size_t> slot_of(communicators_.size() + 1, 0);
    for (std::size_t c = 0; c < communicators_.size(); ++c) slot_of[c + 1] = slot_of[c] + communicators_[c].size();
    std::vector<Seen> per(slot_of.back());
    for (OpId id = 0; id < ops_.size(); ++id) {
        const Op& op = ops_[id];
        if (op.kind != OpKind::collective) continue;
        const Collective& c = collectives_.at(static_cast<std::size_t>(op.ref));
        const std::vector<int>& members = communicators_[c.communicator];
        if (!materialized(op.rank)) fail_graph(describe(id) + " is on rank " + std::to_string(op.rank) + ", a mirror");
        const auto at = std::find(members.begin(), members.end(), op.rank);
        if (at == members.end())
            fail_graph(describe(id) + " runs on a rank outside its communicator " + list_ranks(members));
        if (op.bytes != c.bytes)
            fail_graph(describe(id) + " has " + std::to_string(op.bytes) + " bytes but its collective has " +
                       std::to_string(c.bytes));
        Seen& s = per[slot_of[static_cast<std::size_t>(c.communicator)] + static_cast<std::size_t>(at - members.begin())];
        if (s.stream >= 0 && s.stream != static_cast<int>(op.stream))
            fail_graph(describe(s.first_op) + " and " + describe(id) + " use one communicator on two streams (" +
                       to_string(static_cast<Stream>(s.stream)) + ", " + to_string(op.stream) +
                       "): their order is not fixed, and NCCL needs one order on every rank");
        if (s.stream < 0) s.first_op = id;
        s.stream = static_cast<int>(op.stream);
        s.order.push_back(op.ref);
    }
    // Whether a communicator's mirrors have passed the check below: it depends on the
    // communicator only, so later collectives on it skip it (a folded communicator is mostly
    // mirrors, and the check scans it for each).
    std::vector<bool> mirrors_checked(communicators_.size(), false);
    for (std::size_t c = 0; c < collectives_.size(); ++c) {
        const auto comm = static_cast<std::size_t>(collectives_[c].communicator);
        const std::vector<int>& members = communicators_[comm];
        for (std::size_t i = 0; i < members.size(); ++i) {
            if (!materialized(members[i])) {
                // A mirror arrives with its representative, which must take part too.
                if (!mirrors_checked[comm] &&
                    std::find(members.begin(), members.end(), representative(members[i])) == members.end())
                    fail_graph("rank " + std::to_string(members[i]) + " of communicator " + list_ranks(members) +
                               " mirrors rank " + std::to_string(representative(members[i])) + ", which is not in it");
                continue;
            }
            if (member_ops_[collectives_[c].members + i] == kNone) {
                OpId any = kNone;
                for (std::size_t j = 0; j < members.size() && any == kNone; ++j) any = member_ops_[collectives_[c].members + j];
                fail_graph((any == kNone ? std::string("a collective") : "'" + op_name(any) + "'") +
                           " has no op on rank " + std::to_string(members[i]) + " of its communicator " +
                           list_ranks(members));
            }
        }
        mirrors_checked[comm] = true;
    }
    // The same order on every rank of each communicator.
    for (std::size_t comm = 0; comm < communicators_.size(); ++comm) {
        const std::vector<int>& members = communicators_[comm];
        std::size_t lead = 0;
        while (lead < members.size() && !materialized(members[lead])) ++lead;
        if (lead == members.size()) continue;
        const Seen& a = per[slot_of[comm] + lead];
        if (a.stream < 0) continue;   // no op on the lead: the communicator has no collective
        for (std::size_t m = lead + 1; m < members.size(); ++m) {
            if (!materialized(members[m])) continue;
            const Seen& b = per[slot_of[comm] + m];
            for (std::size_t i = 0; i < a.order.size(); ++i) {
                if (a.order[i] == b.order[i]) continue;
                const auto ops_a = collective_ops(a.order[i]);
                const auto ops_b = collective_ops(b.order[i]);
                fail_graph("collectives out of order on communicator " + list_ranks(members) + ": rank " +
                           std::to_string(members[lead]) + " runs '" + op_name(ops_a[lead]) + "' where rank " +
                           std::to_string(members[m]) + " runs '" + op_name(ops_b[lead]) +
                           "' (NCCL would deadlock)");
            }
        }
    }
}

void OpGraph::check_p2p() const {
    for (const P2P& p : p2ps_) {
        const Op& s = ops_[p.send];
        const Op& r = ops_[p.recv];
        if (s.kind != OpKind::send || r.kind != OpKind::recv || s.bytes != r.bytes || s.rank != p.src || r.rank != p.dst)
            fail_graph("send " + describe(p.send) + " does not match its receive " + describe(p.recv));
        if (mirrors(p.src).size() != mirrors(p.dst).size())
            fail_graph("send " + describe(p.send) + ": its ranks have different numbers of mirrors");
    }
}

void OpGraph::check_buffers() const {
    // Allocs and frees in stream order per buffer: alloc, then at most one free, never twice.
    std::vector<std::uint8_t> state(buffers_.size(), 0);  // 0 none, 1 allocated, 2 freed
    std::vector<std::uint32_t> position(ops_.size());
    for (std::size_t i = 0; i < topo_order_.size(); ++i) position[topo_order_[i]] = static_cast<std::uint32_t>(i);
    std::vector<OpId> ids;
    for (OpId id = 0; id < ops_.size(); ++id)
        if (ops_[id].kind == OpKind::alloc || ops_[id].kind == OpKind::free) ids.push_back(id);
    std::sort(ids.begin(), ids.end(), [&](OpId a, OpId b) { return position[a] < position[b]; });
    for (OpId id : ids) {
        std::uint8_t& s = state[static_cast<std::size_t>(ops_[id].ref)];
        if (ops_[id].kind == OpKind::alloc) {
            if (s != 0) fail_graph(describe(id) + ": the buffer is allocated twice");
            s = 1;
        } else {
            if (s != 1) fail_graph(describe(id) + ": frees a buffer that is not allocated");
            s = 2;
        }
    }
}

// ---- reading -----------------------------------------------------------------------------------

std::span<const OpId> OpGraph::collective_ops(std::int32_t collective) const {
    const Collective& c = collectives_.at(static_cast<std::size_t>(collective));
    return {member_ops_.data() + c.members, communicators_[static_cast<std::size_t>(c.communicator)].size()};
}

std::string OpGraph::op_name(OpId id) const {
    const Op& op = ops_[id];
    std::ostringstream s;
    auto labels = [&] {
        if (op.layer >= 0) s << " L" << op.layer;
        if (op.microbatch >= 0) s << " mb" << op.microbatch;
    };
    switch (op.kind) {
        case OpKind::compute:
            s << (op.phase == Phase::none ? to_string(op.kernel()) : to_string(op.phase));
            labels();
            break;
        case OpKind::collective: {
            const Collective& c = collectives_[static_cast<std::size_t>(op.ref)];
            s << to_string(c.kind);
            if (op.phase != Phase::none && op.phase != Phase::comm) s << ' ' << to_string(op.phase);
            if (op.index >= 0) s << " bucket " << op.index;
            labels();
            s << ' ' << list_ranks(communicators_[c.communicator]);
            break;
        }
        case OpKind::send:
        case OpKind::recv: {
            const P2P& p = p2ps_[static_cast<std::size_t>(op.ref)];
            s << to_string(op.kind);
            if (op.phase != Phase::none) s << ' ' << to_string(op.phase);
            labels();
            s << " r" << p.src << "->r" << p.dst;
            break;
        }
        case OpKind::copy:
            s << "copy " << to_string(op.copy_from()) << "->" << to_string(op.copy_to());
            labels();
            break;
        case OpKind::timer:
            s << "cycle " << to_string(op.period());
            if (op.index >= 0) s << " bucket " << op.index;
            break;
        case OpKind::alloc:
        case OpKind::free:
            s << to_string(op.kind) << ' '
              << to_string(static_cast<BufferLabel>(buffers_[static_cast<std::size_t>(op.ref)].label));
            labels();
            break;
    }
    return s.str();
}

std::string OpGraph::describe(OpId id) const { return "rank " + std::to_string(ops_[id].rank) + ": " + op_name(id); }

std::vector<OpId> OpGraph::critical_path(const std::function<Time(OpId)>& duration) const {
    if (!finalized_) fail_graph("critical_path needs a finalized graph");
    std::vector<Time> finish(ops_.size());
    std::vector<OpId> via(ops_.size(), kNone);
    std::vector<Time> ready(ops_.size());
    for (OpId v : topo_order_) {
        finish[v] = ready[v] + duration(v);
        for (OpId s : successors(v))
            if (via[s] == kNone || finish[v] > ready[s]) {
                ready[s] = finish[v];
                via[s] = v;
            }
    }
    if (ops_.empty()) return {};
    OpId end = 0;
    for (OpId v = 0; v < ops_.size(); ++v)
        if (finish[v] > finish[end]) end = v;
    std::vector<OpId> path;
    for (OpId v = end; v != kNone; v = via[v]) path.push_back(v);
    std::reverse(path.begin(), path.end());
    return path;
}

}  // namespace smol

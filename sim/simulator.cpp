#include "sim/simulator.hpp"

#include <algorithm>
#include <chrono>
#include <deque>
#include <optional>
#include <span>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "core/error.hpp"
#include "sim/compute.hpp"
#include "sim/engine.hpp"
#include "sim/link_classes.hpp"
#include "sim/measured.hpp"
#include "sim/memory.hpp"
#include "sim/network.hpp"

namespace smol::sim {

const char* to_string(NetworkMode m) { return m == NetworkMode::flow ? "flow" : "analytic"; }

NetworkMode parse_network_mode(const std::string& text) {
    if (text == "flow") return NetworkMode::flow;
    if (text == "analytic") return NetworkMode::analytic;
    fail_input("flow or analytic", "'" + text + "'", {"", "", "--network"});
}

namespace {

using topo::LinkId;

enum EventKind : std::uint32_t { op_done, phase_start, phase_end };

/// A transfer's plan with routes resolved: shared by every transfer with the same key (the
/// thousands of identical tensor-parallel all-reduces of a run reuse one).
struct Plan {
    /// One network flow: the member flows of one coupling class of a phase, aggregated (see
    /// FlowNetwork): `weights[i]` members cross `links[i]`.
    struct Flow {
        std::vector<LinkId> links;
        std::vector<std::uint32_t> weights;
        Bytes bytes;           // per member, on the wire (payload / protocol efficiency)
        Bandwidth max_rate;    // NCCL's bandwidth for each member (zero: the links alone decide)
    };
    struct Phase {
        std::vector<Flow> flows;
        Time latency;  // steps × step latency, after the phase's flows
    };
    std::vector<Phase> phases;
    Time base;         // before the first phase
    Time analytic;     // the alpha-beta prediction of the whole transfer
    std::uint16_t thread_blocks = 0;   // NCCL's, on each member (CollectiveSchedule::thread_blocks)
};

/// Coupling classes per phase: flows of equal size move in lockstep (a ring's edges); a phase
/// with flows of several sizes (a rail ring's NVLink and NIC edges) couples each size apart.
/// Flows beyond the fourth size run alone.
constexpr std::size_t kCouplingClasses = 4;

/// Collects a phase's member flows and aggregates each coupling class into one Plan::Flow.
/// `slot` is scratch with one entry per link of the topology, all kNoSlot between uses.
class PhaseFlows {
public:
    static constexpr std::uint32_t kNoSlot = 0xffffffffu;
    explicit PhaseFlows(std::vector<std::uint32_t>& slot) : slot_(slot) {}

    void add(std::span<const LinkId> route, Bytes bytes, Bandwidth max_rate) {
        auto it = std::find(sizes_.begin(), sizes_.end(), bytes);
        if (it == sizes_.end() && sizes_.size() < kCouplingClasses) it = sizes_.insert(sizes_.end(), bytes);
        members_.push_back({route, bytes, it == sizes_.end() ? kUncoupled : static_cast<std::uint8_t>(it - sizes_.begin()), max_rate});
    }
    /// The aggregated flows, one per class in order of first appearance, then the uncoupled
    /// flows (a class whose every link carries one member keeps no weights).
    std::vector<Plan::Flow> take() {
        std::vector<Plan::Flow> out;
        for (std::size_t c = 0; c < sizes_.size(); ++c) {
            Plan::Flow f{{}, {}, sizes_[c], Bandwidth()};
            for (const Member& m : members_) {
                if (m.coupling != c) continue;
                // The group's cap is its smallest member cap.
                if (m.max_rate > Bandwidth() && (f.max_rate == Bandwidth() || m.max_rate < f.max_rate)) f.max_rate = m.max_rate;
                for (LinkId l : m.route) {
                    std::uint32_t& at = slot_[static_cast<std::size_t>(l)];
                    if (at == kNoSlot) {
                        at = static_cast<std::uint32_t>(f.links.size());
                        f.links.push_back(l);
                        f.weights.push_back(1);
                    } else {
                        ++f.weights[at];
                    }
                }
            }
            // In link order: a flow over a whole cluster's links then sweeps the network's link
            // table forward instead of jumping about it (its order means nothing to the model).
            // A flow over a large share of the links is put in order by one pass over the slots
            // (each holds its link's index in the flow), cheaper than sorting; a small one sorted.
            if (f.links.size() * kSweepShare >= slot_.size()) {
                std::vector<LinkId> links;
                std::vector<std::uint32_t> weights;
                links.reserve(f.links.size());
                weights.reserve(f.links.size());
                for (std::size_t l = 0; l < slot_.size(); ++l) {
                    if (slot_[l] == kNoSlot) continue;
                    links.push_back(static_cast<LinkId>(l));
                    weights.push_back(f.weights[slot_[l]]);
                    slot_[l] = kNoSlot;
                }
                f.links = std::move(links);
                f.weights = std::move(weights);
            } else {
                for (LinkId l : f.links) slot_[static_cast<std::size_t>(l)] = kNoSlot;
                std::vector<std::pair<LinkId, std::uint32_t>> by_link;
                by_link.reserve(f.links.size());
                for (std::size_t i = 0; i < f.links.size(); ++i) by_link.emplace_back(f.links[i], f.weights[i]);
                std::sort(by_link.begin(), by_link.end());
                for (std::size_t i = 0; i < by_link.size(); ++i) std::tie(f.links[i], f.weights[i]) = by_link[i];
            }
            if (std::all_of(f.weights.begin(), f.weights.end(), [](std::uint32_t w) { return w == 1; })) f.weights.clear();
            out.push_back(std::move(f));
        }
        for (const Member& m : members_)
            if (m.coupling == kUncoupled)
                out.push_back({{m.route.begin(), m.route.end()}, {}, m.bytes, m.max_rate});
        return out;
    }

private:
    static constexpr std::uint8_t kUncoupled = 0xff;
    /// A flow over at least 1/kSweepShare of the links is ordered by a pass over all of them.
    static constexpr std::size_t kSweepShare = 16;
    struct Member {
        std::span<const LinkId> route;
        Bytes bytes;
        std::uint8_t coupling;
        Bandwidth max_rate;
    };
    std::vector<std::uint32_t>& slot_;
    std::vector<Bytes> sizes_;     // coupling classes in order of first appearance
    std::vector<Member> members_;
};

struct Transfer {
    const Plan* plan = nullptr;
    OpId owner = 0;            // collective: any member op; p2p: the send; copy: the copy; host compute: the op
    std::uint32_t phase = 0;
    std::uint32_t flows_left = 0;
    FlowId flow = 0;           // the phase's last flow (a host op's one flow, whose cap follows the cores)
};

/// A node's host CPU as a resource: its DRAM links (host memory → PCIe root and back: every
/// offloaded step reads and writes DRAM, sharing it with the DMA copies into and out of it) and
/// its cores, shared equally by the host ops running (each process's threads get a fair share of
/// the cores). A host op is a flow of its bytes over both links, capped at the rate its share of
/// the cores computes it.
struct HostCpu {
    std::array<LinkId, 2> links{-1, -1};   // read (host → root), write (root → host)
    std::vector<std::uint32_t> active;     // transfers of the host ops running
};

struct PlanKey {
    std::uint64_t a, b;
    bool operator==(const PlanKey&) const = default;
};
struct PlanKeyHash {
    std::size_t operator()(const PlanKey& k) const { return std::hash<std::uint64_t>()(k.a * 0x9E3779B97F4A7C15ull ^ k.b); }
};

class Simulator {
public:
    Simulator(const OpGraph& g, const topo::Cluster& c, const topo::Topology& t, const SimOptions& o)
        : graph_(g), cluster_(c), topo_(t), options_(o),
          // Over the links only where a run records their samples; else over link classes, made
          // at the start of the run (merge_links); an analytic run has no flows.
          network_(o.network == NetworkMode::flow && o.record_links ? link_bandwidths(t) : std::vector<Bandwidth>{}),
          link_slot_(t.links().size(), PhaseFlows::kNoSlot) {
        const int ranks = g.ranks();
        if (ranks != c.num_devices())
            throw Error(ErrorKind::internal, "the graph has " + std::to_string(ranks) + " ranks but the cluster has " +
                                                 std::to_string(c.num_devices()) + " devices");
        group_.reserve(ranks);
        speed_.reserve(static_cast<std::size_t>(ranks));
        gpu_ = false;
        for (int r = 0; r < ranks; ++r) {
            group_.push_back(&c.group_of(r));
            speed_.push_back(c.compute_speed(r));
            group_index_.push_back(static_cast<std::uint32_t>(group_.back() - c.groups.data()));
            gpu_ = gpu_ || !group_.back()->device.is_cpu;
        }
        ctx_.routes.route = [this](int a, int b) { return topo_.route(topo_.device_vertex(a), topo_.device_vertex(b)); };
        ctx_.routes.latency = [this](int a, int b) {
            return topo_.route_latency(topo_.device_vertex(a), topo_.device_vertex(b));
        };
        ctx_.routes.link_bandwidth = link_bandwidths(t);
        ctx_.routes.cache = &phase_routes_;
        ctx_.node_of = [this](int r) { return cluster_.device(r).node; };
        ctx_.nic_of = [this](int r) {
            const topo::DeviceRef d = cluster_.device(r);
            return d.node * 4096 + cluster_.groups[static_cast<std::size_t>(d.group)].nic_of(d.local);
        };
        ctx_.gpu = gpu_;
        ctx_.cluster = &cluster_;

        tl_.resize(g.size(), ranks);
        for (int r = 0; r < ranks; ++r) tl_.device_names[r] = c.device_name(r);
        memory_.emplace(g, c, ctx_, tl_, o.record_memory);
        // Host DRAM links of GPU nodes (a PCIe root joins devices and host memory); SoC boards
        // price host ops alone, as their device is the host.
        host_.resize(static_cast<std::size_t>(c.num_nodes()));
        // Each host memory vertex's node: that of the first rank on it (one pass over the ranks,
        // not one per host link — 131,072 ranks have 32,768 such links).
        std::vector<int> node_of_host(t.vertices().size(), -1);
        for (int r = ranks - 1; r >= 0; --r) node_of_host[static_cast<std::size_t>(t.host_vertex(r))] = c.device(r).node;
        for (std::size_t l = 0; l < t.links().size(); ++l) {
            const topo::Link& link = t.links()[l];
            const auto& v = t.vertices();
            const bool read = v[static_cast<std::size_t>(link.from)].kind == topo::VertexKind::host_memory &&
                              v[static_cast<std::size_t>(link.to)].kind == topo::VertexKind::pcie_switch;
            const bool write = v[static_cast<std::size_t>(link.to)].kind == topo::VertexKind::host_memory &&
                               v[static_cast<std::size_t>(link.from)].kind == topo::VertexKind::pcie_switch;
            if (!read && !write) continue;
            const int node = node_of_host[static_cast<std::size_t>(read ? link.from : link.to)];
            if (node >= 0) host_[static_cast<std::size_t>(node)].links[read ? 0 : 1] = static_cast<LinkId>(l);
        }
        any_served_ = g.has_arrival_order();
        active_comm_.assign(ranks, 0);
        held_blocks_.assign(ranks, 0);
        // Only a rank that takes part in a transfer can be slowed by one: the others' ops are not
        // tracked (the event loop of a graph without communication pays nothing for it).
        communicates_.assign(static_cast<std::size_t>(ranks), 0);
        std::vector<std::uint8_t> used(g.communicators().size(), 0);
        for (const Collective& c : g.collectives()) used[static_cast<std::size_t>(c.communicator)] = 1;
        for (std::size_t i = 0; i < used.size(); ++i)
            if (used[i])
                for (int r : g.communicators()[i]) communicates_[static_cast<std::size_t>(r)] = 1;
        for (const P2P& p : g.p2ps()) communicates_[static_cast<std::size_t>(p.src)] = communicates_[static_cast<std::size_t>(p.dst)] = 1;
        running_.resize(static_cast<std::size_t>(ranks));
        tracked_.assign(g.size(), 0);
        remaining_.resize(g.size());
        for (OpId id = 0; id < g.size(); ++id) remaining_[id] = g.in_degree(id);
        arrived_.assign(g.collectives().size(), 0);
        collective_blocks_.assign(g.collectives().size(), 0);
        collective_plan_.assign(g.collectives().size(), nullptr);
        p2p_plan_.assign(g.p2ps().size(), nullptr);
        // A folded graph's mirror ranks arrive with their representatives.
        // Per communicator, the positions of its materialized members: only they arrive, start
        // and finish (a mirror has no ops, so nothing runs on it to slow down).
        live_start_.reserve(g.communicators().size() + 1);
        live_start_.push_back(0);
        for (const std::vector<int>& members : g.communicators()) {
            for (std::size_t i = 0; i < members.size(); ++i)
                if (g.materialized(members[i])) live_pos_.push_back(static_cast<std::uint32_t>(i));
            live_start_.push_back(static_cast<std::uint32_t>(live_pos_.size()));
        }
        needed_.reserve(g.collectives().size());
        for (const Collective& c : g.collectives()) needed_.push_back(static_cast<std::uint32_t>(live_members(c.communicator).size()));
        p2p_ready_.assign(g.p2ps().size(), 0);
        if (o.record_links) {
            for (std::size_t l = 0; l < t.links().size(); ++l) tl_.link_names.push_back(t.link_name(static_cast<LinkId>(l)));
            if (o.link_ranks.empty()) {
                network_.record_links(&tl_.links);
            } else {
                watched_rank_.assign(static_cast<std::size_t>(ranks), false);
                watched_link_.assign(t.links().size(), false);
                for (int r : o.link_ranks) {
                    if (r < 0 || r >= ranks) throw Error(ErrorKind::internal, "simulator: link rank " + std::to_string(r) + " out of range");
                    watched_rank_[static_cast<std::size_t>(r)] = true;
                    for (LinkId l : host_[static_cast<std::size_t>(c.device(r).node)].links)
                        if (l >= 0) watched_link_[static_cast<std::size_t>(l)] = true;
                }
            }
        }
    }

    Timeline run() {
        const auto wall0 = std::chrono::steady_clock::now();
        try {
            if (options_.network == NetworkMode::flow && !options_.record_links) merge_links();
            if (!watched_rank_.empty()) {
                // Every plan first, which marks the links the watched ranks' flows cross.
                build_plans();
                network_.record_links(&tl_.links, watched_link_);
            }
            for (OpId id = 0; id < graph_.size(); ++id)
                if (remaining_[id] == 0) ready_.push_back(id);
            drain_ready();
            std::vector<std::uint32_t> finished;
            for (;;) {
                network_.solve(engine_.now());
                const Time tn = network_.next_completion();
                const Time te = engine_.next_time();
                if (tn == Time::max() && te == Time::max()) break;
                if (te <= tn) {
                    const Event e = engine_.pop();
                    handle(e);
                } else {
                    finished.clear();
                    network_.complete(tn, finished);
                    engine_.advance_to(tn, finished.size());
                    for (std::uint32_t tr : finished) flow_done(tr);
                }
                drain_ready();
            }
        } catch (const Error& e) {
            if (e.kind() != ErrorKind::out_of_range) throw;
            throw out_of_range_here(e);
        }
        check_finished();
        memory_->copy_mirrors();   // a mirror's memory is its representative's
        tl_.makespan = engine_.now();
        tl_.events = engine_.processed();
        tl_.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
        return std::move(tl_);
    }

private:
    static std::vector<Bandwidth> link_bandwidths(const topo::Topology& t) {
        std::vector<Bandwidth> out;
        out.reserve(t.links().size());
        for (const auto& l : t.links()) out.push_back(l.bandwidth);
        return out;
    }

    // ---- op lifecycle ---------------------------------------------------------------------------

    void drain_ready() {
        while (ready_head_ < ready_.size()) {
            starting_ = ready_[ready_head_++];
            start(starting_);
        }
        starting_ = OpGraph::kNoOp;
        ready_.clear();
        ready_head_ = 0;
    }

    /// A quantity left its range (core/units.hpp) while simulating: the error says where — the op
    /// being started, or the network and its slowest link — and which inputs make a step that long.
    Error out_of_range_here(const Error& e) const {
        std::string where;
        if (starting_ != OpGraph::kNoOp) {
            where = graph_.describe(starting_) + " on " + tl_.device_names[static_cast<std::size_t>(graph_.op(starting_).rank)];
        } else {
            where = "a network transfer";
            const auto& links = topo_.links();
            std::size_t slowest = 0;
            for (std::size_t l = 1; l < links.size(); ++l)
                if (links[l].bandwidth < links[slowest].bandwidth) slowest = l;
            if (!links.empty())
                where += " (the slowest link, " + topo_.link_name(static_cast<LinkId>(slowest)) + ", runs at " +
                         to_string(links[slowest].bandwidth) + ")";
        }
        return Error(ErrorKind::out_of_range,
                     "simulated time out of range at " + to_string(engine_.now()) + ", in " + where + ": " + e.detail() +
                         ". A step this long comes from a slow device or link of the cluster (peak FLOP/s, bandwidths, "
                         "latencies, launch overhead) or a large plan (--global-batch, --micro-batch, --seq)",
                     e.context());
    }

    /// `ps` picoseconds, truncated (what the slowed-compute bookkeeping has always done), or
    /// out_of_range beyond the range of Time.
    static Time ps_truncated(double ps) {
        if (!(ps > -9.2e18 && ps < 9.2e18)) return Time::ps_rounded(ps);   // throws with the figure
        return Time::ps(static_cast<std::int64_t>(ps));
    }

    void finish(OpId id) {
        tl_.end[id] = engine_.now();
        if (any_served_) release(id);
        if (options_.record_kernel_classes && graph_.op(id).kind == OpKind::compute) record_classes(id);
        for (OpId s : graph_.successors(id))
            if (--remaining_[s] == 0) {
                ready_.push_back(s);
                // start() reads it soon: the misses of a collective's members overlap.
                __builtin_prefetch(&graph_.op(s));
            }
    }

    void start(OpId id) {
        const Op& op = graph_.op(id);
        tl_.start[id] = engine_.now();
        switch (op.kind) {
            case OpKind::compute:
                if (served(op) && !admit(id)) break;
                run_compute(id, op);
                break;
            case OpKind::alloc:
            case OpKind::free:
                memory_->apply(id, op, engine_.now());
                finish(id);
                break;
            case OpKind::collective: {
                if (++arrived_[static_cast<std::size_t>(op.ref)] == needed_[static_cast<std::size_t>(op.ref)]) {
                    const Collective& c = graph_.collectives()[static_cast<std::size_t>(op.ref)];
                    const auto& members = graph_.communicators()[static_cast<std::size_t>(c.communicator)];
                    const Plan* plan = collective_plan(op.ref);
                    const int blocks = c.sms >= 0 ? c.sms : plan->thread_blocks;   // not NCCL's: its own SMs
                    collective_blocks_[static_cast<std::size_t>(op.ref)] = static_cast<std::uint16_t>(blocks);
                    for (std::uint32_t i : live_members(c.communicator)) comm_changed(members[i], +1, blocks);
                    begin(plan, id);
                }
                break;
            }
            case OpKind::send:
            case OpKind::recv: {
                const P2P& p = graph_.p2ps()[static_cast<std::size_t>(op.ref)];
                std::uint8_t& bits = p2p_ready_[static_cast<std::size_t>(op.ref)];
                bits |= op.kind == OpKind::send ? 1 : 2;
                if (bits == 3) {
                    // A server's side is admitted at the rendezvous: that is when the worker's
                    // message arrives (OpGraph::serve_in_arrival_order).
                    const OpId side = served(graph_.op(p.send)) ? p.send : served(graph_.op(p.recv)) ? p.recv : OpGraph::kNoOp;
                    if (side != OpGraph::kNoOp) {
                        if (!admit(side)) break;
                        tl_.start[side] = engine_.now();   // the served side runs from its turn
                    }
                    begin_p2p(op.ref);
                }
                break;
            }
            case OpKind::copy:
                if (served(op) && !admit(id)) break;
                begin(copy_plan(op), id);
                break;
            case OpKind::timer: {
                // The next multiple of the period at or after now (checked: near the end of Time's range).
                const std::int64_t period = op.period().count_ps(), now = engine_.now().count_ps();
                const std::int64_t ticks = checked_add(now, period - 1, "a timer's next tick") / period;
                engine_.schedule(Time::ps(checked_mul(ticks, period, "a timer's next tick")), op_done, id);
                break;
            }
        }
    }

    void begin_p2p(std::int32_t ref) {
        const P2P& p = graph_.p2ps()[static_cast<std::size_t>(ref)];
        comm_changed(p.src, +1);
        comm_changed(p.dst, +1);
        begin(p2p_plan(ref), p.send);
    }

    // ---- streams served in arrival order (OpGraph::serve_in_arrival_order) ----------------------

    bool served(const Op& op) const { return any_served_ && graph_.arrival_ordered(op.rank, op.stream); }

    static std::size_t stream_key(const Op& op) { return static_cast<std::size_t>(op.rank) * kStreams + static_cast<int>(op.stream); }

    /// True when `id` may run now on its stream (it is free, or `id` was served from the queue);
    /// else it queues behind the op running there.
    bool admit(OpId id) {
        Served& s = served_[stream_key(graph_.op(id))];
        if (s.holder == OpGraph::kNoOp) s.holder = id;
        if (s.holder == id) return true;
        s.queue.push_back(id);
        return false;
    }

    /// `id` finished: the first op queued on its stream is served next — started again from the
    /// ready list, so it starts (and its slice begins) now, outside the callback that finished `id`.
    void release(OpId id) {
        const Op& op = graph_.op(id);
        if (!served(op)) return;
        Served& s = served_[stream_key(op)];
        if (s.holder != id) return;
        s.holder = OpGraph::kNoOp;
        if (s.queue.empty()) return;
        s.holder = s.queue.front();
        s.queue.pop_front();
        ready_.push_back(s.holder);
    }

    /// A compute op runs: on the host's DRAM and cores (GPU nodes' host ops), else for its
    /// device time, slowed while its rank communicates: by the device's comm_slowdown, and on a GPU
    /// of known SMs by the SMs NCCL's thread blocks hold (slowdown()).
    void run_compute(OpId id, const Op& op) {
        if (op.on_host() && options_.network == NetworkMode::flow && host_links(op.rank)) {
            start_host(id, op);
            return;
        }
        const Time d = device_time(id, op);
        const topo::DeviceKind& dev = group_[op.rank]->device;
        const bool may_slow = communicates_[static_cast<std::size_t>(op.rank)] != 0;
        const double bound = may_slow && dev.sms > 0 ? bound_share(id, op) : 0.0;
        if (!may_slow || (dev.comm_slowdown == 1.0 && bound == 0.0)) {
            engine_.schedule(engine_.now() + d, op_done, id);
        } else {
            // Track it: its rate changes whenever communication starts or stops on the rank.
            tracked_[id] = 1;
            Running run{id, 0, static_cast<double>(d.count_ps()), engine_.now(), bound, slowdown(op.rank, bound), Time()};
            run.end = engine_.now() + ps_truncated(run.remaining_ps * run.factor);
            run.event = engine_.schedule_movable(run.end, op_done, id);
            running_[static_cast<std::size_t>(op.rank)].push_back(run);
        }
    }

    /// Called when a transfer is complete: finishes the op(s) it stands for.
    void transfer_done(OpId owner) {
        const Op& op = graph_.op(owner);
        if (op.kind == OpKind::collective) {
            const Collective& c = graph_.collectives()[static_cast<std::size_t>(op.ref)];
            const std::vector<int>& members = graph_.communicators()[static_cast<std::size_t>(c.communicator)];
            const std::span<const std::uint32_t> live = live_members(c.communicator);
            const int blocks = collective_blocks_[static_cast<std::size_t>(op.ref)];
            for (std::uint32_t i : live) comm_changed(members[i], -1, blocks);
            const std::span<const OpId> ops = graph_.collective_ops(op.ref);
            for (std::uint32_t i : live)
                if (ops[i] != OpGraph::kNoOp) finish(ops[i]);
        } else if (op.kind == OpKind::send) {
            const P2P& p = graph_.p2ps()[static_cast<std::size_t>(op.ref)];
            comm_changed(p.src, -1);
            comm_changed(p.dst, -1);
            finish(p.send);
            finish(p.recv);
        } else {
            finish(owner);
        }
    }

    /// A compute op's duration, cached per (recipe, node group, dtype, host): the identical layer
    /// passes of a run are priced once.
    Time op_time(OpId id, const Op& op) {
        if (op.ref < 0) return compute_time(op, {}, *group_[op.rank]);
        const std::size_t key = recipe_key(op);
        if (key >= recipe_time_.size()) recipe_time_.resize(key + 1, Time::ps(-1));
        Time& t = recipe_time_[key];
        if (t < Time::zero()) t = compute_time(op, graph_.kernels_of(id), *group_[op.rank], graph_.dispatch_overhead());
        return t;
    }

    /// The op's time on its own device: its priced time (op_time) over the device's speed
    /// (Cluster::compute_speed: a node group's "speed", --slow), times its jitter factor. Host ops
    /// of a GPU node run on the host CPU and are priced by start_host instead: a slow GPU does
    /// not slow its host.
    Time device_time(OpId id, const Op& op) {
        Time t = op_time(id, op);
        const double speed = speed_[static_cast<std::size_t>(op.rank)];
        if (speed != 1.0) t = t * (1.0 / speed);
        if (cluster_.jitter.percent > 0) t = t * jitter_factor(cluster_.jitter, id);
        return t;
    }

    std::size_t recipe_key(const Op& op) const {
        return ((static_cast<std::size_t>(op.ref) * cluster_.groups.size() + group_index_[static_cast<std::size_t>(op.rank)]) * 3 +
                static_cast<std::size_t>(op.dtype())) * 2 + op.on_host();
    }

    /// The op's time per kernel class, stretched to its simulated duration (communication may
    /// have slowed it).
    void record_classes(OpId id) {
        const Op& op = graph_.op(id);
        std::array<Time, kKernelClasses> split{};
        const Time priced = compute_time(op, graph_.kernels_of(id), *group_[op.rank], graph_.dispatch_overhead(), &split);
        const Time took = tl_.end[id] - tl_.start[id];
        if (tl_.kernel_class_time.empty()) tl_.kernel_class_time.assign(graph_.size(), {});
        auto& out = tl_.kernel_class_time[id];
        for (int c = 0; c < kKernelClasses; ++c)
            out[static_cast<std::size_t>(c)] = priced > Time::zero() ? split[static_cast<std::size_t>(c)] * (took / priced) : Time::zero();
    }

    // ---- compute slowed by communication -------------------------------------------------------

    /// A compute op whose rate depends on the communication running on its rank: it progresses at
    /// 1/factor of its rate, factor = slowdown(rank, bound) as of `updated`.
    struct Running {
        OpId op;
        std::uint32_t event;   // its completion event (movable: a new rate moves it to `end`)
        double remaining_ps;   // of unslowed work
        Time updated;
        double bound;          // sm_bound_share of the op
        double factor;
        Time end;              // its completion at the current rate
    };

    /// How much slower an op runs on `rank` now: the device's comm_slowdown while any transfer
    /// runs there, times, on a GPU of `sms` SMs, 1 + bound · (sms / (sms − b) − 1) while NCCL's
    /// thread blocks hold b of them (a GEMM's or attention kernel's throughput is that of the SMs
    /// it gets: each block stays resident for the whole call, src/enqueue.cc:1756-1758).
    double slowdown(int rank, double bound) const {
        const auto r = static_cast<std::size_t>(rank);
        const topo::DeviceKind& dev = group_[r]->device;
        double k = active_comm_[r] > 0 ? dev.comm_slowdown : 1.0;
        if (bound > 0 && held_blocks_[r] > 0) {
            const double sms = dev.sms, held = std::min<double>(held_blocks_[r], dev.sms - 1);
            k *= 1.0 + bound * (sms / (sms - held) - 1.0);
        }
        return k;
    }

    /// An op's sm_bound_share, cached per recipe as op_time is.
    double bound_share(OpId id, const Op& op) {
        if (op.ref < 0) return sm_bound_share(op, {}, *group_[op.rank]);
        const std::size_t key = recipe_key(op);
        if (key >= recipe_bound_.size()) recipe_bound_.resize(key + 1, -1.0);
        double& b = recipe_bound_[key];
        if (b < 0) b = sm_bound_share(op, graph_.kernels_of(id), *group_[op.rank], graph_.dispatch_overhead());
        return b;
    }

    /// A transfer starts (delta +1) or ends (−1) on `rank`; `blocks`: the SMs NCCL's thread blocks
    /// take there meanwhile. The ops running on the rank continue at their new rate.
    void comm_changed(int rank, int delta, int blocks = 0) {
        const auto r = static_cast<std::size_t>(rank);
        active_comm_[r] = static_cast<std::uint32_t>(static_cast<int>(active_comm_[r]) + delta);
        held_blocks_[r] = static_cast<std::uint32_t>(static_cast<int>(held_blocks_[r]) + delta * blocks);
        for (Running& run : running_[r]) {
            const double factor = slowdown(rank, run.bound);
            if (factor == run.factor) continue;
            const double elapsed = static_cast<double>((engine_.now() - run.updated).count_ps());
            run.remaining_ps = std::max(0.0, run.remaining_ps - elapsed / run.factor);
            run.updated = engine_.now();
            run.factor = factor;
            const Time end = engine_.now() + ps_truncated(run.remaining_ps * run.factor);
            if (end == run.end) continue;
            run.end = end;
            engine_.move(run.event, end);
        }
    }

    /// A tracked op ended: it no longer runs on `rank`.
    void finish_running(int rank, OpId op) {
        auto& v = running_[static_cast<std::size_t>(rank)];
        for (std::size_t i = 0; i < v.size(); ++i)
            if (v[i].op == op) {
                v.erase(v.begin() + static_cast<std::ptrdiff_t>(i));
                return;
            }
        throw Error(ErrorKind::internal, "simulator: a tracked op ended but was not running");
    }

    // ---- transfers ------------------------------------------------------------------------------

    /// Starts a transfer; returns its index (kNoTransfer in analytic mode).
    std::uint32_t begin(const Plan* plan, OpId owner) {
        if (options_.network == NetworkMode::analytic) {
            // One event at the predicted end; the owner op's completion event carries it.
            engine_.schedule(engine_.now() + plan->analytic, op_done, owner);
            return kNoTransfer;
        }
        std::uint32_t t;
        if (!free_transfers_.empty()) {
            t = free_transfers_.back();
            free_transfers_.pop_back();
        } else {
            t = static_cast<std::uint32_t>(transfers_.size());
            transfers_.emplace_back();
        }
        transfers_[t] = {plan, owner, 0, 0};
        if (plan->base > Time::zero())
            engine_.schedule(engine_.now() + plan->base, phase_start, t);
        else
            start_phase(t);
        return t;
    }
    static constexpr std::uint32_t kNoTransfer = 0xffffffffu;

    void start_phase(std::uint32_t t) {
        Transfer& tr = transfers_[t];
        if (tr.phase == tr.plan->phases.size()) {  // no phases: a collective of one rank
            const OpId owner = tr.owner;
            free_transfers_.push_back(t);
            transfer_done(owner);
            return;
        }
        const Plan::Phase& ph = tr.plan->phases[tr.phase];
        tr.flows_left = static_cast<std::uint32_t>(ph.flows.size());
        if (ph.flows.empty()) {
            engine_.schedule(engine_.now() + ph.latency, phase_end, t);
            return;
        }
        // Each flow is one coupling class of the phase, its members in lockstep (see FlowNetwork).
        for (const auto& f : ph.flows) tr.flow = network_.start(f.links, f.bytes, t, engine_.now(), f.max_rate, f.weights);
    }

    void flow_done(std::uint32_t t) {
        Transfer& tr = transfers_[t];
        const Op& owner = graph_.op(tr.owner);
        if (owner.kind == OpKind::compute) {   // a host op: its cores go to the others
            auto& active = host_[static_cast<std::size_t>(cluster_.device(owner.rank).node)].active;
            active.erase(std::find(active.begin(), active.end(), t));
            share_cores(owner.rank);
        }
        if (--tr.flows_left > 0) return;
        const Time latency = tr.plan->phases[tr.phase].latency;
        // An NCCL phase's latency is the plan's base, paid before it: the phase ends with its flows.
        if (latency == Time::zero())
            end_phase(t);
        else
            engine_.schedule(engine_.now() + latency, phase_end, t);
    }

    /// Transfer `t`'s phase ended: the next one starts, or the transfer is done.
    void end_phase(std::uint32_t t) {
        Transfer& tr = transfers_[t];
        ++tr.phase;
        if (tr.phase < tr.plan->phases.size()) {
            start_phase(t);
        } else {
            const OpId owner = tr.owner;
            free_transfers_.push_back(t);
            transfer_done(owner);
        }
    }

    void handle(const Event& e) {
        switch (e.kind) {
            case op_done: {
                const Op& op = graph_.op(e.id);
                if (op.kind == OpKind::compute) {
                    if (tracked_[e.id]) finish_running(op.rank, e.id);
                    finish(e.id);
                } else if (op.kind == OpKind::timer) {
                    finish(e.id);
                } else
                    transfer_done(e.id);  // analytic mode
                break;
            }
            case phase_start: start_phase(e.id); break;
            case phase_end: end_phase(e.id); break;
            default: throw Error(ErrorKind::internal, "engine: unknown event kind");
        }
    }

    // ---- plans ----------------------------------------------------------------------------------

    /// Every transfer's plan, made before the run (a plan depends on its op alone), and then its
    /// flows over classes of links every flow crosses alike (sim/link_classes.hpp) instead of the
    /// links: the rates are the same, and a collective over every rank crosses a few classes.
    /// Link samples (traces) name the links, so a run recording them keeps the links.
    void merge_links() {
        build_plans();
        LinkClasses classes(link_bandwidths(topo_));
        for (const Plan& plan : plans_)
            for (const Plan::Phase& ph : plan.phases)
                for (const Plan::Flow& f : ph.flows) classes.refine(f.links, f.weights);
        classes.finish();
        for (Plan& plan : plans_)
            for (Plan::Phase& ph : plan.phases)
                for (Plan::Flow& f : ph.flows) classes.map(f.links, f.weights);
        network_ = FlowNetwork(classes.capacities());
        links_merged_ = true;
    }

    /// Every transfer's plan, before the run.
    void build_plans() {
        for (OpId id = 0; id < graph_.size(); ++id) {
            starting_ = id;
            const Op& op = graph_.op(id);
            switch (op.kind) {
                case OpKind::collective: collective_plan(op.ref); break;
                case OpKind::send: p2p_plan(op.ref); break;
                case OpKind::copy: copy_plan(op); break;
                case OpKind::compute:
                    if (op.on_host() && host_links(op.rank)) host_plan(id, op);
                    break;
                default: break;
            }
        }
        starting_ = OpGraph::kNoOp;
    }

    /// Marks `route` as watched when a watched rank sends or receives over it (SimOptions::link_ranks).
    void watch(int src, int dst, std::span<const LinkId> route) {
        if (watched_rank_.empty() ||
            !(watched_rank_[static_cast<std::size_t>(src)] || watched_rank_[static_cast<std::size_t>(dst)]))
            return;
        for (LinkId l : route) watched_link_[static_cast<std::size_t>(l)] = true;
    }

    const Plan* remember(const PlanKey& key, Plan&& plan) {
        if (links_merged_) throw Error(ErrorKind::internal, "simulator: a transfer's plan was not made before the run");
        plans_.push_back(std::move(plan));
        plan_index_.emplace(key, &plans_.back());
        return &plans_.back();
    }

    /// Collective `ref`'s plan, looked up once per collective (its members' ops all ask).
    const Plan* collective_plan(std::int32_t ref) {
        const Plan*& plan = collective_plan_[static_cast<std::size_t>(ref)];
        if (plan == nullptr) {
            const Collective& c = graph_.collectives()[static_cast<std::size_t>(ref)];
            plan = collective_plan(c, graph_.communicators()[static_cast<std::size_t>(c.communicator)]);
        }
        return plan;
    }

    const Plan* collective_plan(const Collective& c, const std::vector<int>& members) {
        const PlanKey key{(static_cast<std::uint64_t>(c.communicator) << 8) | static_cast<std::uint64_t>(c.kind) |
                              (static_cast<std::uint64_t>(c.root + 1) << 40),
                          static_cast<std::uint64_t>(c.bytes)};
        if (auto it = plan_index_.find(key); it != plan_index_.end()) return it->second;
        if (const auto t = measured_collective_time(cluster_, c.kind, members, Bytes(c.bytes), ctx_.node_of)) {
            // Measured, it is still NCCL's call, holding the thread blocks of NCCL's choice.
            Plan plan = measured_plan(*t);
            if (ctx_.gpu && options_.algo == CollectiveAlgo::automatic)
                plan.thread_blocks =
                    static_cast<std::uint16_t>(choose(c.kind, members, Bytes(c.bytes), c.root, options_.algo, ctx_).thread_blocks);
            return remember(key, std::move(plan));
        }
        const CollectiveSchedule s = choose(c.kind, members, Bytes(c.bytes), c.root, options_.algo, ctx_);
        const double eff = protocol_costs(s.protocol).efficiency;
        Plan plan;
        plan.analytic = predict(s, ctx_.routes);
        plan.thread_blocks = static_cast<std::uint16_t>(s.thread_blocks);
        if (s.nccl) {
            // NCCL's latency first; then its one phase of flows, each capped to finish in NCCL's
            // bandwidth time (sim/collectives.hpp).
            plan.base = s.latency;
            for (const auto& ph : s.phases) {
                Plan::Phase out;
                PhaseFlows flows(link_slot_);
                for (const auto& f : ph.flows) {
                    const Bytes wire = f.bytes * (1.0 / eff);
                    const Bandwidth cap = s.bandwidth_time > Time::zero() ? wire / s.bandwidth_time : Bandwidth();
                    const auto route = ctx_.routes.route(f.src, f.dst);
                    watch(f.src, f.dst, route);
                    flows.add(route, wire, cap);
                }
                out.flows = flows.take();
                plan.phases.push_back(std::move(out));
            }
            return remember(key, std::move(plan));
        }
        plan.base = base_latency(s.algo, s.protocol);
        for (const auto& ph : s.phases) {
            Plan::Phase out;
            out.latency = step_latency(ph, s.protocol, ctx_.routes) * static_cast<std::int64_t>(ph.steps);
            PhaseFlows flows(link_slot_);
            for (const auto& f : ph.flows) {
                const auto route = ctx_.routes.route(f.src, f.dst);
                watch(f.src, f.dst, route);
                flows.add(route, f.bytes * (1.0 / eff), Bandwidth());
            }
            out.flows = flows.take();
            plan.phases.push_back(std::move(out));
        }
        return remember(key, std::move(plan));
    }

    /// A transfer that takes a measured time and no link bandwidth (sim/measured.hpp).
    static Plan measured_plan(Time t) {
        Plan plan;
        Plan::Phase ph;
        ph.latency = t;
        plan.phases.push_back(std::move(ph));
        plan.analytic = t;
        return plan;
    }

    const Plan* single_flow_plan(const PlanKey& key, topo::VertexId a, topo::VertexId b, Bytes bytes, Time extra,
                                 const std::vector<std::pair<topo::VertexId, topo::VertexId>>& mirrored = {}) {
        if (auto it = plan_index_.find(key); it != plan_index_.end()) return it->second;
        Plan plan;
        Plan::Phase ph;
        PhaseFlows flows(link_slot_);
        flows.add(topo_.route(a, b), bytes, Bandwidth());
        // A folded graph's mirrors send the same bytes at the same time over their own routes:
        // one flow with the representative's (a link two of them cross carries both).
        for (const auto& [ma, mb] : mirrored) flows.add(topo_.route(ma, mb), bytes, Bandwidth());
        ph.flows = flows.take();
        ph.latency = topo_.route_latency(a, b) + extra;
        plan.analytic = ph.latency + bytes / topo_.route_bandwidth(a, b);
        plan.phases.push_back(std::move(ph));
        return remember(key, std::move(plan));
    }

    /// Send `ref`'s plan, looked up once per send.
    const Plan* p2p_plan(std::int32_t ref) {
        const Plan*& plan = p2p_plan_[static_cast<std::size_t>(ref)];
        if (plan == nullptr) plan = p2p_plan(graph_.p2ps()[static_cast<std::size_t>(ref)]);
        return plan;
    }

    const Plan* p2p_plan(const P2P& p) {
        // A point-to-point transfer pays the route's latency plus, on GPUs, NCCL's per-hop cost.
        const bool net = cluster_.device(p.src).node != cluster_.device(p.dst).node;
        const ProtocolCosts& costs = protocol_costs(gpu_ ? Protocol::simple : Protocol::host);
        const PlanKey key{(1ull << 62) | (static_cast<std::uint64_t>(p.src) << 31) | static_cast<std::uint64_t>(p.dst),
                          static_cast<std::uint64_t>(p.bytes)};
        if (auto it = plan_index_.find(key); it != plan_index_.end()) return it->second;
        if (const auto t = measured_p2p_time(cluster_, p.src, p.dst, Bytes(p.bytes))) return remember(key, measured_plan(*t));
        const bool watching = !watched_rank_.empty();
        if (watching) watch(p.src, p.dst, topo_.route(topo_.device_vertex(p.src), topo_.device_vertex(p.dst)));
        std::vector<std::pair<topo::VertexId, topo::VertexId>> mirrored;
        if (net) {
            // Mirrors of an inter-node transfer share the fabric with it. (Intra-node links of a
            // mirror replica carry only that replica's traffic, the same as its representative's.)
            const auto ms = graph_.mirrors(p.src), md = graph_.mirrors(p.dst);
            for (std::size_t i = 0; i < ms.size(); ++i) {
                mirrored.emplace_back(topo_.device_vertex(ms[i]), topo_.device_vertex(md[i]));
                if (watching) watch(ms[i], md[i], topo_.route(mirrored.back().first, mirrored.back().second));
            }
        }
        return single_flow_plan(key, topo_.device_vertex(p.src), topo_.device_vertex(p.dst), Bytes(p.bytes),
                                net ? costs.hop_net : costs.hop_intra, mirrored);
    }

    topo::VertexId tier_vertex(int rank, Tier tier) const {
        switch (tier) {
            case Tier::device: return topo_.device_vertex(rank);
            case Tier::host: return topo_.host_vertex(rank);
            case Tier::nvme: {
                const topo::VertexId v = topo_.nvme_vertex(rank);
                if (v < 0)
                    throw Error(ErrorKind::bad_input, "a copy to NVMe on " + cluster_.device_name(rank) +
                                                          ", whose node has no NVMe drive");
                return v;
            }
        }
        return -1;
    }

    const Plan* copy_plan(const Op& op) {
        const PlanKey key{(2ull << 62) | (static_cast<std::uint64_t>(op.rank) << 8) | op.sub,
                          static_cast<std::uint64_t>(op.bytes)};
        const topo::VertexId from = tier_vertex(op.rank, op.copy_from()), to = tier_vertex(op.rank, op.copy_to());
        if (!watched_rank_.empty()) watch(op.rank, op.rank, topo_.route(from, to));
        return single_flow_plan(key, from, to, Bytes(op.bytes), Time::zero());
    }

    // ---- host compute ---------------------------------------------------------------------------

    bool host_links(int rank) const { return host_[static_cast<std::size_t>(cluster_.device(rank).node)].links[0] >= 0; }

    /// A host op as a flow of its DRAM traffic (bytes / the host's streaming efficiency) over the
    /// node's DRAM links, then the CPU's dispatch of its kernels; cached per (recipe, node): the
    /// links are the node's own.
    const Plan* host_plan(OpId id, const Op& op) {
        const topo::NodeGroup& grp = *group_[op.rank];
        const auto node = static_cast<std::uint64_t>(cluster_.device(op.rank).node);
        const PlanKey key{(3ull << 62) | (static_cast<std::uint64_t>(op.ref + 1) << 24) | node,
                          op.ref < 0 ? static_cast<std::uint64_t>(op.bytes) : 0};
        if (auto it = plan_index_.find(key); it != plan_index_.end()) return it->second;
        const auto kernels = graph_.kernels_of(id);
        std::int64_t bytes = op.bytes;
        if (!kernels.empty()) bytes = total_bytes(kernels);
        Plan plan;
        Plan::Phase ph;
        const auto& links = host_[static_cast<std::size_t>(cluster_.device(op.rank).node)].links;
        const Bytes traffic = Bytes(bytes) * (1.0 / grp.host_memory_efficiency);
        Plan::Flow flow;
        for (const LinkId l : links)
            if (l >= 0) flow.links.push_back(l);
        flow.bytes = traffic;
        ph.flows.push_back(std::move(flow));
        ph.latency = grp.device.launch_overhead * static_cast<std::int64_t>(std::max<std::size_t>(1, kernels.size()));
        plan.analytic = ph.latency + traffic / (grp.host_memory_bandwidth * grp.host_memory_efficiency);
        plan.phases.push_back(std::move(ph));
        return remember(key, std::move(plan));
    }

    void start_host(OpId id, const Op& op) {
        const std::uint32_t t = begin(host_plan(id, op), id);
        host_[static_cast<std::size_t>(cluster_.device(op.rank).node)].active.push_back(t);
        share_cores(op.rank);
    }

    /// Every host op running on the rank's node gets an equal share of the node's cores: its
    /// flow is capped at the rate that share computes it (bytes per FLOP × FLOP/s).
    void share_cores(int rank) {
        const topo::NodeGroup& grp = *group_[rank];
        if (!grp.host_peak) return;
        const auto& active = host_[static_cast<std::size_t>(cluster_.device(rank).node)].active;
        const double share = grp.host_peak->per_second() / static_cast<double>(std::max<std::size_t>(1, active.size()));
        for (std::uint32_t t : active) {
            const Op& op = graph_.op(transfers_[t].owner);
            if (!(op.flops > 0)) continue;
            const double bytes = transfers_[t].plan->phases.front().flows.front().bytes.as_double();
            network_.set_cap(transfers_[t].flow, Bandwidth::bytes_per_s(share * bytes / op.flops));
        }
    }

    // ---- deadlock -------------------------------------------------------------------------------

    void check_finished() const {
        // Per rank and stream, the first op that never finished; nothing to say when all did.
        std::vector<std::array<OpId, kStreams>> first(static_cast<std::size_t>(graph_.ranks()));
        for (auto& a : first) a.fill(static_cast<OpId>(-1));
        bool stuck = false;
        for (OpId id = 0; id < graph_.size(); ++id) {
            if (tl_.end[id] >= Time::zero()) continue;
            const Op& op = graph_.op(id);
            OpId& f = first[static_cast<std::size_t>(op.rank)][static_cast<int>(op.stream)];
            if (f == static_cast<OpId>(-1)) f = id;
            stuck = true;
        }
        if (!stuck) return;
        std::ostringstream msg;
        int shown = 0;
        for (int r = 0; r < graph_.ranks() && shown < 8; ++r) {
            bool any = false;
            for (OpId id : first[static_cast<std::size_t>(r)]) {
                if (id == static_cast<OpId>(-1)) continue;
                if (!any) msg << "\n  rank " << r << " (" << tl_.device_names[r] << "):";
                any = true;
                msg << "\n    " << graph_.op_name(id) << " — " << waits_for(id);
            }
            shown += any;
        }
        throw Error(ErrorKind::deadlock, "deadlock at " + to_string(engine_.now()) +
                                             ": no event is pending and these ops cannot run:" + msg.str());
    }

    std::string waits_for(OpId id) const {
        const Op& op = graph_.op(id);
        if (tl_.start[id] >= Time::zero()) {
            if (op.kind == OpKind::collective) {
                std::string missing;
                for (OpId m : graph_.collective_ops(op.ref))
                    if (m != OpGraph::kNoOp && tl_.start[m] < Time::zero()) missing += (missing.empty() ? "" : ", ") + std::to_string(graph_.op(m).rank);
                return "started, waits for ranks " + missing + " to reach it";
            }
            if (op.kind == OpKind::send || op.kind == OpKind::recv) {
                const P2P& p = graph_.p2ps()[static_cast<std::size_t>(op.ref)];
                return op.kind == OpKind::send ? "waits for the receive on rank " + std::to_string(p.dst)
                                               : "waits for the send on rank " + std::to_string(p.src);
            }
            return "started but never finished";
        }
        for (OpId p : graph_.predecessors(id))
            if (tl_.end[p] < Time::zero()) return "waits for " + graph_.describe(p);
        return "never became ready";
    }

    const OpGraph& graph_;
    const topo::Cluster& cluster_;
    const topo::Topology& topo_;
    SimOptions options_;
    Engine engine_;
    FlowNetwork network_;
    std::vector<std::uint32_t> link_slot_;     // PhaseFlows' scratch
    Timeline tl_;
    bool gpu_ = false;
    std::vector<const topo::NodeGroup*> group_;
    std::vector<std::uint32_t> group_index_;   // per rank: its node group in the cluster
    std::vector<Time> recipe_time_;            // op_time's cache; -1 ps: not priced yet
    PhaseRouteCache phase_routes_;            // what the routes of each collective phase give (sim/collectives.hpp)
    CollectiveContext ctx_;

    std::vector<std::uint32_t> remaining_;
    std::vector<OpId> ready_;
    std::size_t ready_head_ = 0;
    OpId starting_ = OpGraph::kNoOp;   // the op start() is starting, for out-of-range messages
    std::vector<std::uint32_t> arrived_;
    std::vector<std::uint32_t> needed_;   // per collective: members with ops
    std::vector<std::uint32_t> live_pos_, live_start_;   // per communicator: its materialized members' positions
    std::span<const std::uint32_t> live_members(std::int32_t communicator) const {
        const auto c = static_cast<std::size_t>(communicator);
        return {live_pos_.data() + live_start_[c], live_start_[c + 1] - live_start_[c]};
    }
    std::vector<std::uint8_t> p2p_ready_;
    std::vector<std::uint32_t> active_comm_;   // per rank: transfers running
    std::vector<std::uint32_t> held_blocks_;   // per rank: SMs NCCL's running calls hold
    std::vector<std::uint8_t> communicates_;   // per rank: it takes part in a collective or a send
    std::vector<std::vector<Running>> running_;
    std::vector<std::uint8_t> tracked_;        // per op: its completion is tracked in running_
    std::vector<double> recipe_bound_;         // bound_share's cache; < 0: not priced yet
    std::vector<std::uint16_t> collective_blocks_;   // per collective: its thread blocks while it runs
    std::vector<const Plan*> collective_plan_;       // per collective: its plan, once looked up
    std::vector<const Plan*> p2p_plan_;              // per send: its plan, once looked up
    std::optional<MemoryModel> memory_;
    std::vector<HostCpu> host_;   // per node
    std::vector<double> speed_;   // per rank: Cluster::compute_speed
    /// A stream served in arrival order: the op running on it and those waiting, in arrival order.
    struct Served {
        OpId holder = OpGraph::kNoOp;
        std::deque<OpId> queue;
    };
    std::unordered_map<std::size_t, Served> served_;   // by stream_key
    bool any_served_ = false;                          // the graph has streams served in arrival order
    std::vector<Transfer> transfers_;
    std::vector<std::uint32_t> free_transfers_;
    std::deque<Plan> plans_;
    bool links_merged_ = false;   // plans_' flows cross link classes (merge_links)
    std::vector<bool> watched_rank_;   // SimOptions::link_ranks, per rank; empty: every link is sampled
    std::vector<bool> watched_link_;   // the links their traffic crosses, marked as the plans are made
    std::unordered_map<PlanKey, const Plan*, PlanKeyHash> plan_index_;
};

}  // namespace

Timeline simulate(const OpGraph& graph, const topo::Cluster& cluster, const topo::Topology& topology,
                  const SimOptions& options) {
    if (!graph.finalized()) throw Error(ErrorKind::internal, "simulate() needs a finalized graph");
    Simulator s(graph, cluster, topology, options);
    return s.run();
}

Timeline simulate(const OpGraph& graph, const topo::Cluster& cluster, const SimOptions& options) {
    const topo::Topology topology(cluster);
    return simulate(graph, cluster, topology, options);
}

}  // namespace smol::sim

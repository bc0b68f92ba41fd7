// The flow-level network: every transfer is a flow on its route, and the links' bandwidth is
// shared max-min fairly among the flows crossing them (progressive filling). Rates change only
// when a flow starts or ends, and only for the flows connected to the change through shared
// links, so a solve touches the affected component, not the whole network.
//
// Changes are batched: start() and complete() mark links dirty, solve(now) recomputes once for
// everything that happened at `now`. The engine asks next_completion() for this model's next
// event (SimGrid's "ask each resource model for its next event").
//
// Flows may be coupled in a group: the edges of one pipelined collective phase (a ring step, a
// tree) move chunk by chunk, so none runs ahead of the slowest, and every flow of the group
// gets the same rate — the fair share of the group's most contended flow (progressive filling
// freezes a group when any of its flows reaches a saturated link). Equal-sized flows of a group
// then finish together: one solve per phase instead of one per flow.
//
// Hot path: no allocation per flow or per solve once the pools have grown; flows live in a
// free-listed pool; completions sit in a heap with lazy deletion (a version per flow).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/timeline.hpp"
#include "core/units.hpp"

namespace smol::sim {

using FlowId = std::uint32_t;

class FlowNetwork {
public:
    /// One capacity per link.
    explicit FlowNetwork(const std::vector<Bandwidth>& capacity);

    static constexpr std::uint32_t kNoGroup = 0xffffffffu;

    /// Starts a flow of `bytes` over `route` (link ids; the span must stay valid while the flow
    /// lives). `tag` is returned by complete(). Flows with the same `group` (a small dense id,
    /// or kNoGroup) share one rate. `max_rate` caps the flow's rate (zero: no cap): what a
    /// protocol sustains regardless of the links (NCCL's per-channel bandwidth). Rates are stale
    /// until solve().
    FlowId start(std::span<const std::int32_t> route, Bytes bytes, std::uint32_t tag, Time now,
                 std::uint32_t group = kNoGroup, Bandwidth max_rate = Bandwidth());
    /// Changes a running flow's cap (zero: none), as when the cores serving it are shared anew;
    /// its rate is recomputed at the next solve().
    void set_cap(FlowId f, Bandwidth max_rate);
    /// Recomputes the rates of flows connected to links changed since the last solve.
    void solve(Time now);
    /// When the next flow finishes (after solve); Time::max() when none is active.
    Time next_completion();
    /// Removes every flow finishing at `now`, appending their tags in flow-id order.
    void complete(Time now, std::vector<std::uint32_t>& tags);

    std::size_t active_flows() const { return active_; }
    /// Current rate of a flow, for tests.
    Bandwidth rate(FlowId f) const { return Bandwidth::bytes_per_s(flows_[f].rate * 1e12); }
    /// Record link utilisation samples (for traces) into `out` on every solve.
    void record_links(std::vector<LinkSample>* out) { samples_ = out; }
    std::uint64_t solves() const { return solves_; }

private:
    struct Flow {
        double remaining = 0;      // bytes
        double rate = 0;           // bytes per picosecond
        Time updated;              // when `remaining` was last brought up to date
        const std::int32_t* route = nullptr;
        std::uint32_t hops = 0;
        std::uint32_t tag = 0;
        std::uint32_t version = 0;
        std::uint32_t stamp = 0;   // component search mark
        std::uint32_t group = kNoGroup;
        double cap = 0;            // bytes per picosecond; 0: no cap
        bool active = false;
        bool frozen = false;       // water-filling mark
    };
    struct Pending {               // completion heap entry
        Time time;
        FlowId flow;
        std::uint32_t version;
    };
    struct ShareEntry {            // water-filling heap entry: a link's fair share, or a flow's cap
        double share;
        std::int32_t link;         // ≥ 0: a link; < 0: the cap of flow −1 − link
        std::uint32_t version;
    };

    void mark_dirty(std::int32_t link);
    void visit(FlowId f);
    void freeze(FlowId f, double share, std::int32_t via_link, bool with_group);
    void push_pending(FlowId f, Time t);

    std::vector<double> capacity_;                  // bytes per picosecond
    std::vector<std::vector<FlowId>> on_link_;
    std::vector<Flow> flows_;
    std::vector<FlowId> free_;
    std::size_t active_ = 0;
    std::vector<Pending> pending_;                  // min-heap on (time, flow)

    // Scratch, sized to the link count once.
    std::vector<std::int32_t> dirty_;
    std::vector<std::vector<FlowId>> groups_;      // members per group id
    std::vector<std::uint32_t> group_stamp_;
    std::vector<std::uint32_t> link_stamp_;
    std::vector<double> residual_;
    std::vector<std::uint32_t> unfrozen_;
    std::vector<std::uint32_t> link_version_;
    std::vector<float> last_util_;
    std::vector<std::int32_t> comp_links_;
    std::vector<FlowId> comp_flows_;
    std::vector<ShareEntry> shares_;
    std::uint32_t stamp_ = 0;
    std::vector<std::uint32_t> group_cap_stamp_;   // the solve that pushed the group's cap
    std::uint32_t cap_stamp_ = 0;
    std::uint64_t solves_ = 0;
    std::vector<LinkSample>* samples_ = nullptr;
};

}  // namespace smol::sim

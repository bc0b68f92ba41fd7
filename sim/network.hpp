// The flow-level network: every transfer is a flow on its route, and the links' bandwidth is
// shared max-min fairly among the flows crossing them (progressive filling).
//
// A flow may stand for several flows in lockstep (an aggregated flow): the edges of one
// pipelined collective phase (a ring step, a tree) move chunk by chunk, so none runs ahead of the
// slowest, and a folded graph's mirrored replicas send the same bytes at the same time. Such a
// flow carries `weight` member flows on each of its links, every member at the flow's rate, so a
// link's load is Σ weight × rate; progressive filling freezes it as one when any of its links
// saturates — the fair share of its most contended member. One flow, one completion, one
// re-solve per phase instead of one per member.
//
// Incremental solving. A max-min fair allocation is the unique feasible one in which every flow
// has a bottleneck: its cap, or a saturated link on which no flow runs faster. Rates change only
// when flows start or end, so solve(now) re-fills only the flows that may have lost their
// bottleneck — the new ones and those whose bottleneck link a start or an end touched — holding
// every other rate fixed (their load leaves the links' residual capacity), then checks the
// bottleneck condition for the held flows on the links it refilled; any held flow that fails it
// joins the refilled set and the fill is redone. When the check passes the allocation is the one
// a fill of the whole network from scratch would give (tests/sim/test_network.cpp compares them
// on random flow sets). A fill grows to the connected component only when the change really
// spreads that far.
//
// A flow alone in the network (a data-parallel step's collectives run one after another) is its
// own bottleneck everywhere: it is solved from its links' capacities and cap without being
// entered on them (detached), and entered only when another flow starts beside it — entered
// first, as it would have been. A collective over every rank then costs one pass over its links
// instead of an entry and a removal on each and a fill.
//
// Changes are batched: start() and complete() mark links dirty, solve(now) recomputes once for
// everything that happened at `now`. The engine asks next_completion() for this model's next
// event (SimGrid's "ask each resource model for its next event").
//
// Hot path: no allocation per flow or per solve once the pools have grown; flows live in a
// free-listed pool; completions sit in a heap with lazy deletion (a version per flow).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/timeline.hpp"
#include "core/units.hpp"

namespace smol::sim {

using FlowId = std::uint32_t;

class FlowNetwork {
public:
    /// One capacity per link.
    explicit FlowNetwork(const std::vector<Bandwidth>& capacity);

    /// Starts a flow of `bytes` (per member) over `links` (distinct link ids; the spans must stay
    /// valid while the flow lives). `weights[i]`: how many member flows cross links[i] (empty:
    /// one each). `tag` is returned by complete(). `max_rate` caps each member's rate (zero: no
    /// cap): what a protocol sustains regardless of the links (NCCL's per-channel bandwidth).
    /// Rates are stale until solve().
    FlowId start(std::span<const std::int32_t> links, Bytes bytes, std::uint32_t tag, Time now,
                 Bandwidth max_rate = Bandwidth(), std::span<const std::uint32_t> weights = {});
    /// Changes a running flow's cap (zero: none), as when the cores serving it are shared anew;
    /// its rate is recomputed at the next solve().
    void set_cap(FlowId f, Bandwidth max_rate);
    /// Recomputes the rates of the flows a start or an end since the last solve may change.
    void solve(Time now);
    /// When the next flow finishes (after solve); Time::max() when none is active.
    Time next_completion();
    /// Removes every flow finishing at `now`, appending their tags in flow-id order.
    void complete(Time now, std::vector<std::uint32_t>& tags);

    std::size_t active_flows() const { return active_; }
    /// Current rate of a flow (of each member), for tests.
    Bandwidth rate(FlowId f) const { return Bandwidth::bytes_per_s(flows_[f].rate * 1e12); }
    /// Record link utilisation samples (for traces) into `out` on every solve: of every link, or
    /// where `only` is given (indexed by link id), of the links it marks.
    void record_links(std::vector<LinkSample>* out, std::vector<bool> only = {}) {
        samples_ = out;
        sample_only_ = std::move(only);
    }
    std::uint64_t solves() const { return solves_; }
    /// Flows refilled over all solves (the work the incremental solve does), for benchmarks.
    std::uint64_t refilled() const { return refilled_; }

private:
    static constexpr std::int32_t kCapBound = -1, kUnsolved = -2;
    struct Flow {
        double remaining = 0;      // bytes per member
        double rate = 0;           // bytes per picosecond per member
        double cap = 0;            // bytes per picosecond; 0: no cap
        Time updated;              // when `remaining` was last brought up to date
        const std::int32_t* links = nullptr;
        const std::uint32_t* weights = nullptr;   // null: one member per link
        std::uint32_t hops = 0;
        std::uint32_t tag = 0;
        std::uint32_t version = 0;
        std::uint32_t stamp = 0;   // in the refilled set of solve `stamp`
        std::int32_t bottleneck = kUnsolved;   // the link that froze it, or kCapBound
        std::uint32_t slot = 0;    // its index in set_ during a fill
        bool active = false;
        bool frozen = false;
        bool detached = false;     // alone, not entered on its links (see attach)
        std::uint32_t weight(std::uint32_t h) const { return weights ? weights[h] : 1u; }
    };
    struct OnLink {                // a flow crossing a link with `weight` members
        FlowId flow;
        std::uint32_t weight;
    };
    struct Pending {               // completion heap entry
        Time time;
        FlowId flow;
        std::uint32_t version;
    };
    struct ShareEntry {            // water-filling heap entry: a link's fair share, or a flow's own limit
        double share;
        std::int32_t link;         // ≥ 0: a link; < 0: the limit of flow −1 − link
        std::uint32_t version;
    };

    /// Per link, what entering, leaving and solving a flow read on every link it crosses, in half
    /// a cache line: its capacity, its flow count and, while no more than kInline flows cross it
    /// (most links), the flows themselves; past that they move to a spill list until the link
    /// empties. What only a shared link needs during a fill is apart (LinkFill): the hot table is
    /// half the size, so a flow over most of a large fabric's links streams through half the bytes.
    static constexpr std::uint32_t kInline = 2;
    struct alignas(32) LinkState {
        double capacity = 0;            // bytes per picosecond
        std::uint32_t flows = 0;        // active flows crossing it
        std::uint32_t spill = 0;        // 1 + its list in spill_, or 0: the flows are inline
        OnLink inline_flows[kInline];
    };
    struct alignas(32) LinkFill {
        double residual = 0;            // during a fill: what is left for the unfrozen refilled flows
        std::uint32_t set_count = 0;    // refilled flows crossing it
        std::uint32_t unfrozen_weight = 0;   // members of unfrozen refilled flows
        std::uint32_t stamp = 0;        // in set_links_ of fill `round_`
        std::uint32_t version = 0;      // of its share entry
        bool dirty = false;
    };
    std::span<OnLink> on_link(std::int32_t link) {
        LinkState& s = link_[static_cast<std::size_t>(link)];
        return s.spill ? std::span<OnLink>(spill_[s.spill - 1]) : std::span<OnLink>(s.inline_flows, s.flows);
    }
    void prefetch(const std::int32_t* links, std::size_t at, std::size_t n) const {
        if (at < n) __builtin_prefetch(&link_[static_cast<std::size_t>(links[at])], 1);
    }
    /// Both halves of a link: for the passes over shared links only.
    void prefetch_both(const std::int32_t* links, std::size_t at, std::size_t n) const {
        if (at < n) {
            __builtin_prefetch(&link_[static_cast<std::size_t>(links[at])], 1);
            __builtin_prefetch(&fill_[static_cast<std::size_t>(links[at])], 1);
        }
    }
    void add_to_link(std::int32_t link, OnLink e);
    void remove_from_link(std::int32_t link, FlowId f);

    static constexpr FlowId kNoFlow = 0xffffffffu;
    /// Enters the detached flow on its links (another flow joins it, or its cap changes).
    void attach();
    /// Solves the detached flow alone: the smallest of its cap and its links' capacity per member.
    void solve_alone(Time now);

    void mark_dirty(std::int32_t link);
    void enter(FlowId f, Time now);
    void fill();
    bool check(Time now);
    void grow_to_component(Time now);
    void freeze(FlowId f, double rate, std::int32_t bottleneck);
    void push_pending(FlowId f, Time t);
    void record_samples(Time now);

    std::vector<LinkState> link_;
    std::vector<LinkFill> fill_;                    // per link, beside link_
    std::vector<std::vector<OnLink>> spill_;        // flow lists of crowded links
    std::vector<std::uint32_t> free_spill_;
    std::vector<Flow> flows_;
    std::vector<FlowId> free_;
    std::size_t active_ = 0;
    std::vector<Pending> pending_;                  // min-heap on (time, flow)

    // Scratch.
    std::vector<std::int32_t> dirty_;
    std::vector<FlowId> added_;                     // started since the last solve
    std::vector<FlowId> set_;                       // the flows being refilled
    std::vector<double> old_rate_;                  // per set_ entry: its rate before the solve
    std::vector<std::int32_t> set_links_;           // links of set_ flows that other flows cross too
    std::vector<OnLink> shared_;                    // per set_ flow, its hops on set_links_ as (link, weight)
    std::vector<std::pair<std::uint32_t, std::uint32_t>> shared_range_;   // per set_ entry: its range in shared_
    std::vector<double> limit_;                     // per set_ entry: cap and the links it has to itself
    std::vector<std::int32_t> sampled_;             // record_links: links whose load may have changed
    std::vector<float> last_util_;
    std::vector<ShareEntry> shares_;
    std::uint32_t stamp_ = 0;                       // per solve: marks the refilled flows
    std::uint32_t round_ = 0;                       // per fill: marks set_links_
    std::uint64_t solves_ = 0;
    std::uint64_t refilled_ = 0;
    FlowId detached_ = kNoFlow;   // the flow running alone, not entered on its links
    std::vector<LinkSample>* samples_ = nullptr;
    std::vector<bool> sample_only_;   // record_links: the links sampled (empty: all)
};

}  // namespace smol::sim

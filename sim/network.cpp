#include "sim/network.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.hpp"

namespace smol::sim {

namespace {
struct PendingLater {
    template <class P>
    bool operator()(const P& a, const P& b) const {
        return a.time != b.time ? a.time > b.time : a.flow > b.flow;
    }
};
struct ShareLater {
    template <class S>
    bool operator()(const S& a, const S& b) const {
        return a.share != b.share ? a.share > b.share : a.link > b.link;
    }
};
// Relative slack of the bottleneck check: rates computed in another order differ in the last
// bits; a held flow within this of a refilled one is taken as equal.
constexpr double kSlack = 1e-9;
// Refills before the set is grown to the whole connected component at once.
constexpr int kRounds = 4;
// A big aggregated flow's links lie all over the link table, so every pass over them waits on
// memory: fetch the state of the link this many hops ahead while working on this one.
constexpr std::uint32_t kAhead = 12;
}  // namespace

FlowNetwork::FlowNetwork(const std::vector<Bandwidth>& capacity)
    : link_(capacity.size()), fill_(capacity.size()), last_util_(capacity.size(), 0.f) {
    for (std::size_t l = 0; l < capacity.size(); ++l) {
        if (!(capacity[l].bytes_per_second() > 0)) throw Error(ErrorKind::internal, "network: a link has no bandwidth");
        link_[l].capacity = capacity[l].bytes_per_second() * 1e-12;
    }
}

void FlowNetwork::mark_dirty(std::int32_t link) {
    LinkFill& s = fill_[static_cast<std::size_t>(link)];
    if (s.dirty) return;
    s.dirty = true;
    dirty_.push_back(link);
}

FlowId FlowNetwork::start(std::span<const std::int32_t> links, Bytes bytes, std::uint32_t tag, Time now,
                          Bandwidth max_rate, std::span<const std::uint32_t> weights) {
    if (!weights.empty() && weights.size() != links.size())
        throw Error(ErrorKind::internal, "network: a flow needs one weight per link");
    if (detached_ != kNoFlow) attach();   // no longer alone
    FlowId f;
    if (!free_.empty()) {
        f = free_.back();
        free_.pop_back();
    } else {
        f = static_cast<FlowId>(flows_.size());
        flows_.emplace_back();
    }
    Flow& fl = flows_[f];
    fl.remaining = std::max(0.0, bytes.as_double());
    fl.rate = 0;
    fl.cap = max_rate.bytes_per_second() * 1e-12;
    fl.updated = now;
    fl.links = links.data();
    fl.weights = weights.empty() ? nullptr : weights.data();
    fl.hops = static_cast<std::uint32_t>(links.size());
    fl.tag = tag;
    fl.bottleneck = kUnsolved;
    ++fl.version;
    fl.active = true;
    ++active_;
    if (links.empty() || fl.remaining == 0) {  // nothing to move: done as soon as asked
        fl.hops = 0;
        push_pending(f, now);
        return f;
    }
    added_.push_back(f);
    if (active_ == 1 && !samples_) {   // alone (link samples need every flow on its links)
        fl.detached = true;
        detached_ = f;
        return f;
    }
    for (std::uint32_t h = 0; h < fl.hops; ++h) {
        prefetch(fl.links, h + kAhead, fl.hops);
        add_to_link(fl.links[h], {f, fl.weight(h)});
        if (samples_) mark_dirty(fl.links[h]);
    }
    return f;
}

void FlowNetwork::attach() {
    const FlowId f = detached_;
    Flow& fl = flows_[f];
    fl.detached = false;
    detached_ = kNoFlow;
    for (std::uint32_t h = 0; h < fl.hops; ++h) {
        prefetch(fl.links, h + kAhead, fl.hops);
        add_to_link(fl.links[h], {f, fl.weight(h)});
    }
}

// What fill() gives a flow every link of which it has to itself, computed the same way: its cap,
// lowered by capacity / weight of each link in route order (the first lowest is its bottleneck).
void FlowNetwork::solve_alone(Time now) {
    ++solves_;
    const FlowId f = detached_;
    Flow& fl = flows_[f];
    const double elapsed = static_cast<double>((now - fl.updated).count_ps());
    fl.remaining = std::max(0.0, fl.remaining - fl.rate * elapsed);
    fl.updated = now;
    ++refilled_;
    double limit = fl.cap > 0 ? fl.cap : std::numeric_limits<double>::infinity();
    std::int32_t bound = kCapBound;
    for (std::uint32_t h = 0; h < fl.hops; ++h) {
        prefetch(fl.links, h + kAhead, fl.hops);
        const double own = link_[static_cast<std::size_t>(fl.links[h])].capacity / fl.weight(h);
        if (own < limit) {
            limit = own;
            bound = fl.links[h];
        }
    }
    fl.bottleneck = bound;
    if (fl.rate == limit) return;   // its pending completion still holds
    fl.rate = limit;
    ++fl.version;
    const Time left = fl.rate > 0 ? Time::ps_ceil(fl.remaining / fl.rate) : Time::zero();
    push_pending(f, now + left);
}

void FlowNetwork::add_to_link(std::int32_t link, OnLink e) {
    LinkState& s = link_[static_cast<std::size_t>(link)];
    if (!s.spill && s.flows < kInline) {
        s.inline_flows[s.flows++] = e;
        return;
    }
    if (!s.spill) {   // crowded: move the inline flows to a spill list
        if (free_spill_.empty()) {
            spill_.emplace_back();
            s.spill = static_cast<std::uint32_t>(spill_.size());
        } else {
            s.spill = free_spill_.back();
            free_spill_.pop_back();
        }
        spill_[s.spill - 1].assign(s.inline_flows, s.inline_flows + s.flows);
    }
    spill_[s.spill - 1].push_back(e);
    ++s.flows;
}

void FlowNetwork::remove_from_link(std::int32_t link, FlowId f) {
    LinkState& s = link_[static_cast<std::size_t>(link)];
    const std::span<OnLink> v = on_link(link);
    auto it = std::find_if(v.begin(), v.end(), [f](const OnLink& e) { return e.flow == f; });
    *it = v.back();
    --s.flows;
    if (s.spill) {
        spill_[s.spill - 1].pop_back();
        if (s.flows == 0) {   // empty again: the list goes back to the pool, capacity kept
            free_spill_.push_back(s.spill);
            s.spill = 0;
        }
    }
}

void FlowNetwork::set_cap(FlowId f, Bandwidth max_rate) {
    Flow& fl = flows_[f];
    const double cap = max_rate.bytes_per_second() * 1e-12;
    if (!fl.active || fl.hops == 0 || fl.cap == cap) return;
    if (detached_ != kNoFlow) attach();
    fl.cap = cap;
    // Refilled at the next solve as a new flow is (its bytes brought up to date at the old rate
    // there), and the flows its links limit with it: its share of them changes.
    added_.push_back(f);
    for (std::uint32_t h = 0; h < fl.hops; ++h) mark_dirty(fl.links[h]);
}

void FlowNetwork::enter(FlowId f, Time now) {
    Flow& fl = flows_[f];
    if (fl.stamp == stamp_) return;
    fl.stamp = stamp_;
    // Bring the remaining bytes up to now at the old rate.
    const double elapsed = static_cast<double>((now - fl.updated).count_ps());
    fl.remaining = std::max(0.0, fl.remaining - fl.rate * elapsed);
    fl.updated = now;
    set_.push_back(f);
    old_rate_.push_back(fl.rate);
    ++refilled_;
}

void FlowNetwork::freeze(FlowId f, double rate, std::int32_t bottleneck) {
    Flow& fl = flows_[f];
    fl.frozen = true;
    fl.rate = rate;
    fl.bottleneck = bottleneck;
    // Only the links it shares: no one reads what it leaves of the links it has to itself.
    const auto [begin, end] = shared_range_[fl.slot];
    for (std::uint32_t k = begin; k < end; ++k) {
        const OnLink& hop = shared_[k];   // (link, weight) of one of its shared hops
        LinkFill& s = fill_[hop.flow];
        s.residual = std::max(0.0, s.residual - rate * hop.weight);
        s.unfrozen_weight -= hop.weight;
        if (s.set_count > 1) {
            ++s.version;
            if (s.unfrozen_weight > 0 && static_cast<std::int32_t>(hop.flow) != bottleneck) {
                shares_.push_back({s.residual / s.unfrozen_weight, static_cast<std::int32_t>(hop.flow), s.version});
                std::push_heap(shares_.begin(), shares_.end(), ShareLater{});
            }
        }
    }
}

// Progressive filling of the refilled set over what the held flows leave of each link:
// repeatedly take the smallest fair share — a link's residual over its unfrozen members, or a
// flow's own limit — and freeze the flows it limits at it. A link that no other flow crosses
// limits its flow alone, at capacity / weight: folded into the flow's own limit with its cap, in
// the one pass that reads it (a ring over every GPU of a cluster is mostly such links). So is a
// shared link that only one refilled flow crosses, at what the held flows leave of it.
void FlowNetwork::fill() {
    if (++round_ == 0) {   // wrapped: clear the marks
        for (LinkFill& s : fill_) s.stamp = 0;
        round_ = 1;
    }
    set_links_.clear();
    shared_.clear();
    shared_range_.clear();
    limit_.clear();
    for (FlowId f : set_) {
        Flow& fl = flows_[f];
        fl.frozen = false;
        fl.slot = static_cast<std::uint32_t>(shared_range_.size());
        double limit = fl.cap > 0 ? fl.cap : std::numeric_limits<double>::infinity();
        std::int32_t bound = kCapBound;
        const auto begin = static_cast<std::uint32_t>(shared_.size());
        for (std::uint32_t h = 0; h < fl.hops; ++h) {
            prefetch(fl.links, h + kAhead, fl.hops);
            const LinkState& s = link_[static_cast<std::size_t>(fl.links[h])];
            if (s.flows == 1) {   // its own
                const double own = s.capacity / fl.weight(h);
                if (own < limit) {
                    limit = own;
                    bound = fl.links[h];
                }
                continue;
            }
            shared_.push_back({static_cast<FlowId>(fl.links[h]), fl.weight(h)});
            LinkFill& u = fill_[static_cast<std::size_t>(fl.links[h])];
            if (u.stamp != round_) {
                u.stamp = round_;
                u.set_count = 0;
                u.unfrozen_weight = 0;
                set_links_.push_back(fl.links[h]);
            }
            ++u.set_count;
            u.unfrozen_weight += fl.weight(h);
        }
        shared_range_.emplace_back(begin, static_cast<std::uint32_t>(shared_.size()));
        fl.bottleneck = bound;
        limit_.push_back(limit);
    }
    shares_.clear();
    for (std::size_t k = 0; k < set_links_.size(); ++k) {
        prefetch_both(set_links_.data(), k + kAhead, set_links_.size());
        const std::int32_t l = set_links_[k];
        const LinkState& s = link_[static_cast<std::size_t>(l)];
        LinkFill& u = fill_[static_cast<std::size_t>(l)];
        double held = 0;
        if (s.flows > u.set_count)
            for (const OnLink& e : on_link(l)) {
                const Flow& g = flows_[e.flow];
                if (g.stamp != stamp_) held += g.rate * e.weight;
            }
        u.residual = std::max(0.0, s.capacity - held);
        if (u.set_count > 1) shares_.push_back({u.residual / u.unfrozen_weight, l, ++u.version});
    }
    for (std::size_t i = 0; i < set_.size(); ++i) {
        const FlowId f = set_[i];
        Flow& fl = flows_[f];
        double limit = limit_[i];
        std::int32_t bound = fl.bottleneck;
        const auto [begin, end] = shared_range_[i];
        for (std::uint32_t k = begin; k < end; ++k) {
            const LinkFill& s = fill_[shared_[k].flow];
            if (s.set_count != 1) continue;
            const double own = s.residual / shared_[k].weight;
            if (own < limit) {
                limit = own;
                bound = static_cast<std::int32_t>(shared_[k].flow);
            }
        }
        fl.bottleneck = bound;
        if (limit < std::numeric_limits<double>::infinity()) shares_.push_back({limit, -1 - static_cast<std::int32_t>(f), 0});
    }
    std::make_heap(shares_.begin(), shares_.end(), ShareLater{});
    while (!shares_.empty()) {
        std::pop_heap(shares_.begin(), shares_.end(), ShareLater{});
        const ShareEntry e = shares_.back();
        shares_.pop_back();
        if (e.link < 0) {
            const auto f = static_cast<FlowId>(-1 - e.link);
            if (!flows_[f].frozen) freeze(f, e.share, flows_[f].bottleneck);
            continue;
        }
        const LinkFill& s = fill_[static_cast<std::size_t>(e.link)];
        if (e.version != s.version || s.unfrozen_weight == 0) continue;
        for (const OnLink& o : on_link(e.link)) {
            const Flow& g = flows_[o.flow];
            if (g.stamp == stamp_ && !g.frozen) freeze(o.flow, e.share, e.link);
        }
    }
}

// The bottleneck condition for the held flows on the refilled links: a held flow whose
// bottleneck is such a link needs it still saturated and itself still the fastest there; and no
// held flow may run faster than a refilled flow on that flow's bottleneck. Those that fail join
// the set; true when none did.
bool FlowNetwork::check(Time now) {
    bool ok = true;
    for (std::size_t k = 0; k < set_links_.size(); ++k) {
        prefetch_both(set_links_.data(), k + kAhead, set_links_.size());
        const std::int32_t l = set_links_[k];
        const LinkState& s = link_[static_cast<std::size_t>(l)];
        const LinkFill& u = fill_[static_cast<std::size_t>(l)];
        if (s.flows == u.set_count) continue;   // no held flow crosses it
        const std::span<const OnLink> on = on_link(l);
        const bool saturated = u.residual <= s.capacity * kSlack;
        double fastest = 0, slowest_bound = std::numeric_limits<double>::infinity();
        for (const OnLink& e : on) {
            const Flow& g = flows_[e.flow];
            fastest = std::max(fastest, g.rate);
            if (g.stamp == stamp_ && g.bottleneck == l) slowest_bound = std::min(slowest_bound, g.rate);
        }
        for (const OnLink& e : on) {
            const Flow& g = flows_[e.flow];
            if (g.stamp == stamp_) continue;
            const bool lost = g.bottleneck == l && (!saturated || g.rate < fastest * (1 - kSlack));
            if (lost || g.rate > slowest_bound * (1 + kSlack)) {
                enter(e.flow, now);
                ok = false;
            }
        }
    }
    return ok;
}

void FlowNetwork::grow_to_component(Time now) {
    for (std::size_t i = 0; i < set_.size(); ++i) {
        const Flow& fl = flows_[set_[i]];
        for (std::uint32_t h = 0; h < fl.hops; ++h)
            for (const OnLink& e : on_link(fl.links[h])) enter(e.flow, now);
    }
}

void FlowNetwork::push_pending(FlowId f, Time t) {
    pending_.push_back({t, f, flows_[f].version});
    std::push_heap(pending_.begin(), pending_.end(), PendingLater{});
}

void FlowNetwork::solve(Time now) {
    if (dirty_.empty() && added_.empty()) return;
    if (detached_ != kNoFlow) {
        // Alone: what flows ended left no flow on their links to refill.
        const bool alone = added_.size() == 1 && added_.front() == detached_ &&
                           std::all_of(dirty_.begin(), dirty_.end(), [&](std::int32_t l) { return link_[static_cast<std::size_t>(l)].flows == 0; });
        if (alone) {
            for (std::int32_t l : dirty_) fill_[static_cast<std::size_t>(l)].dirty = false;
            dirty_.clear();
            added_.clear();
            solve_alone(now);
            return;
        }
        attach();
    }
    ++solves_;
    if (++stamp_ == 0) {   // wrapped: clear the marks
        for (Flow& fl : flows_) fl.stamp = 0;
        stamp_ = 1;
    }
    set_.clear();
    old_rate_.clear();
    // 1. The flows that may have lost their bottleneck: the new ones and those limited by a link
    //    a flow left.
    for (FlowId f : added_)
        if (flows_[f].active) enter(f, now);
    added_.clear();
    if (samples_) sampled_.assign(dirty_.begin(), dirty_.end());
    for (std::size_t k = 0; k < dirty_.size(); ++k) {
        prefetch_both(dirty_.data(), k + kAhead, dirty_.size());
        const std::int32_t l = dirty_[k];
        fill_[static_cast<std::size_t>(l)].dirty = false;
        if (link_[static_cast<std::size_t>(l)].flows == 0) continue;
        for (const OnLink& e : on_link(l))
            if (flows_[e.flow].bottleneck == l) enter(e.flow, now);
    }
    dirty_.clear();
    // 2. Fill, check, and grow the set until the held flows keep their bottlenecks.
    for (int round = 1; !set_.empty(); ++round) {
        fill();
        if (check(now)) break;
        if (round == kRounds) {
            grow_to_component(now);
            fill();
            break;
        }
    }
    // 3. New completion times for the flows whose rate changed.
    for (std::size_t k = 0; k < set_.size(); ++k) {
        const FlowId f = set_[k];
        Flow& fl = flows_[f];
        if (fl.rate == old_rate_[k]) continue;   // its pending completion still holds
        ++fl.version;
        // Checked: 1 GB at 1 B/s passes the range of Time (an out_of_range the simulator places).
        const Time left = fl.rate > 0 ? Time::ps_ceil(fl.remaining / fl.rate) : Time::zero();
        push_pending(f, now + left);
    }
    if (samples_) record_samples(now);
}

// Utilisation of every link a flow started or ended on, or a refilled flow crosses.
void FlowNetwork::record_samples(Time now) {
    for (FlowId f : set_) {
        const Flow& fl = flows_[f];
        sampled_.insert(sampled_.end(), fl.links, fl.links + fl.hops);
    }
    std::sort(sampled_.begin(), sampled_.end());
    sampled_.erase(std::unique(sampled_.begin(), sampled_.end()), sampled_.end());
    for (std::int32_t l : sampled_) {
        const auto i = static_cast<std::size_t>(l);
        if (!sample_only_.empty() && !sample_only_[i]) continue;
        double load = 0;
        for (const OnLink& e : on_link(l)) load += flows_[e.flow].rate * e.weight;
        const auto util = static_cast<float>(std::min(1.0, load / link_[i].capacity));
        if (util != last_util_[i]) {
            last_util_[i] = util;
            samples_->push_back({l, now, util});
        }
    }
}

Time FlowNetwork::next_completion() {
    while (!pending_.empty()) {
        const Pending& p = pending_.front();
        const Flow& fl = flows_[p.flow];
        if (fl.active && fl.version == p.version) return p.time;
        std::pop_heap(pending_.begin(), pending_.end(), PendingLater{});
        pending_.pop_back();
    }
    return Time::max();
}

void FlowNetwork::complete(Time now, std::vector<std::uint32_t>& tags) {
    while (next_completion() == now) {
        std::pop_heap(pending_.begin(), pending_.end(), PendingLater{});
        const FlowId f = pending_.back().flow;
        pending_.pop_back();
        Flow& fl = flows_[f];
        fl.active = false;
        fl.remaining = 0;
        fl.rate = 0;
        fl.bottleneck = kUnsolved;
        --active_;
        if (fl.detached) {   // on no link
            fl.detached = false;
            detached_ = kNoFlow;
            tags.push_back(fl.tag);
            free_.push_back(f);
            continue;
        }
        for (std::uint32_t h = 0; h < fl.hops; ++h) {
            prefetch(fl.links, h + kAhead, fl.hops);
            const std::int32_t l = fl.links[h];
            remove_from_link(l, f);
            // An emptied link has no flow to refill (but its utilisation drops to zero).
            if (samples_ || link_[static_cast<std::size_t>(l)].flows > 0) mark_dirty(l);
        }
        tags.push_back(fl.tag);
        free_.push_back(f);
    }
}

}  // namespace smol::sim

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
}  // namespace

FlowNetwork::FlowNetwork(const std::vector<Bandwidth>& capacity)
    : on_link_(capacity.size()),
      is_dirty_(capacity.size(), 0),
      link_stamp_(capacity.size(), 0),
      held_(capacity.size(), 0),
      residual_(capacity.size(), 0),
      unfrozen_weight_(capacity.size(), 0),
      set_count_(capacity.size(), 0),
      link_version_(capacity.size(), 0),
      last_util_(capacity.size(), 0.f) {
    capacity_.reserve(capacity.size());
    for (Bandwidth b : capacity) {
        if (!(b.bytes_per_second() > 0)) throw Error(ErrorKind::internal, "network: a link has no bandwidth");
        capacity_.push_back(b.bytes_per_second() * 1e-12);
    }
}

void FlowNetwork::mark_dirty(std::int32_t link) {
    if (is_dirty_[static_cast<std::size_t>(link)]) return;
    is_dirty_[static_cast<std::size_t>(link)] = 1;
    dirty_.push_back(link);
}

FlowId FlowNetwork::start(std::span<const std::int32_t> links, Bytes bytes, std::uint32_t tag, Time now,
                          Bandwidth max_rate, std::span<const std::uint32_t> weights) {
    if (!weights.empty() && weights.size() != links.size())
        throw Error(ErrorKind::internal, "network: a flow needs one weight per link");
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
    for (std::uint32_t h = 0; h < fl.hops; ++h) {
        on_link_[static_cast<std::size_t>(fl.links[h])].push_back({f, fl.weight(h)});
        mark_dirty(fl.links[h]);
    }
    added_.push_back(f);
    return f;
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

void FlowNetwork::take_links(std::size_t from) {
    for (std::size_t i = from; i < set_.size(); ++i) {
        const Flow& fl = flows_[set_[i]];
        for (std::uint32_t h = 0; h < fl.hops; ++h) {
            const std::int32_t l = fl.links[h];
            if (link_stamp_[static_cast<std::size_t>(l)] != stamp_) {
                link_stamp_[static_cast<std::size_t>(l)] = stamp_;
                set_links_.push_back(l);
            }
        }
    }
}

void FlowNetwork::freeze(FlowId f, double rate, std::int32_t bottleneck) {
    Flow& fl = flows_[f];
    fl.frozen = true;
    fl.rate = rate;
    fl.bottleneck = bottleneck;
    for (std::uint32_t h = 0; h < fl.hops; ++h) {
        const auto l = static_cast<std::size_t>(fl.links[h]);
        const std::uint32_t w = fl.weight(h);
        residual_[l] = std::max(0.0, residual_[l] - rate * w);
        unfrozen_weight_[l] -= w;
        ++link_version_[l];
        if (set_count_[l] > 1 && unfrozen_weight_[l] > 0 && fl.links[h] != bottleneck) {
            shares_.push_back({residual_[l] / unfrozen_weight_[l], fl.links[h], link_version_[l]});
            std::push_heap(shares_.begin(), shares_.end(), ShareLater{});
        }
    }
}

// Progressive filling of the refilled set over what the held flows leave of each link:
// repeatedly take the smallest fair share — a link's residual over its unfrozen members, or a
// flow's own limit — and freeze the flows it limits at it. A link that only one refilled flow
// crosses limits that flow alone, so it is folded into the flow's own limit with its cap.
void FlowNetwork::fill() {
    for (std::int32_t l : set_links_) {
        const auto i = static_cast<std::size_t>(l);
        double held = 0;
        std::uint32_t count = 0, weight = 0;
        for (const OnLink& e : on_link_[i]) {
            const Flow& g = flows_[e.flow];
            if (g.stamp == stamp_) {
                ++count;
                weight += e.weight;
            } else {
                held += g.rate * e.weight;
            }
        }
        held_[i] = held;
        set_count_[i] = count;
        unfrozen_weight_[i] = weight;
        residual_[i] = std::max(0.0, capacity_[i] - held);
        ++link_version_[i];
    }
    shares_.clear();
    for (std::int32_t l : set_links_) {
        const auto i = static_cast<std::size_t>(l);
        if (set_count_[i] > 1) shares_.push_back({residual_[i] / unfrozen_weight_[i], l, link_version_[i]});
    }
    for (FlowId f : set_) {
        Flow& fl = flows_[f];
        fl.frozen = false;
        double limit = fl.cap > 0 ? fl.cap : std::numeric_limits<double>::infinity();
        std::int32_t bound = kCapBound;
        for (std::uint32_t h = 0; h < fl.hops; ++h) {
            const auto i = static_cast<std::size_t>(fl.links[h]);
            if (set_count_[i] != 1) continue;
            const double own = residual_[i] / fl.weight(h);
            if (own < limit) {
                limit = own;
                bound = fl.links[h];
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
        const auto i = static_cast<std::size_t>(e.link);
        if (e.version != link_version_[i] || unfrozen_weight_[i] == 0) continue;
        for (const OnLink& o : on_link_[i]) {
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
    const std::size_t links = set_links_.size();
    for (std::size_t k = 0; k < links; ++k) {
        const auto i = static_cast<std::size_t>(set_links_[k]);
        const auto& on = on_link_[i];
        const bool saturated = residual_[i] <= capacity_[i] * kSlack;
        double fastest = 0, slowest_bound = std::numeric_limits<double>::infinity();
        bool held = false;
        for (const OnLink& e : on) {
            const Flow& g = flows_[e.flow];
            fastest = std::max(fastest, g.rate);
            if (g.stamp != stamp_)
                held = true;
            else if (g.bottleneck == set_links_[k])
                slowest_bound = std::min(slowest_bound, g.rate);
        }
        if (!held) continue;
        for (const OnLink& e : on) {
            const Flow& g = flows_[e.flow];
            if (g.stamp == stamp_) continue;
            const bool lost = g.bottleneck == set_links_[k] && (!saturated || g.rate < fastest * (1 - kSlack));
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
            for (const OnLink& e : on_link_[static_cast<std::size_t>(fl.links[h])]) enter(e.flow, now);
    }
}

void FlowNetwork::push_pending(FlowId f, Time t) {
    pending_.push_back({t, f, flows_[f].version});
    std::push_heap(pending_.begin(), pending_.end(), PendingLater{});
}

void FlowNetwork::solve(Time now) {
    if (dirty_.empty() && added_.empty()) return;
    ++solves_;
    if (++stamp_ == 0) {   // wrapped: clear the marks
        for (Flow& fl : flows_) fl.stamp = 0;
        std::fill(link_stamp_.begin(), link_stamp_.end(), 0u);
        stamp_ = 1;
    }
    set_.clear();
    old_rate_.clear();
    set_links_.clear();
    // 1. The flows that may have lost their bottleneck: the new ones and those limited by a link
    //    a start or an end touched. Every dirty link is refilled (an emptied one drops to zero).
    for (FlowId f : added_)
        if (flows_[f].active) enter(f, now);
    added_.clear();
    for (std::int32_t l : dirty_) {
        is_dirty_[static_cast<std::size_t>(l)] = 0;
        if (link_stamp_[static_cast<std::size_t>(l)] != stamp_) {
            link_stamp_[static_cast<std::size_t>(l)] = stamp_;
            set_links_.push_back(l);
        }
        for (const OnLink& e : on_link_[static_cast<std::size_t>(l)])
            if (flows_[e.flow].bottleneck == l) enter(e.flow, now);
    }
    dirty_.clear();
    // 2. Fill, check, and grow the set until the held flows keep their bottlenecks.
    std::size_t linked = 0;
    for (int round = 1;; ++round) {
        take_links(linked);
        linked = set_.size();
        fill();
        if (check(now)) break;
        if (round == kRounds) {
            grow_to_component(now);
            take_links(linked);
            linked = set_.size();
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
        const double ps = fl.rate > 0 ? std::ceil(fl.remaining / fl.rate) : 0.0;
        push_pending(f, now + Time::ps(static_cast<std::int64_t>(ps)));
    }
    if (samples_) {
        std::sort(set_links_.begin(), set_links_.end());
        for (std::int32_t l : set_links_) {
            const auto i = static_cast<std::size_t>(l);
            const auto util = static_cast<float>(1.0 - residual_[i] / capacity_[i]);
            if (util != last_util_[i]) {
                last_util_[i] = util;
                samples_->push_back({l, now, util});
            }
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
        for (std::uint32_t h = 0; h < fl.hops; ++h) {
            const std::int32_t l = fl.links[h];
            auto& v = on_link_[static_cast<std::size_t>(l)];
            auto it = std::find_if(v.begin(), v.end(), [f](const OnLink& e) { return e.flow == f; });
            *it = v.back();
            v.pop_back();
            mark_dirty(l);
        }
        tags.push_back(fl.tag);
        free_.push_back(f);
    }
}

}  // namespace smol::sim

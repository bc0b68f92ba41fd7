#include "sim/network.hpp"

#include <algorithm>
#include <cmath>

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
constexpr std::uint32_t kDirty = 0xffffffffu;
}  // namespace

FlowNetwork::FlowNetwork(const std::vector<Bandwidth>& capacity)
    : on_link_(capacity.size()),
      link_stamp_(capacity.size(), 0),
      residual_(capacity.size(), 0),
      unfrozen_(capacity.size(), 0),
      link_version_(capacity.size(), 0),
      last_util_(capacity.size(), 0.f) {
    capacity_.reserve(capacity.size());
    for (Bandwidth b : capacity) {
        if (!(b.bytes_per_second() > 0)) throw Error(ErrorKind::internal, "network: a link has no bandwidth");
        capacity_.push_back(b.bytes_per_second() * 1e-12);
    }
}

void FlowNetwork::mark_dirty(std::int32_t link) {
    // link_stamp_ doubles as the dirty flag between solves (kDirty) and the search mark inside one.
    if (link_stamp_[link] == kDirty) return;
    link_stamp_[link] = kDirty;
    dirty_.push_back(link);
}

FlowId FlowNetwork::start(std::span<const std::int32_t> route, Bytes bytes, std::uint32_t tag, Time now,
                          std::uint32_t group, Bandwidth max_rate) {
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
    fl.updated = now;
    fl.route = route.data();
    fl.hops = static_cast<std::uint32_t>(route.size());
    fl.tag = tag;
    fl.group = kNoGroup;
    fl.cap = max_rate.bytes_per_second() * 1e-12;
    ++fl.version;
    fl.active = true;
    ++active_;
    if (route.empty() || fl.remaining == 0) {  // nothing to move: done as soon as asked
        fl.hops = 0;
        push_pending(f, now);
        return f;
    }
    for (std::int32_t l : route) {
        on_link_[l].push_back(f);
        mark_dirty(l);
    }
    if (group != kNoGroup) {
        if (group >= groups_.size()) {
            groups_.resize(group + 1);
            group_stamp_.resize(group + 1, 0);
        }
        fl.group = group;
        groups_[group].push_back(f);
    }
    return f;
}

void FlowNetwork::set_cap(FlowId f, Bandwidth max_rate) {
    Flow& fl = flows_[f];
    const double cap = max_rate.bytes_per_second() * 1e-12;
    if (!fl.active || fl.cap == cap) return;
    fl.cap = cap;
    for (std::uint32_t h = 0; h < fl.hops; ++h) mark_dirty(fl.route[h]);
}

void FlowNetwork::visit(FlowId f) {
    Flow& fl = flows_[f];
    if (fl.stamp == stamp_) return;
    fl.stamp = stamp_;
    comp_flows_.push_back(f);
    for (std::uint32_t h = 0; h < fl.hops; ++h) {
        const std::int32_t l = fl.route[h];
        if (link_stamp_[l] != stamp_) {
            link_stamp_[l] = stamp_;
            comp_links_.push_back(l);
        }
    }
    // A coupled flow drags its whole group into the component.
    if (fl.group != kNoGroup && group_stamp_[fl.group] != stamp_) {
        group_stamp_[fl.group] = stamp_;
        for (FlowId m : groups_[fl.group]) visit(m);
    }
}

void FlowNetwork::freeze(FlowId f, double share, std::int32_t via_link, bool with_group) {
    Flow& fl = flows_[f];
    if (fl.frozen) return;
    fl.frozen = true;
    fl.rate = share;
    for (std::uint32_t h = 0; h < fl.hops; ++h) {
        const std::int32_t l = fl.route[h];
        residual_[l] = std::max(0.0, residual_[l] - share);
        --unfrozen_[l];
        ++link_version_[l];
        if (l != via_link && unfrozen_[l] > 0) {
            shares_.push_back({residual_[l] / unfrozen_[l], l, link_version_[l]});
            std::push_heap(shares_.begin(), shares_.end(), ShareLater{});
        }
    }
    if (with_group && fl.group != kNoGroup)
        for (FlowId m : groups_[fl.group]) freeze(m, share, via_link, false);
}

void FlowNetwork::push_pending(FlowId f, Time t) {
    pending_.push_back({t, f, flows_[f].version});
    std::push_heap(pending_.begin(), pending_.end(), PendingLater{});
}

void FlowNetwork::solve(Time now) {
    if (dirty_.empty()) return;
    ++solves_;
    // 1. The connected component of the dirty links: links ↔ flows through shared links.
    if (++stamp_ == kDirty) stamp_ = 1;
    comp_links_.clear();
    comp_flows_.clear();
    for (std::int32_t l : dirty_) {
        link_stamp_[l] = stamp_;
        comp_links_.push_back(l);
    }
    dirty_.clear();
    for (std::size_t i = 0; i < comp_links_.size(); ++i)
        for (FlowId f : on_link_[comp_links_[i]]) visit(f);
    // 2. Bring every affected flow's remaining bytes up to now at its old rate.
    for (FlowId f : comp_flows_) {
        Flow& fl = flows_[f];
        const double elapsed = static_cast<double>((now - fl.updated).count_ps());
        fl.remaining = std::max(0.0, fl.remaining - fl.rate * elapsed);
        fl.updated = now;
        fl.frozen = false;
    }
    // 3. Progressive filling: repeatedly take the link offering the smallest fair share, fix the
    //    rate of its unfrozen flows at that share, and remove their use from the other links.
    shares_.clear();
    for (std::int32_t l : comp_links_) {
        residual_[l] = capacity_[l];
        unfrozen_[l] = static_cast<std::uint32_t>(on_link_[l].size());
        ++link_version_[l];
        if (unfrozen_[l] > 0) shares_.push_back({residual_[l] / unfrozen_[l], l, link_version_[l]});
    }
    // A capped flow is a one-flow link of its cap's capacity: it freezes (with its group) at its
    // cap unless a link's share is smaller first. A coupled group freezes as one, so one entry
    // per group — its smallest cap — is enough (the flows of one coupling class share a cap).
    if (++cap_stamp_ == 0) cap_stamp_ = 1;
    for (FlowId f : comp_flows_) {
        const Flow& fl = flows_[f];
        if (fl.cap <= 0) continue;
        if (fl.group != kNoGroup) {
            if (group_cap_stamp_.size() <= fl.group) group_cap_stamp_.resize(fl.group + 1, 0);
            if (group_cap_stamp_[fl.group] == cap_stamp_) continue;
            group_cap_stamp_[fl.group] = cap_stamp_;
            double smallest = fl.cap;
            for (FlowId m : groups_[fl.group]) smallest = std::min(smallest, flows_[m].cap > 0 ? flows_[m].cap : smallest);
            shares_.push_back({smallest, -1 - static_cast<std::int32_t>(f), 0});
        } else {
            shares_.push_back({fl.cap, -1 - static_cast<std::int32_t>(f), 0});
        }
    }
    std::make_heap(shares_.begin(), shares_.end(), ShareLater{});
    while (!shares_.empty()) {
        std::pop_heap(shares_.begin(), shares_.end(), ShareLater{});
        const ShareEntry e = shares_.back();
        shares_.pop_back();
        if (e.link < 0) {
            freeze(static_cast<FlowId>(-1 - e.link), e.share, -1, true);
            continue;
        }
        if (e.version != link_version_[e.link] || unfrozen_[e.link] == 0) continue;
        for (FlowId f : on_link_[e.link]) freeze(f, e.share, e.link, true);
    }
    // 4. New completion times.
    for (FlowId f : comp_flows_) {
        Flow& fl = flows_[f];
        ++fl.version;
        // Checked: 1 GB at 1 B/s passes the range of Time (an out_of_range the simulator places).
        const Time left = fl.rate > 0 ? Time::ps_ceil(fl.remaining / fl.rate) : Time::zero();
        push_pending(f, now + left);
    }
    if (samples_) {
        std::sort(comp_links_.begin(), comp_links_.end());
        for (std::int32_t l : comp_links_) {
            const auto util = static_cast<float>(1.0 - residual_[l] / capacity_[l]);
            if (util != last_util_[l]) {
                last_util_[l] = util;
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
        --active_;
        for (std::uint32_t h = 0; h < fl.hops; ++h) {
            const std::int32_t l = fl.route[h];
            auto& v = on_link_[l];
            auto it = std::find(v.begin(), v.end(), f);
            *it = v.back();
            v.pop_back();
            mark_dirty(l);
        }
        if (fl.group != kNoGroup) {
            auto& members = groups_[fl.group];
            *std::find(members.begin(), members.end(), f) = members.back();
            members.pop_back();
            fl.group = kNoGroup;
        }
        tags.push_back(fl.tag);
        free_.push_back(f);
    }
}

}  // namespace smol::sim

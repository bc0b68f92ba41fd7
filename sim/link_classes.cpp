#include "sim/link_classes.hpp"

#include <algorithm>
#include <bit>
#include <utility>

namespace smol::sim {

LinkClasses::LinkClasses(const std::vector<Bandwidth>& capacity) : of_(capacity.size()) {
    std::unordered_map<std::uint64_t, std::uint32_t> by_capacity;
    for (std::size_t l = 0; l < capacity.size(); ++l) {
        const auto [it, fresh] =
            by_capacity.try_emplace(std::bit_cast<std::uint64_t>(capacity[l].bytes_per_second()), static_cast<std::uint32_t>(size_.size()));
        if (fresh) {
            size_.push_back(0);
            capacity_.push_back(capacity[l]);
        }
        of_[l] = it->second;
        ++size_[it->second];
    }
}

std::uint32_t LinkClasses::add_class(std::uint32_t like) {
    size_.push_back(0);
    capacity_.push_back(capacity_[like]);
    return static_cast<std::uint32_t>(size_.size() - 1);
}

void LinkClasses::refine(std::span<const std::int32_t> links, std::span<const std::uint32_t> weights) {
    const auto weight = [&](std::size_t i) { return weights.empty() ? 1u : weights[i]; };
    const auto key = [](std::uint32_t c, std::uint32_t w) { return (std::uint64_t{c} << 32) | w; };
    const std::size_t classes = size_.size();
    seen_.resize(classes, 0);
    size_then_.resize(classes);
    first_weight_.resize(classes);
    first_count_.resize(classes);
    first_to_.resize(classes);
    if (!other_count_.empty()) other_count_.clear();   // clear() walks every bucket, even when empty
    if (!other_to_.empty()) other_to_.clear();
    ++pass_;
    // Count, per class the flow touches, its links by the flow's weight on them.
    from_.resize(links.size());
    for (std::size_t i = 0; i < links.size(); ++i) {
        const std::uint32_t c = of_[static_cast<std::size_t>(links[i])];
        from_[i] = c;
        if (seen_[c] != pass_) {
            seen_[c] = pass_;
            size_then_[c] = size_[c];
            first_weight_[c] = weight(i);
            first_count_[c] = 0;
            first_to_[c] = kNone;
        }
        if (weight(i) == first_weight_[c]) ++first_count_[c];
        else ++other_count_[key(c, weight(i))];
    }
    // A class the flow covers with one weight stays whole; of any other, each weight's links move
    // to a class of their own, and those the flow does not cross keep the old one.
    for (std::size_t i = 0; i < links.size(); ++i) {
        const std::uint32_t c = from_[i];
        if (first_count_[c] == size_then_[c]) continue;
        std::uint32_t* to = nullptr;
        if (weight(i) == first_weight_[c]) {
            to = &first_to_[c];
        } else {
            const auto [it, fresh] = other_to_.try_emplace(key(c, weight(i)), kNone);
            to = &it->second;
        }
        if (*to == kNone) *to = add_class(c);
        of_[static_cast<std::size_t>(links[i])] = *to;
        --size_[c];
        ++size_[*to];
    }
}

void LinkClasses::finish() {
    std::vector<std::uint32_t> renumber(size_.size(), kNone);
    std::vector<Bandwidth> capacity;
    for (std::uint32_t& c : of_) {
        if (renumber[c] == kNone) {
            renumber[c] = static_cast<std::uint32_t>(capacity.size());
            capacity.push_back(capacity_[c]);
        }
        c = renumber[c];
    }
    capacity_ = std::move(capacity);
    size_.assign(capacity_.size(), 0);
    for (std::uint32_t c : of_) ++size_[c];
    seen_.clear();
    size_then_.clear();
    first_weight_.clear();
    first_count_.clear();
    first_to_.clear();
    from_.clear();
    slot_.assign(capacity_.size(), kNone);
}

void LinkClasses::map(std::vector<std::int32_t>& links, std::vector<std::uint32_t>& weights) {
    // Each class the flow crosses, once (its links share one weight), in class order: by a pass
    // over the classes when the flow crosses a large share of them, else sorted.
    std::vector<std::int32_t> classes;
    std::vector<std::uint32_t> class_weights;
    for (std::size_t i = 0; i < links.size(); ++i) {
        const std::uint32_t c = of_[static_cast<std::size_t>(links[i])];
        if (slot_[c] != kNone) continue;
        slot_[c] = weights.empty() ? 1u : weights[i];
        classes.push_back(static_cast<std::int32_t>(c));
    }
    if (classes.size() * 16 >= slot_.size()) {
        classes.clear();
        for (std::size_t c = 0; c < slot_.size(); ++c) {
            if (slot_[c] == kNone) continue;
            classes.push_back(static_cast<std::int32_t>(c));
            class_weights.push_back(slot_[c]);
            slot_[c] = kNone;
        }
    } else {
        std::sort(classes.begin(), classes.end());
        for (const std::int32_t c : classes) {
            class_weights.push_back(slot_[static_cast<std::size_t>(c)]);
            slot_[static_cast<std::size_t>(c)] = kNone;
        }
    }
    if (std::all_of(class_weights.begin(), class_weights.end(), [](std::uint32_t w) { return w == 1; })) class_weights.clear();
    links = std::move(classes);
    weights = std::move(class_weights);
}

}  // namespace smol::sim

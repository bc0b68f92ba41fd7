// Links that every flow of a run crosses alike, merged into one link of the flow network.
//
// A class holds links of one capacity such that each flow of the run crosses either all of them,
// each with the same weight (members), or none. The load of every link of a class is then the
// same sum, Σ weight × rate over the same flows, at every instant, so each of them states the same
// max-min constraint: one representative per class gives every flow the rate it gets over all of
// them, and a collective over every rank of a symmetric fabric (each GPU's NVLink port, each
// rail's NIC) crosses a handful of classes instead of hundreds of thousands of links.
//
// The classes are the coarsest partition of the links by capacity that every flow respects,
// found by refining the capacity partition with each flow's (link, weight) pairs in turn
// (partition refinement, Paige & Tarjan 1987). Class ids follow the order of each class's first
// link, so the same flows give the same classes.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/units.hpp"

namespace smol::sim {

class LinkClasses {
public:
    /// Every link in the class of the links of its capacity.
    explicit LinkClasses(const std::vector<Bandwidth>& capacity);

    /// Splits the classes `links` cuts: of each, the links the flow crosses with weight w (for each
    /// w) and those it does not cross. `weights[i]` is the members over links[i] (empty: one each);
    /// the links are distinct.
    void refine(std::span<const std::int32_t> links, std::span<const std::uint32_t> weights);

    /// Numbers the classes in the order of their first link; call once, after the last refine.
    void finish();

    std::size_t size() const { return capacity_.size(); }
    std::int32_t of(std::int32_t link) const { return static_cast<std::int32_t>(of_[static_cast<std::size_t>(link)]); }
    /// Per class (after finish), its links' capacity.
    const std::vector<Bandwidth>& capacities() const { return capacity_; }

    /// A refined flow over classes instead of links: one entry per class it crosses, in class
    /// order, with the weight it has on each of that class's links (weights empty where all are 1).
    void map(std::vector<std::int32_t>& links, std::vector<std::uint32_t>& weights);

private:
    static constexpr std::uint32_t kNone = 0xffffffffu;
    std::uint32_t add_class(std::uint32_t like);

    std::vector<std::uint32_t> of_;        // per link: its class
    std::vector<std::uint32_t> size_;      // per class: its links
    std::vector<Bandwidth> capacity_;      // per class
    // Refinement scratch, per class: the pass that last saw it, its size then, the first weight
    // the flow has on it, how many links carry that weight, and the class they move to.
    std::vector<std::uint32_t> seen_, size_then_, first_weight_, first_count_, first_to_;
    std::uint32_t pass_ = 0;
    std::unordered_map<std::uint64_t, std::uint32_t> other_count_, other_to_;   // (class, weight) beyond the first
    std::vector<std::uint32_t> from_;      // per flow link: its class before the split
    std::vector<std::uint32_t> slot_;      // map's scratch, per class
};

}  // namespace smol::sim

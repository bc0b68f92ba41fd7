// Link classes (sim/link_classes.hpp): the coarsest partition of the links by capacity that every
// flow crosses all-or-none with one weight, checked by hand and against its definition (links of
// one capacity and the same weight under every flow, and only those, share a class).
// tests/strategies/test_link_classes.cpp runs plans over classes and over links.
#include <catch2/catch.hpp>

#include <map>
#include <random>

#include "sim/link_classes.hpp"

using namespace smol;
using namespace smol::sim;

TEST_CASE("link classes: worked by hand", "[sim][link_classes]") {
    const Bandwidth a = Bandwidth::gb_per_s(1), b = Bandwidth::gb_per_s(2);
    LinkClasses classes({a, a, a, a, b, b});
    // Links 0, 1 with one member, 4 with two: {0,1} and {2,3} part, {4} and {5} part.
    const std::vector<std::int32_t> f1{0, 1, 4};
    const std::vector<std::uint32_t> w1{1, 1, 2};
    classes.refine(f1, w1);
    // All four of capacity a, weights 1, 2, 1, 2: {0,1} and {2,3} split again by weight.
    const std::vector<std::int32_t> f2{0, 1, 2, 3};
    const std::vector<std::uint32_t> w2{1, 2, 1, 2};
    classes.refine(f2, w2);
    // Both of capacity b, one member each: {4}, {5} stay apart (f1 split them).
    const std::vector<std::int32_t> f3{4, 5};
    classes.refine(f3, {});
    classes.finish();
    CHECK(classes.size() == 6);
    for (int l = 0; l < 6; ++l) CHECK(classes.of(l) == l);   // numbered by first link

    LinkClasses merged({a, a, a, b, b});
    const std::vector<std::int32_t> ring{0, 1, 2, 3, 4};
    merged.refine(ring, {});   // one flow over all: two classes, by capacity
    const std::vector<std::int32_t> part{3, 4};
    const std::vector<std::uint32_t> two{2, 2};
    merged.refine(part, two);  // covers the b class whole, with one weight: no split
    merged.finish();
    REQUIRE(merged.size() == 2);
    CHECK(merged.capacities() == std::vector<Bandwidth>{a, b});
    std::vector<std::int32_t> links{4, 0, 2, 3};
    std::vector<std::uint32_t> weights{3, 1, 1, 3};
    merged.map(links, weights);
    CHECK(links == std::vector<std::int32_t>{0, 1});
    CHECK(weights == std::vector<std::uint32_t>{1, 3});
    std::vector<std::int32_t> ones{1, 3};
    std::vector<std::uint32_t> none;
    merged.map(ones, none);
    CHECK(ones == std::vector<std::int32_t>{0, 1});
    CHECK(none.empty());
}

TEST_CASE("link classes: links share a class exactly when every flow treats them alike", "[sim][link_classes]") {
    std::mt19937 rng(7);
    for (int trial = 0; trial < 50; ++trial) {
        const int n = 1 + static_cast<int>(rng() % 40);
        std::vector<Bandwidth> caps;
        for (int l = 0; l < n; ++l) caps.push_back(Bandwidth::gb_per_s(1 + static_cast<double>(rng() % 3)));
        LinkClasses classes(caps);
        // Per link, its signature: the weight (0: not crossed) under every flow.
        std::vector<std::vector<std::uint32_t>> signature(static_cast<std::size_t>(n));
        const int flows = static_cast<int>(rng() % 8);
        for (int f = 0; f < flows; ++f) {
            std::vector<std::int32_t> links;
            std::vector<std::uint32_t> weights;
            const bool weighted = rng() % 2 == 0;
            for (int l = 0; l < n; ++l) {
                std::uint32_t w = rng() % 3 == 0 ? 0 : 1;
                if (w && weighted) w = 1 + rng() % 2;
                signature[static_cast<std::size_t>(l)].push_back(w);
                if (w) {
                    links.push_back(l);
                    weights.push_back(w);
                }
            }
            std::shuffle(std::begin(links), std::end(links), rng);   // order must not matter…
            for (std::size_t i = 0; i < links.size(); ++i)           // …with weights following links
                weights[i] = signature[static_cast<std::size_t>(links[i])].back();
            if (weighted) classes.refine(links, weights);
            else classes.refine(links, {});
        }
        classes.finish();
        std::map<std::pair<double, std::vector<std::uint32_t>>, std::int32_t> expected;
        std::int32_t next = 0;
        for (int l = 0; l < n; ++l) {
            const auto key = std::make_pair(caps[static_cast<std::size_t>(l)].bytes_per_second(), signature[static_cast<std::size_t>(l)]);
            const auto [it, fresh] = expected.try_emplace(key, next);
            if (fresh) ++next;
            INFO("trial " << trial << ", link " << l);
            CHECK(classes.of(l) == it->second);
            CHECK(classes.capacities()[static_cast<std::size_t>(classes.of(l))] == caps[static_cast<std::size_t>(l)]);
        }
        CHECK(classes.size() == static_cast<std::size_t>(next));
    }
}

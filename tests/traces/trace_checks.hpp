// Checks every Chrome trace must pass, whichever backend filled its timeline: the simulated
// traces of tests/traces and the measured ones of tests/exec.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace smol::test {

using nlohmann::json;

inline std::int64_t ps(const json& micros) { return std::llround(micros.get<double>() * 1e6); }

inline std::vector<json> events(const json& doc, const std::string& ph) {
    std::vector<json> out;
    for (const json& e : doc.at("traceEvents"))
        if (e.at("ph") == ph) out.push_back(e);
    return out;
}

/// No two "X" slices on one (pid, tid) overlap.
inline void check_no_overlap(const json& doc) {
    std::map<std::pair<int, int>, std::vector<std::pair<std::int64_t, std::int64_t>>> lanes;
    for (const json& e : events(doc, "X")) {
        const std::int64_t s = ps(e.at("ts"));
        lanes[{e.at("pid").get<int>(), e.at("tid").get<int>()}].push_back({s, s + ps(e.at("dur"))});
    }
    for (auto& [lane, slices] : lanes) {
        std::sort(slices.begin(), slices.end());
        for (std::size_t i = 1; i < slices.size(); ++i) {
            INFO("pid " << lane.first << " tid " << lane.second << " slice at " << slices[i].first << " ps");
            CHECK(slices[i - 1].second <= slices[i].first);
        }
    }
}

/// Every flow id has exactly one "s" and one "f", each inside an "X" slice on its own thread.
/// Returns id → (start event, finish event).
inline std::map<std::int64_t, std::pair<json, json>> check_flows(const json& doc) {
    const auto xs = events(doc, "X");
    std::map<std::int64_t, std::pair<json, json>> flows;
    std::map<std::int64_t, int> starts, finishes;
    for (const json& e : doc.at("traceEvents")) {
        if (e.at("ph") != "s" && e.at("ph") != "f") continue;
        const auto id = e.at("id").get<std::int64_t>();
        if (e.at("ph") == "s") {
            ++starts[id];
            flows[id].first = e;
        } else {
            ++finishes[id];
            flows[id].second = e;
            CHECK(e.at("bp") == "e");
        }
        bool enclosed = false;
        for (const json& x : xs)
            if (x.at("pid") == e.at("pid") && x.at("tid") == e.at("tid") && ps(x.at("ts")) <= ps(e.at("ts")) &&
                ps(e.at("ts")) <= ps(x.at("ts")) + ps(x.at("dur")))
                enclosed = true;
        INFO(e.dump());
        CHECK(enclosed);
    }
    for (const auto& [id, n] : starts) {
        INFO("flow " << id);
        CHECK(n == 1);
        CHECK(finishes[id] == 1);
    }
    for (const auto& [id, n] : finishes) {
        INFO("flow " << id);
        CHECK(n == 1);
        CHECK(starts[id] == 1);
    }
    for (const auto& [id, ends] : flows) {
        CHECK(ends.first.at("name") == ends.second.at("name"));
        CHECK(ends.first.at("cat") == ends.second.at("cat"));
    }
    return flows;
}

}  // namespace smol::test

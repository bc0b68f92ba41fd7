// Checks every Chrome trace must pass, simulated or measured: slices on one thread never
// overlap, and flows bind to their own slices (see traces/chrome_trace.hpp). Shared by the trace
// tests and the executor's tests.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/op_graph.hpp"

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

/// The category of an op's slice: its kind, "p2p" for sends and receives.
inline std::string category(OpKind k) { return k == OpKind::send || k == OpKind::recv ? "p2p" : to_string(k); }

/// The "X" slice that starts exactly at a flow event, on its thread, with its category (the
/// binding rule every viewer agrees on for these traces); null when none.
inline const json* slice_at(const std::vector<json>& xs, const json& flow) {
    for (const json& x : xs)
        if (x.at("pid") == flow.at("pid") && x.at("tid") == flow.at("tid") && x.at("ts") == flow.at("ts") &&
            x.at("cat") == flow.at("cat"))
            return &x;
    return nullptr;
}

/// Every flow id runs "s", then "t"s, then "f", in file order and in time order; every flow event
/// sits at the start of a slice of its thread and category, inside no other slice of the thread
/// (the classic viewer's closed-interval lookup). Returns id → the op ids of its slices in order.
inline std::map<std::int64_t, std::vector<std::int64_t>> check_flows(const json& doc) {
    const auto xs = events(doc, "X");
    std::map<std::int64_t, std::vector<json>> by_id;
    std::int64_t last_ts = -1;
    for (const json& e : doc.at("traceEvents")) {
        const std::string ph = e.at("ph");
        if (ph != "s" && ph != "t" && ph != "f") continue;
        CHECK(ps(e.at("ts")) >= last_ts);   // flow events are written in time order
        last_ts = ps(e.at("ts"));
        by_id[e.at("id").get<std::int64_t>()].push_back(e);
    }
    std::map<std::int64_t, std::vector<std::int64_t>> out;
    for (const auto& [id, list] : by_id) {
        INFO("flow " << id);
        REQUIRE(list.size() >= 2);
        for (std::size_t k = 0; k < list.size(); ++k) {
            const json& e = list[k];
            CHECK(e.at("ph") == (k == 0 ? "s" : k + 1 == list.size() ? "f" : "t"));
            CHECK(e.contains("bp") == (k + 1 == list.size()));
            CHECK(e.at("name") == list[0].at("name"));
            const json* x = slice_at(xs, e);
            INFO(e.dump());
            REQUIRE(x != nullptr);
            out[id].push_back(x->at("args").at("op").get<std::int64_t>());
            int containing = 0;
            for (const json& y : xs)
                if (y.at("pid") == e.at("pid") && y.at("tid") == e.at("tid") && ps(y.at("ts")) <= ps(e.at("ts")) &&
                    ps(e.at("ts")) <= ps(y.at("ts")) + ps(y.at("dur")))
                    ++containing;
            CHECK(containing == 1);
        }
    }
    return out;
}

}  // namespace smol::test

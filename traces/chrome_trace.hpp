// The Chrome trace (chrome://tracing, Perfetto) of a Timeline, laid out as the README fixes it:
// object form {"traceEvents":[…],"displayTimeUnit":"ns"}; one process per rank named after its
// device ("node1/gpu3"), one thread per stream; complete events ("X") whose args carry op, bytes,
// FLOPs, layer and micro-batch; flow events tying each send to its receive and the members of a
// collective together (bound to their slices in Perfetto, the classic viewer and DevTools; see
// chrome_trace.cpp); counter events for memory per tier; a "network" process with one
// utilisation counter per link. Slices on one thread never overlap. Same input, same bytes.
#pragma once

#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "core/op_graph.hpp"
#include "core/timeline.hpp"

namespace smol::traces {

struct TraceOptions {
    std::vector<int> ranks;   // ranks to write; empty: all of them (huge runs write a subset)
    /// The network process, when the timeline has link samples (a simulation of a few traced
    /// ranks samples only the links their traffic crosses: sim::SimOptions::link_ranks).
    bool links = true;
    /// Run metadata (model, cluster, plan, command line, version), written in order as the
    /// top-level "metadata" object, which Perfetto, the classic viewer and DevTools show.
    std::vector<std::pair<std::string, std::string>> metadata;
};

void write_chrome_trace(std::ostream& out, const OpGraph& graph, const Timeline& timeline,
                        const TraceOptions& options = {});

}  // namespace smol::traces

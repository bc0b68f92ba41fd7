// Simulated against measured: two timelines of one graph (same op ids), lined up op by op.
//
// Per op class, the time both backends spent, summed over every rank:
//   gemm, attention, elementwise, optimizer — the kernels of compute ops, by kernel class
//       (Timeline::kernel_class_time; a timeline without it counts each op whole in its class);
//   collective — per member, from the last member's arrival to its end: the collective itself,
//       not the wait for late members (that is the schedule's doing, and shows in the step);
//   p2p — per transfer, from the rendezvous (both sides posted) to the receive's end;
//   copy — each copy's duration.
// Errors are signed fractions, simulated / measured − 1 (DESIGN.md's step_error): +0.1 means the
// simulator predicted 10 % too long. The step is each timeline's makespan.
#pragma once

#include <array>
#include <cstddef>
#include <ostream>
#include <vector>

#include "core/json.hpp"
#include "core/op_graph.hpp"
#include "core/timeline.hpp"

namespace smol::traces {

enum class OpClass : std::uint8_t { gemm, attention, elementwise, optimizer, collective, p2p, copy };
inline constexpr int kOpClasses = 7;
const char* to_string(OpClass c);

struct ClassComparison {
    Time simulated, measured;
    std::size_t ops = 0;         // ops (or transfers) that contributed
    double error = 0;            // simulated / measured − 1; 0 when nothing was measured
};

struct OpComparison {
    OpId op = 0;
    Time simulated, measured;    // the op's own time, as its class counts it
};

struct Comparison {
    Time simulated_step, measured_step;
    double step_error = 0;
    std::array<ClassComparison, kOpClasses> per_class{};
    std::vector<OpComparison> largest;   // the ops whose times differ most, largest first
};

/// Both timelines must be of `graph` (one start and end per op, every op run).
Comparison compare(const OpGraph& graph, const Timeline& simulated, const Timeline& measured, std::size_t largest = 8);

/// simulated_step_s, measured_step_s, step_error, per_class {class: {simulated_s, measured_s,
/// error, ops}} (classes with no ops left out), largest [{op, name, simulated_s, measured_s}].
Json to_json(const OpGraph& graph, const Comparison& c);
void print_comparison(std::ostream& out, const OpGraph& graph, const Comparison& c);

}  // namespace smol::traces

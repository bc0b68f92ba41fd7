#include "traces/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.hpp"

namespace smol::traces {

namespace {

double error_of(Time simulated, Time measured) { return measured > Time::zero() ? simulated / measured - 1.0 : 0.0; }

std::string pct(double e) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%+.1f %%", e * 100);
    return buf;
}

/// An op's time in its class (see the header): the same rule for both timelines.
struct Accounting {
    const OpGraph& g;
    const Timeline& tl;

    Time collective(OpId id) const {
        Time arrival = Time::zero();
        for (OpId m : g.collective_ops(g.op(id).ref))
            if (m != OpGraph::kNoOp) arrival = std::max(arrival, tl.start[m]);
        return std::max(Time::zero(), tl.end[id] - arrival);
    }
    Time transfer(OpId recv) const {
        const P2P& p = g.p2ps()[static_cast<std::size_t>(g.op(recv).ref)];
        return std::max(Time::zero(), tl.end[recv] - std::max(tl.start[p.send], tl.start[p.recv]));
    }
    /// Adds op `id`'s times to `per_class`; returns its own time (0 for ops no class counts).
    Time add(OpId id, std::array<Time, kOpClasses>& per_class) const {
        const Op& op = g.op(id);
        switch (op.kind) {
            case OpKind::compute: {
                if (tl.kernel_class_time.size() == g.size()) {
                    Time total;
                    for (int c = 0; c < kKernelClasses; ++c) {
                        per_class[static_cast<std::size_t>(c)] += tl.kernel_class_time[id][static_cast<std::size_t>(c)];
                        total += tl.kernel_class_time[id][static_cast<std::size_t>(c)];
                    }
                    return total;
                }
                const Time d = tl.end[id] - tl.start[id];
                per_class[static_cast<std::size_t>(op.kernel())] += d;
                return d;
            }
            case OpKind::collective: {
                const Time d = collective(id);
                per_class[static_cast<std::size_t>(OpClass::collective)] += d;
                return d;
            }
            case OpKind::recv: {
                const Time d = transfer(id);
                per_class[static_cast<std::size_t>(OpClass::p2p)] += d;
                return d;
            }
            case OpKind::copy: {
                const Time d = tl.end[id] - tl.start[id];
                per_class[static_cast<std::size_t>(OpClass::copy)] += d;
                return d;
            }
            case OpKind::send:   // counted once, at its receive
            case OpKind::alloc:
            case OpKind::free:
            case OpKind::timer: return Time::zero();
        }
        return Time::zero();
    }
};

void check_timeline(const OpGraph& g, const Timeline& tl, const char* which) {
    if (tl.start.size() != g.size() || tl.end.size() != g.size())
        throw Error(ErrorKind::internal, std::string("the ") + which + " timeline has " + std::to_string(tl.start.size()) +
                                             " ops, the graph " + std::to_string(g.size()));
    for (OpId id = 0; id < g.size(); ++id)
        if (tl.start[id] < Time::zero() || tl.end[id] < tl.start[id])
            throw Error(ErrorKind::internal, std::string("the ") + which + " timeline never ran " + g.describe(id));
}

}  // namespace

const char* to_string(OpClass c) {
    switch (c) {
        case OpClass::gemm: return "gemm";
        case OpClass::attention: return "attention";
        case OpClass::elementwise: return "elementwise";
        case OpClass::optimizer: return "optimizer";
        case OpClass::collective: return "collective";
        case OpClass::p2p: return "p2p";
        case OpClass::copy: return "copy";
    }
    return "?";
}

Comparison compare(const OpGraph& g, const Timeline& simulated, const Timeline& measured, std::size_t largest) {
    check_timeline(g, simulated, "simulated");
    check_timeline(g, measured, "measured");
    Comparison c;
    c.simulated_step = simulated.makespan;
    c.measured_step = measured.makespan;
    c.step_error = error_of(c.simulated_step, c.measured_step);
    const Accounting sim{g, simulated}, real{g, measured};
    std::array<Time, kOpClasses> sim_class{}, real_class{};
    std::vector<OpComparison> ops;
    for (OpId id = 0; id < g.size(); ++id) {
        std::array<Time, kOpClasses> s{}, r{};
        const Time ts = sim.add(id, s), tr = real.add(id, r);
        bool counted = false;
        for (int k = 0; k < kOpClasses; ++k) {
            sim_class[static_cast<std::size_t>(k)] += s[static_cast<std::size_t>(k)];
            real_class[static_cast<std::size_t>(k)] += r[static_cast<std::size_t>(k)];
            if (s[static_cast<std::size_t>(k)] > Time::zero() || r[static_cast<std::size_t>(k)] > Time::zero()) counted = true;
        }
        // A compute op counts in each kernel class it has; every other op in its one class.
        const Op& op = g.op(id);
        if (op.kind == OpKind::compute) {
            for (int k = 0; k < kKernelClasses; ++k)
                if (s[static_cast<std::size_t>(k)] > Time::zero() || r[static_cast<std::size_t>(k)] > Time::zero())
                    ++c.per_class[static_cast<std::size_t>(k)].ops;
        } else if (op.kind == OpKind::collective || op.kind == OpKind::recv || op.kind == OpKind::copy) {
            const OpClass k = op.kind == OpKind::collective ? OpClass::collective : op.kind == OpKind::recv ? OpClass::p2p : OpClass::copy;
            ++c.per_class[static_cast<std::size_t>(k)].ops;
        }
        if (counted) ops.push_back({id, ts, tr});
    }
    for (int k = 0; k < kOpClasses; ++k) {
        ClassComparison& cc = c.per_class[static_cast<std::size_t>(k)];
        cc.simulated = sim_class[static_cast<std::size_t>(k)];
        cc.measured = real_class[static_cast<std::size_t>(k)];
        cc.error = error_of(cc.simulated, cc.measured);
    }
    auto gap = [](const OpComparison& o) { return std::llabs((o.simulated - o.measured).count_ps()); };
    std::stable_sort(ops.begin(), ops.end(), [&](const OpComparison& a, const OpComparison& b) { return gap(a) > gap(b); });
    if (ops.size() > largest) ops.resize(largest);
    c.largest = std::move(ops);
    return c;
}

Json to_json(const OpGraph& g, const Comparison& c) {
    Json per_class = Json::object();
    for (int k = 0; k < kOpClasses; ++k) {
        const ClassComparison& cc = c.per_class[static_cast<std::size_t>(k)];
        if (cc.ops == 0) continue;
        per_class[to_string(static_cast<OpClass>(k))] = {{"simulated_s", cc.simulated.to_seconds()},
                                                         {"measured_s", cc.measured.to_seconds()},
                                                         {"error", cc.error},
                                                         {"ops", cc.ops}};
    }
    Json largest = Json::array();
    for (const OpComparison& o : c.largest)
        largest.push_back({{"op", o.op}, {"name", g.describe(o.op)}, {"simulated_s", o.simulated.to_seconds()},
                           {"measured_s", o.measured.to_seconds()}});
    return {{"simulated_step_s", c.simulated_step.to_seconds()},
            {"measured_step_s", c.measured_step.to_seconds()},
            {"step_error", c.step_error},
            {"per_class", per_class},
            {"largest_differences", largest}};
}

void print_comparison(std::ostream& out, const OpGraph& g, const Comparison& c) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "  step          simulated %-11s measured %-11s error %s\n", to_string(c.simulated_step).c_str(),
                  to_string(c.measured_step).c_str(), pct(c.step_error).c_str());
    out << buf << "\n  class         simulated   measured    error      ops\n";
    for (int k = 0; k < kOpClasses; ++k) {
        const ClassComparison& cc = c.per_class[static_cast<std::size_t>(k)];
        if (cc.ops == 0) continue;
        std::snprintf(buf, sizeof buf, "  %-13s %-11s %-11s %-10s %zu\n", to_string(static_cast<OpClass>(k)),
                      to_string(cc.simulated).c_str(), to_string(cc.measured).c_str(), pct(cc.error).c_str(), cc.ops);
        out << buf;
    }
    if (c.largest.empty()) return;
    out << "\n  largest differences   simulated   measured\n";
    for (const OpComparison& o : c.largest) {
        std::snprintf(buf, sizeof buf, "  %-40s %-11s %s\n", g.describe(o.op).c_str(), to_string(o.simulated).c_str(),
                      to_string(o.measured).c_str());
        out << buf;
    }
}

}  // namespace smol::traces

#include "tools/pipeline_split.hpp"

#include <algorithm>
#include <limits>
#include <map>

#include "core/kernel.hpp"
#include "sim/compute.hpp"
#include "sim/simulator.hpp"
#include "strategies/data_parallel.hpp"
#include "strategies/model_parallel.hpp"
#include "strategies/moe.hpp"
#include "strategies/optimizer.hpp"
#include "strategies/schedule.hpp"

namespace smol::tools {

namespace {

using strategies::Layout;
using strategies::Plan;

bool is_layer(const Block& b) { return b.kind == Block::Kind::transformer || b.kind == Block::Kind::layer; }

/// The seconds one micro-batch of `b` takes on `group` (forward, backward and recompute, each
/// pass one op as the builders emit it), by the simulator's compute model, the framework's
/// dispatch included.
double block_seconds(const Block& b, DType dtype, const topo::NodeGroup& group, Time dispatch) {
    Op op;
    op.ref = 0;   // priced from the kernel list given
    op.sub = static_cast<std::uint8_t>(static_cast<unsigned>(dtype) << 3);
    double s = 0;
    const std::vector<Kernel> bwd = block_backward(b);
    for (const std::vector<Kernel>* pass : {&b.fwd_kernels, &bwd, &b.recompute_kernels})
        if (!pass->empty()) s += sim::compute_time(op, *pass, group, dispatch).to_seconds();
    return s;
}

/// The ranks of pipeline stage `s`.
std::vector<int> stage_ranks(const Layout& l, int s) {
    std::vector<int> out;
    for (int d = 0; d < l.dp_cp(); ++d)
        for (int t = 0; t < l.tp; ++t) out.push_back(l.rank(t, d, s));
    return out;
}

/// Per (device, chunk): the most micro-batches whose activations are alive at once, from the
/// schedule table (a forward allocates them; the backward, or zb-h1's weight pass, frees them).
std::vector<std::vector<int>> in_flight(const strategies::PipelineSchedule& sched) {
    std::vector<std::vector<int>> most(static_cast<std::size_t>(sched.stages), std::vector<int>(static_cast<std::size_t>(sched.chunks), 0));
    const strategies::Pass frees = sched.split_backward() ? strategies::Pass::bwd_weight : strategies::Pass::bwd;
    for (int s = 0; s < sched.stages; ++s) {
        std::vector<int> live(static_cast<std::size_t>(sched.chunks), 0);
        for (const strategies::Step& step : sched.steps[static_cast<std::size_t>(s)]) {
            int& n = live[static_cast<std::size_t>(step.chunk)];
            if (step.pass == strategies::Pass::fwd) ++n;
            if (step.pass == frees) --n;
            int& m = most[static_cast<std::size_t>(s)][static_cast<std::size_t>(step.chunk)];
            m = std::max(m, n);
        }
    }
    return most;
}

}  // namespace

bool stages_on_mixed_devices(const topo::Cluster& cluster, const Layout& l) {
    if (l.pp < 2) return false;
    // One kind of device at one speed everywhere: no stage can differ (the sweep asks this of
    // every candidate; the scan below is over every rank).
    const bool one_kind = std::all_of(cluster.groups.begin(), cluster.groups.end(), [&](const topo::NodeGroup& g) {
        return g.device.name == cluster.groups.front().device.name && g.speed == cluster.groups.front().speed;
    });
    if (one_kind && cluster.slow_devices.empty()) return false;
    const int r0 = l.rank(0, 0, 0);
    const topo::DeviceKind* first = &cluster.device_kind(r0);
    for (int s = 0; s < l.pp; ++s)
        for (int r : stage_ranks(l, s))
            if (cluster.device_kind(r).name != first->name || cluster.compute_speed(r) != cluster.compute_speed(r0)) return true;
    return false;
}

namespace {

/// The split of speed_balanced_layers for device memory budgets `budget` (bytes per pipeline
/// device; empty: each device's smallest memory, set on return); empty when none fits.
std::vector<int> split_within(const Model& model, const topo::Cluster& cluster, const Plan& plan, const Layout& l,
                              std::vector<double>& budget, bool within_memory) {
    const std::vector<Block> blocks = strategies::detail::replica_blocks(model, l, plan);
    const int chunks = plan.schedule == strategies::Schedule::interleaved ? plan.virtual_stages : 1;
    const strategies::PipelineSchedule sched = strategies::make_schedule(plan.schedule, l.pp, l.microbatches, chunks);
    const int stages = sched.virtual_stages();

    // Per pipeline device: its slowest group (the stage waits for it) and its smallest memory.
    // Seconds per block are computed once per distinct group.
    std::map<const topo::NodeGroup*, std::vector<double>> seconds_on;
    std::vector<const std::vector<double>*> seconds(static_cast<std::size_t>(l.pp));
    std::vector<double> slowdown(static_cast<std::size_t>(l.pp), 1.0);   // 1 / the device's speed (--slow, a group's speed)
    std::vector<double> memory(static_cast<std::size_t>(l.pp), std::numeric_limits<double>::infinity());
    for (int s = 0; s < l.pp; ++s) {
        double slowest = -1;
        for (int r : stage_ranks(l, s)) {
            const topo::NodeGroup& g = cluster.group_of(r);
            auto [it, fresh] = seconds_on.try_emplace(&g);
            if (fresh)
                for (const Block& b : blocks) it->second.push_back(block_seconds(b, l.dtype, g, l.framework.dispatch_per_kernel));
            // The simulator divides a device's compute time by its speed (sim/simulator.cpp device_time).
            const double k = 1.0 / cluster.compute_speed(r);
            double total = 0;
            for (double t : it->second) total += t * k;
            if (total > slowest) {
                slowest = total;
                seconds[static_cast<std::size_t>(s)] = &it->second;
                slowdown[static_cast<std::size_t>(s)] = k;
            }
            memory[static_cast<std::size_t>(s)] =
                std::min(memory[static_cast<std::size_t>(s)], static_cast<double>(cluster.device_kind(r).memory.count()));
        }
    }
    if (budget.empty()) budget = memory;

    // Layers and what comes with the first (embedding) and the last (head) stage, as
    // partition_layers counts them; per block: seconds per device, state and activation bytes.
    std::vector<int> layer_block;   // block index of each layer
    for (int i = 0; i < static_cast<int>(blocks.size()); ++i)
        if (is_layer(blocks[static_cast<std::size_t>(i)])) layer_block.push_back(i);
    const int n = static_cast<int>(layer_block.size());
    const strategies::StateBytes sb = strategies::state_bytes(l.dtype);
    const auto state_of = [&](std::int64_t params) {
        const double own = static_cast<double>(params) * (sb.params + sb.grads);
        const double opt = static_cast<double>(strategies::optimizer_state_bytes(l, params).count());
        return own + (plan.strategy == strategies::DataParallel::zero1 ? opt / l.dp_cp() : opt);
    };
    const std::vector<std::vector<int>> flight = in_flight(sched);
    // Blocks [from, to) of the model that virtual stage k runs when it holds layers [a, b).
    const auto block_range = [&](int k, int a, int b) {
        const int from = k == 0 ? 0 : layer_block[static_cast<std::size_t>(a)];
        const int to = k == stages - 1 ? static_cast<int>(blocks.size()) : layer_block[static_cast<std::size_t>(b) - 1] + 1;
        return std::pair{from, to};
    };
    const auto cost = [&](int k, int a, int b, bool within_memory) {
        const int device = sched.device_of(k), chunk = sched.chunk_of(k);
        const auto [from, to] = block_range(k, a, b);
        double t = 0, params = 0, activations = 0;
        for (int i = from; i < to; ++i) {
            const Block& blk = blocks[static_cast<std::size_t>(i)];
            t += (*seconds[static_cast<std::size_t>(device)])[static_cast<std::size_t>(i)] * slowdown[static_cast<std::size_t>(device)];
            params += static_cast<double>(blk.params);
            activations += static_cast<double>(blk.activations.count());
        }
        if (within_memory) {
            const double need = state_of(static_cast<std::int64_t>(params)) +
                                activations * flight[static_cast<std::size_t>(device)][static_cast<std::size_t>(chunk)];
            if (need > budget[static_cast<std::size_t>(device)] / chunks) return std::numeric_limits<double>::infinity();
        }
        return t;
    };
    return strategies::min_max_split(n, stages, [&](int k, int a, int b) { return cost(k, a, b, within_memory); });
}

/// Rounds of checking a split against the simulator's memory model before giving up on fitting.
constexpr int kMemoryRounds = 4;

}  // namespace

std::vector<int> speed_balanced_layers(const Model& model, const topo::Cluster& cluster, const Plan& plan, const Layout& l) {
    // The estimate of split_within leaves out what the simulator also holds (receive buffers,
    // transient workspaces), so each split is checked by simulating it (analytic network, the
    // simulator's own memory model); a device over its memory has its budget lowered by the
    // excess and the split is chosen again.
    std::vector<double> budget, capacity;
    std::vector<int> last;
    for (int round = 0; round < kMemoryRounds; ++round) {
        std::vector<int> split = split_within(model, cluster, plan, l, budget, true);
        if (capacity.empty()) capacity = budget;
        if (split.empty()) break;
        last = split;
        Plan p = plan;
        p.stage_layers = split;
        sim::SimOptions quick;
        quick.network = sim::NetworkMode::analytic;
        quick.record_memory = false;
        quick.record_links = false;
        const Timeline t = sim::simulate(strategies::build(model, cluster, p).graph, cluster, quick);
        bool over = false;
        for (int s = 0; s < l.pp; ++s) {
            double peak = 0;
            for (int r : stage_ranks(l, s))
                peak = std::max(peak, static_cast<double>(t.peak[static_cast<std::size_t>(r)][static_cast<std::size_t>(Tier::device)].count()));
            const double excess = peak - capacity[static_cast<std::size_t>(s)];
            if (excess > 0) {
                budget[static_cast<std::size_t>(s)] -= excess;
                over = true;
            }
        }
        if (!over) return split;
    }
    // No split found to fit: the last one tried (the most careful with memory), else the fastest.
    if (!last.empty()) return last;
    std::vector<double> unused;
    return split_within(model, cluster, plan, l, unused, false);
}

Plan with_pipeline_split(const Model& model, const topo::Cluster& cluster, Plan plan) {
    if (plan.pp < 2 || !plan.stage_layers.empty()) return plan;
    if (plan.partition && *plan.partition != strategies::Partition::speed) return plan;
    const Layout l = strategies::resolve(model, cluster, plan);
    if (!plan.partition && !stages_on_mixed_devices(cluster, l)) return plan;
    plan.stage_layers = speed_balanced_layers(model, cluster, plan, l);
    return plan;
}

}  // namespace smol::tools

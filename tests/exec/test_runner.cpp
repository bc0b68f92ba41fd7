// Every strategy's graph, run for real under mpirun (-np 2 and -np 4): each op executes exactly
// once (counted by a backend that wraps the CPU one), the measured timeline respects every edge
// of the graph, its Chrome trace passes the checks a simulated trace passes, and the measured
// peak memory is recorded and resident. No test asserts a timing.
#include <catch2/catch.hpp>

#include <atomic>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "exec/cpu/backend.hpp"
#include "exec/runner.hpp"
#include "exec_support.hpp"
#include "strategies/plan.hpp"
#include "topologies/localhost.hpp"
#include "traces/chrome_trace.hpp"
#include "traces/trace_checks.hpp"

using namespace smol;

namespace {

/// Counts what the runner asks of the device, per op and per buffer, then lets the CPU backend do it.
class CountingBackend final : public exec::Backend {
public:
    CountingBackend(exec::Backend& inner, const OpGraph& g)
        : inner_(inner), ran_(g.size()), allocated_(g.buffers().size()) {}

    std::string describe() const override { return inner_.describe(); }
    void prepare(const OpGraph& g, int rank, const exec::Communicators& comms) override {
        inner_.prepare(g, rank, comms);
        for (int s = 0; s < kStreams; ++s) devices_[static_cast<std::size_t>(s)] = std::make_unique<Device>(*this, static_cast<Stream>(s));
    }
    exec::StreamDevice& stream(Stream s) override { return *devices_[static_cast<std::size_t>(s)]; }
    void allocate(std::int32_t b) override {
        ++allocated_[static_cast<std::size_t>(b)];
        inner_.allocate(b);
    }
    void release(std::int32_t b) override { inner_.release(b); }
    Bytes workspace() const override { return inner_.workspace(); }

    int ran(OpId id) const { return ran_[id]; }
    int allocated(std::int32_t b) const { return allocated_[static_cast<std::size_t>(b)]; }

private:
    struct Device final : exec::StreamDevice {
        Device(CountingBackend& o, Stream s) : owner(o), stream(s) {}
        exec::StreamDevice& inner() { return owner.inner_.stream(stream); }
        void compute(OpId id, std::span<const Kernel> k, bool h, exec::ClassTimes& c) override {
            ++owner.ran_[id];
            inner().compute(id, k, h, c);
        }
        void collective(OpId id) override {
            ++owner.ran_[id];
            inner().collective(id);
        }
        void send(OpId id) override {
            ++owner.ran_[id];
            inner().send(id);
        }
        void recv(OpId id) override {
            ++owner.ran_[id];
            inner().recv(id);
        }
        void copy(OpId id) override {
            ++owner.ran_[id];
            inner().copy(id);
        }
        CountingBackend& owner;
        Stream stream;
    };

    exec::Backend& inner_;
    std::vector<std::atomic<int>> ran_;
    std::vector<std::atomic<int>> allocated_;
    std::array<std::unique_ptr<Device>, kStreams> devices_;
};

Model tiny() { return model_preset("gpt-tiny"); }

/// Edges of the graph between ops of different ranks.
std::size_t cross_rank_edges(const OpGraph& g) {
    std::size_t n = 0;
    for (OpId v = 0; v < g.size(); ++v)
        for (OpId s : g.successors(v)) n += g.op(v).rank != g.op(s).rank;
    return n;
}

/// Runs `plan` on the localhost cluster of this mpirun (one rank per process) and checks it.
/// `between_ranks`: the graph has edges between ranks, which the runner signals by message.
void run_and_check(strategies::Plan plan, bool between_ranks = false) {
    exec::Session& session = test::session();
    const topo::Cluster cluster = topo::localhost_cluster();
    REQUIRE(cluster.num_devices() == session.size());
    plan.fold = false;
    plan.seq = 128;
    const strategies::Built built = strategies::build(tiny(), cluster, plan);
    const OpGraph& g = built.graph;
    if (between_ranks) CHECK(cross_rank_edges(g) > 0);

    exec::cpu::CpuBackend cpu(g, session.mpi(), "");
    CountingBackend counting(cpu, g);
    exec::ExecOptions options;
    options.warmup = 0;
    options.timeout = Time::seconds(60);
    exec::Measured m;
    {
        exec::Runner runner(g, cluster, session.mpi(), counting, options);
        m = runner.run();
    }

    // Every op of this rank ran exactly once; every buffer it allocates was allocated once.
    int wrong = 0;
    OpId first_wrong = 0;
    for (OpId id = 0; id < g.size(); ++id) {
        const Op& op = g.op(id);
        if (op.rank != session.rank()) continue;
        int times = -1;
        switch (op.kind) {
            case OpKind::compute:
            case OpKind::collective:
            case OpKind::send:
            case OpKind::recv:
            case OpKind::copy: times = counting.ran(id); break;
            case OpKind::alloc: times = counting.allocated(op.ref); break;
            case OpKind::free:
            case OpKind::timer: times = 1; break;   // checked from the timeline below
        }
        if (times != 1 && wrong++ == 0) first_wrong = id;
    }
    INFO("rank " << session.rank() << ": first op not run exactly once: " << (wrong ? g.describe(first_wrong) : "none"));
    CHECK(wrong == 0);

    if (!session.root()) return;
    const Timeline& tl = m.timeline;
    REQUIRE(tl.start.size() == g.size());
    CHECK(tl.events == g.size());
    std::size_t never = 0;
    for (OpId id = 0; id < g.size(); ++id) never += tl.start[id] < Time::zero() || tl.end[id] < tl.start[id];
    CHECK(never == 0);

    // The timeline respects every edge: a predecessor ends before its successor starts (one host,
    // one clock: no alignment error to allow for).
    std::size_t violations = 0;
    std::string example;
    for (OpId v = 0; v < g.size(); ++v)
        for (OpId s : g.successors(v))
            if (tl.end[v] > tl.start[s] && violations++ == 0)
                example = g.describe(v) + " ends at " + to_string(tl.end[v]) + ", after " + g.describe(s) + " starts at " +
                          to_string(tl.start[s]);
    INFO(example);
    CHECK(violations == 0);
    CHECK(tl.makespan > Time::zero());

    // The measured trace passes the simulated trace's checks.
    std::ostringstream trace;
    traces::write_chrome_trace(trace, g, tl);
    const nlohmann::json doc = nlohmann::json::parse(trace.str());
    test::check_no_overlap(doc);
    test::check_flows(doc);

    // The measured peak memory is recorded, bounded by the rank's buffers, and resident.
    for (int r = 0; r < g.ranks(); ++r) {
        Bytes total, largest;
        for (const Buffer& b : g.buffers())
            if (b.rank == r && b.tier != Tier::nvme) {
                total += Bytes(b.bytes);
                largest = std::max(largest, Bytes(b.bytes));
            }
        INFO("rank " << r);
        const Bytes peak = tl.peak[static_cast<std::size_t>(r)][static_cast<int>(Tier::device)];
        CHECK(peak >= largest);
        CHECK(peak <= total);
        if (total > Bytes(0)) CHECK(peak > Bytes(0));
        REQUIRE(m.resident_peak.size() == static_cast<std::size_t>(g.ranks()));
        CHECK(m.resident_peak[static_cast<std::size_t>(r)] >= peak);
    }
    CHECK_FALSE(tl.memory.empty());
    CHECK(tl.kernel_class_time.size() == g.size());
}

strategies::Plan data_parallel(strategies::DataParallel s) {
    strategies::Plan p;
    p.strategy = s;
    return p;
}

strategies::Plan pipeline(strategies::Schedule s, int virtual_stages = 1) {
    strategies::Plan p;
    p.pp = 2;
    p.schedule = s;
    p.virtual_stages = virtual_stages;
    p.global_batch = 4;
    return p;
}

}  // namespace

using strategies::DataParallel;
using strategies::Schedule;

TEST_CASE("exec runs ddp: every op once, in graph order", "[exec][mpi][plan-ddp]") { run_and_check(data_parallel(DataParallel::ddp)); }
TEST_CASE("exec runs ring (Horovod, cycle timers)", "[exec][mpi][plan-ring]") { run_and_check(data_parallel(DataParallel::ring)); }
TEST_CASE("exec runs ps", "[exec][mpi][plan-ps]") { run_and_check(data_parallel(DataParallel::ps)); }
TEST_CASE("exec runs ps-async: edges between ranks (bounded staleness)", "[exec][mpi][plan-ps-async]") {
    strategies::Plan p = data_parallel(DataParallel::ps_async);
    p.staleness = 1;
    run_and_check(p, true);
}
TEST_CASE("exec runs zero1", "[exec][mpi][plan-zero1]") { run_and_check(data_parallel(DataParallel::zero1)); }
TEST_CASE("exec runs zero2", "[exec][mpi][plan-zero2]") { run_and_check(data_parallel(DataParallel::zero2)); }
TEST_CASE("exec runs zero3", "[exec][mpi][plan-zero3]") { run_and_check(data_parallel(DataParallel::zero3)); }
TEST_CASE("exec runs fsdp", "[exec][mpi][plan-fsdp]") { run_and_check(data_parallel(DataParallel::fsdp)); }
TEST_CASE("exec runs tp 2", "[exec][mpi][plan-tp2]") {
    strategies::Plan p;
    p.tp = 2;
    run_and_check(p);
}
TEST_CASE("exec runs pp 2 with gpipe", "[exec][mpi][plan-pp2-gpipe]") { run_and_check(pipeline(Schedule::gpipe)); }
TEST_CASE("exec runs pp 2 with 1f1b", "[exec][mpi][plan-pp2-1f1b]") { run_and_check(pipeline(Schedule::one_f_one_b)); }
TEST_CASE("exec runs pp 2 interleaved", "[exec][mpi][plan-pp2-interleaved]") { run_and_check(pipeline(Schedule::interleaved, 2)); }
TEST_CASE("exec runs tp 2 · pp 2", "[exec][mpi][plan-tp2-pp2]") {
    strategies::Plan p = pipeline(Schedule::one_f_one_b);
    p.tp = 2;
    run_and_check(p);
}

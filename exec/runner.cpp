#include "exec/runner.hpp"

#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace smol::exec {

namespace {

constexpr int kSignalTag = 7;
enum SignalKind : std::int64_t { op_done = 0, rank_failed = 1, rank_stuck = 2 };
/// How far ahead rank 0 schedules a step's start: enough for the broadcast to reach every rank
/// and the stream threads to be created and asleep.
constexpr std::int64_t kStartLeadNs = 5'000'000;

void sleep_until_ns(std::int64_t t) {
    timespec ts{static_cast<time_t>(t / 1'000'000'000), static_cast<long>(t % 1'000'000'000)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
    }
}

void sleep_for_ns(std::int64_t d) { sleep_until_ns(now_ns() + d); }

/// Per worker thread: flush denormals to zero (a kernel on tiny values must not run at a tenth of
/// its speed in microcode assists, as torch.set_flush_denormal does for training), and a 1 µs
/// timer slack so a short sleep is not stretched by Linux's default 50 µs slack.
void configure_thread() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_setcsr(_mm_getcsr() | 0x8040);   // FTZ | DAZ
#elif defined(__aarch64__)
    std::uint64_t fpcr;
    asm volatile("mrs %0, fpcr" : "=r"(fpcr));
    fpcr |= std::uint64_t{1} << 24;      // FZ
    asm volatile("msr fpcr, %0" : : "r"(fpcr));
#endif
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
}

Bytes resident_peak() {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("VmHWM:", 0) == 0) return Bytes(std::atoll(line.c_str() + 6) * 1024);
    return Bytes(0);
}

std::string seconds(std::int64_t ns) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g s", static_cast<double>(ns) * 1e-9);
    return buf;
}

}  // namespace

std::vector<Kernel> kernels_to_run(const OpGraph& graph, OpId id) {
    const std::span<const Kernel> recipe = graph.kernels_of(id);
    if (!recipe.empty()) return {recipe.begin(), recipe.end()};
    const Op& op = graph.op(id);
    switch (op.kernel()) {
        case KernelClass::gemm:
        case KernelClass::attention: {
            const auto d = std::max<std::int64_t>(1, std::llround(std::cbrt(op.flops / 2)));
            Kernel k = gemm_kernel(KernelName::other, op.kernel(), d, d, d, 1, 4, false);
            k.flops = op.flops;
            return {k};
        }
        case KernelClass::elementwise: return {stream_kernel(KernelName::other, KernelClass::elementwise, op.bytes, op.flops)};
        case KernelClass::optimizer: {
            const std::int64_t params = op.flops > 0 ? static_cast<std::int64_t>(op.flops / 12) : op.bytes / 28;
            return {adam_kernel(std::max<std::int64_t>(1, params), 28)};
        }
    }
    return {};
}

Runner::Runner(const OpGraph& graph, const topo::Cluster& cluster, Mpi& mpi, Backend& backend,
               const ExecOptions& options)
    : g_(graph), cluster_(cluster), mpi_(mpi), backend_(backend), options_(options), rank_(mpi.rank()),
      async_(backend.asynchronous()) {
    if (!g_.finalized()) throw Error(ErrorKind::internal, "the executor needs a finalized graph");
    if (g_.folded())
        fail_input("the graph is folded (one data-parallel replica stands for several): the executor runs every "
                   "rank's own ops; build it with folding off (--no-fold)");
    if (g_.ranks() != mpi_.size())
        fail_input("the plan has " + std::to_string(g_.ranks()) + " ranks but mpirun started " +
                   std::to_string(mpi_.size()) + " processes: run it with mpirun -np " + std::to_string(g_.ranks()));
    if (cluster_.num_devices() != g_.ranks())
        throw Error(ErrorKind::internal, "the cluster has " + std::to_string(cluster_.num_devices()) +
                                             " devices but the graph " + std::to_string(g_.ranks()) + " ranks");
    unified_ = cluster_.device_kind(rank_).unified_memory;
    check_fault();
    if (!g_.p2ps().empty() && g_.p2ps().size() - 1 > static_cast<std::size_t>(mpi_.tag_ub()))
        fail_input("the plan has " + std::to_string(g_.p2ps().size()) + " sends, more than MPI's tag space (" +
                   std::to_string(mpi_.tag_ub()) + ") can tell apart");

    // This rank's queues, in id order (= stream order).
    const std::size_t n = g_.size();
    local_index_.assign(n, 0);
    for (OpId id = 0; id < n; ++id) {
        const Op& op = g_.op(id);
        if (op.rank != rank_) continue;
        local_index_[id] = static_cast<std::uint32_t>(mine_.size());
        mine_.push_back(id);
        streams_[static_cast<std::size_t>(op.stream)].queue.push_back(id);
    }
    // Waits (predecessors on another stream or rank) and the ranks to signal on completion.
    std::vector<std::pair<OpId, OpId>> waits;   // (successor on this rank, predecessor)
    std::vector<std::pair<OpId, int>> notify;   // (op on this rank, remote rank of a successor)
    for (OpId v = 0; v < n; ++v) {
        const Op& pv = g_.op(v);
        for (OpId s : g_.successors(v)) {
            const Op& ps = g_.op(s);
            if (ps.rank == rank_ && (pv.rank != rank_ || pv.stream != ps.stream)) {
                waits.emplace_back(s, v);
                remote_edges_ = remote_edges_ || pv.rank != rank_;
            }
            if (pv.rank == rank_ && ps.rank != rank_) notify.emplace_back(v, ps.rank);
        }
    }
    std::sort(waits.begin(), waits.end());
    std::sort(notify.begin(), notify.end());
    notify.erase(std::unique(notify.begin(), notify.end()), notify.end());
    wait_begin_.assign(n + 1, 0);
    for (const auto& w : waits) ++wait_begin_[w.first + 1];
    for (std::size_t i = 0; i < n; ++i) wait_begin_[i + 1] += wait_begin_[i];
    for (const auto& w : waits) wait_list_.push_back(w.second);
    notify_begin_.assign(n + 1, 0);
    for (const auto& x : notify) ++notify_begin_[x.first + 1];
    for (std::size_t i = 0; i < n; ++i) notify_begin_[i + 1] += notify_begin_[i];
    for (const auto& x : notify) notify_list_.push_back(x.second);

    done_ = std::make_unique<std::atomic<std::uint32_t>[]>(n);
    for (std::size_t i = 0; i < n; ++i) done_[i].store(0, std::memory_order_relaxed);
    live_.assign(g_.buffers().size(), 0);

    comms_ = std::make_unique<Communicators>(mpi_, g_);
    backend_.prepare(g_, rank_, *comms_);
    progress_ = std::thread(&Runner::progress_loop, this);
    watchdog_ = std::thread(&Runner::watchdog_loop, this);
}

Runner::~Runner() {
    stop_ = true;
    if (progress_.joinable()) progress_.join();
    if (watchdog_.joinable()) watchdog_.join();
}

void Runner::check_fault() const {
    if (!options_.fault) return;
    const Fault& f = *options_.fault;
    const std::string what = "SMOL_FAIL_AT=" + std::to_string(f.rank) + ":" + std::to_string(f.op);
    if (f.rank < 0 || f.rank >= g_.ranks())
        fail_input(what + ": rank " + std::to_string(f.rank) + " is not one of the plan's 0.." + std::to_string(g_.ranks() - 1));
    if (f.op >= g_.size())
        fail_input(what + ": the plan has ops 0.." + std::to_string(g_.size() - 1));
    if (g_.op(f.op).rank != f.rank)
        fail_input(what + ": op " + std::to_string(f.op) + " ('" + g_.describe(f.op) + "') runs on rank " +
                   std::to_string(g_.op(f.op).rank));
}

// ---- steps --------------------------------------------------------------------------------------

Measured Runner::run() {
    Measured out;
    out.clocks = align_clocks(mpi_);
    out.workspace = backend_.workspace();
    out.backend = backend_.describe();
    const std::int64_t offset_ns = out.clocks.offset[static_cast<std::size_t>(mpi_.host())].count_ps() / 1000;
    // Steps are numbered on across calls: an op is done in a step when its flag holds that
    // step's number, so flags never need resetting.
    for (int i = 0; i <= options_.warmup; ++i) {
        MPI_Barrier(mpi_.world());
        std::int64_t start = mpi_.rank() == 0 ? now_ns() + kStartLeadNs : 0;
        MPI_Bcast(&start, 1, MPI_INT64_T, 0, mpi_.world());
        run_step(++steps_run_, start + offset_ns);
    }
    MPI_Barrier(mpi_.world());
    measure_drift(mpi_, out.clocks);

    record_.resident_peak = resident_peak();
    record_.device_peak = backend_.device_peak();
    if (mpi_.rank() == 0) {
        out.timeline.resize(g_.size(), g_.ranks());
        for (int r = 0; r < g_.ranks(); ++r) {
            const topo::NodeGroup& grp = cluster_.group_of(r);
            out.timeline.device_names[static_cast<std::size_t>(r)] = cluster_.device_name(r);
            auto& cap = out.timeline.capacity[static_cast<std::size_t>(r)];
            cap[static_cast<int>(Tier::device)] = grp.device.memory;
            cap[static_cast<int>(Tier::host)] = grp.host_memory / grp.devices_per_node;
            if (grp.nvme_capacity) cap[static_cast<int>(Tier::nvme)] = *grp.nvme_capacity / grp.devices_per_node;
        }
    }
    out.resident_peak = gather_timeline(mpi_, g_, record_, out.timeline, options_.record_kernel_classes, &out.device_peak);
    if (mpi_.rank() == 0) {
        Time makespan;
        for (OpId id = 0; id < g_.size(); ++id) makespan = std::max(makespan, out.timeline.end[id]);
        out.timeline.makespan = makespan;
        out.timeline.wall_s = makespan.to_seconds();
    }
    return out;
}

void Runner::run_step(std::uint32_t step, std::int64_t start_ns) {
    record_.start.assign(mine_.size(), -1);
    record_.end.assign(mine_.size(), -1);
    record_.classes.assign(mine_.size(), {});
    record_.memory.clear();
    memory_ops_.clear();
    record_.peak = {};
    in_use_ = {};
    step_ = step;
    last_progress_ns_ = now_ns();
    in_step_ = true;
    if (async_) backend_.begin_step();
    std::vector<std::thread> threads;
    for (int s = 0; s < kStreams; ++s)
        if (!streams_[static_cast<std::size_t>(s)].queue.empty())
            threads.emplace_back(&Runner::stream_loop, this, static_cast<Stream>(s), step, start_ns);
    for (std::thread& t : threads) t.join();
    if (async_) {
        backend_.end_step();   // the watchdog still watches: in_step_ stays set while the device runs
        take_device_times(start_ns);
    }
    in_step_ = false;
    // Buffers that live to the end of the step (model states) are released for the next one.
    for (std::size_t b = 0; b < live_.size(); ++b)
        if (live_[b]) {
            backend_.release(static_cast<std::int32_t>(b));
            live_[b] = 0;
        }
    record_.ops_run = 0;
    for (std::int64_t e : record_.end) record_.ops_run += e >= 0;
}

void Runner::stream_loop(Stream s, std::uint32_t step, std::int64_t start_ns) {
    configure_thread();
    StreamState& st = streams_[static_cast<std::size_t>(s)];
    StreamDevice& device = backend_.stream(s);
    std::vector<OpId> after;   // asynchronous backends: the op's waits on other streams of this rank
    sleep_until_ns(start_ns);
    for (std::size_t i = 0; i < st.queue.size(); ++i) {
        const OpId id = st.queue[i];
        st.running = false;
        st.since_ns = now_ns();
        st.position = i;
        wait_ready(id, step);
        if (options_.fault && options_.fault->rank == rank_ && options_.fault->op == id) {
            if (options_.fault->hang) {
                st.running = true;
                while (true) sleep_for_ns(1'000'000'000);   // until the watchdog ends the job
            }
            fail(id, "injected failure (SMOL_FAIL_AT)");
        }
        const std::int64_t t0 = now_ns();
        st.since_ns = t0;
        st.running = true;
        ClassTimes classes{};
        try {
            if (async_) {
                after.clear();
                for (std::uint32_t w = wait_begin_[id]; w < wait_begin_[id + 1]; ++w)
                    if (g_.op(wait_list_[w]).rank == rank_) after.push_back(wait_list_[w]);
                device.begin(id, after);
            }
            execute(id, device, start_ns, classes);
            if (async_) {
                device.end(id);
                if (notify_begin_[id] != notify_begin_[id + 1]) device.finish(id);
            }
        } catch (const std::exception& e) {
            fail(id, e.what());
        }
        const std::int64_t t1 = now_ns();
        const std::uint32_t k = local_index_[id];
        record_.start[k] = (t0 - start_ns) * 1000;
        record_.end[k] = (t1 - start_ns) * 1000;
        for (int c = 0; c < kKernelClasses; ++c) record_.classes[k][static_cast<std::size_t>(c)] = classes[static_cast<std::size_t>(c)].count_ps();
        finished(id, step);
    }
    st.position = st.queue.size();
}

bool Runner::ready(OpId id, std::uint32_t step) const {
    for (std::uint32_t i = wait_begin_[id]; i < wait_begin_[id + 1]; ++i)
        if (done_[wait_list_[i]].load(std::memory_order_acquire) != step) return false;
    return true;
}

void Runner::wait_ready(OpId id, std::uint32_t step) {
    if (ready(id, step)) return;
    bool remote = false;
    for (std::uint32_t i = wait_begin_[id]; i < wait_begin_[id + 1]; ++i) remote = remote || g_.op(wait_list_[i]).rank != rank_;
    if (remote) ++waiting_remote_;
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return ready(id, step); });
    lock.unlock();
    if (remote) --waiting_remote_;
}

void Runner::finished(OpId id, std::uint32_t step) {
    done_[id].store(step, std::memory_order_release);
    { std::lock_guard<std::mutex> lock(mu_); }   // a waiter between its check and its sleep sees the flag
    cv_.notify_all();
    for (std::uint32_t i = notify_begin_[id]; i < notify_begin_[id + 1]; ++i) {
        std::int64_t msg[3] = {op_done, static_cast<std::int64_t>(id), static_cast<std::int64_t>(step)};
        MPI_Send(msg, 3, MPI_INT64_T, notify_list_[i], kSignalTag, mpi_.signals());
    }
    last_progress_ns_ = now_ns();
}

void Runner::execute(OpId id, StreamDevice& device, std::int64_t start_ns, ClassTimes& classes) {
    const Op& op = g_.op(id);
    switch (op.kind) {
        case OpKind::compute: {
            const std::vector<Kernel> kernels = kernels_to_run(g_, id);
            device.compute(id, kernels, op.on_host(), classes);
            break;
        }
        case OpKind::collective: device.collective(id); break;
        case OpKind::send: device.send(id); break;
        case OpKind::recv: device.recv(id); break;
        case OpKind::copy: device.copy(id); break;
        case OpKind::alloc:
        case OpKind::free: memory_op(id, start_ns); break;
        case OpKind::timer: {
            // The next tick of a clock that starts with the step (now, if on a tick).
            if (async_) device.host_enter(id);
            const std::int64_t period = std::max<std::int64_t>(1, op.period().count_ps() / 1000);
            const std::int64_t since = now_ns() - start_ns;
            sleep_until_ns(start_ns + (since + period - 1) / period * period);
            break;
        }
    }
}

void Runner::memory_op(OpId id, std::int64_t start_ns) {
    const Op& op = g_.op(id);
    const Buffer& b = g_.buffers()[static_cast<std::size_t>(op.ref)];
    // As the simulator counts it: a host buffer of a unified-memory device is device memory.
    const int tier = b.tier == Tier::host && unified_ ? static_cast<int>(Tier::device) : static_cast<int>(b.tier);
    if (op.kind == OpKind::alloc) backend_.allocate(op.ref);
    else backend_.release(op.ref);
    std::lock_guard<std::mutex> lock(memory_mu_);
    Bytes& used = in_use_[static_cast<std::size_t>(tier)];
    if (op.kind == OpKind::alloc) {
        used += Bytes(b.bytes);
        live_[static_cast<std::size_t>(op.ref)] = 1;
        record_.peak[static_cast<std::size_t>(tier)] = std::max(record_.peak[static_cast<std::size_t>(tier)], used);
    } else {
        used -= Bytes(b.bytes);
        live_[static_cast<std::size_t>(op.ref)] = 0;
    }
    record_.memory.push_back({rank_, static_cast<Tier>(tier), Time::ps((now_ns() - start_ns) * 1000), used});
    memory_ops_.push_back(id);
}

void Runner::take_device_times(std::int64_t start_ns) {
    for (std::size_t k = 0; k < mine_.size(); ++k) {
        ClassTimes classes{};
        backend_.op_times(mine_[k], start_ns, record_.start[k], record_.end[k], classes);
        for (int c = 0; c < kKernelClasses; ++c)
            record_.classes[k][static_cast<std::size_t>(c)] = classes[static_cast<std::size_t>(c)].count_ps();
    }
    // The host issued allocations and frees ahead of the device: put each sample at its op's
    // device start, in that order (ties in op order), and count the bytes in use again.
    std::vector<std::size_t> order(record_.memory.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    auto at = [&](std::size_t i) { return record_.start[local_index_[memory_ops_[i]]]; };
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        return at(a) != at(b) ? at(a) < at(b) : memory_ops_[a] < memory_ops_[b];
    });
    std::vector<MemorySample> samples;
    samples.reserve(order.size());
    std::array<Bytes, kTiers> used{};
    record_.peak = {};
    for (std::size_t i : order) {
        const Op& op = g_.op(memory_ops_[i]);
        const Buffer& b = g_.buffers()[static_cast<std::size_t>(op.ref)];
        const auto tier = static_cast<std::size_t>(record_.memory[i].tier);
        if (op.kind == OpKind::alloc) used[tier] += Bytes(b.bytes);
        else used[tier] -= Bytes(b.bytes);
        record_.peak[tier] = std::max(record_.peak[tier], used[tier]);
        samples.push_back({rank_, record_.memory[i].tier, Time::ps(at(i)), used[tier]});
    }
    record_.memory = std::move(samples);
}

// ---- progress, watchdog, failure ----------------------------------------------------------------

void Runner::progress_loop() {
    configure_thread();
    // Each poll costs about a microsecond of this rank's core, and takes the MPI library's locks
    // that the rank's communication threads need: poll quickly only just after a signal or a new
    // wait, backing off (10 µs doubling to 500 µs) while nothing arrives; with no stream waiting
    // for another rank, listen for abort notices every 2 ms.
    constexpr std::int64_t kFirst = 10'000, kLongest = 500'000, kIdle = 2'000'000;
    std::int64_t interval = kFirst;
    while (!stop_) {
        int flag = 0;
        MPI_Message message;
        MPI_Status status;
        MPI_Improbe(MPI_ANY_SOURCE, kSignalTag, mpi_.signals(), &flag, &message, &status);
        if (flag) {
            std::int64_t msg[3];
            MPI_Mrecv(msg, 3, MPI_INT64_T, &message, MPI_STATUS_IGNORE);
            if (msg[0] == op_done) {
                done_[static_cast<std::size_t>(msg[1])].store(static_cast<std::uint32_t>(msg[2]), std::memory_order_release);
                { std::lock_guard<std::mutex> lock(mu_); }
                cv_.notify_all();
            } else if (msg[0] == rank_stuck) {
                // Another rank's watchdog fired: say where this rank is before that rank ends the job.
                std::fprintf(stderr, "smolcluster: error: rank %d, when rank %d's watchdog fired; stuck ops:%s\n", rank_,
                             static_cast<int>(msg[2]), stuck_report(step_).c_str());
                std::fflush(stderr);
            } else {
                const auto op = static_cast<OpId>(msg[1]);
                std::fprintf(stderr, "smolcluster: error: rank %d stops: rank %d failed at op %u ('%s')\n", rank_,
                             static_cast<int>(msg[2]), op, op < g_.size() ? g_.describe(op).c_str() : "?");
                std::fflush(stderr);
                mpi_.abort(1);
            }
            interval = kFirst;
            continue;
        }
        if (waiting_remote_ > 0) {
            sleep_for_ns(interval);
            interval = std::min(2 * interval, kLongest);
        } else {
            sleep_for_ns(kIdle);
            interval = kFirst;
        }
    }
}

void Runner::watchdog_loop() {
    const std::int64_t limit = options_.timeout.count_ps() / 1000;
    while (!stop_) {
        sleep_for_ns(50'000'000);
        if (!in_step_ || now_ns() - last_progress_ns_ < limit) continue;
        const std::string report = stuck_report(step_);
        std::fprintf(stderr, "smolcluster: error: rank %d finished no op for %s (--timeout); stuck ops:%s\n", rank_,
                     seconds(limit).c_str(), report.c_str());
        std::fflush(stderr);
        notify_all_ranks(rank_stuck, 0);
        sleep_for_ns(300'000'000);   // time for the others to say where they are
        mpi_.abort(1);
    }
}

std::string Runner::stuck_report(std::uint32_t step) const {
    std::ostringstream s;
    const std::int64_t now = now_ns();
    for (int k = 0; k < kStreams; ++k) {
        const StreamState& st = streams_[static_cast<std::size_t>(k)];
        const std::size_t pos = st.position;
        if (pos >= st.queue.size()) continue;
        const OpId id = st.queue[pos];
        s << "\n  stream " << to_string(static_cast<Stream>(k)) << ": op " << id << " '" << g_.op_name(id) << "' ";
        if (st.running) {
            s << "running for " << seconds(now - st.since_ns);
            const Op& op = g_.op(id);
            if (op.kind == OpKind::collective) s << " (a collective: waits until every member reaches it)";
            if (op.kind == OpKind::send || op.kind == OpKind::recv) {
                const P2P& p = g_.p2ps()[static_cast<std::size_t>(op.ref)];
                s << (op.kind == OpKind::send ? " (waits for the receive on rank " + std::to_string(p.dst)
                                              : " (waits for the send on rank " + std::to_string(p.src))
                  << ")";
            }
        } else {
            s << "waiting " << seconds(now - st.since_ns) << " for";
            int shown = 0;
            for (std::uint32_t i = wait_begin_[id]; i < wait_begin_[id + 1] && shown < 3; ++i) {
                const OpId p = wait_list_[i];
                if (done_[p].load() == step) continue;
                s << (shown++ ? ", " : " ") << "op " << p << " '" << g_.describe(p) << "'";
            }
        }
    }
    if (async_ && s.str().empty())
        s << "\n  every op is issued; the device has not finished them (a collective or transfer waiting for another rank?)";
    return s.str();
}

void Runner::fail(OpId id, const std::string& what) {
    static std::atomic_flag failing = ATOMIC_FLAG_INIT;
    if (failing.test_and_set()) while (true) sleep_for_ns(1'000'000'000);   // another thread reports
    std::fprintf(stderr, "smolcluster: error: rank %d failed at op %u ('%s'): %s\n", rank_, id, g_.describe(id).c_str(),
                 what.c_str());
    std::fflush(stderr);
    // Tell the other ranks, so each says why it stops, then end the job.
    notify_all_ranks(rank_failed, id);
    sleep_for_ns(300'000'000);
    mpi_.abort(1);
}

void Runner::notify_all_ranks(std::int64_t kind, OpId id) {
    for (int r = 0; r < mpi_.size(); ++r) {
        if (r == rank_) continue;
        std::int64_t msg[3] = {kind, static_cast<std::int64_t>(id), rank_};
        MPI_Send(msg, 3, MPI_INT64_T, r, kSignalTag, mpi_.signals());
    }
}

}  // namespace smol::exec

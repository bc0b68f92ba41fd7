#include "exec/calibrate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <functional>
#include <set>

#include "core/error.hpp"
#include "exec/cpu/backend.hpp"
#include "exec/cpu/kernels.hpp"
#include "exec/cuda/measure.hpp"
#include "exec/mpi.hpp"
#include "exec/runner.hpp"
#include "topologies/localhost.hpp"

namespace smol::exec {

namespace {

/// Repetitions of one measurement: timed ones per rank (the warm-up repetition before them is
/// run and dropped).
using Series = std::vector<std::vector<OpId>>;

/// A benchmark graph: the same ops on every rank.
struct Bench {
    explicit Bench(int ranks) : graph(ranks), ranks(ranks) {}
    OpGraph graph;
    int ranks;
    OpId phase_begin_ = 0;
    std::vector<OpId> previous_last_;

    /// Starts a new phase: its ops (those added from now on) wait, through edges, until every op
    /// of the previous phase is done on every rank, so phases never overlap and the ranks outside
    /// a phase's group wait without running MPI (a rank waiting for another rank's op sleeps on a
    /// condition variable; only a blocking MPI call would spin).
    void phase() {
        close_phase();
        phase_begin_ = static_cast<OpId>(graph.size());
    }
    /// Ends the last phase (call before running). A phase's ops on a rank are on one stream, so
    /// its last op there is the last to finish; each rank's first op of the new phase waits for
    /// every rank's last op of the previous one.
    void close_phase() {
        const auto end = static_cast<OpId>(graph.size());
        if (end == phase_begin_) return;
        std::vector<OpId> first(static_cast<std::size_t>(ranks), OpGraph::kNoOp), last(first);
        for (OpId id = phase_begin_; id < end; ++id) {
            const auto r = static_cast<std::size_t>(graph.op(id).rank);
            if (first[r] == OpGraph::kNoOp) first[r] = id;
            last[r] = id;
        }
        for (OpId before : previous_last_)
            for (OpId after : first)
                if (before != OpGraph::kNoOp && after != OpGraph::kNoOp) graph.depend(before, after);
        previous_last_ = last;
        phase_begin_ = end;
    }

    /// `reps` ops running `kernel` on each rank's `stream`, after one warm-up op.
    Series kernel(const Kernel& k, int reps, Stream stream = Stream::compute) {
        std::vector<Kernel> one{k};
        return kernels(one, reps, stream);
    }
    Series kernels(const std::vector<Kernel>& ks, int reps, Stream stream = Stream::compute) {
        const std::int32_t recipe = graph.intern_recipe(ks);
        Series s(static_cast<std::size_t>(ranks));
        for (int r = 0; r < ranks; ++r)
            for (int i = 0; i <= reps; ++i) {
                const OpId id = graph.add_kernels(r, Phase::none, -1, -1, recipe, DType::fp32, false, stream);
                if (i > 0) s[static_cast<std::size_t>(r)].push_back(id);
            }
        return s;
    }
    /// `reps` collectives over `members` (root: the first member), after one warm-up.
    Series collective(CollectiveKind kind, const std::vector<int>& members, std::int64_t bytes, int reps) {
        Series s(static_cast<std::size_t>(ranks));
        for (int i = 0; i <= reps; ++i) {
            const auto ops = graph.add_collective(kind, members, Bytes(bytes), Stream::comm, Phase::comm, -1, -1, -1,
                                                  members.front());
            if (i > 0)
                for (std::size_t m = 0; m < members.size(); ++m) s[static_cast<std::size_t>(members[m])].push_back(ops[m]);
        }
        return s;
    }
    /// `reps` ping-pong messages between a and b (a → b, b → a, …) after one warm-up pair; the
    /// receives are returned (the transfer ends when its receive does).
    Series ping_pong(int a, int b, std::int64_t bytes, int reps) {
        Series s(static_cast<std::size_t>(ranks));
        for (int i = 0; i <= reps; ++i) {
            const bool forward = i % 2 == 0;
            const auto [send, recv] = graph.add_send_recv(forward ? a : b, forward ? b : a, Bytes(bytes), Phase::comm, -1, -1);
            (void)send;
            if (i > 0) s[static_cast<std::size_t>(graph.op(recv).rank)].push_back(recv);
        }
        return s;
    }
    /// `reps` copies of `bytes` from one tier to another on every rank, after one warm-up.
    Series copies(Tier from, Tier to, std::int64_t bytes, int reps) {
        Series s(static_cast<std::size_t>(ranks));
        for (int r = 0; r < ranks; ++r)
            for (int i = 0; i <= reps; ++i) {
                const OpId id = graph.add_copy(r, from, to, Bytes(bytes), Phase::none);
                if (i > 0) s[static_cast<std::size_t>(r)].push_back(id);
            }
        return s;
    }
};

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const std::size_t h = v.size() / 2;
    return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

/// What the executor measured for one benchmark graph (rank 0: the whole timeline).
struct Ran {
    Timeline tl;
    bool direct_io = false;
};

Ran run_bench(Session& session, const topo::Cluster& cluster, Bench& bench, const std::string& scratch) {
    bench.close_phase();
    bench.graph.finalize();
    cpu::CpuBackend backend(bench.graph, session.mpi(), scratch);
    ExecOptions options;
    options.warmup = 0;
    options.timeout = Time::seconds(600);
    Runner runner(bench.graph, cluster, session.mpi(), backend, options);
    Measured m = runner.run();
    return {std::move(m.timeline), backend.direct_io()};
}

double kernel_seconds(const Timeline& tl, OpId id) {
    Time t;
    for (Time c : tl.kernel_class_time[id]) t += c;
    return t.to_seconds();
}
double op_seconds(const Timeline& tl, OpId id) { return (tl.end[id] - tl.start[id]).to_seconds(); }

/// The median over every rank's timed repetitions of `f(op)`.
double median_of(const Series& s, const std::function<double(OpId)>& f) {
    std::vector<double> v;
    for (const auto& per_rank : s)
        for (OpId id : per_rank) v.push_back(f(id));
    return median(v);
}

/// A collective's time from its last member's arrival to its last member's end (a rooted one's
/// root may finish before the others arrive), median over repetitions.
double collective_seconds(const OpGraph& g, const Timeline& tl, const Series& s) {
    std::vector<double> v;
    for (const auto& per_rank : s) {
        for (OpId id : per_rank) {
            const auto members = g.collective_ops(g.op(id).ref);
            if (members.front() != id) continue;   // once per repetition: at its first member
            Time arrival, end;
            for (OpId m : members) {
                arrival = std::max(arrival, tl.start[m]);
                end = std::max(end, tl.end[m]);
            }
            v.push_back((end - arrival).to_seconds());
        }
    }
    return median(v);
}

/// A transfer's time from the rendezvous (both sides posted) to the receive's end.
double transfer_seconds(const OpGraph& g, const Timeline& tl, const Series& s) {
    std::vector<double> v;
    for (const auto& per_rank : s)
        for (OpId recv : per_rank) {
            const P2P& p = g.p2ps()[static_cast<std::size_t>(g.op(recv).ref)];
            v.push_back((tl.end[recv] - std::max(tl.start[p.send], tl.start[p.recv])).to_seconds());
        }
    return median(v);
}

int reps_for(double estimate_s, double target_s, int least, int most) {
    const double n = std::ceil(target_s / std::max(estimate_s, 1e-9));
    return static_cast<int>(std::clamp(n, static_cast<double>(least), static_cast<double>(most)));
}

std::string utc_now() {
    const std::time_t t = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    return buf;
}

std::vector<std::int64_t> sizes(std::int64_t from, std::int64_t to, std::int64_t factor) {
    std::vector<std::int64_t> out;
    for (std::int64_t s = from; s <= to; s *= factor) out.push_back(s);
    return out;
}

class Calibration {
public:
    Calibration(Session& session, const CalibrateOptions& options, std::ostream& progress)
        : session_(session), mpi_(session.mpi()), o_(options), progress_(progress),
          facts_(topo::read_host_facts()),
          // The runner needs a cluster for names and memory tiers; one host-like node of all ranks.
          cluster_(topo::cluster_from_json(JsonView(topo::localhost_json(facts_, mpi_.size()), "calibration"))) {
        const double ghz = facts_.clock_ghz > 0 ? facts_.clock_ghz : 2.0;
        lead_flops_ = 0.5 * ghz * 1e9 * facts_.flops_per_cycle * std::max(1, facts_.cores / std::max(1, mpi_.local_size()));
    }

    topo::Profile run() {
        describe_machine();
        if (o_.cuda) {
            section("gpu", [&] { gpu(); });
            return profile_;
        }
        section("compute", [&] { compute(); });
        section("network", [&] { network(); });
        section("memory", [&] { memory(); });
        section("overlap", [&] { overlap(); });
        return profile_;
    }

private:
    bool root() const { return mpi_.rank() == 0; }

    void section(const char* name, const std::function<void()>& body) {
        const auto t0 = std::chrono::steady_clock::now();
        body();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (root()) progress_ << "  " << name << std::string(10 - std::min<std::size_t>(9, std::string(name).size()), ' ')
                              << detail_ << " (" << static_cast<int>(s * 10) / 10.0 << " s)" << std::endl;
        detail_.clear();
    }

    void describe_machine() {
        // Every host must run as many ranks: a profile's rates are per rank of such a host.
        int lo = mpi_.local_size(), hi = lo;
        MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, mpi_.world());
        MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, mpi_.world());
        if (lo != hi)
            fail_input("the hosts run different numbers of ranks (" + std::to_string(lo) + " to " + std::to_string(hi) +
                       "): calibrate with the same number on every host (mpirun --map-by ppr:N:node)");
        char name[256] = {};
        mpi_.host_name().copy(name, sizeof name - 1);
        std::vector<char> names(static_cast<std::size_t>(mpi_.size()) * sizeof name);
        MPI_Gather(name, sizeof name, MPI_CHAR, names.data(), sizeof name, MPI_CHAR, 0, mpi_.world());
        std::set<std::string> seen;
        for (int r = 0; r < mpi_.size(); ++r) {
            const std::string h(names.data() + static_cast<std::size_t>(r) * sizeof name);
            if (seen.insert(h).second) profile_.hosts.push_back(h);
        }
        profile_.cpu_model = facts_.cpu_model;
        profile_.cores = facts_.cores;
        profile_.nodes = mpi_.hosts();
        profile_.ranks_per_node = mpi_.local_size();
        profile_.blas = cpu::blas_version();
        profile_.blas_threads = cpu::blas_threads_per_rank(mpi_.local_size());
        profile_.mpi = Mpi::library_version();
        profile_.date = utc_now();
        profile_.quick = o_.quick;
        if (root())
            progress_ << "calibrating " << profile_.hosts.size() << " host" << (profile_.hosts.size() == 1 ? "" : "s") << " ("
                      << facts_.cpu_model << ", " << facts_.cores << " cores), " << mpi_.local_size() << " rank"
                      << (mpi_.local_size() == 1 ? "" : "s") << " per host, " << profile_.blas_threads << " BLAS thread"
                      << (profile_.blas_threads == 1 ? "" : "s") << " per rank" << std::endl;
    }

    // ---- a GPU --------------------------------------------------------------------------------
    void gpu() {
        cuda::MeasureOptions mo;
        mo.quick = o_.quick;
        const cuda::GpuFigures f = cuda::measure_session(session_, mo);
        if (!root()) return;
        profile_.blas = "cuBLASLt";
        profile_.blas_threads = 1;
        cuda::fill_profile(f, profile_);
        double best = 0;
        for (double r : profile_.compute.gemm_bf16.rate) best = std::max(best, r);
        detail_ = f.device + ": bf16 GEMM up to " + to_string(FlopRate::flops_per_s(best)) + ", HBM " +
                  to_string(Bandwidth::bytes_per_s(profile_.compute.stream.y.back())) + ", launch " +
                  to_string(profile_.compute.dispatch) + ", " + std::to_string(f.nccl.size()) + " NCCL points";
    }

    // ---- compute --------------------------------------------------------------------------------

    void compute() {
        // Rounds of the whole set, one after another, keeping each figure's fastest round: a
        // shape timed while something else held a core is timed again seconds later (a kernel
        // never runs faster than the machine allows; it runs slower whenever it shares it).
        const int rounds = o_.quick ? 2 : 3;
        topo::MeasuredCompute best = compute_round();
        for (int r = 1; r < rounds; ++r) keep_fastest(best, compute_round());
        if (!root()) return;
        const double slowdown = profile_.compute.comm_slowdown;
        profile_.compute = std::move(best);
        profile_.compute.comm_slowdown = slowdown;
        const topo::MeasuredCompute& c = profile_.compute;
        double top = 0;
        for (double r : c.gemm.rate) top = std::max(top, r);
        detail_ = "gemm up to " + to_string(FlopRate::flops_per_s(top)) + ", stream " +
                  to_string(Bandwidth::bytes_per_s(c.stream.y.back())) + ", dispatch " + to_string(c.dispatch) +
                  " per kernel, fastest of " + std::to_string(rounds) + " rounds";
    }

    /// Every rate of `next` above `best`'s (and a shorter dispatch) into `best`: the same grids.
    static void keep_fastest(topo::MeasuredCompute& best, const topo::MeasuredCompute& next) {
        const auto faster = [](std::vector<double>& a, const std::vector<double>& b) {
            for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) a[i] = std::max(a[i], b[i]);
        };
        for (auto [a, b] : {std::pair{&best.gemm, &next.gemm}, {&best.flash_fwd, &next.flash_fwd}, {&best.flash_bwd, &next.flash_bwd},
                            {&best.flash_fwd_causal, &next.flash_fwd_causal}, {&best.flash_bwd_causal, &next.flash_bwd_causal}})
            faster(a->rate, b->rate);
        for (auto [a, b] : {std::pair{&best.stream, &next.stream}, {&best.softmax, &next.softmax}, {&best.adam, &next.adam}})
            faster(a->y, b->y);
        best.arithmetic = std::max(best.arithmetic, next.arithmetic);
        best.dispatch = std::min(best.dispatch, next.dispatch);
    }

    /// One round of the compute benchmarks (rank 0: the figures; the others: an empty set).
    topo::MeasuredCompute compute_round() {
        Bench b(mpi_.size());
        const double target = o_.quick ? 0.002 : 0.006;
        // GEMM grid; shapes above the FLOP cap take the rate of the nearest smaller one measured
        // (a large product's rate has settled).
        const std::vector<double> dims = o_.quick ? std::vector<double>{16, 128, 1024, 4096}
                                                  : std::vector<double>{16, 64, 256, 1024, 4096};
        const double cap = o_.quick ? 2.2e8 : 2.2e9;
        std::vector<Series> gemm;
        std::vector<std::array<double, 3>> shape;
        for (double m : dims)
            for (double n : dims)
                for (double k : dims) {
                    shape.push_back({m, n, k});
                    const double flops = 2 * m * n * k;
                    if (flops > cap) {
                        gemm.emplace_back();
                        continue;
                    }
                    const Kernel g = gemm_kernel(KernelName::other, KernelClass::gemm, static_cast<std::int64_t>(m),
                                                 static_cast<std::int64_t>(n), static_cast<std::int64_t>(k), 1, 4, false);
                    gemm.push_back(b.kernel(g, reps_for(flops / lead_flops_, target, 2, 40)));
                }
        // Streaming passes, softmax and Adam over sizes.
        const std::vector<std::int64_t> stream_bytes = sizes(16 << 10, o_.quick ? 16 << 20 : 256 << 20, 4);
        std::vector<Series> stream;
        for (std::int64_t bytes : stream_bytes)
            stream.push_back(b.kernel(stream_kernel(KernelName::other, KernelClass::elementwise, bytes),
                                      reps_for(static_cast<double>(bytes) / 5e9, target, 2, 40)));
        const std::int64_t cols = 256;
        const std::vector<std::int64_t> softmax_elements = sizes(4 << 10, o_.quick ? 1 << 20 : 16 << 20, o_.quick ? 16 : 4);
        std::vector<Series> softmax;
        for (std::int64_t e : softmax_elements)
            softmax.push_back(b.kernel(softmax_kernel(e / cols, cols, 4), reps_for(static_cast<double>(e) / 2e8, target, 2, 40)));
        const std::vector<std::int64_t> adam_params = sizes(16 << 10, o_.quick ? 1 << 20 : 16 << 20, o_.quick ? 16 : 4);
        std::vector<Series> adam;
        for (std::int64_t n : adam_params)
            adam.push_back(b.kernel(adam_kernel(n, 28), reps_for(static_cast<double>(n) / 3e8, target, 2, 40)));
        // Flash attention, one head: queries × keys × head dim, without a mask and under the causal
        // one (whose whole diagonal tiles make a short sequence's rate per computed pair lower).
        const std::vector<double> seqs = o_.quick ? std::vector<double>{128, 512} : std::vector<double>{128, 1024};
        const std::vector<double> head_dims = o_.quick ? std::vector<double>{64} : std::vector<double>{64, 128};
        std::vector<Series> flash[2][2];   // [causal][backward]
        std::vector<double> flash_flops[2][2];
        for (int causal = 0; causal < 2; ++causal)
            for (int bwd = 0; bwd < 2; ++bwd)
                for (double q : seqs)
                    for (double kv : seqs)
                        for (double d : head_dims) {
                            const Kernel f = flash_kernel(1, static_cast<std::int64_t>(q), static_cast<std::int64_t>(kv),
                                                          static_cast<std::int64_t>(d), 4, bwd == 1, causal == 1);
                            flash[causal][bwd].push_back(b.kernel(f, reps_for(f.flops / lead_flops_, target, 2, 20)));
                            flash_flops[causal][bwd].push_back(f.flops);
                        }
        // Register arithmetic: a pass that moves nothing.
        const Series arithmetic = b.kernel(stream_kernel(KernelName::other, KernelClass::elementwise, 0, 2e8), 3);
        // Dispatch: one op of 1000 kernels that do (almost) nothing.
        const std::vector<Kernel> tiny(1000, stream_kernel(KernelName::other, KernelClass::elementwise, 64));
        const Series dispatch = b.kernels(tiny, 5);

        const Ran ran = run_bench(session_, cluster_, b, o_.scratch);
        topo::MeasuredCompute c;
        if (!root()) return c;
        const Timeline& tl = ran.tl;
        auto kernel_s = [&](OpId id) { return kernel_seconds(tl, id); };
        c.gemm.m = c.gemm.n = c.gemm.k = dims;
        c.gemm.rate.assign(shape.size(), 0);
        for (std::size_t i = 0; i < shape.size(); ++i)
            if (!gemm[i].empty()) c.gemm.rate[i] = 2 * shape[i][0] * shape[i][1] * shape[i][2] / median_of(gemm[i], kernel_s);
        fill_capped(c.gemm, dims.size());
        for (std::size_t i = 0; i < stream_bytes.size(); ++i) {
            c.stream.x.push_back(static_cast<double>(stream_bytes[i]));
            c.stream.y.push_back(static_cast<double>(stream_bytes[i]) / median_of(stream[i], kernel_s));
        }
        for (std::size_t i = 0; i < softmax_elements.size(); ++i) {
            const double e = static_cast<double>(softmax_elements[i] / cols * cols);
            c.softmax.x.push_back(e);
            c.softmax.y.push_back(e / median_of(softmax[i], kernel_s));
        }
        for (std::size_t i = 0; i < adam_params.size(); ++i) {
            c.adam.x.push_back(static_cast<double>(adam_params[i]));
            c.adam.y.push_back(static_cast<double>(adam_params[i]) / median_of(adam[i], kernel_s));
        }
        for (int causal = 0; causal < 2; ++causal)
            for (int bwd = 0; bwd < 2; ++bwd) {
                topo::ShapeTable& t = causal ? (bwd ? c.flash_bwd_causal : c.flash_fwd_causal) : (bwd ? c.flash_bwd : c.flash_fwd);
                t.m = t.n = seqs;
                t.k = head_dims;
                for (std::size_t i = 0; i < flash[causal][bwd].size(); ++i)   // the grid in the order it was timed
                    t.rate.push_back(flash_flops[causal][bwd][i] / median_of(flash[causal][bwd][i], kernel_s));
            }
        c.arithmetic = 2e8 / median_of(arithmetic, kernel_s);
        c.dispatch = Time::seconds(median_of(dispatch, [&](OpId id) { return op_seconds(tl, id); }) / 1000.0);
        return c;
    }

    /// Grid points above the FLOP cap: the rate of the neighbour with the largest dimension halved
    /// down the grid until one was measured.
    static void fill_capped(topo::ShapeTable& t, std::size_t n) {
        auto at = [&](std::size_t i, std::size_t j, std::size_t l) -> double& { return t.rate[(i * n + j) * n + l]; };
        for (std::size_t s = 0; s < 3 * n; ++s)   // sweeps until every point is filled
            for (std::size_t i = 0; i < n; ++i)
                for (std::size_t j = 0; j < n; ++j)
                    for (std::size_t l = 0; l < n; ++l) {
                        double& v = at(i, j, l);
                        if (v > 0) continue;
                        const std::size_t big = std::max({i, j, l});
                        double from = 0;
                        if (i == big && i > 0) from = std::max(from, at(i - 1, j, l));
                        if (j == big && j > 0) from = std::max(from, at(i, j - 1, l));
                        if (l == big && l > 0) from = std::max(from, at(i, j, l - 1));
                        if (from > 0) v = from;
                    }
    }

    // ---- network --------------------------------------------------------------------------------

    void network() {
        const int world = mpi_.size();
        if (world < 2) {
            detail_ = "one rank: nothing to measure";
            return;
        }
        // Groups: the first g ranks for g = 2, 4, … and the whole world; across hosts, also one
        // rank per host.
        std::vector<std::vector<int>> groups;
        auto add_group = [&](std::vector<int> g) {
            if (g.size() >= 2 && std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(std::move(g));
        };
        for (int g = 2; g <= world; g *= 2) {
            std::vector<int> m(static_cast<std::size_t>(g));
            for (int r = 0; r < g; ++r) m[static_cast<std::size_t>(r)] = r;
            add_group(m);
        }
        std::vector<int> all(static_cast<std::size_t>(world));
        for (int r = 0; r < world; ++r) all[static_cast<std::size_t>(r)] = r;
        add_group(all);
        std::vector<int> leaders;
        for (int r = 0; r < world; ++r)
            if (std::find_if(leaders.begin(), leaders.end(), [&](int l) { return mpi_.host_of()[static_cast<std::size_t>(l)] == mpi_.host_of()[static_cast<std::size_t>(r)]; }) ==
                leaders.end())
                leaders.push_back(r);
        for (std::size_t g = 2; g <= leaders.size(); g *= 2) add_group({leaders.begin(), leaders.begin() + static_cast<std::ptrdiff_t>(g)});
        add_group(leaders);

        const std::vector<std::int64_t> message = o_.quick ? std::vector<std::int64_t>{1 << 10, 16 << 10, 256 << 10, 4 << 20, 16 << 20}
                                                           : sizes(1 << 10, 256 << 20, 4);
        const double target = o_.quick ? 0.004 : 0.02;
        auto estimate = [](std::int64_t bytes) { return 2e-5 + static_cast<double>(bytes) / 1e9; };
        const std::vector<CollectiveKind> kinds{CollectiveKind::all_reduce, CollectiveKind::reduce_scatter,
                                                CollectiveKind::all_gather, CollectiveKind::broadcast,
                                                CollectiveKind::reduce,     CollectiveKind::all_to_all};
        struct Item {
            bool p2p;
            CollectiveKind kind;
            std::vector<int> members;
            std::vector<std::int64_t> bytes;
            std::vector<Series> series;
        };
        std::vector<Item> items;
        Bench b(world);
        for (const auto& members : groups) {
            b.phase();
            for (CollectiveKind kind : kinds) {
                Item it{false, kind, members, message, {}};
                for (std::int64_t bytes : message) it.series.push_back(b.collective(kind, members, bytes, reps_for(estimate(bytes), target, 3, 30)));
                items.push_back(std::move(it));
            }
            Item barrier{false, CollectiveKind::barrier, members, {1}, {}};
            barrier.series.push_back(b.collective(CollectiveKind::barrier, members, 0, 30));
            items.push_back(std::move(barrier));
        }
        // Point to point: two ranks of one host, and two hosts.
        std::vector<std::pair<int, int>> pairs;
        if (mpi_.host_of()[1] == mpi_.host_of()[0]) pairs.emplace_back(0, 1);
        if (leaders.size() >= 2) pairs.emplace_back(leaders[0], leaders[1]);
        for (const auto& [a, c] : pairs) {
            b.phase();
            Item it{true, CollectiveKind::all_reduce, {a, c}, message, {}};
            for (std::int64_t bytes : message) it.series.push_back(b.ping_pong(a, c, bytes, 2 * reps_for(estimate(bytes), target, 2, 15)));
            items.push_back(std::move(it));
        }

        const Ran ran = run_bench(session_, cluster_, b, o_.scratch);
        if (!root()) return;
        for (const Item& it : items) {
            topo::MeasuredTransfer t;
            t.p2p = it.p2p;
            t.kind = it.kind;
            t.ranks = static_cast<int>(it.members.size());
            std::set<int> hosts;
            for (int r : it.members) hosts.insert(mpi_.host_of()[static_cast<std::size_t>(r)]);
            t.nodes = static_cast<int>(hosts.size());
            for (std::size_t i = 0; i < it.bytes.size(); ++i) {
                t.time.x.push_back(static_cast<double>(it.bytes[i]));
                const double s = it.p2p ? transfer_seconds(b.graph, ran.tl, it.series[i]) : collective_seconds(b.graph, ran.tl, it.series[i]);
                t.time.y.push_back(std::max(s, 1e-9));
            }
            profile_.network.transfers.push_back(std::move(t));
        }
        const topo::MeasuredTransfer* ar = profile_.network.collective(CollectiveKind::all_reduce, 2, profile_.network.transfers.front().nodes);
        detail_ = std::to_string(profile_.network.transfers.size()) + " curves over " + std::to_string(message.size()) +
                  " sizes; all-reduce of 2 ranks: " + to_string(Time::seconds(ar ? ar->time.y.front() : 0)) + " at 1 KiB, " +
                  to_string(Bandwidth::bytes_per_s(ar ? ar->time.x.back() / ar->time.y.back() : 0)) + " at " +
                  to_string(Bytes(message.back()));
    }

    // ---- memory ---------------------------------------------------------------------------------

    void memory() {
        const std::int64_t bytes = o_.quick ? 16 << 20 : 64 << 20;
        Bench b(mpi_.size());
        const Series copy = b.copies(Tier::device, Tier::host, bytes, 5);
        const Series write = b.copies(Tier::host, Tier::nvme, bytes, 3);
        const Series read = b.copies(Tier::nvme, Tier::host, bytes, 3);
        const Ran ran = run_bench(session_, cluster_, b, o_.scratch);
        if (!root()) return;
        auto rate = [&](const Series& s) {
            return Bandwidth::bytes_per_s(static_cast<double>(bytes) / median_of(s, [&](OpId id) { return op_seconds(ran.tl, id); }));
        };
        profile_.memcpy = rate(copy);
        profile_.file_write = rate(write);
        profile_.file_read = rate(read);
        profile_.direct_io = ran.direct_io;
        detail_ = "memcpy " + to_string(profile_.memcpy) + ", file write " + to_string(profile_.file_write) + ", read " +
                  to_string(profile_.file_read) + (profile_.direct_io ? " (O_DIRECT)" : " (through the page cache)");
    }

    // ---- compute while communicating --------------------------------------------------------------

    void overlap() {
        const int world = mpi_.size();
        if (world < 2) {
            profile_.compute.comm_slowdown = 1.0;
            detail_ = "one rank: no communication to overlap";
            return;
        }
        // GEMMs alone, then the same GEMMs while every rank all-reduces 4 MiB back to back for
        // longer than they take.
        const std::int64_t d = 512;
        const Kernel g = gemm_kernel(KernelName::other, KernelClass::gemm, d, d, d, 1, 4, false);
        const int reps = o_.quick ? 6 : 16;
        Bench b(world);
        const Series alone = b.kernel(g, reps);
        const Series overlapped = b.kernel(g, reps);
        std::vector<int> all(static_cast<std::size_t>(world));
        for (int r = 0; r < world; ++r) all[static_cast<std::size_t>(r)] = r;
        const double gemm_s = g.flops / lead_flops_ * (reps + 1);
        const int collectives = reps_for(2e-5 + (4 << 20) / 1e9, 3 * gemm_s, 8, 400);
        const auto first = b.graph.add_collective(CollectiveKind::all_reduce, all, Bytes(4 << 20), Stream::comm, Phase::comm);
        for (int r = 0; r < world; ++r) b.graph.depend(alone[static_cast<std::size_t>(r)].back(), first[static_cast<std::size_t>(r)]);
        std::vector<OpId> last = first;
        for (int i = 1; i < collectives; ++i) last = b.graph.add_collective(CollectiveKind::all_reduce, all, Bytes(4 << 20), Stream::comm, Phase::comm);
        const Ran ran = run_bench(session_, cluster_, b, o_.scratch);
        if (!root()) return;
        const Timeline& tl = ran.tl;
        auto kernel_s = [&](OpId id) { return kernel_seconds(tl, id); };
        // Only GEMMs that ran entirely while the rank's all-reduces ran.
        Series inside(static_cast<std::size_t>(world));
        for (int r = 0; r < world; ++r)
            for (OpId id : overlapped[static_cast<std::size_t>(r)])
                if (tl.start[id] >= tl.start[first[static_cast<std::size_t>(r)]] && tl.end[id] <= tl.end[last[static_cast<std::size_t>(r)]])
                    inside[static_cast<std::size_t>(r)].push_back(id);
        const double a = median_of(alone, kernel_s), o = median_of(inside, kernel_s);
        profile_.compute.comm_slowdown = a > 0 && o > 0 ? std::max(1.0, o / a) : 1.0;
        char buf[96];
        std::snprintf(buf, sizeof buf, "GEMMs run %.2f× slower while all-reduces run", profile_.compute.comm_slowdown);
        detail_ = buf;
    }

    Session& session_;
    Mpi& mpi_;
    CalibrateOptions o_;
    std::ostream& progress_;
    topo::HostFacts facts_;
    topo::Cluster cluster_;
    double lead_flops_ = 1e10;
    topo::Profile profile_;
    std::string detail_;
};

}  // namespace

topo::Profile calibrate(Session& session, const CalibrateOptions& options, std::ostream& progress) {
    return Calibration(session, options, progress).run();
}

}  // namespace smol::exec

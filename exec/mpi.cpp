#include "exec/mpi.hpp"

#include <time.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "core/error.hpp"

namespace smol::exec {

namespace {

constexpr int kClockTag = 1;
constexpr int kClockRounds = 16;

void check(int rc, const char* what) {
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        throw Error(ErrorKind::internal, std::string(what) + ": " + std::string(msg, static_cast<std::size_t>(len)));
    }
}

const char* thread_level_name(int level) {
    switch (level) {
        case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
        case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
        case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
        case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    }
    return "an unknown thread level";
}

// splitmix64: the mixing step of every hash here.
std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
    std::uint64_t x = h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}
std::uint64_t bits(double d) {
    std::uint64_t b;
    std::memcpy(&b, &d, sizeof b);
    return b;
}

std::uint64_t kernel_hash(std::uint64_t h, const Kernel& k) {
    h = mix(h, static_cast<std::uint64_t>(k.op) | static_cast<std::uint64_t>(k.cls) << 8 |
                   static_cast<std::uint64_t>(k.name) << 16 | static_cast<std::uint64_t>(k.backward) << 24 |
                   static_cast<std::uint64_t>(k.weight) << 25 | static_cast<std::uint64_t>(k.elem_bytes) << 32);
    for (std::int64_t v : {std::int64_t{k.batch}, k.m, k.n, k.k, k.elements, k.bytes}) h = mix(h, static_cast<std::uint64_t>(v));
    return mix(h, bits(k.flops));
}

std::uint64_t op_hash(const OpGraph& g, OpId id) {
    const Op& o = g.op(id);
    std::uint64_t h = mix(0, bits(o.flops));
    for (std::int64_t v : {o.bytes, std::int64_t{o.rank}, std::int64_t{o.layer}, std::int64_t{o.microbatch},
                           std::int64_t{o.index}, std::int64_t{o.ref}})
        h = mix(h, static_cast<std::uint64_t>(v));
    h = mix(h, static_cast<std::uint64_t>(o.kind) | static_cast<std::uint64_t>(o.stream) << 8 |
                   static_cast<std::uint64_t>(o.phase) << 16 | static_cast<std::uint64_t>(o.sub) << 24);
    for (OpId s : g.successors(id)) h = mix(h, s);
    switch (o.kind) {
        case OpKind::compute:
            for (const Kernel& k : g.kernels_of(id)) h = kernel_hash(h, k);
            break;
        case OpKind::collective: {
            const Collective& c = g.collectives()[static_cast<std::size_t>(o.ref)];
            h = mix(h, static_cast<std::uint64_t>(c.kind));
            h = mix(h, static_cast<std::uint64_t>(c.bytes));
            h = mix(h, static_cast<std::uint64_t>(c.root));
            for (int r : g.communicators()[static_cast<std::size_t>(c.communicator)]) h = mix(h, static_cast<std::uint64_t>(r));
            for (OpId m : g.collective_ops(o.ref)) h = mix(h, m);
            break;
        }
        case OpKind::send:
        case OpKind::recv: {
            const P2P& p = g.p2ps()[static_cast<std::size_t>(o.ref)];
            for (std::int64_t v : {std::int64_t{p.send}, std::int64_t{p.recv}, std::int64_t{p.src}, std::int64_t{p.dst}, p.bytes})
                h = mix(h, static_cast<std::uint64_t>(v));
            break;
        }
        case OpKind::alloc:
        case OpKind::free: {
            const Buffer& b = g.buffers()[static_cast<std::size_t>(o.ref)];
            for (std::int64_t v : {std::int64_t{b.rank}, static_cast<std::int64_t>(b.tier), b.bytes, std::int64_t{b.label}})
                h = mix(h, static_cast<std::uint64_t>(v));
            break;
        }
        case OpKind::copy:
        case OpKind::timer: break;
    }
    return h;
}

/// Broadcasts a string of at most 1 KiB from `root`.
std::string bcast_text(const Mpi& mpi, std::string text, int root) {
    char buf[1024] = {};
    if (mpi.rank() == root) std::strncpy(buf, text.c_str(), sizeof buf - 1);
    check(MPI_Bcast(buf, sizeof buf, MPI_CHAR, root, mpi.world()), "MPI_Bcast");
    return buf;
}

std::string ranks_list(const std::vector<int>& ranks) {
    std::string s;
    for (std::size_t i = 0; i < ranks.size() && i < 8; ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
    if (ranks.size() > 8) s += ", …";
    return s;
}

/// rank 0 ↔ `peer` ping-pong: the offset of peer's clock to rank 0's (ns) and half the best
/// round trip. Only ranks 0 and `peer` take part.
std::pair<std::int64_t, std::int64_t> ping_pong(const Mpi& mpi, int peer) {
    std::int64_t best_rtt = -1, best_offset = 0;
    for (int round = 0; round < kClockRounds; ++round) {
        if (mpi.rank() == 0) {
            std::int64_t t0 = now_ns(), tp = 0;
            check(MPI_Send(&t0, 1, MPI_INT64_T, peer, kClockTag, mpi.world()), "MPI_Send");
            check(MPI_Recv(&tp, 1, MPI_INT64_T, peer, kClockTag, mpi.world(), MPI_STATUS_IGNORE), "MPI_Recv");
            const std::int64_t t1 = now_ns(), rtt = t1 - t0;
            if (best_rtt < 0 || rtt < best_rtt) {
                best_rtt = rtt;
                best_offset = tp - (t0 + t1) / 2;
            }
        } else {
            std::int64_t t0 = 0;
            check(MPI_Recv(&t0, 1, MPI_INT64_T, 0, kClockTag, mpi.world(), MPI_STATUS_IGNORE), "MPI_Recv");
            std::int64_t tp = now_ns();
            check(MPI_Send(&tp, 1, MPI_INT64_T, 0, kClockTag, mpi.world()), "MPI_Send");
        }
    }
    return {best_offset, best_rtt / 2};
}

}  // namespace

std::int64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// ---- Mpi ----------------------------------------------------------------------------------------

Mpi::Mpi() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) throw Error(ErrorKind::internal, "MPI is initialised twice in one process");
    int provided = MPI_THREAD_SINGLE;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    if (provided < MPI_THREAD_MULTIPLE) {
        MPI_Finalize();
        fail_input(std::string("the MPI library provides ") + thread_level_name(provided) +
                   ", and smolcluster needs MPI_THREAD_MULTIPLE (every stream of a rank is a thread that calls "
                   "MPI): use an MPI built with thread support (Debian's libopenmpi-dev is; Open MPI from source: "
                   "--enable-mpi-thread-multiple)");
    }
    check(MPI_Comm_dup(MPI_COMM_WORLD, &world_), "MPI_Comm_dup");
    check(MPI_Comm_dup(MPI_COMM_WORLD, &signals_), "MPI_Comm_dup");
    check(MPI_Comm_dup(MPI_COMM_WORLD, &p2p_), "MPI_Comm_dup");
    MPI_Comm_rank(world_, &rank_);
    MPI_Comm_size(world_, &size_);
    check(MPI_Comm_split_type(world_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &shared_), "MPI_Comm_split_type");
    MPI_Comm_rank(shared_, &local_rank_);
    MPI_Comm_size(shared_, &local_size_);
    // Hosts are numbered by their lowest world rank (rank 0's host is host 0).
    MPI_Comm leaders = MPI_COMM_NULL;
    check(MPI_Comm_split(world_, local_rank_ == 0 ? 0 : MPI_UNDEFINED, rank_, &leaders), "MPI_Comm_split");
    int ids[2] = {0, 0};
    if (leaders != MPI_COMM_NULL) {
        MPI_Comm_rank(leaders, &ids[0]);
        MPI_Comm_size(leaders, &ids[1]);
        MPI_Comm_free(&leaders);
    }
    check(MPI_Bcast(ids, 2, MPI_INT, 0, shared_), "MPI_Bcast");
    host_ = ids[0];
    hosts_ = ids[1];
    host_of_.assign(static_cast<std::size_t>(size_), 0);
    check(MPI_Allgather(&host_, 1, MPI_INT, host_of_.data(), 1, MPI_INT, world_), "MPI_Allgather");
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    int len = 0;
    MPI_Get_processor_name(name, &len);
    host_name_.assign(name, static_cast<std::size_t>(len));
    void* ub = nullptr;
    int flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    if (flag && ub) tag_ub_ = *static_cast<int*>(ub);
}

Mpi::~Mpi() {
    for (MPI_Comm* c : {&world_, &shared_, &signals_, &p2p_})
        if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
    MPI_Finalize();
}

std::string Mpi::library_version() {
    char v[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int len = 0;
    MPI_Get_library_version(v, &len);
    std::string s(v, strnlen(v, static_cast<std::size_t>(len)));
    // "Open MPI v4.1.4, package: Debian OpenMPI, ident: …": the library and version.
    if (const auto end = s.find_first_of(",\n\r"); end != std::string::npos) s.resize(end);
    while (!s.empty() && (s.back() == ' ' || s.back() == ',')) s.pop_back();
    return s;
}

void Mpi::abort(int code) const {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);   // MPI_Abort does not return; this satisfies [[noreturn]]
}

// ---- Communicators ------------------------------------------------------------------------------

Communicators::Communicators(const Mpi& mpi, const OpGraph& graph) {
    MPI_Group world_group;
    check(MPI_Comm_group(mpi.world(), &world_group), "MPI_Comm_group");
    const auto& all = graph.communicators();
    comms_.assign(all.size(), MPI_COMM_NULL);
    for (std::size_t i = 0; i < all.size(); ++i) {
        const std::vector<int>& members = all[i];
        if (std::find(members.begin(), members.end(), mpi.rank()) == members.end()) continue;
        MPI_Group group;
        check(MPI_Group_incl(world_group, static_cast<int>(members.size()), members.data(), &group), "MPI_Group_incl");
        // The tag keeps concurrent creations of different groups apart (it need only be unique
        // among creations in flight; the index is, and fits in the guaranteed tag range mod 32768).
        check(MPI_Comm_create_group(mpi.world(), group, static_cast<int>(i % 32768), &comms_[i]), "MPI_Comm_create_group");
        MPI_Group_free(&group);
    }
    MPI_Group_free(&world_group);
}

Communicators::~Communicators() {
    for (MPI_Comm& c : comms_)
        if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
}

// ---- the graph check ----------------------------------------------------------------------------

std::vector<std::uint64_t> graph_prefix_hashes(const OpGraph& graph) {
    std::vector<std::uint64_t> prefix(graph.size() + 1);
    prefix[0] = mix(0x736d6f6c, static_cast<std::uint64_t>(graph.ranks()));
    for (OpId id = 0; id < graph.size(); ++id) prefix[id + 1] = mix(prefix[id], op_hash(graph, id));
    return prefix;
}

std::string describe_for_mismatch(const OpGraph& g, OpId id) {
    if (id >= g.size()) return "no op " + std::to_string(id) + " (its graph has " + std::to_string(g.size()) + " ops)";
    const Op& o = g.op(id);
    std::ostringstream s;
    s << "'" << g.describe(id) << "' (" << to_string(o.kind) << " on stream " << to_string(o.stream);
    if (o.bytes) s << ", " << to_string(Bytes(o.bytes));
    if (o.flops > 0) s << ", " << o.flops << " FLOPs";
    if (o.kind == OpKind::compute) s << ", " << g.kernels_of(id).size() << " kernels";
    s << ", " << g.successors(id).size() << " successors)";
    return s.str();
}

void check_same_graph(const Mpi& mpi, const OpGraph& graph) {
    const std::vector<std::uint64_t> prefix = graph_prefix_hashes(graph);
    const auto n = static_cast<std::int64_t>(graph.size());
    std::int64_t nmin = 0, nmax = 0;
    check(MPI_Allreduce(&n, &nmin, 1, MPI_INT64_T, MPI_MIN, mpi.world()), "MPI_Allreduce");
    check(MPI_Allreduce(&n, &nmax, 1, MPI_INT64_T, MPI_MAX, mpi.world()), "MPI_Allreduce");
    auto equal_at = [&](std::int64_t k) {
        const std::uint64_t v = prefix[static_cast<std::size_t>(k)];
        std::uint64_t lo = 0, hi = 0;
        check(MPI_Allreduce(&v, &lo, 1, MPI_UINT64_T, MPI_MIN, mpi.world()), "MPI_Allreduce");
        check(MPI_Allreduce(&v, &hi, 1, MPI_UINT64_T, MPI_MAX, mpi.world()), "MPI_Allreduce");
        return lo == hi;
    };
    if (nmin == nmax && equal_at(nmin)) return;
    // The first op whose prefix differs: prefix[k] covers ops before k.
    std::int64_t first;
    if (!equal_at(0)) {
        first = -1;   // the rank counts differ
    } else if (equal_at(nmin)) {
        first = nmin; // one graph is a prefix of another
    } else {
        std::int64_t lo = 0, hi = nmin;
        while (hi - lo > 1) {
            const std::int64_t mid = lo + (hi - lo) / 2;
            (equal_at(mid) ? lo : hi) = mid;
        }
        first = hi - 1;
    }
    // Which ranks differ from rank 0 at that op, and what rank 0 and the first of them hold.
    auto key = [&](std::int64_t k) -> std::uint64_t {
        if (k < 0) return static_cast<std::uint64_t>(graph.ranks());
        return k < n ? prefix[static_cast<std::size_t>(k + 1)] : 0;
    };
    std::uint64_t mine = key(first), root = mine;
    check(MPI_Bcast(&root, 1, MPI_UINT64_T, 0, mpi.world()), "MPI_Bcast");
    const int differs = mine != root ? 1 : 0;
    std::vector<int> flags(static_cast<std::size_t>(mpi.size()));
    check(MPI_Allgather(&differs, 1, MPI_INT, flags.data(), 1, MPI_INT, mpi.world()), "MPI_Allgather");
    std::vector<int> different;
    for (int r = 0; r < mpi.size(); ++r)
        if (flags[static_cast<std::size_t>(r)]) different.push_back(r);
    const int other = different.empty() ? 0 : different.front();
    auto describe_here = [&] {
        return first < 0 ? "a graph of " + std::to_string(graph.ranks()) + " ranks"
                         : describe_for_mismatch(graph, static_cast<OpId>(first));
    };
    const std::string at_root = bcast_text(mpi, describe_here(), 0);
    const std::string at_other = bcast_text(mpi, describe_here(), other);
    fail_input("the ranks built different op graphs (every rank must run the same smolcluster build with the same "
               "flags and files): " +
               (first < 0 ? std::string("they disagree on the number of ranks") : "the first difference is op " + std::to_string(first)) +
               ": rank 0 has " + at_root + ", rank " + std::to_string(other) + " has " + at_other +
               " (ranks that differ from rank 0: " + ranks_list(different) + ")");
}

// ---- clocks -------------------------------------------------------------------------------------

ClockReport align_clocks(const Mpi& mpi) {
    ClockReport r;
    r.hosts = mpi.hosts();
    r.offset.assign(static_cast<std::size_t>(r.hosts), Time::zero());
    r.uncertainty.assign(static_cast<std::size_t>(r.hosts), Time::zero());
    r.drift.assign(static_cast<std::size_t>(r.hosts), Time::zero());
    // Each host's leader: its lowest world rank.
    std::vector<int> leader(static_cast<std::size_t>(r.hosts), -1);
    for (int w = mpi.size() - 1; w >= 0; --w) leader[static_cast<std::size_t>(mpi.host_of()[static_cast<std::size_t>(w)])] = w;
    std::vector<std::int64_t> figures(static_cast<std::size_t>(2 * r.hosts + 1), 0);
    for (int h = 1; h < r.hosts; ++h) {
        const int peer = leader[static_cast<std::size_t>(h)];
        if (mpi.rank() != 0 && mpi.rank() != peer) continue;
        const auto [offset, half_rtt] = ping_pong(mpi, peer);
        figures[static_cast<std::size_t>(2 * h)] = offset;
        figures[static_cast<std::size_t>(2 * h + 1)] = half_rtt;
    }
    // The method's error where the answer is known to be 0: two ranks of rank 0's host.
    int neighbour = -1;
    for (int w = 1; w < mpi.size() && neighbour < 0; ++w)
        if (mpi.host_of()[static_cast<std::size_t>(w)] == 0) neighbour = w;
    if (neighbour > 0 && (mpi.rank() == 0 || mpi.rank() == neighbour)) {
        const auto [offset, half_rtt] = ping_pong(mpi, neighbour);
        figures.back() = std::abs(offset);
        (void)half_rtt;
    }
    check(MPI_Bcast(figures.data(), static_cast<int>(figures.size()), MPI_INT64_T, 0, mpi.world()), "MPI_Bcast");
    for (int h = 1; h < r.hosts; ++h) {
        r.offset[static_cast<std::size_t>(h)] = Time::ps(figures[static_cast<std::size_t>(2 * h)] * 1000);
        r.uncertainty[static_cast<std::size_t>(h)] = Time::ps(figures[static_cast<std::size_t>(2 * h + 1)] * 1000);
    }
    r.residual = Time::ps(figures.back() * 1000);
    return r;
}

void measure_drift(const Mpi& mpi, ClockReport& report) {
    const ClockReport after = align_clocks(mpi);
    for (int h = 0; h < report.hosts; ++h)
        report.drift[static_cast<std::size_t>(h)] = after.offset[static_cast<std::size_t>(h)] - report.offset[static_cast<std::size_t>(h)];
}

// ---- gathering ----------------------------------------------------------------------------------

std::vector<Bytes> gather_timeline(const Mpi& mpi, const OpGraph& graph, const RankRecord& mine, Timeline& tl,
                                   bool with_classes, std::vector<Bytes>* device_peaks) {
    const int size = mpi.size();
    const bool root = mpi.rank() == 0;
    // Ops per rank, in op-id order: the order each rank packed its record in.
    std::vector<std::vector<OpId>> ops_of(static_cast<std::size_t>(size));
    if (root)
        for (OpId id = 0; id < graph.size(); ++id) ops_of[static_cast<std::size_t>(graph.op(id).rank)].push_back(id);

    auto gatherv = [&](const std::vector<std::int64_t>& send, std::vector<std::int64_t>& recv, std::vector<int>& displs) {
        const int count = static_cast<int>(send.size());
        std::vector<int> counts(static_cast<std::size_t>(size));
        check(MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, mpi.world()), "MPI_Gather");
        displs.assign(static_cast<std::size_t>(size) + 1, 0);
        for (int r = 0; r < size; ++r) displs[static_cast<std::size_t>(r) + 1] = displs[static_cast<std::size_t>(r)] + counts[static_cast<std::size_t>(r)];
        recv.assign(static_cast<std::size_t>(root ? displs.back() : 0), 0);
        check(MPI_Gatherv(send.data(), count, MPI_INT64_T, recv.data(), counts.data(), displs.data(), MPI_INT64_T, 0,
                          mpi.world()),
              "MPI_Gatherv");
    };

    // Per op: start, end, and the kernel-class times.
    const std::size_t width = 2 + (with_classes ? kKernelClasses : 0);
    std::vector<std::int64_t> ops;
    ops.reserve(mine.start.size() * width);
    for (std::size_t i = 0; i < mine.start.size(); ++i) {
        ops.push_back(mine.start[i]);
        ops.push_back(mine.end[i]);
        if (with_classes)
            for (int c = 0; c < kKernelClasses; ++c) ops.push_back(mine.classes[i][static_cast<std::size_t>(c)]);
    }
    std::vector<std::int64_t> all;
    std::vector<int> displs;
    gatherv(ops, all, displs);
    if (root) {
        if (with_classes) tl.kernel_class_time.assign(graph.size(), {});
        for (int r = 0; r < size; ++r) {
            const auto& ids = ops_of[static_cast<std::size_t>(r)];
            const std::size_t got = static_cast<std::size_t>(displs[static_cast<std::size_t>(r) + 1] - displs[static_cast<std::size_t>(r)]) / width;
            if (got != ids.size())
                throw Error(ErrorKind::internal, "rank " + std::to_string(r) + " reported " + std::to_string(got) +
                                                     " ops, its graph has " + std::to_string(ids.size()));
            for (std::size_t i = 0; i < ids.size(); ++i) {
                const std::int64_t* v = all.data() + displs[static_cast<std::size_t>(r)] + i * width;
                tl.start[ids[i]] = Time::ps(v[0]);
                tl.end[ids[i]] = Time::ps(v[1]);
                if (with_classes)
                    for (int c = 0; c < kKernelClasses; ++c) tl.kernel_class_time[ids[i]][static_cast<std::size_t>(c)] = Time::ps(v[2 + c]);
            }
        }
    }

    // Memory samples: (tier, time, bytes in use) per sample.
    std::vector<std::int64_t> samples;
    for (const MemorySample& m : mine.memory) {
        samples.push_back(static_cast<std::int64_t>(m.tier));
        samples.push_back(m.time.count_ps());
        samples.push_back(m.in_use.count());
    }
    gatherv(samples, all, displs);
    if (root) {
        tl.memory.clear();
        for (int r = 0; r < size; ++r)
            for (int i = displs[static_cast<std::size_t>(r)]; i < displs[static_cast<std::size_t>(r) + 1]; i += 3)
                tl.memory.push_back({r, static_cast<Tier>(all[static_cast<std::size_t>(i)]), Time::ps(all[static_cast<std::size_t>(i) + 1]),
                                     Bytes(all[static_cast<std::size_t>(i) + 2])});
        std::stable_sort(tl.memory.begin(), tl.memory.end(),
                         [](const MemorySample& a, const MemorySample& b) { return a.time < b.time; });
    }

    // Peaks per tier, the resident peak and the device peak.
    std::vector<std::int64_t> per_rank{mine.peak[0].count(), mine.peak[1].count(), mine.peak[2].count(),
                                       mine.resident_peak.count(), mine.device_peak.count()};
    gatherv(per_rank, all, displs);
    std::vector<Bytes> resident;
    if (root) {
        if (device_peaks) device_peaks->clear();
        for (int r = 0; r < size; ++r) {
            for (int t = 0; t < kTiers; ++t) tl.peak[static_cast<std::size_t>(r)][static_cast<std::size_t>(t)] = Bytes(all[static_cast<std::size_t>(5 * r + t)]);
            resident.push_back(Bytes(all[static_cast<std::size_t>(5 * r + 3)]));
            if (device_peaks) device_peaks->push_back(Bytes(all[static_cast<std::size_t>(5 * r + 4)]));
        }
    }
    std::uint64_t ops_run = 0;
    check(MPI_Reduce(&mine.ops_run, &ops_run, 1, MPI_UINT64_T, MPI_SUM, 0, mpi.world()), "MPI_Reduce");
    if (root) tl.events = ops_run;
    return resident;
}

}  // namespace smol::exec

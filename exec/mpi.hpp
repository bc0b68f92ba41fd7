// MPI plumbing shared by every backend: the process's MPI (MPI_THREAD_MULTIPLE), its place on the
// hosts, one MPI communicator per op-graph communicator, the graph hash check, clock alignment,
// and gathering every rank's part of the Timeline to rank 0.
//
// Communicators: world_ (a duplicate of MPI_COMM_WORLD for the runner's own collectives),
// signals_ (the runner's signal messages: edges between ranks, abort notices; received only by
// the progress thread), p2p_ (the graph's sends and receives, tag = p2p id), shared_ (the ranks
// of this host), and one communicator per op-graph communicator (Communicators). Separate
// communicators keep the matching of each kind of traffic apart without reserved tag ranges.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/op_graph.hpp"
#include "core/units.hpp"
#include "exec/executor.hpp"

namespace smol::exec {

class Mpi {
public:
    /// MPI_Init_thread(MPI_THREAD_MULTIPLE); throws bad_input when the library provides less.
    Mpi();
    ~Mpi();
    Mpi(const Mpi&) = delete;
    Mpi& operator=(const Mpi&) = delete;

    int rank() const { return rank_; }
    int size() const { return size_; }
    int local_rank() const { return local_rank_; }
    int local_size() const { return local_size_; }
    int host() const { return host_; }         // index of this host, 0 for rank 0's
    int hosts() const { return hosts_; }
    const std::string& host_name() const { return host_name_; }
    /// For each world rank, the index of its host.
    const std::vector<int>& host_of() const { return host_of_; }

    MPI_Comm world() const { return world_; }
    MPI_Comm shared() const { return shared_; }
    MPI_Comm signals() const { return signals_; }
    MPI_Comm p2p() const { return p2p_; }
    int tag_ub() const { return tag_ub_; }

    /// "Open MPI v4.1.4, package: Debian OpenMPI, …" (first line).
    static std::string library_version();
    /// Terminates every process of the job (MPI_Abort on the world).
    [[noreturn]] void abort(int code) const;

private:
    int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, host_ = 0, hosts_ = 1, tag_ub_ = 32767;
    std::string host_name_;
    std::vector<int> host_of_;
    MPI_Comm world_ = MPI_COMM_NULL, shared_ = MPI_COMM_NULL, signals_ = MPI_COMM_NULL, p2p_ = MPI_COMM_NULL;
};

/// One MPI communicator per op-graph communicator this rank belongs to, created once (every rank
/// walks the graph's communicators in index order, MPI_Comm_create_group over each one's
/// members, so creation never deadlocks); the MPI rank order is the communicator's member order.
class Communicators {
public:
    Communicators(const Mpi& mpi, const OpGraph& graph);
    ~Communicators();
    Communicators(const Communicators&) = delete;
    Communicators& operator=(const Communicators&) = delete;

    /// The communicator of op-graph communicator `index`; MPI_COMM_NULL where this rank is not a member.
    MPI_Comm of(std::int32_t index) const { return comms_[static_cast<std::size_t>(index)]; }

private:
    std::vector<MPI_Comm> comms_;
};

/// A hash of everything that makes one graph differ from another, per op (its record, its
/// successors, what it refers to: collective and communicator, p2p, buffer, recipe kernels),
/// chained: prefix[i] covers ops 0..i-1 and the graph's rank count.
std::vector<std::uint64_t> graph_prefix_hashes(const OpGraph& graph);
/// An op's fields in words, for mismatch messages: "rank 1: fwd L2 mb0 (compute, stream compute,
/// 1.2e+09 FLOPs, 3.1 MB, 17 kernels)".
std::string describe_for_mismatch(const OpGraph& graph, OpId id);
/// Throws bad_input on every rank when the ranks' graphs differ (see Session's check_same_graph).
void check_same_graph(const Mpi& mpi, const OpGraph& graph);

/// Clock offsets of the hosts to rank 0's (see ClockReport). Collective over the world.
ClockReport align_clocks(const Mpi& mpi);
/// Re-measures and fills `report.drift` (the change since `report` was measured).
void measure_drift(const Mpi& mpi, ClockReport& report);

/// Monotonic time of this host, in ns (CLOCK_MONOTONIC, shared by the host's processes).
std::int64_t now_ns();

/// What one rank recorded in the measured step, in ps since the step's start (rank-0 clock).
struct RankRecord {
    std::vector<std::int64_t> start, end;                         // per op of this rank, in op-id order
    std::vector<std::array<std::int64_t, kKernelClasses>> classes; // per op of this rank
    std::vector<MemorySample> memory;
    std::array<Bytes, kTiers> peak{};
    std::uint64_t ops_run = 0;
    Bytes resident_peak;
    Bytes device_peak;                                            // Backend::device_peak
};
/// Gathers every rank's record into `tl` on rank 0 (tl must be resized to the graph);
/// returns the resident peaks per rank on rank 0 (and the device peaks in `device_peaks`, if given).
std::vector<Bytes> gather_timeline(const Mpi& mpi, const OpGraph& graph, const RankRecord& mine, Timeline& tl,
                                   bool with_classes, std::vector<Bytes>* device_peaks = nullptr);

}  // namespace smol::exec

// NCCL for the CUDA backend: one communicator per op-graph communicator this rank belongs to
// (member order = NCCL rank; the unique id made by the first member and broadcast over that
// communicator's MPI communicator), and one two-rank communicator per point-to-point channel
// (plan.hpp plan_channels; the id sent from the sender to the receiver over MPI). Every rank
// creates its communicators in one global order (communicators by index, then channels), so the
// blocking ncclCommInitRank calls never wait on each other in a cycle.
//
// Collectives run on fp32 elements, as the CPU backend's MPI calls do (plan.hpp
// collective_floats): all-reduce, reduce and broadcast in place (as PyTorch DDP reduces its
// buckets in place), reduce-scatter and all-gather out of place, all-to-all as grouped
// ncclSend/ncclRecv to every member (what torch.distributed.all_to_all_single runs on NCCL), a
// barrier as an all-reduce of one float (what ProcessGroupNCCL::barrier does).
#pragma once

#include <nccl.h>

#include <string>
#include <vector>

#include "core/op_graph.hpp"
#include "exec/cuda/plan.hpp"

namespace smol::exec {
class Mpi;
class Communicators;
}  // namespace smol::exec

namespace smol::exec::cuda {

/// Throws Error(internal) "WHAT failed: ncclSystemError (…): NCCL's last error" unless ncclSuccess.
void check(ncclResult_t r, const std::string& what, ncclComm_t comm = nullptr);
/// "NCCL 2.28.9".
std::string nccl_version();

class NcclComms {
public:
    /// Collective over every rank (each creates what it is a member of).
    NcclComms(const OpGraph& graph, const Channels& channels, int rank, const Mpi& mpi, const Communicators& comms);
    ~NcclComms();
    NcclComms(const NcclComms&) = delete;
    NcclComms& operator=(const NcclComms&) = delete;

    /// The NCCL communicator of op-graph communicator `index` (null where this rank is not in it).
    ncclComm_t of(std::int32_t index) const { return collective_[static_cast<std::size_t>(index)]; }
    /// The channel's two-rank communicator (sender NCCL rank 0, receiver 1).
    ncclComm_t channel(std::int32_t index) const { return channel_[static_cast<std::size_t>(index)]; }
    /// Throws naming the communicator when NCCL reported an asynchronous error on any of them.
    void check_async() const;

private:
    std::vector<ncclComm_t> collective_, channel_;
};

/// Enqueues one collective on `stream`: `buffer` holds f.send floats then f.recv floats
/// (plan.hpp collective_floats); `root` is the root's index in the communicator; `ranks` its size.
void run_collective(CollectiveKind kind, float* buffer, const CollectiveFloats& f, int root, int ranks, ncclComm_t comm,
                    cudaStream_t stream, const std::string& what);

}  // namespace smol::exec::cuda

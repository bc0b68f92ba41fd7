// Collectives and point to point for the CPU backend, on real fp32 buffers through MPI.
//
// Sizes follow the graph (sim/collectives.hpp, as nccl-tests count them): `bytes` is the whole
// buffer S — the all-reduce's, the reduce-scatter's input, the all-gather's output, the
// all-to-all's per-rank total. Over p ranks the MPI calls move float elements:
//   all_reduce      MPI_Allreduce of ⌈S/4⌉ floats (sum)
//   reduce_scatter  MPI_Reduce_scatter_block: p blocks of ⌈S/4p⌉ in, one block out
//   all_gather      MPI_Allgather: one block of ⌈S/4p⌉ in, p blocks out
//   broadcast       MPI_Bcast of ⌈S/4⌉ floats from the root
//   reduce          MPI_Reduce of ⌈S/4⌉ floats (sum) to the root
//   all_to_all      MPI_Alltoall: p blocks of ⌈S/4p⌉ each way
//   barrier         MPI_Barrier
// (a size that does not divide is rounded up to whole floats per block).
//
// Collectives block in the MPI call, as a framework's communication thread does (Open MPI polls
// while it waits). A send or receive is posted non-blocking and then polled with MPI_Test,
// spinning a few microseconds and then sleeping between polls (1 µs doubling to 64 µs), so a
// receive posted long before its data arrives (a pipeline stage waiting for its neighbour) does
// not hold a core the stage's compute thread needs.
#pragma once

#include <mpi.h>

#include <cstdint>

#include "core/op_graph.hpp"

namespace smol::exec::cpu {

/// Floats a rank sends and receives in a collective of `bytes` over `ranks` ranks.
struct CollectiveCounts {
    std::int64_t send = 0, recv = 0;
};
CollectiveCounts collective_counts(CollectiveKind kind, std::int64_t bytes, int ranks);

/// Runs one collective on `comm` (whose rank order is the communicator's member order): `send`
/// holds counts.send floats, `recv` receives counts.recv; `root` is the root's index in the
/// communicator (broadcast: the buffer is `recv`, read at the root and written elsewhere).
void run_collective(CollectiveKind kind, const float* send, float* recv, std::int64_t bytes, int root, MPI_Comm comm);

/// Posts a send or receive of `bytes` bytes (any size: split into MPI_INT-sized counts of a
/// 1 KiB contiguous type beyond 2 GiB) with `tag` on `comm`.
MPI_Request post_send(const void* data, std::int64_t bytes, int peer, int tag, MPI_Comm comm);
MPI_Request post_recv(void* data, std::int64_t bytes, int peer, int tag, MPI_Comm comm);
/// Waits for a request by polling (see the header comment).
void wait_polling(MPI_Request& request);

}  // namespace smol::exec::cpu

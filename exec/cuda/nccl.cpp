#include "exec/cuda/nccl.hpp"

#include <mpi.h>

#include <algorithm>

#include "core/error.hpp"
#include "exec/mpi.hpp"

namespace smol::exec::cuda {

namespace {

constexpr int kChannelIdTag = 9;

void check_mpi(int rc, const char* what) {
    if (rc != MPI_SUCCESS) throw Error(ErrorKind::internal, std::string(what) + " failed while creating NCCL communicators");
}

ncclComm_t init_rank(int ranks, const ncclUniqueId& id, int rank, const std::string& what) {
    ncclComm_t comm = nullptr;
    check(ncclCommInitRank(&comm, ranks, id, rank), "ncclCommInitRank for " + what);
    return comm;
}

std::string members_text(const std::vector<int>& m) {
    std::string s = "[";
    for (std::size_t i = 0; i < m.size(); ++i) {
        if (i) s += ',';
        s += std::to_string(m[i]);
    }
    return s + "]";
}

}  // namespace

void check(ncclResult_t r, const std::string& what, ncclComm_t comm) {
    if (r == ncclSuccess) return;
    std::string msg = what + " failed: " + ncclGetErrorString(r);
    const char* last = ncclGetLastError(comm);
    if (last && *last) msg += ": " + std::string(last);
    throw Error(ErrorKind::internal, msg);
}

std::string nccl_version() {
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) return "NCCL";
    // NCCL_VERSION(X,Y,Z) = X·10000 + Y·100 + Z since 2.9.
    return "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

NcclComms::NcclComms(const OpGraph& g, const Channels& channels, int rank, const Mpi& mpi, const Communicators& comms) {
    collective_.assign(g.communicators().size(), nullptr);
    channel_.assign(channels.list.size(), nullptr);
    for (std::size_t i = 0; i < g.communicators().size(); ++i) {
        const std::vector<int>& members = g.communicators()[i];
        const auto it = std::find(members.begin(), members.end(), rank);
        if (it == members.end()) continue;
        const int me = static_cast<int>(it - members.begin());
        ncclUniqueId id{};
        if (me == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
        check_mpi(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comms.of(static_cast<std::int32_t>(i))), "MPI_Bcast of an NCCL id");
        collective_[i] = init_rank(static_cast<int>(members.size()), id, me, "communicator " + members_text(members));
    }
    for (std::size_t c = 0; c < channels.list.size(); ++c) {
        const Channel& ch = channels.list[c];
        if (rank != ch.src && rank != ch.dst) continue;
        if (ch.src == ch.dst)
            fail_input("the CUDA backend cannot run a send from rank " + std::to_string(ch.src) + " to itself");
        ncclUniqueId id{};
        if (rank == ch.src) {
            check(ncclGetUniqueId(&id), "ncclGetUniqueId");
            check_mpi(MPI_Send(&id, sizeof id, MPI_BYTE, ch.dst, kChannelIdTag, mpi.world()), "MPI_Send of an NCCL id");
        } else {
            check_mpi(MPI_Recv(&id, sizeof id, MPI_BYTE, ch.src, kChannelIdTag, mpi.world(), MPI_STATUS_IGNORE),
                      "MPI_Recv of an NCCL id");
        }
        channel_[c] = init_rank(2, id, rank == ch.src ? 0 : 1,
                                "the sends from rank " + std::to_string(ch.src) + " to rank " + std::to_string(ch.dst));
    }
}

NcclComms::~NcclComms() {
    for (ncclComm_t c : channel_)
        if (c) ncclCommDestroy(c);
    for (ncclComm_t c : collective_)
        if (c) ncclCommDestroy(c);
}

void NcclComms::check_async() const {
    auto one = [](ncclComm_t c, const std::string& what) {
        if (!c) return;
        ncclResult_t r = ncclSuccess;
        check(ncclCommGetAsyncError(c, &r), "ncclCommGetAsyncError", c);
        check(r, what, c);
    };
    for (std::size_t i = 0; i < collective_.size(); ++i) one(collective_[i], "a collective on communicator " + std::to_string(i));
    for (std::size_t i = 0; i < channel_.size(); ++i) one(channel_[i], "a transfer on point-to-point channel " + std::to_string(i));
}

void run_collective(CollectiveKind kind, float* buffer, const CollectiveFloats& f, int root, int ranks, ncclComm_t comm,
                    cudaStream_t stream, const std::string& what) {
    float* send = buffer;
    float* recv = buffer + f.send;
    const auto n = static_cast<std::size_t>(f.recv);
    const auto block = static_cast<std::size_t>(f.block);
    switch (kind) {
        case CollectiveKind::all_reduce:
        case CollectiveKind::barrier:
            check(ncclAllReduce(recv, recv, n, ncclFloat32, ncclSum, comm, stream), "ncclAllReduce for " + what, comm);
            break;
        case CollectiveKind::reduce:
            check(ncclReduce(recv, recv, n, ncclFloat32, ncclSum, root, comm, stream), "ncclReduce for " + what, comm);
            break;
        case CollectiveKind::broadcast:
            check(ncclBroadcast(recv, recv, n, ncclFloat32, root, comm, stream), "ncclBroadcast for " + what, comm);
            break;
        case CollectiveKind::reduce_scatter:
            check(ncclReduceScatter(send, recv, block, ncclFloat32, ncclSum, comm, stream), "ncclReduceScatter for " + what, comm);
            break;
        case CollectiveKind::all_gather:
            check(ncclAllGather(send, recv, block, ncclFloat32, comm, stream), "ncclAllGather for " + what, comm);
            break;
        case CollectiveKind::all_to_all:
            check(ncclGroupStart(), "ncclGroupStart for " + what, comm);
            for (int peer = 0; peer < ranks; ++peer) {
                check(ncclSend(send + peer * block, block, ncclFloat32, peer, comm, stream), "ncclSend for " + what, comm);
                check(ncclRecv(recv + peer * block, block, ncclFloat32, peer, comm, stream), "ncclRecv for " + what, comm);
            }
            check(ncclGroupEnd(), "ncclGroupEnd for " + what, comm);
            break;
    }
}

}  // namespace smol::exec::cuda

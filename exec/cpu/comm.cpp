#include "exec/cpu/comm.hpp"

#include <time.h>

#include <climits>

#include "core/error.hpp"

namespace smol::exec::cpu {

namespace {

int as_count(std::int64_t n) {
    if (n > INT_MAX) throw Error(ErrorKind::bad_input, "a collective of " + std::to_string(n) + " floats exceeds MPI's int counts");
    return static_cast<int>(n);
}

void check(int rc, const char* what) {
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        throw Error(ErrorKind::internal, std::string(what) + " failed: " + std::string(msg, static_cast<std::size_t>(len)));
    }
}

/// A count and type covering `bytes` (bytes beyond 2 GiB travel as 1 KiB elements, rounded up).
std::pair<int, MPI_Datatype> byte_count(std::int64_t bytes) {
    if (bytes <= INT_MAX) return {static_cast<int>(bytes), MPI_BYTE};
    static MPI_Datatype kib = [] {
        MPI_Datatype t;
        MPI_Type_contiguous(1024, MPI_BYTE, &t);
        MPI_Type_commit(&t);
        return t;
    }();
    return {as_count((bytes + 1023) / 1024), kib};
}

}  // namespace

CollectiveCounts collective_counts(CollectiveKind kind, std::int64_t bytes, int ranks) {
    const std::int64_t whole = (bytes + 3) / 4;
    const std::int64_t block = (whole + ranks - 1) / ranks;
    switch (kind) {
        case CollectiveKind::all_reduce:
        case CollectiveKind::reduce: return {whole, whole};
        case CollectiveKind::broadcast: return {0, whole};
        case CollectiveKind::reduce_scatter: return {block * ranks, block};
        case CollectiveKind::all_gather: return {block, block * ranks};
        case CollectiveKind::all_to_all: return {block * ranks, block * ranks};
        case CollectiveKind::barrier: return {0, 0};
    }
    return {};
}

void run_collective(CollectiveKind kind, const float* send, float* recv, std::int64_t bytes, int root, MPI_Comm comm) {
    int ranks = 1;
    MPI_Comm_size(comm, &ranks);
    const CollectiveCounts n = collective_counts(kind, bytes, ranks);
    switch (kind) {
        case CollectiveKind::all_reduce:
            check(MPI_Allreduce(send, recv, as_count(n.recv), MPI_FLOAT, MPI_SUM, comm), "MPI_Allreduce");
            break;
        case CollectiveKind::reduce_scatter:
            check(MPI_Reduce_scatter_block(send, recv, as_count(n.recv), MPI_FLOAT, MPI_SUM, comm), "MPI_Reduce_scatter_block");
            break;
        case CollectiveKind::all_gather:
            check(MPI_Allgather(send, as_count(n.send), MPI_FLOAT, recv, as_count(n.send), MPI_FLOAT, comm), "MPI_Allgather");
            break;
        case CollectiveKind::broadcast:
            check(MPI_Bcast(recv, as_count(n.recv), MPI_FLOAT, root, comm), "MPI_Bcast");
            break;
        case CollectiveKind::reduce:
            check(MPI_Reduce(send, recv, as_count(n.recv), MPI_FLOAT, MPI_SUM, root, comm), "MPI_Reduce");
            break;
        case CollectiveKind::all_to_all:
            check(MPI_Alltoall(send, as_count(n.send / ranks), MPI_FLOAT, recv, as_count(n.recv / ranks), MPI_FLOAT, comm),
                  "MPI_Alltoall");
            break;
        case CollectiveKind::barrier: check(MPI_Barrier(comm), "MPI_Barrier"); break;
    }
}

MPI_Request post_send(const void* data, std::int64_t bytes, int peer, int tag, MPI_Comm comm) {
    const auto [count, type] = byte_count(bytes);
    MPI_Request r;
    check(MPI_Isend(data, count, type, peer, tag, comm, &r), "MPI_Isend");
    return r;
}

MPI_Request post_recv(void* data, std::int64_t bytes, int peer, int tag, MPI_Comm comm) {
    const auto [count, type] = byte_count(bytes);
    MPI_Request r;
    check(MPI_Irecv(data, count, type, peer, tag, comm, &r), "MPI_Irecv");
    return r;
}

void wait_polling(MPI_Request& request) {
    // Spin first: a message whose peer is ready completes within a few microseconds (Open MPI's
    // shared-memory latency is about 1 µs); then sleep between polls, 1 µs doubling to 64 µs.
    constexpr int kSpins = 200;
    constexpr long kMaxSleepNs = 64'000;
    int done = 0;
    for (int i = 0; i < kSpins; ++i) {
        check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
        if (done) return;
    }
    long sleep_ns = 1'000;
    while (true) {
        timespec ts{0, sleep_ns};
        nanosleep(&ts, nullptr);
        check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
        if (done) return;
        if (sleep_ns < kMaxSleepNs) sleep_ns *= 2;
    }
}

}  // namespace smol::exec::cpu

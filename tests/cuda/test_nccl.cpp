// NCCL as the CUDA backend uses it (exec/cuda/nccl.hpp), under mpirun with a GPU per rank: every
// collective's values against what it must compute from rank-dependent data (an all-reduce
// equals the sum over ranks, a reduce-scatter each rank's block of it, an all-gather every
// rank's block in order, a broadcast the root's data, an all-to-all the transposed blocks), and
// a send on a point-to-point channel arrives intact.
#include <catch2/catch.hpp>

#include <numeric>

#include "cuda_support.hpp"
#include "exec/cuda/backend.hpp"
#include "exec/cuda/nccl.hpp"
#include "exec/mpi.hpp"

using namespace smol;
using namespace smol::exec::cuda;
using smol::test::DeviceMemory;

namespace {

/// Rank r's i-th element: distinct per rank and index, exact in fp32 when summed over ranks.
float value(int rank, std::int64_t i) { return static_cast<float>(rank + 1) * 1000.0f + static_cast<float>(i % 997); }

}  // namespace

TEST_CASE("NCCL collectives compute what they must, on every rank", "[cuda][mpi][nccl]") {
    exec::Session& session = test::session();
    exec::Mpi& mpi = session.mpi();
    const int p = mpi.size(), me = mpi.rank();
    if (p < 2) {
        WARN("runs under mpirun -np 2 or more");
        return;
    }
    int gpus = 0;
    check(cudaGetDeviceCount(&gpus), "cudaGetDeviceCount");
    check(cudaSetDevice(device_for_rank(mpi.local_rank(), mpi.local_size(), gpus, mpi.host_name())), "cudaSetDevice");
    std::vector<int> all(static_cast<std::size_t>(p));
    std::iota(all.begin(), all.end(), 0);
    OpGraph g(p);
    g.add_collective(CollectiveKind::barrier, all, Bytes(0), Stream::comm, Phase::comm);
    g.add_send_recv(0, 1, Bytes(4000), Phase::fwd, 0, 0);
    g.finalize();
    const exec::Communicators comms(mpi, g);
    const Channels channels = plan_channels(g);
    const NcclComms nccl(g, channels, me, mpi, comms);
    ncclComm_t comm = nccl.of(0);
    REQUIRE(comm != nullptr);
    cudaStream_t s = nullptr;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");

    const std::int64_t bytes = 4 * 1000 * p + 12;   // not a multiple of p floats: blocks round up
    for (CollectiveKind kind : {CollectiveKind::all_reduce, CollectiveKind::reduce_scatter, CollectiveKind::all_gather,
                                CollectiveKind::broadcast, CollectiveKind::reduce, CollectiveKind::all_to_all,
                                CollectiveKind::barrier}) {
        INFO(to_string(kind));
        const CollectiveFloats f = collective_floats(kind, bytes, p);
        const int root = p - 1;
        std::vector<float> host(static_cast<std::size_t>(f.send + f.recv));
        // The input: the send part, or (in place) the receive part.
        const std::int64_t in = f.send > 0 ? f.send : f.recv;
        const std::int64_t in_at = f.send > 0 ? 0 : f.send;
        for (std::int64_t i = 0; i < in; ++i) host[static_cast<std::size_t>(in_at + i)] = value(me, i);
        DeviceMemory buf(host.size() * 4);
        check(cudaMemcpy(buf.get(), host.data(), host.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
        run_collective(kind, buf.get<float>(), f, root, p, comm, s, "a test");
        check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
        const auto out = test::download(buf.get<float>() + f.send, static_cast<std::size_t>(f.recv), Element::fp32);
        auto sum = [&](std::int64_t i) {
            float t = 0;
            for (int r = 0; r < p; ++r) t += value(r, i);
            return t;
        };
        std::size_t wrong = 0;
        for (std::int64_t i = 0; i < f.recv; ++i) {
            float want = 0;
            switch (kind) {
                case CollectiveKind::all_reduce:
                case CollectiveKind::barrier: want = sum(i); break;
                case CollectiveKind::reduce: want = me == root ? sum(i) : value(me, i); break;   // NCCL leaves non-roots' buffers
                case CollectiveKind::broadcast: want = value(root, i); break;
                case CollectiveKind::reduce_scatter: want = sum(me * f.block + i); break;
                case CollectiveKind::all_gather: want = value(static_cast<int>(i / f.block), i % f.block); break;
                case CollectiveKind::all_to_all: want = value(static_cast<int>(i / f.block), me * f.block + i % f.block); break;
            }
            wrong += out[static_cast<std::size_t>(i)] != want;
        }
        CHECK(wrong == 0);
    }

    // A send from rank 0 arrives at rank 1 on their channel.
    DeviceMemory msg(4000);
    if (me == 0) {
        std::vector<float> data(1000);
        for (std::size_t i = 0; i < data.size(); ++i) data[i] = value(0, static_cast<std::int64_t>(i));
        check(cudaMemcpy(msg.get(), data.data(), 4000, cudaMemcpyHostToDevice), "cudaMemcpy");
        check(ncclSend(msg.get(), 4000, ncclUint8, 1, nccl.channel(0), s), "ncclSend");
    } else if (me == 1) {
        check(ncclRecv(msg.get(), 4000, ncclUint8, 0, nccl.channel(0), s), "ncclRecv");
    }
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    if (me == 1) {
        const auto got = test::download(msg.get(), 1000, Element::fp32);
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < got.size(); ++i) wrong += got[i] != value(0, static_cast<std::int64_t>(i));
        CHECK(wrong == 0);
    }
    cudaStreamDestroy(s);
}

// The entry points of executor.hpp for a build with MPI and BLAS (unavailable.cpp is the other).
#include "exec/executor.hpp"

#include <algorithm>
#include <chrono>
#include <thread>
#include <fstream>
#include <limits>

#include "core/error.hpp"
#include "exec/cpu/backend.hpp"
#include "exec/cuda/plan.hpp"
#include "exec/mpi.hpp"
#include "exec/runner.hpp"

namespace smol::exec {

namespace {

Bytes mem_available() {
    std::ifstream in("/proc/meminfo");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("MemAvailable:", 0) == 0) return Bytes(std::atoll(line.c_str() + 13) * 1024);
    return Bytes(0);
}

}  // namespace

bool available() { return true; }

void require_available(const char*) {}

Session::Session() : mpi_(std::make_unique<Mpi>()) {}
Session::~Session() = default;
int Session::rank() const { return mpi_->rank(); }
int Session::size() const { return mpi_->size(); }
int Session::local_size() const { return mpi_->local_size(); }
Mpi& Session::mpi() { return *mpi_; }

void Session::leave_with_error(int code, Time grace) {
    // A detached timer: the process normally exits (after MPI_Finalize) long before it fires.
    std::thread([code, grace] {
        std::this_thread::sleep_for(std::chrono::nanoseconds(grace.count_ps() / 1000));
        MPI_Abort(MPI_COMM_WORLD, code);
    }).detach();
}

void check_same_graph(Session& session, const OpGraph& graph) { check_same_graph(session.mpi(), graph); }

std::vector<std::string> all_gather_text(Session& session, const std::string& mine) {
    Mpi& mpi = session.mpi();
    const auto ranks = static_cast<std::size_t>(mpi.size());
    const std::int64_t length = static_cast<std::int64_t>(mine.size());
    std::vector<std::int64_t> lengths(ranks);
    MPI_Allgather(&length, 1, MPI_INT64_T, lengths.data(), 1, MPI_INT64_T, mpi.world());
    std::vector<int> counts(ranks), offsets(ranks);
    std::int64_t total = 0;
    for (std::size_t r = 0; r < ranks; ++r) {
        if (total + lengths[r] > std::numeric_limits<int>::max())
            fail_input("the ranks' results add up to more than 2 GiB, past what one MPI_Allgatherv carries: split "
                       "the job (fewer plans per command, e.g. --strategies or --tp lists)");
        offsets[r] = static_cast<int>(total);
        counts[r] = static_cast<int>(lengths[r]);
        total += lengths[r];
    }
    std::string all(static_cast<std::size_t>(total), '\0');
    MPI_Allgatherv(mine.data(), static_cast<int>(mine.size()), MPI_CHAR, all.data(), counts.data(), offsets.data(), MPI_CHAR,
                   mpi.world());
    std::vector<std::string> out(ranks);
    for (std::size_t r = 0; r < ranks; ++r) out[r] = all.substr(static_cast<std::size_t>(offsets[r]), static_cast<std::size_t>(counts[r]));
    return out;
}

Bytes cpu_workspace(const OpGraph& graph, int rank) {
    std::int64_t total = 0;
    for (std::int64_t b : cpu::workspace_bytes(graph, rank)) total += b;
    return Bytes(total);
}

Bytes cuda_workspace(const OpGraph& graph, int rank) { return Bytes(cuda::device_workspace_bytes(graph, rank)); }

HostMemory host_memory(Session& session, Bytes need) {
    Mpi& mpi = session.mpi();
    const std::int64_t mine = need.count();
    std::int64_t host_need = 0;
    MPI_Allreduce(&mine, &host_need, 1, MPI_INT64_T, MPI_SUM, mpi.shared());
    const std::int64_t available = mem_available().count();
    // The host with the least to spare, found by a MINLOC over (spare, rank).
    struct {
        double spare;
        int rank;
    } local{static_cast<double>(available - host_need), mpi.rank()}, worst{};
    MPI_Allreduce(&local, &worst, 1, MPI_DOUBLE_INT, MPI_MINLOC, mpi.world());
    std::int64_t figures[3] = {host_need, available, mpi.local_size()};
    MPI_Bcast(figures, 3, MPI_INT64_T, worst.rank, mpi.world());
    char name[256] = {};
    if (mpi.rank() == worst.rank) mpi.host_name().copy(name, sizeof name - 1);
    MPI_Bcast(name, sizeof name, MPI_CHAR, worst.rank, mpi.world());
    HostMemory out;
    out.host = name;
    out.need = Bytes(figures[0]);
    out.available = Bytes(figures[1]);
    out.ranks = static_cast<int>(figures[2]);
    out.fits = worst.spare >= 0;
    return out;
}

Measured run_cpu(Session& session, const OpGraph& graph, const topo::Cluster& cluster, const ExecOptions& options) {
    cpu::CpuBackend backend(graph, session.mpi(), options.scratch);
    Runner runner(graph, cluster, session.mpi(), backend, options);
    return runner.run();
}

}  // namespace smol::exec

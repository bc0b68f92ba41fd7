// The CPU backend: one rank's device work on the host's cores and memory.
//
//   compute      every kernel of the op's recipe at its own shape, in fp32 (kernels.hpp), on a
//                per-stream workspace sized to the stream's largest kernel and filled once with
//                small values (operands are real memory, not a pointer to nothing)
//                gradient compression's passes run their real code (compression.hpp)
//   collectives  MPI on real buffers of the op's size, on the op-graph communicator's MPI
//                communicator (comm.hpp)
//   send / recv  MPI point to point on the p2p communicator, tag = the graph's p2p id
//   copies       device ↔ host as memcpy — on a CPU board device and host are one memory, so a
//                "transfer" is a copy within DRAM; to and from the NVMe tier as file I/O in the
//                scratch directory (O_DIRECT where the file system allows it, so the page cache
//                does not stand in for the drive)
//   alloc / free real allocations, every page touched, so the memory is resident; a freed
//                block is kept for the next allocation of the same size (as PyTorch's caching
//                allocator keeps blocks), so steady-state steps do not pay page faults; NVMe-tier
//                buffers are files of their size (posix_fallocate) in the scratch directory
// BLAS threads per rank: the host's cores divided by the ranks on the host (at least 1, at most
// the cores this process may run on), set explicitly.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "exec/cpu/host_buffers.hpp"
#include "exec/executor.hpp"
#include "exec/mpi.hpp"

namespace smol::exec::cpu {

/// 64-byte aligned floats, touched when made.
class Workspace {
public:
    Workspace() = default;
    explicit Workspace(std::int64_t floats);
    ~Workspace();
    Workspace(const Workspace&) = delete;
    Workspace& operator=(const Workspace&) = delete;
    Workspace(Workspace&& o) noexcept;
    Workspace& operator=(Workspace&& o) noexcept;
    float* data() const { return data_; }
    std::int64_t floats() const { return floats_; }

private:
    float* data_ = nullptr;
    std::int64_t floats_ = 0;
};

/// Floats of workspace one kernel needs (its operands and results, fp32).
std::int64_t kernel_floats(const Kernel& k);
/// Bytes of workspace each stream of `rank` needs for its ops.
std::array<std::int64_t, kStreams> workspace_bytes(const OpGraph& graph, int rank);
/// `v` rounded up to a multiple of `to`.
std::int64_t round_up(std::int64_t v, std::int64_t to);
/// bad_input: "`what` `path`: " and errno's text.
[[noreturn]] void fail_io(const std::string& what, const std::string& path);
/// Writes or reads `bytes` at offset 0 of `fd`, looping over short transfers (the NVMe tier's
/// files, of both backends); reading past what was written leaves the rest of `data` as it is.
void file_io(int fd, void* data, std::int64_t bytes, bool write, const std::string& path);

/// The NVMe tier's files, of both backends: a folder of this process and rank
/// ("smolcluster-<pid>-rank<r>") under `root` (--scratch; empty: the system's temporary folder),
/// made when the first file is named, and removed with every file in it with this object.
class ScratchDir {
public:
    explicit ScratchDir(std::string root) : root_(std::move(root)) {}
    ~ScratchDir();
    ScratchDir(const ScratchDir&) = delete;
    ScratchDir& operator=(const ScratchDir&) = delete;
    /// A new file's path: "<folder>/<prefix>-<n>", n counting up from 0. bad_input (naming
    /// --scratch) when `root` is not a directory or the folder cannot be made.
    std::string next_file(int rank, const char* prefix);

private:
    std::string root_, dir_;
    int next_ = 0;
};
/// BLAS threads for one of `local_ranks` ranks on this host.
int blas_threads_per_rank(int local_ranks);
/// Runs one kernel of a recipe in fp32 on `workspace` (kernel_floats(k) floats, laid out as the
/// kernel needs: operands back to back); `adam_step` counts Adam steps (incremented by each).
/// What a CPU stream runs, and what the CUDA backend runs for ops on the host.
void run_kernel(const Kernel& k, float* workspace, int& adam_step);

class CpuBackend final : public Backend {
public:
    /// `scratch`: directory for the NVMe tier (a per-rank subdirectory is made there when needed
    /// and removed afterwards); empty: the temporary directory.
    CpuBackend(const OpGraph& graph, Mpi& mpi, std::string scratch);
    ~CpuBackend() override;

    std::string describe() const override;
    void prepare(const OpGraph& graph, int rank, const Communicators& comms) override;
    StreamDevice& stream(Stream s) override;
    void allocate(std::int32_t buffer) override;
    void release(std::int32_t buffer) override;
    Bytes workspace() const override;

    /// Whether the NVMe tier's copies bypass the page cache (O_DIRECT was accepted).
    bool direct_io() const;

private:
    class Device;

    const OpGraph& g_;
    Mpi& mpi_;
    ScratchDir scratch_;
    int rank_ = 0;
    std::array<std::unique_ptr<Device>, kStreams> devices_;
    Bytes workspace_;

    HostBuffers buffers_{scratch_};
};

}  // namespace smol::exec::cpu

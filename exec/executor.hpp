// The real executor: runs a finalized op graph on the machine, one process per rank (started by
// mpirun), and fills the same Timeline the simulator fills, so traces/ writes the trace and the
// summary unchanged and traces/compare lines the two up op by op.
//
// Three layers, so a CUDA + NCCL backend reuses everything but the device work:
//   * the runner (runner.*): one thread per (rank, stream) that has ops, an in-order queue per
//     thread, dependency tracking (local edges through completion flags and a condition variable,
//     edges between ranks through small signal messages received by a progress thread), op start
//     and end times, memory accounting, the watchdog and fault injection;
//   * MPI plumbing (mpi.*): MPI_THREAD_MULTIPLE, one MPI communicator per op-graph communicator,
//     the graph hash check, clock alignment, gathering every rank's part of the Timeline;
//   * a Backend: the device work of one rank (cpu/: BLAS kernels, MPI collectives and point to
//     point, memcpy and file I/O, real allocations).
//
// What "an op starts" and "ends" means is the simulator's (sim/simulator.hpp): an op starts when
// every op it depends on has finished; a collective's start is the rank's arrival (the collective
// itself runs once all members arrive); a send and a receive each start when posted and end
// when their transfer completes; a timer waits for the next tick of a clock that starts with the
// step. Alloc and free take real memory.
//
// This header has no MPI types: tools/ includes it whether or not smolcluster was built with MPI
// (available() says which; without MPI every entry point throws a bad_input error saying so).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/kernel.hpp"
#include "core/op_graph.hpp"
#include "core/timeline.hpp"
#include "core/units.hpp"
#include "topologies/cluster.hpp"

namespace smol::exec {

class Mpi;
class Communicators;

/// Whether this binary was built with the MPI + BLAS executor.
bool available();
/// Throws bad_input ("smolcluster was built without MPI …") when !available().
void require_available(const char* command);

/// Whether a launcher (mpirun, mpiexec, srun) started this process, read from the environment
/// before MPI is initialised: Open MPI's OMPI_COMM_WORLD_SIZE, PMI's PMI_RANK / PMI_SIZE,
/// PMIx's PMIX_RANK.
bool launched_by_mpirun();

/// SMOL_FAIL_AT=RANK:OP[:hang]: rank RANK fails (or hangs, for the watchdog) when it reaches op
/// OP. For tests of the failure path; read by fault_from_env().
struct Fault {
    int rank = 0;
    OpId op = 0;
    bool hang = false;
};
/// The fault named by SMOL_FAIL_AT, if set; bad_input naming the variable when malformed.
std::optional<Fault> fault_from_env();

struct ExecOptions {
    int warmup = 1;                          // steps run before the measured one
    Time timeout = Time::seconds(300);       // watchdog: the longest a rank may go without finishing an op
    std::string scratch;                     // directory for the NVMe tier; empty: the temporary directory
    std::optional<Fault> fault;
    bool record_kernel_classes = true;       // Timeline::kernel_class_time
    /// CUDA: fp32 GEMMs on TF32 tensor cores (Ampere and later). Off by default, as PyTorch's
    /// torch.backends.cuda.matmul.allow_tf32 is since 1.12.
    bool allow_tf32 = false;
};

/// Clock alignment (mpi.cpp): rank clocks are put on rank 0's. Ranks of one host share its
/// monotonic clock (offset exactly 0); each other host's offset is measured by ping-pong rounds
/// with rank 0, the round with the shortest round trip giving the estimate.
struct ClockReport {
    int hosts = 1;
    std::vector<Time> offset;       // per host: its clock minus rank 0's
    std::vector<Time> uncertainty;  // per host: half the best round trip (0 for rank 0's host)
    std::vector<Time> drift;        // per host: offset measured after the run minus before
    /// Half the best round trip between two ranks of rank 0's host, whose clocks are known to be
    /// one: what the estimate's error is when the answer is exactly 0 (0 when alone on the host).
    Time residual;
};

/// What one run produced. On rank 0 `timeline` is every rank's, on rank-0 clock, times relative
/// to the measured step's start; on other ranks it is empty.
struct Measured {
    Timeline timeline;
    ClockReport clocks;
    std::vector<Bytes> resident_peak;   // rank 0: per rank, the process's peak resident memory (VmHWM)
    Bytes workspace;                    // per rank: kernel and transfer workspace outside the graph's buffers
    std::vector<Bytes> device_peak;     // rank 0: per rank, Backend::device_peak (CUDA: the memory pool's high-water mark)
    std::string backend;                // "cpu: OpenBLAS 0.3.21 …, Open MPI v4.1.4 …"
};

// ---- the device work of one rank, implemented by each backend ------------------------------------

/// Time spent per kernel class by one compute op.
using ClassTimes = std::array<Time, kKernelClasses>;

/// The device work of one (rank, stream): called only from that stream's thread, in stream order.
class StreamDevice {
public:
    virtual ~StreamDevice() = default;
    /// Runs `kernels` in order; adds each kernel's time (dispatch included) to `by_class`.
    virtual void compute(OpId id, std::span<const Kernel> kernels, bool on_host, ClassTimes& by_class) = 0;
    virtual void collective(OpId id) = 0;
    virtual void send(OpId id) = 0;
    virtual void recv(OpId id) = 0;
    virtual void copy(OpId id) = 0;

    // ---- asynchronous backends only (Backend::asynchronous()) ----------------------------------
    // The stream's thread only enqueues; the device runs the stream in order. The runner brackets
    // every op (its own alloc, free and timer ops too) with begin and end, so the backend marks
    // each op on the device (CUDA events) and the Timeline is device time.
    /// Before op `id` is issued: the stream waits, on the device, for `after` (ops of this rank
    /// on other streams, already issued), then marks the op's start.
    virtual void begin(OpId id, std::span<const OpId> after) {}
    /// After op `id` was issued: marks its end.
    virtual void end(OpId id) {}
    /// Host work the runner does inside the stream's order (a timer's wait) starts once
    /// host_enter returns: when the device has reached op `id`.
    virtual void host_enter(OpId id) {}
    /// Blocks until op `id` (issued on this stream) has finished on the device: before the
    /// runner tells another rank that it is done.
    virtual void finish(OpId id) {}
};

class Backend {
public:
    virtual ~Backend() = default;
    /// "cpu: OpenBLAS 0.3.21 (1 thread), Open MPI v4.1.4"
    virtual std::string describe() const = 0;
    /// Called once, on every rank at the same point, before the first step: sizes workspaces for
    /// this rank's ops. `comms` holds one MPI communicator per op-graph communicator.
    virtual void prepare(const OpGraph& graph, int rank, const Communicators& comms) = 0;
    /// The device of one stream (after prepare).
    virtual StreamDevice& stream(Stream s) = 0;
    /// Real memory for a buffer of the graph (pages touched) and its release. A backend may keep
    /// released blocks for the next allocation of the same size, as framework allocators do.
    virtual void allocate(std::int32_t buffer) = 0;
    virtual void release(std::int32_t buffer) = 0;
    /// Memory set aside by prepare() beyond the graph's buffers.
    virtual Bytes workspace() const = 0;

    /// Whether stream devices only enqueue (the asynchronous part of StreamDevice); the CPU
    /// backend's run each op to its end.
    virtual bool asynchronous() const { return false; }
    /// Asynchronous backends: called before a step's stream threads start, and after they have
    /// issued every op (waits until the device has run them).
    virtual void begin_step() {}
    virtual void end_step() {}
    /// After end_step: op `id`'s start and end in ps since `origin_ns` (this host's monotonic
    /// clock, now_ns()), and its time per kernel class.
    virtual void op_times(OpId id, std::int64_t origin_ns, std::int64_t& start_ps, std::int64_t& end_ps,
                          ClassTimes& classes) const {}
    /// The peak of device memory the graph's buffers took in the last step, as the device's
    /// allocator counts it (0 where the backend does not measure it).
    virtual Bytes device_peak() const { return Bytes(0); }
};

/// The kernels a compute op runs: its recipe, or for an op made with add_compute one kernel of
/// its class from its totals (gemm and attention: a square GEMM of its FLOPs; elementwise: a
/// streaming pass of its bytes and FLOPs; optimizer: Adam over FLOPs / 12 parameters).
std::vector<Kernel> kernels_to_run(const OpGraph& graph, OpId id);

// ---- entry points for tools/ -------------------------------------------------------------------

/// MPI for the life of the process (MPI_Init_thread with MPI_THREAD_MULTIPLE; a clear error when
/// the library does not provide it); finalised on destruction. At most one per process.
class Session {
public:
    Session();
    ~Session();
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    int rank() const;
    int size() const;
    int local_size() const;     // ranks on this host
    bool root() const { return rank() == 0; }
    Mpi& mpi();
    /// For a rank leaving with an error: every rank that fails the same way meets the others in
    /// MPI_Finalize and exits with its own status (and its own message); if the others do not
    /// leave within `grace`, this rank ends the job (MPI_Abort with `code`) so none is left
    /// waiting for it.
    void leave_with_error(int code, Time grace = Time::seconds(10));

private:
    std::unique_ptr<Mpi> mpi_;
};

/// Every rank's `mine`, in rank order, on every rank (MPI_Allgatherv of the lengths, then of the
/// bytes, over the world). bad_input when the texts together pass MPI's int count (2 GiB).
std::vector<std::string> all_gather_text(Session& session, const std::string& mine);

/// Every rank must build the same graph: compares a hash of each rank's graph; on a mismatch
/// throws bad_input (on every rank) naming the first op that differs and what each side has.
void check_same_graph(Session& session, const OpGraph& graph);

/// Workspace the CPU backend sets aside for `rank`'s ops (its largest kernel and transfers).
Bytes cpu_workspace(const OpGraph& graph, int rank);

/// Memory on the hosts of a run: `need` (this rank's simulated peak plus workspace) summed over
/// the ranks of each host (MPI_COMM_TYPE_SHARED) against the host's MemAvailable. Every rank gets
/// the figures of the host with the least to spare, and `fits` when every host has enough.
struct HostMemory {
    std::string host;
    int ranks = 1;
    Bytes need, available;
    bool fits = true;
};
HostMemory host_memory(Session& session, Bytes need);

/// Runs `options.warmup` steps and one measured step of `graph` on the CPU backend; every rank
/// calls it. The graph must be finalized, unfolded, with one rank per MPI process.
Measured run_cpu(Session& session, const OpGraph& graph, const topo::Cluster& cluster, const ExecOptions& options);

// ---- the CUDA + NCCL backend (exec/cuda/) ---------------------------------------------------------

/// Whether this binary was built with the CUDA backend (CMake found the CUDA toolkit, cuBLASLt
/// and NCCL besides MPI).
bool cuda_built();
/// Device memory the CUDA backend sets aside for `rank`'s ops (its streams' workspaces,
/// exec/cuda/plan.hpp); computed from the graph, with or without a GPU.
Bytes cuda_workspace(const OpGraph& graph, int rank);
/// Each rank's GPU (as the CUDA backend picks it: its local rank) against `need` (its simulated
/// device peak plus the workspace); every rank gets the figures of the rank with the least to
/// spare, and `fits` when every rank's GPU has enough free. bad_input when a host has no GPU or
/// fewer GPUs than ranks.
struct GpuMemory {
    int rank = 0;
    std::string device;          // "NVIDIA H200 (compute capability 9.0, …)"
    Bytes need, available;       // available: cudaMemGetInfo's free memory
    bool fits = true;
};
GpuMemory gpu_memory(Session& session, Bytes need);
/// run_cpu on the CUDA backend: one GPU per rank, NCCL collectives, CUDA-event times.
Measured run_cuda(Session& session, const OpGraph& graph, const topo::Cluster& cluster, const ExecOptions& options);

}  // namespace smol::exec

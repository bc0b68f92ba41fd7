// The CUDA backend: one rank's device work on one GPU, behind the same Backend interface as the
// CPU backend, run asynchronously (Backend::asynchronous): each op-graph stream's thread only
// enqueues on its CUDA stream, and CUDA events mark every op, so the Timeline is GPU time.
//
//   streams      one CUDA stream per op-graph stream with ops (non-blocking; communication
//                streams at the highest priority, plan.hpp); CUDA_DEVICE_MAX_CONNECTIONS is
//                raised to 32 (unless set) so the nine streams and NCCL's do not share the
//                default 8 hardware queues, where a blocked NCCL kernel could hold up an
//                unrelated stream behind it
//   events       per op its start and end and a boundary after each kernel-class run
//                (plan.hpp plan_events); a wait on another stream is cudaStreamWaitEvent on
//                that op's end; times are read after the step as cudaEventElapsedTime from a
//                step-start event whose host time is taken when it completes
//   compute      cuBLASLt GEMMs in the op's dtype (gemm.hpp), softmax, flash attention, the
//                memory-bound passes and a fused Adam (kernels.hpp), on the stream's
//                workspace: inputs filled once with small random values, outputs, Adam's state
//                (plan.hpp stream_needs); compute on the host runs the CPU backend's fp32
//                kernels (cpu::run_kernel) in a host section
//   host sections  a host op (timer, on-host compute, file I/O) waits for its start event
//                (the device has reached it: every earlier op of the stream and its waits are
//                done), does its work, and its end event is recorded after, on a stream idle
//                since: both marks are device times
//   collectives  NCCL on the op-graph communicator's NCCL communicator (nccl.hpp); send and
//                receive on their channel's two-rank communicator
//   copies       cudaMemcpyAsync between the stream's device workspace and its pinned staging
//                buffer; the NVMe tier as file I/O of the pinned buffer in the scratch directory
//                (O_DIRECT where the file system allows it), after or before the device copy
//   alloc / free device-tier buffers through cudaMallocAsync / cudaFreeAsync on the op's stream
//                from the device's default pool (release threshold: never give memory back, as
//                PyTorch's caching allocator keeps it), so the pool's high-water mark
//                (cudaMemPoolAttrUsedMemHigh) is the plan's device peak; host-tier buffers are
//                pageable memory with every page touched (kept for the next buffer of the same
//                size), NVMe-tier ones files of their size; out of device memory names the
//                rank, the buffer's label and size, and what the GPU had free
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "exec/cpu/backend.hpp"   // cpu::ScratchDir and cpu::HostBuffers, the host and NVMe tiers
#include "exec/cuda/plan.hpp"
#include "exec/executor.hpp"
#include "exec/mpi.hpp"

namespace smol::exec::cuda {

class NcclComms;

/// Sets CUDA_DEVICE_MAX_CONNECTIONS to 32 unless the user set it: before the first CUDA call of
/// the process (it is read when the context is made).
void set_cuda_environment();
/// The GPUs CUDA sees; bad_input naming the host and CUDA's reason when it sees none.
int visible_gpus(const std::string& host);
/// "NVIDIA H200 (compute capability 9.0, 132 SMs, 139.8 GiB)".
std::string device_description(int device);

class CudaBackend final : public Backend {
public:
    /// Picks this rank's GPU (its local rank on the host, plan.hpp device_for_rank).
    CudaBackend(const OpGraph& graph, Mpi& mpi, const ExecOptions& options);
    ~CudaBackend() override;

    std::string describe() const override;
    void prepare(const OpGraph& graph, int rank, const Communicators& comms) override;
    StreamDevice& stream(Stream s) override;
    void allocate(std::int32_t buffer) override;
    void release(std::int32_t buffer) override;
    Bytes workspace() const override;

    bool asynchronous() const override { return true; }
    void begin_step() override;
    void end_step() override;
    void op_times(OpId id, std::int64_t origin_ns, std::int64_t& start_ps, std::int64_t& end_ps,
                  ClassTimes& classes) const override;
    Bytes device_peak() const override { return device_peak_; }

    int device() const { return device_; }
    /// A stream's device regions (after prepare): tests read a kernel's operands and results.
    struct Regions {
        const char* in = nullptr;
        std::int64_t in_bytes = 0;
        const char* out = nullptr;
        std::int64_t out_bytes = 0;
    };
    Regions regions(Stream s) const;

private:
    class Device;
    friend class Device;

    void use_device() const;
    cudaEvent_t event(std::uint32_t index) const { return events_[index]; }
    /// Op `id`'s first and last event.
    std::uint32_t first_event(OpId id) const { return plan_.first[plan_.local[id]]; }
    std::uint32_t last_event(OpId id) const { return plan_.first[plan_.local[id] + 1] - 1; }

    const OpGraph& g_;
    Mpi& mpi_;
    ExecOptions options_;
    int device_ = 0;
    int rank_ = 0;
    double compute_capability_ = 0;
    std::int64_t smem_limit_ = 0;
    cpu::ScratchDir scratch_;

    EventPlan plan_;
    Channels channels_;
    std::vector<cudaEvent_t> events_;
    cudaEvent_t step_start_ = nullptr;
    std::int64_t step_start_ns_ = 0;                 // host time at which step_start_ had completed
    std::vector<std::int64_t> event_ps_;             // after end_step: each event's ps after step_start_
    std::vector<std::uint32_t> class_begin_;         // per local op: its runs in class_list_
    std::vector<KernelClass> class_list_;
    std::array<std::unique_ptr<Device>, kStreams> devices_;
    std::unique_ptr<NcclComms> nccl_;
    Bytes workspace_;
    cudaMemPool_t pool_ = nullptr;
    Bytes device_peak_;

    // Buffers of the graph.
    std::vector<cudaStream_t> alloc_stream_, free_stream_;   // per buffer: its alloc's and free's stream
    std::vector<void*> device_block_;                        // per device-tier buffer, while allocated
    cpu::HostBuffers host_buffers_{scratch_};                 // host- and NVMe-tier buffers
};

}  // namespace smol::exec::cuda

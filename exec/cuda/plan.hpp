// What the CUDA backend decides before it touches a GPU, in plain C++ (no CUDA headers), so CI
// tests every decision on a machine without one (tests/exec/test_cuda_plan.cpp):
//
//   devices      one GPU per rank of a host (its local rank), and a clear error where a plan
//                would put two ranks on one GPU (NCCL refuses that with ncclInvalidUsage,
//                src/init.cc: "Duplicate GPU detected : rank %d and rank %d both on CUDA device");
//   streams      one CUDA stream per op-graph stream that has ops; communication streams (comm,
//                p2p and the pipeline queues) at the device's highest priority, as PyTorch's
//                ProcessGroupNCCL does with Options(is_high_priority_stream = true) (its default
//                is false, ProcessGroupNCCL.hpp): a GEMM launched after a collective's kernel
//                does not delay it;
//   events       per op: its start and end, and one event after each run of kernels of one
//                class, so a compute op's time splits by class (Timeline::kernel_class_time);
//   host work    the ops a CPU core does inside the stream's order (timers, on-host compute,
//                file I/O of the NVMe tier), bracketed on the device so their times are device
//                times too;
//   workspaces   per stream, the device memory its kernels read (filled once with small random
//                values) and write, Adam's state, cuBLASLt's workspace, pinned staging for
//                copies, host memory for on-host kernels;
//   GEMMs        the row-major C[m×n] = A[m×k]·B[k×n] of a recipe as the column-major matmul
//                cuBLASLt takes (Cᵀ = Bᵀ·Aᵀ: M = n, N = m, K = k, no transposes), strided over
//                the batch, in the op's dtype;
//   point to point  one NCCL communicator per (sender, receiver, send stream, receive stream)
//                "channel": NCCL matches a channel's sends and receives by order, not by tag,
//                and the graph posts a channel's receives in the order of its sends.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/kernel.hpp"
#include "core/model.hpp"
#include "core/op_graph.hpp"
#include "exec/cuda/types.hpp"

namespace smol::exec::cuda {

// ---- devices ------------------------------------------------------------------------------------

/// The GPU (an index among the visible ones) of the rank with local rank `local_rank` of
/// `local_size` ranks on its host; bad_input when the host has fewer GPUs than ranks (NCCL
/// cannot put two ranks on one GPU) or none at all. `host` names the host in the message.
int device_for_rank(int local_rank, int local_size, int device_count, const std::string& host);

// ---- streams and events -------------------------------------------------------------------------

/// Streams whose work is communication: they get the device's highest priority.
bool high_priority(Stream s);

/// A run of consecutive kernels of one class in a recipe.
struct ClassRun {
    KernelClass cls;
    int kernels;
};
/// The class runs of `kernels` in order ([gemm ×2, elementwise, gemm] → 3 runs).
std::vector<ClassRun> class_runs(std::span<const Kernel> kernels);

/// Events of every op of one rank: event[first[i]] is op i's start, event[first[i + 1] − 1] its
/// end; a compute op with class times has one event after each class run in between (the last
/// of them is its end). Indexed by the op's position among the rank's ops (op-id order).
struct EventPlan {
    std::vector<OpId> ops;                 // the rank's ops, in id order
    std::vector<std::uint32_t> first;      // per op (size ops + 1): its first event
    std::vector<std::uint32_t> local;      // per graph op: its index in `ops` (valid for the rank's ops)
    std::uint32_t events() const { return first.empty() ? 0 : first.back(); }
};
EventPlan plan_events(const OpGraph& graph, int rank, bool kernel_classes);

/// Ops a host core runs in the stream's order: timers, compute on the host, and copies to or from
/// the NVMe tier (file I/O).
bool host_work(const OpGraph& graph, OpId id);

/// How a copy between tiers runs: a device↔host copy is one cudaMemcpyAsync between the stream's
/// device workspace and its pinned staging buffer; a copy touching the NVMe tier writes or reads
/// the staging buffer to or from a file (and copies to or from the device first or after).
enum class CopyRoute { device_to_host, host_to_device, host_to_file, file_to_host, device_to_file, file_to_device };
/// The route between two different tiers (the op graph refuses a copy within one tier;
/// an internal error here).
CopyRoute copy_route(Tier from, Tier to);
const char* to_string(CopyRoute r);
bool touches_device(CopyRoute r);
bool touches_file(CopyRoute r);

// ---- GEMMs --------------------------------------------------------------------------------------

/// How products accumulate: fp32 (CUBLAS_COMPUTE_32F) for every dtype; with `tf32` the fp32
/// inputs go through the tensor cores rounded to TF32 (CUBLAS_COMPUTE_32F_FAST_TF32).
enum class Compute : std::uint8_t { fp32, fp32_fast_tf32 };
Element element_of(DType d);
/// The elements a softmax kernel runs on: fp32 where its recipe says so (Megatron's unfused
/// softmax in fp32 inside a 16-bit run, core/transformer.cpp), else the run's dtype.
Element softmax_element(const Kernel& kernel, DType dtype);
int element_bytes(Element e);
const char* to_string(Element e);
const char* to_string(Compute c);

/// One column-major matrix as cublasLtMatrixLayoutCreate takes it, with its batch.
struct MatrixLayout {
    std::int64_t rows = 0, cols = 0, ld = 0;
    std::int32_t batch = 1;
    std::int64_t stride = 0;   // elements between batch members
    bool operator==(const MatrixLayout&) const = default;
};
/// D = A·B in cuBLASLt's column-major terms; A and B untransposed (CUBLAS_OP_N), C = D.
struct GemmShape {
    std::int64_t m = 0, n = 0, k = 0;
    MatrixLayout a, b, c;
    Element element = Element::bf16;
    Compute compute = Compute::fp32;
    /// Bytes every A, B and C pointer of the batch is aligned to (bases 256-aligned, then each
    /// batch member's offset): the minimum alignments cuBLASLt's heuristic may assume
    /// (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES, which default to 256).
    int align_a = 256, align_b = 256, align_c = 256;
    bool operator==(const GemmShape&) const = default;
};
/// The largest power of two up to 256 dividing `bytes` (256 for 0).
int alignment_of(std::int64_t bytes);
/// Offsets of the backend's operands are rounded up to this, so bases are 256-byte aligned.
inline constexpr std::int64_t kOperandAlign = 256;
/// The matmul that runs `kernel` (a KernelOp::gemm) in `dtype`: the recipe's row-major product
/// as Cᵀ = Bᵀ·Aᵀ. TF32 only for fp32 with `allow_tf32` on a device of compute capability ≥ 8.0
/// (Ampere's tensor cores were the first with TF32).
GemmShape gemm_shape(const Kernel& kernel, DType dtype, bool allow_tf32, double compute_capability);

/// cuBLASLt's workspace per stream that runs GEMMs: 32 MiB, what cuBLAS recommends on Hopper
/// (cuBLAS docs, "cublasSetWorkspace": 32 MiB for Hopper, 4 MiB for others; we take one size).
inline constexpr std::int64_t kLtWorkspaceBytes = 32LL << 20;

// ---- flash attention ----------------------------------------------------------------------------

/// Dynamic shared memory (bytes) of the forward and backward kernels for a padded head dim d.
std::int64_t flash_fwd_smem(std::int64_t d, int warps);
std::int64_t flash_bwd_smem(std::int64_t d, int warps);
/// The tiles for head dimension `head_dim` (rounded up to a multiple of 16, the tensor-core
/// fragment width; FlashAttention-2 pads to a multiple of 8 the same way, flash_attn_interface.py)
/// within `smem_limit` bytes of shared memory per block: 4 warps where both kernels fit, else 2;
/// bad_input naming the head dimension when even 2 warps do not fit, or it is above 256.
FlashTiles flash_tiles(std::int64_t head_dim, std::int64_t smem_limit);

// ---- workspaces ---------------------------------------------------------------------------------

/// Device bytes one kernel reads (`in`: filled once, never written), writes (`out`) and keeps
/// across steps (`state`: Adam's fp32 master weights and moments), in `dtype`. Regions are apart,
/// so no kernel reads what another wrote: inputs stay the small random values they were filled
/// with and Adam's moments stay finite step after step.
struct KernelBytes {
    std::int64_t in = 0, out = 0, state = 0;
};
KernelBytes kernel_bytes(const Kernel& kernel, DType dtype);
/// A softmax kernel of a backward recipe (dx = y·(dy − Σ y·dy): read y and dy, write dx), told
/// apart by its traffic, 1.5× the forward's (core/kernel.cpp backward_kernels).
bool softmax_backward(const Kernel& kernel);
/// Adam's own traffic: read p, m, v, g (fp32) and write p, m, v: 28 bytes per parameter. A
/// recipe's Adam that moves more (a mixed-precision step: unscale, clip, copy to the 16-bit
/// weights, zero the gradients: 58 bytes, strategies/framework.cpp) runs a streaming pass over
/// Adam's state for the rest.
inline constexpr std::int64_t kAdamBytesPerParam = 28;
std::int64_t adam_extra_bytes(const Kernel& kernel);

/// What one stream of a rank needs.
struct StreamNeeds {
    bool used = false;             // the rank has ops on it
    std::int64_t in = 0, out = 0, state = 0;   // device regions (bytes)
    std::int64_t lt_workspace = 0;             // cuBLASLt workspace (bytes), when it runs GEMMs
    std::int64_t pinned = 0;                   // pinned host staging for copies (bytes)
    std::int64_t host_floats = 0;              // pageable host workspace for on-host kernels
    bool file = false;                         // copies to or from the NVMe tier
    bool host_work = false;                    // host sections (needs a release flag)
    std::int64_t device_total() const { return in + out + state + lt_workspace; }
};
/// Every stream's needs for `rank`'s ops of `graph`, kernels in the op's dtype.
std::array<StreamNeeds, kStreams> stream_needs(const OpGraph& graph, int rank);
/// Device bytes set aside beyond the graph's buffers (every stream's regions and cuBLASLt
/// workspaces): what the memory check adds to the simulated peak.
std::int64_t device_workspace_bytes(const OpGraph& graph, int rank);

/// Elements of fp32 a collective of `bytes` moves per rank over `ranks` ranks (as the CPU
/// backend counts them, exec/cpu/comm.hpp): `send` in, `recv` out; all-reduce, broadcast and
/// reduce run in place (send 0).
struct CollectiveFloats {
    std::int64_t send = 0, recv = 0, block = 0;
};
CollectiveFloats collective_floats(CollectiveKind kind, std::int64_t bytes, int ranks);

// ---- point to point -----------------------------------------------------------------------------

struct Channel {
    int src = 0, dst = 0;
    Stream send_stream = Stream::p2p, recv_stream = Stream::p2p;
    std::vector<std::int32_t> p2ps;   // in send order (= receive order)
};
/// Every channel of the graph, sorted by (src, dst, send stream, receive stream), and for each
/// p2p its channel. A channel's receives are posted in the order of its sends: OpGraph appends a
/// send and its receive together (add_send_recv), so both follow the order of the calls.
struct Channels {
    std::vector<Channel> list;
    std::vector<std::int32_t> of_p2p;
};
Channels plan_channels(const OpGraph& graph);

}  // namespace smol::exec::cuda

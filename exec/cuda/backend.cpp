#include "exec/cuda/backend.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>

#include <cublasLt.h>

#include "core/error.hpp"
#include "exec/cpu/backend.hpp"
#include "exec/cpu/kernels.hpp"
#include "exec/cuda/check.hpp"
#include "exec/cuda/gemm.hpp"
#include "exec/cuda/kernels.hpp"
#include "exec/cuda/nccl.hpp"

namespace smol::exec::cuda {

namespace {

constexpr std::int64_t kPage = 4096;

using cpu::fail_io;
using cpu::file_io;
using cpu::round_up;

std::int64_t aligned(std::int64_t bytes) { return round_up(bytes, kOperandAlign); }

std::string text(std::int64_t bytes) { return to_string(Bytes(bytes)); }

int version_major(int v) { return v / 1000; }
int version_minor(int v) { return v % 1000 / 10; }

}  // namespace

void set_cuda_environment() { setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0); }

int visible_gpus(const std::string& host) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError();
        fail_input("the CUDA backend found no usable GPU on host " + host + " (cudaGetDeviceCount: " + cuda::describe(e) +
                   "); check nvidia-smi and CUDA_VISIBLE_DEVICES, or run with --backend cpu");
    }
    return count;
}

std::string device_description(int device) {
    cudaDeviceProp p{};
    check(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
    return std::string(p.name) + " (compute capability " + std::to_string(p.major) + "." + std::to_string(p.minor) + ", " +
           std::to_string(p.multiProcessorCount) + " SMs, " + to_string_binary(Bytes(static_cast<std::int64_t>(p.totalGlobalMem))) + ")";
}

// ---- one stream ---------------------------------------------------------------------------------

class CudaBackend::Device final : public StreamDevice {
public:
    Device(CudaBackend& owner, Stream s, const StreamNeeds& need, int priority, Element fill, std::uint64_t seed)
        : owner_(owner), s_(s), host_(need.host_floats) {
        check(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, priority),
              std::string("cudaStreamCreateWithPriority for stream ") + to_string(s));
        in_bytes_ = need.in;
        out_bytes_ = need.out;
        state_bytes_ = need.state;
        lt_bytes_ = need.lt_workspace;
        adam_n_ = need.state / 12;
        in_ = device_region(in_bytes_, "inputs");
        out_ = device_region(out_bytes_, "outputs");
        state_ = device_region(state_bytes_, "Adam state");
        lt_ = device_region(lt_bytes_, "cuBLASLt workspace");
        // Small random values, never zero: inputs and outputs in the rank's dtype (read as fp32
        // they are finite too: a bf16 or fp16 pattern's high half is a float of moderate
        // exponent); Adam's master weights in [−1, 1), moments small, second moments positive.
        const int eb = element_bytes(fill);
        check(fill_uniform(in_, in_bytes_ / eb, fill, -1.0f, 1.0f, seed + 1, stream_), "filling the inputs");
        check(fill_uniform(out_, out_bytes_ / eb, fill, -1.0f, 1.0f, seed + 2, stream_), "filling the outputs");
        if (adam_n_ > 0) {
            float* p = reinterpret_cast<float*>(state_);
            check(fill_uniform(p, adam_n_, Element::fp32, -1.0f, 1.0f, seed + 3, stream_), "filling Adam's weights");
            check(fill_uniform(p + adam_n_, adam_n_, Element::fp32, -1e-3f, 1e-3f, seed + 4, stream_), "filling Adam's moments");
            check(fill_uniform(p + 2 * adam_n_, adam_n_, Element::fp32, 1e-6f, 1e-4f, seed + 5, stream_),
                  "filling Adam's second moments");
        }
        if (need.pinned > 0) {
            pinned_bytes_ = round_up(need.pinned, kPage);
            pinned_ = static_cast<char*>(std::aligned_alloc(kPage, static_cast<std::size_t>(pinned_bytes_)));
            if (!pinned_) throw Error(ErrorKind::bad_input, "cannot allocate " + text(pinned_bytes_) + " of host staging memory");
            std::memset(pinned_, 1, static_cast<std::size_t>(pinned_bytes_));
            check(cudaHostRegister(pinned_, static_cast<std::size_t>(pinned_bytes_), cudaHostRegisterDefault),
                  "cudaHostRegister of " + text(pinned_bytes_) + " of staging memory for stream " + to_string(s));
        }
        if (need.file) {
            path_ = owner_.scratch_.next_file(owner_.rank_, "copy");
            // O_DIRECT bypasses the page cache (a real transfer to the drive); tmpfs and some
            // other file systems refuse it, and buffered I/O is what remains there.
            fd_ = open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
            if (fd_ < 0 && errno == EINVAL) fd_ = open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
            if (fd_ < 0) fail_io("cannot create", path_);
        }
        if (lt_bytes_ > 0) matmuls_ = std::make_unique<Matmuls>();
    }

    ~Device() override {
        if (stream_) cudaStreamSynchronize(stream_);
        matmuls_.reset();
        for (char* p : {in_, out_, state_, lt_})
            if (p) cudaFree(p);
        if (pinned_) {
            cudaHostUnregister(pinned_);
            std::free(pinned_);
        }
        if (fd_ >= 0) close(fd_);
        if (stream_) cudaStreamDestroy(stream_);
    }

    cudaStream_t stream() const { return stream_; }
    Regions regions() const { return {in_, in_bytes_, out_, out_bytes_}; }

    /// Makes the matmul of a GEMM kernel (in prepare).
    void prepare_gemm(const Kernel& k, DType dtype) {
        if (k.m <= 0 || k.n <= 0 || k.k <= 0) return;
        matmuls_->get(gemm_shape(k, dtype, owner_.options_.allow_tf32, owner_.compute_capability_), lt_bytes_);
    }

    // ---- the asynchronous brackets ----

    void begin(OpId id, std::span<const OpId> after) override {
        owner_.use_device();
        for (OpId p : after)
            check(cudaStreamWaitEvent(stream_, owner_.event(owner_.last_event(p)), 0),
                  "cudaStreamWaitEvent on '" + owner_.g_.describe(p) + "'");
        check(cudaEventRecord(owner_.event(owner_.first_event(id)), stream_), "cudaEventRecord (start)");
    }

    void end(OpId id) override { check(cudaEventRecord(owner_.event(owner_.last_event(id)), stream_), "cudaEventRecord (end)"); }

    void host_enter(OpId id) override {
        check(cudaEventSynchronize(owner_.event(owner_.first_event(id))), "cudaEventSynchronize (host work's start)");
    }

    void finish(OpId id) override { check(cudaEventSynchronize(owner_.event(owner_.last_event(id))), "cudaEventSynchronize"); }

    // ---- the work ----

    void compute(OpId id, std::span<const Kernel> kernels, bool on_host, ClassTimes&) override {
        const DType dtype = owner_.g_.op(id).dtype();
        const std::uint32_t first = owner_.first_event(id), last = owner_.last_event(id);
        const bool boundaries = last - first > 1;   // class times were planned: an event between class runs
        std::uint32_t boundary = first + 1;
        if (on_host) host_enter(id);
        for (std::size_t i = 0; i < kernels.size(); ++i) {
            if (on_host) cpu::run_kernel(kernels[i], host_.data(), host_adam_step_);
            else run_device_kernel(kernels[i], dtype);
            if (boundaries && i + 1 < kernels.size() && kernels[i + 1].cls != kernels[i].cls)
                check(cudaEventRecord(owner_.event(boundary++), stream_), "cudaEventRecord (class boundary)");
        }
    }

    void collective(OpId id) override {
        const OpGraph& g = owner_.g_;
        const Collective& c = g.collectives()[static_cast<std::size_t>(g.op(id).ref)];
        const std::vector<int>& members = g.communicators()[static_cast<std::size_t>(c.communicator)];
        const int ranks = static_cast<int>(members.size());
        int root = 0;
        if (c.kind == CollectiveKind::broadcast || c.kind == CollectiveKind::reduce)
            root = static_cast<int>(std::find(members.begin(), members.end(), c.root) - members.begin());
        ncclComm_t comm = owner_.nccl_->of(c.communicator);
        if (!comm) throw Error(ErrorKind::internal, "rank " + std::to_string(owner_.rank_) + " has no NCCL communicator for its collective");
        run_collective(c.kind, reinterpret_cast<float*>(out_), collective_floats(c.kind, c.bytes, ranks), root, ranks, comm,
                       stream_, std::string(to_string(c.kind)) + " of " + text(c.bytes));
    }

    void send(OpId id) override { transfer(id, true); }
    void recv(OpId id) override { transfer(id, false); }

    void copy(OpId id) override {
        const Op& op = owner_.g_.op(id);
        const CopyRoute route = copy_route(op.copy_from(), op.copy_to());
        const auto bytes = static_cast<std::size_t>(std::max<std::int64_t>(op.bytes, 0));
        const std::int64_t file_bytes = round_up(std::max<std::int64_t>(op.bytes, 1), kPage);
        const std::string what = "cudaMemcpyAsync of " + text(op.bytes) + ", " + to_string(route);
        auto memcpy_async = [&](void* dst, const void* src, cudaMemcpyKind kind) {
            check(cudaMemcpyAsync(dst, src, bytes, kind, stream_), what);
        };
        switch (route) {
            case CopyRoute::device_to_host: memcpy_async(pinned_, out_, cudaMemcpyDeviceToHost); break;
            case CopyRoute::host_to_device: memcpy_async(out_, pinned_, cudaMemcpyHostToDevice); break;
            case CopyRoute::host_to_file:
                host_enter(id);
                file_io(fd_, pinned_, file_bytes, true, path_);
                break;
            case CopyRoute::file_to_host:
                host_enter(id);
                file_io(fd_, pinned_, file_bytes, false, path_);
                break;
            case CopyRoute::device_to_file:
                memcpy_async(pinned_, out_, cudaMemcpyDeviceToHost);
                check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize before writing the NVMe tier");
                file_io(fd_, pinned_, file_bytes, true, path_);
                break;
            case CopyRoute::file_to_device:
                host_enter(id);
                file_io(fd_, pinned_, file_bytes, false, path_);
                memcpy_async(out_, pinned_, cudaMemcpyHostToDevice);
                break;
        }
    }

private:
    char* device_region(std::int64_t bytes, const char* what) {
        if (bytes <= 0) return nullptr;
        void* p = nullptr;
        const cudaError_t e = cudaMalloc(&p, static_cast<std::size_t>(bytes));
        if (e == cudaErrorMemoryAllocation) {
            cudaGetLastError();
            std::size_t free = 0, total = 0;
            cudaMemGetInfo(&free, &total);
            fail_input("the CUDA backend's workspace does not fit on the GPU: stream " + std::string(to_string(s_)) + "'s " +
                       what + " need " + text(bytes) + " with " + text(static_cast<std::int64_t>(free)) + " free of " +
                       text(static_cast<std::int64_t>(total)));
        }
        check(e, "cudaMalloc of " + text(bytes) + " for stream " + to_string(s_) + "'s " + what);
        return static_cast<char*>(p);
    }

    void run_device_kernel(const Kernel& k, DType dtype) {
        const Element e = element_of(dtype);
        const std::int64_t eb = element_bytes(e), batch = std::max<std::int64_t>(1, k.batch);
        switch (k.op) {
            case KernelOp::gemm: {
                if (k.m <= 0 || k.n <= 0 || k.k <= 0) return;
                const GemmShape shape = gemm_shape(k, dtype, owner_.options_.allow_tf32, owner_.compute_capability_);
                const char* a = in_;                                   // the recipe's A, m×k
                const char* b = in_ + aligned(batch * k.m * k.k * eb);  // its B, k×n
                // Column-major Cᵀ = Bᵀ·Aᵀ: the matmul's A is the recipe's B (gemm_shape).
                matmuls_->at(shape).run(b, a, out_, lt_, stream_);
                return;
            }
            case KernelOp::softmax: {
                const std::string what = "softmax over " + std::to_string(k.m) + " rows of " + std::to_string(k.n);
                const Element se = softmax_element(k, dtype);
                if (softmax_backward(k))
                    check(cuda::softmax_backward(in_, in_ + aligned(k.m * k.n * element_bytes(se)), out_, k.m, k.n, se, stream_),
                          what + " (backward)");
                else
                    check(softmax_forward(in_, out_, k.m, k.n, se, stream_), what);
                return;
            }
            case KernelOp::flash: {
                const FlashTiles t = flash_tiles(k.k, owner_.smem_limit_);
                const float scale = 1.0f / std::sqrt(static_cast<float>(std::max<std::int64_t>(1, k.k)));
                const std::int64_t q = aligned(batch * k.m * t.d * eb), kv = aligned(batch * k.n * t.d * eb);
                const std::string what = std::string(k.causal ? "causal " : "") + "flash attention " +
                                         std::string(k.backward ? "backward" : "forward") + " over " +
                                         std::to_string(batch) + " heads of " + std::to_string(k.m) + " × " +
                                         std::to_string(k.n) + ", head dim " + std::to_string(k.k);
                const char* Q = in_;
                const char* K = Q + q;
                const char* V = K + kv;
                if (!k.backward) {
                    check(flash_forward(Q, K, V, out_, reinterpret_cast<float*>(out_ + q), batch, k.m, k.n, t, scale, k.causal, e,
                                        stream_),
                          what);
                } else {
                    const char* O = V + kv;
                    const char* dO = O + q;
                    const auto* lse = reinterpret_cast<const float*>(dO + q);
                    auto* dQ = reinterpret_cast<float*>(out_);
                    char* dK = out_ + aligned(batch * k.m * t.d * 4);
                    char* dV = dK + kv;
                    auto* delta = reinterpret_cast<float*>(dV + kv);
                    check(flash_backward(Q, K, V, O, dO, lse, delta, dQ, dK, dV, batch, k.m, k.n, t, scale, k.causal, e, stream_),
                          what);
                }
                return;
            }
            case KernelOp::stream: {
                const std::int64_t n = (k.bytes + 7) / 8;   // read n floats, write n floats
                // Arithmetic beyond the pass's own 2 FLOPs per element, as fused multiply-adds.
                const double extra = k.flops - 2.0 * static_cast<double>(n);
                const int fma = n > 0 && extra > 0 ? static_cast<int>(std::min(1e6, std::ceil(extra / (2.0 * static_cast<double>(n))))) : 0;
                check(stream_pass(reinterpret_cast<const float*>(in_), reinterpret_cast<float*>(out_), n, 1.0001f, 1e-6f, fma,
                                  stream_),
                      "a memory-bound pass over " + text(k.bytes));
                return;
            }
            case KernelOp::adam: {
                const std::int64_t n = k.elements;
                float* state = reinterpret_cast<float*>(state_);
                const AdamTensor t{state, state + adam_n_, state + 2 * adam_n_, reinterpret_cast<const float*>(in_), n};
                check(adam_step(&t, 1, AdamHyper{}, ++adam_step_, stream_), "Adam over " + std::to_string(n) + " parameters");
                // The rest of the step's traffic (plan.hpp adam_extra_bytes): passes over Adam's
                // state in place, y = 1·x + 0, which leave every value as it was.
                std::int64_t rest = adam_extra_bytes(k);
                const std::int64_t region = 3 * adam_n_;
                while (rest > 0 && region > 0) {
                    const std::int64_t floats = std::min(region, (rest + 7) / 8);
                    check(stream_pass(state, state, floats, 1.0f, 0.0f, 0, stream_), "the optimizer step's other passes");
                    rest -= 8 * floats;
                }
                return;
            }
        }
    }

    void transfer(OpId id, bool sending) {
        const OpGraph& g = owner_.g_;
        const P2P& p = g.p2ps()[static_cast<std::size_t>(g.op(id).ref)];
        const std::int32_t channel = owner_.channels_.of_p2p[static_cast<std::size_t>(g.op(id).ref)];
        ncclComm_t comm = owner_.nccl_->channel(channel);
        const auto bytes = static_cast<std::size_t>(std::max<std::int64_t>(p.bytes, 0));
        if (sending)
            check(ncclSend(out_, bytes, ncclUint8, 1, comm, stream_), "ncclSend of " + text(p.bytes) + " to rank " + std::to_string(p.dst), comm);
        else
            check(ncclRecv(out_, bytes, ncclUint8, 0, comm, stream_), "ncclRecv of " + text(p.bytes) + " from rank " + std::to_string(p.src), comm);
    }

    CudaBackend& owner_;
    Stream s_;
    cudaStream_t stream_ = nullptr;
    char* in_ = nullptr;
    char* out_ = nullptr;
    char* state_ = nullptr;
    char* lt_ = nullptr;
    std::int64_t in_bytes_ = 0, out_bytes_ = 0, state_bytes_ = 0, lt_bytes_ = 0, adam_n_ = 0;
    char* pinned_ = nullptr;
    std::int64_t pinned_bytes_ = 0;
    cpu::Workspace host_;
    int fd_ = -1;
    std::string path_;
    std::unique_ptr<Matmuls> matmuls_;
    int adam_step_ = 0, host_adam_step_ = 0;
};

// ---- the backend --------------------------------------------------------------------------------

CudaBackend::CudaBackend(const OpGraph& graph, Mpi& mpi, const ExecOptions& options)
    : g_(graph), mpi_(mpi), options_(options), scratch_(options.scratch) {
    set_cuda_environment();
    device_ = device_for_rank(mpi.local_rank(), mpi.local_size(), visible_gpus(mpi.host_name()), mpi.host_name());
    use_device();
    int major = 0, minor = 0, smem = 0;
    check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_), "cudaDeviceGetAttribute");
    check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device_), "cudaDeviceGetAttribute");
    check(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device_), "cudaDeviceGetAttribute");
    compute_capability_ = major + 0.1 * minor;
    smem_limit_ = smem;
    // Compute on the host (an offloaded optimizer step) uses the host's cores as the CPU backend does.
    cpu::set_blas_threads(cpu::blas_threads_per_rank(mpi.local_size()));
}

CudaBackend::~CudaBackend() {
    cudaSetDevice(device_);
    cudaDeviceSynchronize();
    for (std::size_t b = 0; b < device_block_.size(); ++b)
        if (device_block_[b]) cudaFree(device_block_[b]);
    for (auto& d : devices_) d.reset();
    nccl_.reset();
    for (cudaEvent_t e : events_)
        if (e) cudaEventDestroy(e);
    if (step_start_) cudaEventDestroy(step_start_);
}

void CudaBackend::use_device() const { check(cudaSetDevice(device_), "cudaSetDevice(" + std::to_string(device_) + ")"); }

std::string CudaBackend::describe() const {
    int runtime = 0, driver = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    const std::size_t lt = cublasLtGetVersion();
    return "cuda: " + device_description(device_) + ", CUDA runtime " + std::to_string(version_major(runtime)) + "." +
           std::to_string(version_minor(runtime)) + " (driver " + std::to_string(version_major(driver)) + "." +
           std::to_string(version_minor(driver)) + "), cuBLASLt " + std::to_string(lt) + ", " + nccl_version() + ", " +
           Mpi::library_version() + (options_.allow_tf32 ? ", TF32 for fp32 GEMMs" : "");
}

void CudaBackend::prepare(const OpGraph& g, int rank, const Communicators& comms) {
    use_device();
    rank_ = rank;

    // What the plan asks of this GPU, checked before anything is made.
    std::int64_t fwd_smem = 0, bwd_smem = 0;
    bool flash = false;
    DType fill_dtype = DType::bf16;
    bool dtype_seen = false;
    for (OpId id = 0; id < g.size(); ++id) {
        const Op& op = g.op(id);
        if (op.rank != rank || op.kind != OpKind::compute || op.on_host()) continue;
        if (!dtype_seen) {
            fill_dtype = op.dtype();
            dtype_seen = true;
        }
        for (const Kernel& k : kernels_to_run(g, id)) {
            if (k.op != KernelOp::flash) continue;
            if (op.dtype() == DType::fp32)
                fail_input("the CUDA backend's flash attention runs in bf16 or fp16, as FlashAttention-2 does, and this plan "
                           "computes in fp32 ('" + g.describe(id) + "'): pass --dtype bf16");
            const FlashTiles t = flash_tiles(k.k, smem_limit_);
            fwd_smem = std::max(fwd_smem, t.fwd_smem);
            bwd_smem = std::max(bwd_smem, t.bwd_smem);
            flash = true;
        }
    }
    if (flash) check(flash_configure(FlashTiles{0, 0, fwd_smem, bwd_smem}), "cudaFuncSetAttribute for the flash kernels");

    plan_ = plan_events(g, rank, options_.record_kernel_classes);
    class_begin_.assign(1, 0);
    class_list_.clear();
    for (OpId id : plan_.ops) {
        if (g.op(id).kind == OpKind::compute)
            for (const ClassRun& r : class_runs(kernels_to_run(g, id))) class_list_.push_back(r.cls);
        class_begin_.push_back(static_cast<std::uint32_t>(class_list_.size()));
    }
    channels_ = plan_channels(g);

    // Streams and their workspaces.
    const auto needs = stream_needs(g, rank);
    int least = 0, greatest = 0;
    check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
    workspace_ = Bytes(0);
    for (int s = 0; s < kStreams; ++s) {
        const StreamNeeds& n = needs[static_cast<std::size_t>(s)];
        if (!n.used) continue;
        const auto stream = static_cast<Stream>(s);
        devices_[static_cast<std::size_t>(s)] = std::make_unique<Device>(
            *this, stream, n, high_priority(stream) ? greatest : least, element_of(fill_dtype),
            0x5eed0000ull + static_cast<std::uint64_t>(rank) * 64 + static_cast<std::uint64_t>(s) * 8);
        workspace_ += Bytes(n.device_total());
    }
    for (OpId id : plan_.ops) {
        const Op& op = g.op(id);
        if (op.kind != OpKind::compute || op.on_host()) continue;
        for (const Kernel& k : kernels_to_run(g, id))
            if (k.op == KernelOp::gemm) devices_[static_cast<std::size_t>(op.stream)]->prepare_gemm(k, op.dtype());
    }

    // Events.
    events_.assign(plan_.events(), nullptr);
    for (cudaEvent_t& e : events_) check(cudaEventCreate(&e), "cudaEventCreate");
    check(cudaEventCreate(&step_start_), "cudaEventCreate");
    event_ps_.assign(events_.size(), 0);

    // NCCL (collective over the ranks: every rank reaches prepare at the same point).
    nccl_ = std::make_unique<NcclComms>(g, channels_, rank, mpi_, comms);

    // Stream-ordered allocation from the device's pool, which keeps what it has.
    check(cudaDeviceGetDefaultMemPool(&pool_, device_), "cudaDeviceGetDefaultMemPool");
    std::uint64_t keep = std::numeric_limits<std::uint64_t>::max();
    check(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep), "cudaMemPoolSetAttribute");
    const std::size_t buffers = g.buffers().size();
    alloc_stream_.assign(buffers, nullptr);
    free_stream_.assign(buffers, nullptr);
    for (OpId id : plan_.ops) {
        const Op& op = g.op(id);
        if (op.kind != OpKind::alloc && op.kind != OpKind::free) continue;
        auto& slot = op.kind == OpKind::alloc ? alloc_stream_ : free_stream_;
        slot[static_cast<std::size_t>(op.ref)] = devices_[static_cast<std::size_t>(op.stream)]->stream();
    }
    device_block_.assign(buffers, nullptr);
    host_buffers_.reset(rank_, buffers);
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after preparing the workspaces");
}

StreamDevice& CudaBackend::stream(Stream s) {
    auto& d = devices_[static_cast<std::size_t>(s)];
    if (!d) throw Error(ErrorKind::internal, std::string("no device for stream ") + to_string(s));
    return *d;
}

Bytes CudaBackend::workspace() const { return workspace_; }

CudaBackend::Regions CudaBackend::regions(Stream s) const {
    const auto& d = devices_[static_cast<std::size_t>(s)];
    return d ? d->regions() : Regions{};
}

void CudaBackend::allocate(std::int32_t buffer) {
    const Buffer& b = g_.buffers()[static_cast<std::size_t>(buffer)];
    if (b.bytes <= 0) return;
    const auto i = static_cast<std::size_t>(buffer);
    const std::string label = to_string(static_cast<BufferLabel>(b.label));
    if (b.tier == Tier::device) {
        use_device();
        void* p = nullptr;
        const cudaError_t e = cudaMallocAsync(&p, static_cast<std::size_t>(b.bytes), alloc_stream_[i]);
        if (e == cudaErrorMemoryAllocation) {
            cudaGetLastError();
            std::size_t free = 0, total = 0;
            cudaMemGetInfo(&free, &total);
            throw Error(ErrorKind::bad_input,
                        "rank " + std::to_string(b.rank) + " is out of GPU memory: cannot allocate " + to_string_binary(Bytes(b.bytes)) + " of " +
                            label + " (buffer " + std::to_string(buffer) + ") with " + to_string_binary(Bytes(static_cast<std::int64_t>(free))) +
                            " free of " + to_string_binary(Bytes(static_cast<std::int64_t>(total))) + " on " + device_description(device_) +
                            " (the backend's workspace holds " + to_string_binary(workspace_) + ")");
        }
        check(e, "cudaMallocAsync of " + text(b.bytes) + " for " + label);
        device_block_[i] = p;
        return;
    }
    host_buffers_.allocate(buffer, b);
}

void CudaBackend::release(std::int32_t buffer) {
    const Buffer& b = g_.buffers()[static_cast<std::size_t>(buffer)];
    const auto i = static_cast<std::size_t>(buffer);
    if (device_block_[i]) {
        use_device();
        cudaStream_t s = free_stream_[i] ? free_stream_[i] : alloc_stream_[i];
        check(cudaFreeAsync(device_block_[i], s), "cudaFreeAsync of " + text(b.bytes) + " of " +
                                                      to_string(static_cast<BufferLabel>(b.label)));
        device_block_[i] = nullptr;
    }
    host_buffers_.release(buffer, b);
}

void CudaBackend::begin_step() {
    use_device();
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize before a step");
    std::uint64_t zero = 0;
    check(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &zero), "cudaMemPoolSetAttribute (reset the peak)");
    // The step's origin on the device: an event on an idle stream, its host time read once it
    // has completed (later than the event by the polling delay, a few microseconds, the same
    // for every op of the step).
    cudaStream_t s = nullptr;
    for (const auto& d : devices_)
        if (d) {
            s = d->stream();
            break;
        }
    check(cudaEventRecord(step_start_, s), "cudaEventRecord (step start)");
    check(cudaEventSynchronize(step_start_), "cudaEventSynchronize (step start)");
    step_start_ns_ = now_ns();
}

void CudaBackend::end_step() {
    use_device();
    // Poll rather than block, so a device that never finishes (a collective waiting for a rank
    // that failed) leaves this thread to the watchdog.
    for (const auto& d : devices_) {
        if (!d) continue;
        while (true) {
            const cudaError_t e = cudaStreamQuery(d->stream());
            if (e == cudaSuccess) break;
            if (e != cudaErrorNotReady) check(e, "a step's work on the GPU");
            timespec ts{0, 20'000};
            nanosleep(&ts, nullptr);
        }
    }
    nccl_->check_async();
    for (std::size_t i = 0; i < events_.size(); ++i) {
        float ms = 0;
        check(cudaEventElapsedTime(&ms, step_start_, events_[i]), "cudaEventElapsedTime");
        event_ps_[i] = std::llround(static_cast<double>(ms) * 1e9);
    }
    std::uint64_t high = 0;
    check(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &high), "cudaMemPoolGetAttribute (peak)");
    device_peak_ = Bytes(static_cast<std::int64_t>(high));
}

void CudaBackend::op_times(OpId id, std::int64_t origin_ns, std::int64_t& start_ps, std::int64_t& end_ps,
                           ClassTimes& classes) const {
    const std::uint32_t k = plan_.local[id];
    const std::uint32_t first = plan_.first[k], last = plan_.first[k + 1] - 1;
    const std::int64_t base = (step_start_ns_ - origin_ns) * 1000;
    start_ps = base + event_ps_[first];
    end_ps = base + event_ps_[last];
    const std::uint32_t runs = class_begin_[k + 1] - class_begin_[k];
    if (runs == 0) return;
    if (last - first == runs) {
        for (std::uint32_t r = 0; r < runs; ++r)
            classes[static_cast<std::size_t>(class_list_[class_begin_[k] + r])] +=
                Time::ps(event_ps_[first + r + 1] - event_ps_[first + r]);
    } else {
        // No boundaries planned (class times off): the whole op in its first class.
        classes[static_cast<std::size_t>(class_list_[class_begin_[k]])] += Time::ps(end_ps - start_ps);
    }
}

}  // namespace smol::exec::cuda

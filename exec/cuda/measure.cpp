#include "exec/cuda/measure.hpp"

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "core/error.hpp"
#include "core/kernel.hpp"
#include "exec/cuda/backend.hpp"
#include "exec/cuda/check.hpp"
#include "exec/cuda/gemm.hpp"
#include "exec/cuda/kernels.hpp"
#include "exec/cuda/nccl.hpp"
#include "exec/executor.hpp"
#include "exec/mpi.hpp"
#include "topologies/measured.hpp"

namespace smol::exec::cuda {

namespace {

/// Device memory for the life of a benchmark.
class DeviceBuffer {
public:
    explicit DeviceBuffer(std::int64_t bytes) {
        check(cudaMalloc(&p_, static_cast<std::size_t>(std::max<std::int64_t>(bytes, 256))),
              "cudaMalloc of " + to_string(Bytes(bytes)) + " for calibration");
    }
    ~DeviceBuffer() { cudaFree(p_); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    char* get() const { return static_cast<char*>(p_); }

private:
    void* p_ = nullptr;
};

class Stream {
public:
    Stream() { check(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"); }
    ~Stream() { cudaStreamDestroy(s_); }
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    cudaStream_t get() const { return s_; }

private:
    cudaStream_t s_ = nullptr;
};

/// One warm-up `launch`, then `repeats` launches each between two events, enqueued back to back
/// (the device fed ahead); the median seconds of one launch.
double time_each(cudaStream_t s, int repeats, const std::function<void()>& launch) {
    std::vector<cudaEvent_t> ev(static_cast<std::size_t>(2 * repeats), nullptr);
    for (cudaEvent_t& e : ev) check(cudaEventCreate(&e), "cudaEventCreate");
    launch();
    for (int r = 0; r < repeats; ++r) {
        check(cudaEventRecord(ev[static_cast<std::size_t>(2 * r)], s), "cudaEventRecord");
        launch();
        check(cudaEventRecord(ev[static_cast<std::size_t>(2 * r + 1)], s), "cudaEventRecord");
    }
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize after a benchmark");
    std::vector<double> t;
    for (int r = 0; r < repeats; ++r) {
        float ms = 0;
        check(cudaEventElapsedTime(&ms, ev[static_cast<std::size_t>(2 * r)], ev[static_cast<std::size_t>(2 * r + 1)]),
              "cudaEventElapsedTime");
        t.push_back(static_cast<double>(ms) * 1e-3);
    }
    for (cudaEvent_t e : ev) cudaEventDestroy(e);
    return median(t);
}

const char* dtype_name(DType d) { return to_string(d); }

}  // namespace

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

GpuFigures measure_device(int device, const MeasureOptions& o) {
    set_cuda_environment();
    check(cudaSetDevice(device), "cudaSetDevice");
    GpuFigures f;
    f.device = device_description(device);
    int major = 0, minor = 0, smem = 0;
    check(cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
    check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "cudaDeviceGetAttribute");
    check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "cudaDeviceGetAttribute");
    check(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "cudaDeviceGetAttribute");
    const double cc = major + 0.1 * minor;
    const Stream stream;
    const cudaStream_t s = stream.get();
    const int reps = std::max(1, o.repeats);

    // GEMMs over the grid, per dtype: A and B from one buffer, C in another (as the backend lays them out).
    f.gemm_dims = o.quick ? std::vector<std::int64_t>{512, 2048, 8192} : std::vector<std::int64_t>{256, 1024, 4096, 8192};
    {
        const std::int64_t top = f.gemm_dims.back();
        const DeviceBuffer in(2 * top * top * 4 + kOperandAlign), out(top * top * 4), ws(kLtWorkspaceBytes);
        Matmuls matmuls;
        struct Config {
            DType dtype;
            bool tf32;
        };
        std::vector<Config> configs{{DType::bf16, false}, {DType::fp16, false}, {DType::fp32, false}};
        if (cc >= 8.0) configs.push_back({DType::fp32, true});
        for (const Config& c : configs) {
            const Element e = element_of(c.dtype);
            const std::int64_t eb = element_bytes(e);
            check(fill_uniform(in.get(), 2 * top * top * 4 / eb, e, -1.0f, 1.0f, 11, s), "filling GEMM inputs");
            for (std::int64_t m : f.gemm_dims)
                for (std::int64_t n : f.gemm_dims)
                    for (std::int64_t k : f.gemm_dims) {
                        const Kernel kernel = gemm_kernel(KernelName::other, KernelClass::gemm, m, n, k, 1, static_cast<int>(eb), false);
                        const Matmul& mm = matmuls.get(gemm_shape(kernel, c.dtype, c.tf32, cc), kLtWorkspaceBytes);
                        const char* a = in.get();
                        const char* b = in.get() + (m * k * eb + kOperandAlign - 1) / kOperandAlign * kOperandAlign;
                        const double t = time_each(s, reps, [&] { mm.run(b, a, out.get(), ws.get(), s); });
                        f.gemm.push_back({c.dtype, c.tf32, m, n, k, 2.0 * static_cast<double>(m) * n * k / t});
                    }
        }
    }

    // The memory-bound pass (HBM bandwidth), bytes moved = read + written.
    {
        const std::vector<std::int64_t> sizes = o.quick ? std::vector<std::int64_t>{1LL << 20, 64LL << 20, 1LL << 30}
                                                        : std::vector<std::int64_t>{64LL << 10, 1LL << 20, 16LL << 20,
                                                                                    256LL << 20, 1LL << 30, 4LL << 30};
        const DeviceBuffer buf(sizes.back());
        check(fill_uniform(buf.get(), sizes.back() / 4, Element::fp32, -1.0f, 1.0f, 12, s), "filling the pass's input");
        for (std::int64_t bytes : sizes) {
            const std::int64_t n = bytes / 8;
            const auto* x = reinterpret_cast<const float*>(buf.get());
            auto* y = reinterpret_cast<float*>(buf.get() + bytes / 2);
            f.stream.push_back({bytes, time_each(s, reps, [&] { check(stream_pass(x, y, n, 1.0001f, 1e-6f, 0, s), "stream pass"); })});
        }
    }

    // Softmax (bf16, rows of 1024 columns: a GPT-2 attention row).
    {
        const std::vector<std::int64_t> elements = o.quick ? std::vector<std::int64_t>{16LL << 20}
                                                           : std::vector<std::int64_t>{1LL << 20, 16LL << 20, 128LL << 20};
        const std::int64_t cols = 1024;
        const DeviceBuffer x(elements.back() * 2), y(elements.back() * 2);
        check(fill_uniform(x.get(), elements.back(), Element::bf16, -4.0f, 4.0f, 13, s), "filling softmax input");
        for (std::int64_t n : elements)
            f.softmax.push_back({n, time_each(s, reps, [&] {
                                     check(softmax_forward(x.get(), y.get(), n / cols, cols, Element::bf16, s), "softmax");
                                 })});
    }

    // Flash attention forward and backward (bf16) over queries × keys × head dim: enough heads
    // that the shortest sequence's query tiles (64 rows each) fill every SM twice, so the table
    // holds the kernel's rate on a full GPU, as a run's batch × heads usually keeps it.
    {
        const std::vector<std::int64_t> lengths = o.quick ? std::vector<std::int64_t>{1024, 4096}
                                                          : std::vector<std::int64_t>{512, 1024, 2048, 4096};
        const std::vector<std::int64_t> dims{64, 128};
        const std::int64_t heads = std::max<std::int64_t>(16, (2 * f.sms * topo::kFlashTileRows + lengths.front() - 1) / lengths.front());
        const std::int64_t top = lengths.back() * heads * dims.back();
        FlashTiles widest{};
        for (std::int64_t d : dims) {
            const FlashTiles t = flash_tiles(d, smem);
            widest.fwd_smem = std::max(widest.fwd_smem, t.fwd_smem);
            widest.bwd_smem = std::max(widest.bwd_smem, t.bwd_smem);
        }
        check(flash_configure(widest), "cudaFuncSetAttribute for the flash kernels");
        // Q, K, V, O, dO (bf16), dQ (fp32), dK, dV (bf16), lse and delta (fp32).
        const DeviceBuffer q(top * 2), k(top * 2), v(top * 2), o_(top * 2), d_o(top * 2), dq(top * 4), dk(top * 2),
            dv(top * 2), lse(lengths.back() * heads * 4), delta(lengths.back() * heads * 4);
        for (const DeviceBuffer* b : {&q, &k, &v, &d_o})
            check(fill_uniform(b->get(), top, Element::bf16, -1.0f, 1.0f, 14, s), "filling attention inputs");
        for (bool causal : {false, true})
            for (std::int64_t d : dims)
                for (std::int64_t len : lengths)
                    for (std::int64_t kv : lengths) {
                        const FlashTiles t = flash_tiles(d, smem);
                        const float scale = 1.0f / std::sqrt(static_cast<float>(d));
                        auto* lse_p = reinterpret_cast<float*>(lse.get());
                        const double fwd = time_each(s, reps, [&] {
                            check(flash_forward(q.get(), k.get(), v.get(), o_.get(), lse_p, heads, len, kv, t, scale, causal,
                                                Element::bf16, s),
                                  "flash forward");
                        });
                        const double bwd = time_each(s, reps, [&] {
                            check(flash_backward(q.get(), k.get(), v.get(), o_.get(), d_o.get(), lse_p,
                                                 reinterpret_cast<float*>(delta.get()), reinterpret_cast<float*>(dq.get()), dk.get(),
                                                 dv.get(), heads, len, kv, t, scale, causal, Element::bf16, s),
                                  "flash backward");
                        });
                        // FLOPs as core/kernel.cpp counts them: 4·d per computed pair and head forward
                        // (q·kv pairs, or causal_pairs under the mask), 2.5× that backward.
                        const double pairs = causal ? causal_pairs(len, kv) : static_cast<double>(len) * static_cast<double>(kv);
                        const double flops = 4.0 * pairs * static_cast<double>(d * heads);
                        f.flash.push_back({false, causal, heads, len, kv, d, flops / fwd});
                        f.flash.push_back({true, causal, heads, len, kv, d, 2.5 * flops / bwd});
                    }
    }

    // Adam over one flat tensor of parameters.
    {
        const std::vector<std::int64_t> params = o.quick ? std::vector<std::int64_t>{16LL << 20}
                                                         : std::vector<std::int64_t>{1LL << 20, 16LL << 20, 256LL << 20};
        const std::int64_t top = params.back();
        const DeviceBuffer state(4 * top * 4);
        float* p = reinterpret_cast<float*>(state.get());
        check(fill_uniform(p, top, Element::fp32, -1.0f, 1.0f, 15, s), "filling Adam's weights");
        check(fill_uniform(p + top, top, Element::fp32, -1e-3f, 1e-3f, 16, s), "filling Adam's moments");
        check(fill_uniform(p + 2 * top, top, Element::fp32, 1e-6f, 1e-4f, 17, s), "filling Adam's second moments");
        check(fill_uniform(p + 3 * top, top, Element::fp32, -1.0f, 1.0f, 18, s), "filling gradients");
        int step = 0;
        for (std::int64_t n : params) {
            const AdamTensor t{p, p + top, p + 2 * top, p + 3 * top, n};
            f.adam.push_back({n, time_each(s, reps, [&] { check(adam_step(&t, 1, AdamHyper{}, ++step, s), "Adam"); })});
        }
    }

    // Launch overhead: back-to-back empty kernels issued from the host, between two events.
    {
        constexpr int kLaunches = 2000;
        const double t = time_each(s, reps, [&] {
            for (int i = 0; i < kLaunches; ++i) check(launch_empty(s), "an empty kernel");
        });
        f.launch = Time::seconds(t / kLaunches);
    }

    // Pinned host memory ↔ device.
    {
        const std::vector<std::int64_t> sizes = o.quick ? std::vector<std::int64_t>{1LL << 20, 256LL << 20}
                                                        : std::vector<std::int64_t>{64LL << 10, 1LL << 20, 16LL << 20,
                                                                                    256LL << 20, 1LL << 30};
        const std::int64_t top = sizes.back();
        void* host = std::aligned_alloc(4096, static_cast<std::size_t>(top));
        if (!host) throw Error(ErrorKind::internal, "cannot allocate " + to_string(Bytes(top)) + " of host memory for calibration");
        std::memset(host, 1, static_cast<std::size_t>(top));
        check(cudaHostRegister(host, static_cast<std::size_t>(top), cudaHostRegisterDefault), "cudaHostRegister");
        {
            const DeviceBuffer dev(top);
            for (std::int64_t bytes : sizes) {
                const auto n = static_cast<std::size_t>(bytes);
                f.h2d.push_back({bytes, time_each(s, reps, [&] {
                                     check(cudaMemcpyAsync(dev.get(), host, n, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
                                 })});
                f.d2h.push_back({bytes, time_each(s, reps, [&] {
                                     check(cudaMemcpyAsync(host, dev.get(), n, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
                                 })});
            }
        }
        cudaHostUnregister(host);
        std::free(host);
    }
    return f;
}

std::vector<NcclTime> measure_nccl(Session& session, int device, const MeasureOptions& o) {
    Mpi& mpi = session.mpi();
    std::vector<NcclTime> out;
    if (mpi.size() < 2) return out;
    set_cuda_environment();
    check(cudaSetDevice(device), "cudaSetDevice");
    const Stream stream;
    const cudaStream_t s = stream.get();
    const int reps = std::max(1, o.repeats);
    const std::vector<std::int64_t> sizes = o.quick ? std::vector<std::int64_t>{1LL << 20, 64LL << 20}
                                                    : std::vector<std::int64_t>{4LL << 10, 64LL << 10, 1LL << 20,
                                                                                16LL << 20, 256LL << 20};
    const std::vector<CollectiveKind> kinds{CollectiveKind::all_reduce, CollectiveKind::reduce_scatter,
                                            CollectiveKind::all_gather, CollectiveKind::broadcast,
                                            CollectiveKind::reduce, CollectiveKind::all_to_all};
    std::vector<int> groups;
    for (int p = 2; p <= mpi.size(); p *= 2) groups.push_back(p);
    if (groups.back() != mpi.size()) groups.push_back(mpi.size());
    const DeviceBuffer buf(2 * sizes.back() + 4096);
    check(fill_uniform(buf.get(), (2 * sizes.back()) / 4, Element::fp32, -1.0f, 1.0f, 19, s), "filling NCCL buffers");
    cudaEvent_t start = nullptr, end = nullptr;
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&end), "cudaEventCreate");
    for (int p : groups) {
        const bool member = mpi.rank() < p;
        MPI_Comm sub = MPI_COMM_NULL;
        MPI_Comm_split(mpi.world(), member ? 0 : MPI_UNDEFINED, mpi.rank(), &sub);
        if (member) {
            ncclUniqueId id{};
            if (mpi.rank() == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
            MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, sub);
            ncclComm_t comm = nullptr;
            check(ncclCommInitRank(&comm, p, id, mpi.rank()), "ncclCommInitRank for calibration");
            for (CollectiveKind kind : kinds)
                for (std::int64_t bytes : sizes) {
                    const CollectiveFloats cf = collective_floats(kind, bytes, p);
                    std::vector<double> t;
                    for (int r = 0; r <= reps; ++r) {   // the first is a warm-up
                        MPI_Barrier(sub);
                        check(cudaEventRecord(start, s), "cudaEventRecord");
                        run_collective(kind, reinterpret_cast<float*>(buf.get()), cf, 0, p, comm, s,
                                       std::string(to_string(kind)) + " calibration");
                        check(cudaEventRecord(end, s), "cudaEventRecord");
                        check(cudaEventSynchronize(end), "cudaEventSynchronize");
                        float ms = 0;
                        check(cudaEventElapsedTime(&ms, start, end), "cudaEventElapsedTime");
                        double mine = ms * 1e-3, slowest = 0;
                        MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, sub);
                        if (r > 0) t.push_back(slowest);
                    }
                    if (mpi.rank() == 0) out.push_back({kind, p, bytes, median(t)});
                }
            check(ncclCommDestroy(comm), "ncclCommDestroy");
            MPI_Comm_free(&sub);
        }
        MPI_Barrier(mpi.world());
    }
    cudaEventDestroy(start);
    cudaEventDestroy(end);
    return out;
}

GpuFigures measure_session(Session& session, const MeasureOptions& options) {
    Mpi& mpi = session.mpi();
    const int device = device_for_rank(mpi.local_rank(), mpi.local_size(), visible_gpus(mpi.host_name()), mpi.host_name());
    GpuFigures f;
    if (session.root()) f = measure_device(device, options);
    f.nccl = measure_nccl(session, device, options);
    return f;
}

Json to_json(const GpuFigures& f) {
    Json j;
    j["device"] = f.device;
    j["launch_s"] = f.launch.to_seconds();
    Json gemm = Json::array();
    for (const GemmRate& g : f.gemm)
        gemm.push_back({{"dtype", std::string(dtype_name(g.dtype)) + (g.tf32 ? "+tf32" : "")},
                        {"m", g.m},
                        {"n", g.n},
                        {"k", g.k},
                        {"flops_per_s", g.flops_per_s}});
    j["gemm_dims"] = f.gemm_dims;
    j["gemm"] = gemm;
    auto curve = [](const std::vector<SizeTime>& v, const char* size_key) {
        Json c{{size_key, Json::array()}, {"seconds", Json::array()}};
        for (const SizeTime& p : v) {
            c[size_key].push_back(p.size);
            c["seconds"].push_back(p.seconds);
        }
        return c;
    };
    j["stream"] = curve(f.stream, "bytes");
    j["softmax"] = curve(f.softmax, "elements");
    j["adam"] = curve(f.adam, "parameters");
    j["h2d"] = curve(f.h2d, "bytes");
    j["d2h"] = curve(f.d2h, "bytes");
    Json flash = Json::array();
    for (const FlashRate& r : f.flash)
        flash.push_back({{"backward", r.backward}, {"causal", r.causal}, {"heads", r.heads}, {"q", r.q}, {"kv", r.kv}, {"d", r.d},
                         {"flops_per_s", r.flops_per_s}});
    j["flash"] = flash;
    Json nccl = Json::array();
    for (const NcclTime& n : f.nccl)
        nccl.push_back({{"kind", to_string(n.kind)}, {"ranks", n.ranks}, {"bytes", n.bytes}, {"seconds", n.seconds}});
    j["nccl"] = nccl;
    return j;
}

}  // namespace smol::exec::cuda

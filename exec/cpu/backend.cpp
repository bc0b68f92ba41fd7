#include "exec/cpu/backend.hpp"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"
#include "exec/cpu/comm.hpp"
#include "exec/cpu/compression.hpp"
#include "exec/cpu/kernels.hpp"

namespace smol::exec::cpu {

namespace {

constexpr std::int64_t kPage = 4096;

Time elapsed(std::int64_t t0) { return Time::ps((now_ns() - t0) * 1000); }

}  // namespace

std::int64_t round_up(std::int64_t v, std::int64_t to) { return (v + to - 1) / to * to; }

void fail_io(const std::string& what, const std::string& path) {
    throw Error(ErrorKind::bad_input, what + " " + path + ": " + std::strerror(errno));
}

void file_io(int fd, void* data, std::int64_t bytes, bool write, const std::string& path) {
    auto* p = static_cast<char*>(data);
    std::int64_t done = 0;
    while (done < bytes) {
        const ssize_t n = write ? pwrite(fd, p + done, static_cast<std::size_t>(bytes - done), done)
                                : pread(fd, p + done, static_cast<std::size_t>(bytes - done), done);
        if (n < 0) {
            if (errno == EINTR) continue;
            fail_io(write ? "cannot write" : "cannot read", path);
        }
        if (n == 0) break;   // reading past what was written: the rest stays as it is
        done += n;
    }
}

ScratchDir::~ScratchDir() {
    if (dir_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
}

std::string ScratchDir::next_file(int rank, const char* prefix) {
    if (dir_.empty()) {
        namespace fs = std::filesystem;
        const fs::path root = root_.empty() ? fs::temp_directory_path() : fs::path(root_);
        std::error_code ec;
        if (!fs::is_directory(root, ec))
            fail_input("--scratch " + root.string() + " is not a directory", ErrorContext{"", "", "--scratch"});
        const fs::path dir = root / ("smolcluster-" + std::to_string(getpid()) + "-rank" + std::to_string(rank));
        fs::create_directories(dir, ec);
        if (ec) fail_input("cannot create " + dir.string() + ": " + ec.message(), ErrorContext{"", "", "--scratch"});
        dir_ = dir.string();
    }
    return dir_ + "/" + prefix + "-" + std::to_string(next_++);
}

// ---- workspace ----------------------------------------------------------------------------------

Workspace::Workspace(std::int64_t floats) : floats_(std::max<std::int64_t>(floats, 16)) {
    const std::int64_t bytes = round_up(floats_ * 4, kPage);
    data_ = static_cast<float*>(std::aligned_alloc(kPage, static_cast<std::size_t>(bytes)));
    if (!data_) throw Error(ErrorKind::bad_input, "cannot allocate a workspace of " + to_string_binary(Bytes(bytes)));
    // Small normal values: sums and products stay finite and far from denormals.
    for (std::int64_t i = 0; i < floats_; ++i) data_[i] = 0.01f * static_cast<float>(1 + i % 97);
}
Workspace::~Workspace() { std::free(data_); }
Workspace::Workspace(Workspace&& o) noexcept : data_(o.data_), floats_(o.floats_) {
    o.data_ = nullptr;
    o.floats_ = 0;
}
Workspace& Workspace::operator=(Workspace&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(floats_, o.floats_);
    return *this;
}

std::int64_t kernel_floats(const Kernel& k) {
    const std::int64_t batch = std::max<std::int64_t>(1, k.batch);
    switch (k.op) {
        case KernelOp::gemm: return batch * (k.m * k.k + k.k * k.n + k.m * k.n);
        case KernelOp::softmax: return k.m * k.n;
        case KernelOp::flash:
            // Forward: Q, O (q×d), K, V (kv×d), lse (q); backward adds dO, dQ, dK, dV and delta.
            return batch * (k.backward ? 4 * k.m * k.k + 4 * k.n * k.k + k.m : 2 * k.m * k.k + 2 * k.n * k.k + k.m) +
                   flash_scratch_floats(k.k) + (k.backward ? k.m : 0);
        case KernelOp::stream: return is_compression_kernel(k) ? compression_floats(k) : 2 * ((k.bytes + 7) / 8);
        case KernelOp::adam: return 4 * k.elements;
    }
    return 0;
}

std::array<std::int64_t, kStreams> workspace_bytes(const OpGraph& g, int rank) {
    std::array<std::int64_t, kStreams> need{};
    for (OpId id = 0; id < g.size(); ++id) {
        const Op& op = g.op(id);
        if (op.rank != rank) continue;
        std::int64_t bytes = 0;
        switch (op.kind) {
            case OpKind::compute:
                for (const Kernel& k : kernels_to_run(g, id)) bytes = std::max(bytes, 4 * kernel_floats(k));
                break;
            case OpKind::collective: {
                const Collective& c = g.collectives()[static_cast<std::size_t>(op.ref)];
                const int ranks = static_cast<int>(g.communicators()[static_cast<std::size_t>(c.communicator)].size());
                const CollectiveCounts n = collective_counts(c.kind, c.bytes, ranks);
                bytes = 4 * (n.send + n.recv);
                break;
            }
            case OpKind::send:
            case OpKind::recv: bytes = round_up(op.bytes, 1024); break;
            case OpKind::copy:
                bytes = op.copy_from() == Tier::nvme || op.copy_to() == Tier::nvme ? round_up(op.bytes, kPage)
                                                                                    : 2 * round_up(op.bytes, kPage);
                break;
            case OpKind::alloc:
            case OpKind::free:
            case OpKind::timer: break;
        }
        auto& s = need[static_cast<std::size_t>(op.stream)];
        s = std::max(s, bytes);
    }
    return need;
}

int blas_threads_per_rank(int local_ranks) {
    const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
    cpu_set_t set;
    CPU_ZERO(&set);
    const int allowed = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : static_cast<int>(cores);
    return std::max(1, std::min(allowed, static_cast<int>(cores / std::max(1, local_ranks))));
}

void run_kernel(const Kernel& k, float* w, int& adam_step) {
    const std::int64_t batch = std::max<std::int64_t>(1, k.batch);
    switch (k.op) {
        case KernelOp::gemm: {
            float* a = w;
            float* b = a + batch * k.m * k.k;
            float* c = b + batch * k.k * k.n;
            for (std::int64_t i = 0; i < batch; ++i)
                gemm(a + i * k.m * k.k, b + i * k.k * k.n, c + i * k.m * k.n, k.m, k.n, k.k);
            break;
        }
        case KernelOp::softmax: softmax(w, k.m, k.n); break;
        case KernelOp::flash: {
            const std::int64_t q = k.m, kv = k.n, d = k.k;
            const float scale = 1.0f / std::sqrt(static_cast<float>(d));
            // Per head: Q, K, V, O, lse (and dO, dQ, dK, dV in backward), back to back.
            const std::int64_t head = k.backward ? 4 * q * d + 4 * kv * d + q : 2 * q * d + 2 * kv * d + q;
            float* scratch = w + batch * head;
            for (std::int64_t h = 0; h < batch; ++h) {
                float* qh = w + h * head;
                float* kh = qh + q * d;
                float* vh = kh + kv * d;
                float* oh = vh + kv * d;
                float* lse = oh + q * d;
                if (!k.backward) {
                    flash_forward(qh, kh, vh, oh, lse, q, kv, d, scale, scratch, k.causal);
                } else {
                    float* d_o = lse + q;
                    float* dq = d_o + q * d;
                    float* dk = dq + q * d;
                    float* dv = dk + kv * d;
                    flash_backward(qh, kh, vh, oh, d_o, lse, dq, dk, dv, q, kv, d, scale, scratch, k.causal);
                }
            }
            break;
        }
        case KernelOp::stream: {
            if (is_compression_kernel(k)) {   // gradient compression's own passes (compression.hpp)
                run_compression_kernel(k, w);
                break;
            }
            const std::int64_t n = (k.bytes + 7) / 8;   // read n floats, write n floats
            if (n > 0) cpu::stream(w, w + n, n, 1.0001f, 1e-6f);
            if (k.flops > 2.0 * static_cast<double>(n)) arithmetic(k.flops - 2.0 * static_cast<double>(n));
            break;
        }
        case KernelOp::adam: {
            const std::int64_t n = k.elements;
            adam(w, w + n, w + 2 * n, w + 3 * n, n, AdamParams{}, ++adam_step);
            break;
        }
    }
}

// ---- one stream ---------------------------------------------------------------------------------

class CpuBackend::Device final : public StreamDevice {
public:
    Device(CpuBackend& owner, const Communicators& comms, std::int64_t bytes, bool needs_file)
        : owner_(owner), comms_(comms), ws_((bytes + 3) / 4) {
        if (needs_file) {
            path_ = owner_.scratch_.next_file(owner_.rank_, "copy");
            // O_DIRECT bypasses the page cache (a real transfer to the drive); tmpfs and some
            // other file systems refuse it, and buffered I/O is what remains there.
            fd_ = open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
            direct_ = fd_ >= 0;
            if (fd_ < 0 && errno == EINVAL) fd_ = open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
            if (fd_ < 0) fail_io("cannot create", path_);
        }
    }
    ~Device() override {
        if (fd_ >= 0) close(fd_);
    }

    void compute(OpId id, std::span<const Kernel> kernels, bool, ClassTimes& by_class) override {
        (void)id;
        for (const Kernel& k : kernels) {
            const std::int64_t t0 = now_ns();
            run_kernel(k, ws_.data(), adam_step_);
            by_class[static_cast<std::size_t>(k.cls)] += elapsed(t0);
        }
    }

    void collective(OpId id) override {
        const OpGraph& g = owner_.g_;
        const Collective& c = g.collectives()[static_cast<std::size_t>(g.op(id).ref)];
        const std::vector<int>& members = g.communicators()[static_cast<std::size_t>(c.communicator)];
        int root = 0;
        if (c.kind == CollectiveKind::broadcast || c.kind == CollectiveKind::reduce)
            root = static_cast<int>(std::find(members.begin(), members.end(), c.root) - members.begin());
        const CollectiveCounts n = collective_counts(c.kind, c.bytes, static_cast<int>(members.size()));
        float* send = ws_.data();
        float* recv = ws_.data() + n.send;
        run_collective(c.kind, send, recv, c.bytes, root, comms_.of(c.communicator));
    }

    bool direct_io() const { return direct_; }

    void send(OpId id) override { transfer(id, true); }
    void recv(OpId id) override { transfer(id, false); }

    void copy(OpId id) override {
        const Op& op = owner_.g_.op(id);
        if (op.copy_from() == Tier::nvme || op.copy_to() == Tier::nvme) {
            const std::int64_t bytes = round_up(op.bytes, kPage);
            file_io(fd_, ws_.data(), bytes, op.copy_to() == Tier::nvme, path_);
            return;
        }
        const std::int64_t half = round_up(op.bytes, kPage) / 4;
        std::memcpy(ws_.data() + half, ws_.data(), static_cast<std::size_t>(op.bytes));
    }

private:
    void transfer(OpId id, bool sending) {
        const OpGraph& g = owner_.g_;
        const Op& op = g.op(id);
        const P2P& p = g.p2ps()[static_cast<std::size_t>(op.ref)];
        MPI_Request r = sending ? post_send(ws_.data(), p.bytes, p.dst, op.ref, owner_.mpi_.p2p())
                                : post_recv(ws_.data(), p.bytes, p.src, op.ref, owner_.mpi_.p2p());
        wait_polling(r);
    }

    CpuBackend& owner_;
    const Communicators& comms_;
    Workspace ws_;
    int adam_step_ = 0;
    int fd_ = -1;
    bool direct_ = false;
    std::string path_;
};

// ---- the backend --------------------------------------------------------------------------------

CpuBackend::CpuBackend(const OpGraph& graph, Mpi& mpi, std::string scratch)
    : g_(graph), mpi_(mpi), scratch_(std::move(scratch)) {
    set_blas_threads(blas_threads_per_rank(mpi_.local_size()));
}

CpuBackend::~CpuBackend() {
    for (auto& d : devices_) d.reset();
}

std::string CpuBackend::describe() const {
    const int t = blas_threads();
    return "cpu: " + blas_version() + " (" + std::to_string(t) + " BLAS thread" + (t == 1 ? "" : "s") + " per rank), " +
           Mpi::library_version();
}

void CpuBackend::prepare(const OpGraph& graph, int rank, const Communicators& comms) {
    rank_ = rank;
    for (OpId id = 0; id < graph.size(); ++id) {
        const Op& op = graph.op(id);
        if (op.rank == rank && op.kind == OpKind::compute && op.dtype() != DType::fp32)
            fail_input("the CPU executor runs fp32 kernels, and this plan computes in " + std::string(to_string(op.dtype())) +
                       " ('" + graph.describe(id) + "'): pass --dtype fp32");
    }
    const auto need = workspace_bytes(graph, rank);
    std::array<bool, kStreams> file{}, has{};
    for (OpId id = 0; id < graph.size(); ++id) {
        const Op& op = graph.op(id);
        if (op.rank != rank) continue;
        has[static_cast<std::size_t>(op.stream)] = true;
        if (op.kind == OpKind::copy && (op.copy_from() == Tier::nvme || op.copy_to() == Tier::nvme))
            file[static_cast<std::size_t>(op.stream)] = true;
    }
    workspace_ = Bytes(0);
    for (int s = 0; s < kStreams; ++s) {
        if (!has[static_cast<std::size_t>(s)]) continue;
        devices_[static_cast<std::size_t>(s)] = std::make_unique<Device>(*this, comms, need[static_cast<std::size_t>(s)],
                                                                        file[static_cast<std::size_t>(s)]);
        workspace_ += Bytes(need[static_cast<std::size_t>(s)]);
    }
    buffers_.reset(rank, graph.buffers().size());
}

StreamDevice& CpuBackend::stream(Stream s) {
    auto& d = devices_[static_cast<std::size_t>(s)];
    if (!d) throw Error(ErrorKind::internal, std::string("no device for stream ") + to_string(s));
    return *d;
}

Bytes CpuBackend::workspace() const { return workspace_; }

bool CpuBackend::direct_io() const {
    for (const auto& d : devices_)
        if (d && d->direct_io()) return true;
    return false;
}

void CpuBackend::allocate(std::int32_t buffer) {
    buffers_.allocate(buffer, g_.buffers()[static_cast<std::size_t>(buffer)]);
}

void CpuBackend::release(std::int32_t buffer) {
    buffers_.release(buffer, g_.buffers()[static_cast<std::size_t>(buffer)]);
}

}  // namespace smol::exec::cpu

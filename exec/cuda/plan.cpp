#include "exec/cuda/plan.hpp"

#include <algorithm>
#include <map>
#include <tuple>

#include "core/error.hpp"
#include "exec/cpu/backend.hpp"
#include "exec/executor.hpp"

namespace smol::exec::cuda {

namespace {

std::int64_t round_up(std::int64_t v, std::int64_t to) { return (v + to - 1) / to * to; }

}  // namespace

int device_for_rank(int local_rank, int local_size, int device_count, const std::string& host) {
    if (device_count <= 0)
        fail_input("the CUDA backend needs a GPU, and host " + host + " has none that CUDA can see "
                   "(check nvidia-smi and CUDA_VISIBLE_DEVICES, or run with --backend cpu)");
    if (local_size > device_count)
        fail_input("mpirun started " + std::to_string(local_size) + " ranks on host " + host + ", which has " +
                   std::to_string(device_count) + " GPU" + (device_count == 1 ? "" : "s") +
                   ": NCCL cannot run two ranks on one GPU (it stops with 'Duplicate GPU detected'); run at most " +
                   std::to_string(device_count) + " rank" + (device_count == 1 ? "" : "s") +
                   " per host (a one-GPU machine runs single-rank plans: --devices 1)");
    if (local_rank < 0 || local_rank >= local_size)
        throw Error(ErrorKind::internal, "local rank " + std::to_string(local_rank) + " of " + std::to_string(local_size));
    return local_rank;
}

bool high_priority(Stream s) {
    switch (s) {
        case Stream::comm:
        case Stream::p2p:
        case Stream::send_next:
        case Stream::recv_next:
        case Stream::send_prev:
        case Stream::recv_prev:
        case Stream::cp_send:
        case Stream::cp_recv:
        case Stream::tp: return true;
        case Stream::compute:
        case Stream::copy:
        case Stream::copy_in:
        case Stream::io:
        case Stream::host: return false;
    }
    return false;
}

std::vector<ClassRun> class_runs(std::span<const Kernel> kernels) {
    std::vector<ClassRun> runs;
    for (const Kernel& k : kernels) {
        if (runs.empty() || runs.back().cls != k.cls) runs.push_back({k.cls, 0});
        ++runs.back().kernels;
    }
    return runs;
}

EventPlan plan_events(const OpGraph& graph, int rank, bool kernel_classes) {
    EventPlan p;
    p.local.assign(graph.size(), 0);
    p.first.push_back(0);
    for (OpId id = 0; id < graph.size(); ++id) {
        const Op& op = graph.op(id);
        if (op.rank != rank) continue;
        std::uint32_t events = 2;
        if (kernel_classes && op.kind == OpKind::compute) {
            const auto runs = class_runs(kernels_to_run(graph, id));
            events = 1 + static_cast<std::uint32_t>(std::max<std::size_t>(1, runs.size()));
        }
        p.local[id] = static_cast<std::uint32_t>(p.ops.size());
        p.ops.push_back(id);
        p.first.push_back(p.first.back() + events);
    }
    return p;
}

bool host_work(const OpGraph& graph, OpId id) {
    const Op& op = graph.op(id);
    switch (op.kind) {
        case OpKind::timer: return true;
        case OpKind::compute: return op.on_host();
        case OpKind::copy: return touches_file(copy_route(op.copy_from(), op.copy_to()));
        default: return false;
    }
}

CopyRoute copy_route(Tier from, Tier to) {
    if (from == Tier::device && to == Tier::host) return CopyRoute::device_to_host;
    if (from == Tier::host && to == Tier::device) return CopyRoute::host_to_device;
    if (from == Tier::host && to == Tier::nvme) return CopyRoute::host_to_file;
    if (from == Tier::nvme && to == Tier::host) return CopyRoute::file_to_host;
    if (from == Tier::device && to == Tier::nvme) return CopyRoute::device_to_file;
    if (from == Tier::nvme && to == Tier::device) return CopyRoute::file_to_device;
    throw Error(ErrorKind::internal, std::string("a copy within the ") + to_string(from) + " tier");
}

const char* to_string(CopyRoute r) {
    switch (r) {
        case CopyRoute::device_to_host: return "device to host";
        case CopyRoute::host_to_device: return "host to device";
        case CopyRoute::host_to_file: return "host to file";
        case CopyRoute::file_to_host: return "file to host";
        case CopyRoute::device_to_file: return "device to file";
        case CopyRoute::file_to_device: return "file to device";
    }
    return "?";
}

bool touches_device(CopyRoute r) {
    return r == CopyRoute::device_to_host || r == CopyRoute::host_to_device || r == CopyRoute::device_to_file ||
           r == CopyRoute::file_to_device;
}

bool touches_file(CopyRoute r) {
    return r == CopyRoute::host_to_file || r == CopyRoute::file_to_host || r == CopyRoute::device_to_file ||
           r == CopyRoute::file_to_device;
}

Element element_of(DType d) {
    switch (d) {
        case DType::bf16: return Element::bf16;
        case DType::fp16: return Element::fp16;
        case DType::fp32: return Element::fp32;
    }
    return Element::fp32;
}

Element softmax_element(const Kernel& kernel, DType dtype) {
    return kernel.elem_bytes == 4 ? Element::fp32 : element_of(dtype);
}

int element_bytes(Element e) { return e == Element::fp32 ? 4 : 2; }

const char* to_string(Element e) {
    switch (e) {
        case Element::bf16: return "bf16";
        case Element::fp16: return "fp16";
        case Element::fp32: return "fp32";
    }
    return "?";
}

const char* to_string(Compute c) { return c == Compute::fp32 ? "fp32 accumulation" : "fp32 with TF32 tensor cores"; }

GemmShape gemm_shape(const Kernel& kernel, DType dtype, bool allow_tf32, double compute_capability) {
    GemmShape g;
    g.element = element_of(dtype);
    g.compute = dtype == DType::fp32 && allow_tf32 && compute_capability >= 8.0 ? Compute::fp32_fast_tf32 : Compute::fp32;
    const std::int32_t batch = std::max<std::int32_t>(1, kernel.batch);
    // Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ over the same memory: the recipe's B (k×n
    // row-major) is a column-major n×k matrix with leading dimension n, its A (m×k) a k×m one.
    g.m = kernel.n;
    g.n = kernel.m;
    g.k = kernel.k;
    g.a = {kernel.n, kernel.k, std::max<std::int64_t>(1, kernel.n), batch, kernel.n * kernel.k};
    g.b = {kernel.k, kernel.m, std::max<std::int64_t>(1, kernel.k), batch, kernel.k * kernel.m};
    g.c = {kernel.n, kernel.m, std::max<std::int64_t>(1, kernel.n), batch, kernel.n * kernel.m};
    const std::int64_t e = element_bytes(g.element);
    if (batch > 1) {
        g.align_a = alignment_of(g.a.stride * e);
        g.align_b = alignment_of(g.b.stride * e);
        g.align_c = alignment_of(g.c.stride * e);
    }
    return g;
}

int alignment_of(std::int64_t bytes) {
    int a = 1;
    while (a < 256 && bytes % (2 * a) == 0) a *= 2;
    return a;
}

std::int64_t flash_fwd_smem(std::int64_t d, int warps) {
    const std::int64_t br = 16LL * warps, bc = kFlashKeyTile;
    // K and V tiles, Q, scores (fp32), probabilities (16-bit), the output accumulator (fp32),
    // running maxima and sums.
    return 2 * bc * d * 2 + br * d * 2 + br * bc * 4 + br * bc * 2 + br * d * 4 + 2 * br * 4;
}

std::int64_t flash_bwd_smem(std::int64_t d, int warps) {
    const std::int64_t br = 16LL * warps, bc = br;
    // K, V, Q, dO tiles; scores then dP (fp32); P and dS (16-bit); dK and dV accumulators
    // (fp32); a 16×16 fp32 tile per warp for dQ's atomic adds; lse and delta of the query tile.
    return 2 * bc * d * 2 + 2 * br * d * 2 + br * bc * 4 + 2 * br * bc * 2 + 2 * bc * d * 4 + warps * 16 * 16 * 4 +
           2 * br * 4;
}

FlashTiles flash_tiles(std::int64_t head_dim, std::int64_t smem_limit) {
    FlashTiles t;
    t.d = round_up(std::max<std::int64_t>(head_dim, 1), 16);
    if (t.d > 256)
        fail_input("the CUDA backend's flash attention takes head dimensions up to 256 (as FlashAttention-2 does), "
                   "and this plan's is " + std::to_string(head_dim));
    for (int w : {4, 2}) {
        if (flash_fwd_smem(t.d, w) <= smem_limit && flash_bwd_smem(t.d, w) <= smem_limit) {
            t.warps = w;
            break;
        }
    }
    if (t.warps == 0)
        fail_input("flash attention with head dimension " + std::to_string(head_dim) + " needs " +
                   std::to_string(flash_bwd_smem(t.d, 2)) + " bytes of shared memory per block, and this GPU allows " +
                   std::to_string(smem_limit));
    t.fwd_smem = flash_fwd_smem(t.d, t.warps);
    t.bwd_smem = flash_bwd_smem(t.d, t.warps);
    return t;
}

bool softmax_backward(const Kernel& k) {
    // The recipe's softmax backward is the forward kernel with 1.5× its traffic (read y and dy,
    // write dx: core/kernel.cpp backward_kernels).
    return k.bytes >= 3 * k.m * k.n * std::max<std::int64_t>(1, k.elem_bytes);
}

KernelBytes kernel_bytes(const Kernel& k, DType dtype) {
    const std::int64_t e = dtype_bytes(dtype);
    const std::int64_t batch = std::max<std::int64_t>(1, k.batch);
    // Each operand starts on a kOperandAlign boundary.
    auto a = [](std::int64_t bytes) { return round_up(bytes, kOperandAlign); };
    KernelBytes b;
    switch (k.op) {
        case KernelOp::gemm:
            b.in = a(batch * k.m * k.k * e) + a(batch * k.k * k.n * e);   // A, B
            b.out = a(batch * k.m * k.n * e);                              // C
            break;
        case KernelOp::softmax: {
            const std::int64_t se = element_bytes(softmax_element(k, dtype));
            b.in = (softmax_backward(k) ? 2 : 1) * a(k.m * k.n * se);     // x (forward); y, dy (backward)
            b.out = a(k.m * k.n * se);
            break;
        }
        case KernelOp::flash: {
            const std::int64_t d = round_up(std::max<std::int64_t>(k.k, 1), 16);
            const std::int64_t q = a(batch * k.m * d * e), kv = a(batch * k.n * d * e), rows = a(batch * k.m * 4);
            if (!k.backward) {
                b.in = q + 2 * kv;                 // Q, K, V
                b.out = q + rows;                  // O, lse
            } else {
                b.in = 3 * q + 2 * kv + rows;      // Q, K, V, O, dO, lse
                b.out = a(batch * k.m * d * 4) + 2 * kv + rows;   // dQ (fp32), dK, dV, delta
            }
            break;
        }
        case KernelOp::stream: b.in = b.out = round_up((k.bytes + 1) / 2, 16); break;
        case KernelOp::adam:
            b.in = a(4 * k.elements);      // gradients
            b.state = 12 * k.elements;     // master weights, first and second moments
            break;
    }
    return b;
}

std::int64_t adam_extra_bytes(const Kernel& k) { return std::max<std::int64_t>(0, k.bytes - kAdamBytesPerParam * k.elements); }

CollectiveFloats collective_floats(CollectiveKind kind, std::int64_t bytes, int ranks) {
    const std::int64_t whole = (bytes + 3) / 4;
    const std::int64_t block = (whole + ranks - 1) / std::max(1, ranks);
    switch (kind) {
        case CollectiveKind::all_reduce:
        case CollectiveKind::reduce:
        case CollectiveKind::broadcast: return {0, whole, block};
        case CollectiveKind::reduce_scatter: return {block * ranks, block, block};
        case CollectiveKind::all_gather: return {block, block * ranks, block};
        case CollectiveKind::all_to_all: return {block * ranks, block * ranks, block};
        case CollectiveKind::barrier: return {0, 1, 1};   // one float all-reduced, as torch's NCCL barrier does
    }
    return {};
}

std::array<StreamNeeds, kStreams> stream_needs(const OpGraph& g, int rank) {
    std::array<StreamNeeds, kStreams> need{};
    auto grow = [](std::int64_t& v, std::int64_t x) { v = std::max(v, x); };
    for (OpId id = 0; id < g.size(); ++id) {
        const Op& op = g.op(id);
        if (op.rank != rank) continue;
        StreamNeeds& s = need[static_cast<std::size_t>(op.stream)];
        s.used = true;
        switch (op.kind) {
            case OpKind::compute:
                for (const Kernel& k : kernels_to_run(g, id)) {
                    if (op.on_host()) {
                        grow(s.host_floats, cpu::kernel_floats(k));
                        continue;
                    }
                    const KernelBytes b = kernel_bytes(k, op.dtype());
                    grow(s.in, b.in);
                    grow(s.out, b.out);
                    grow(s.state, b.state);
                    if (k.op == KernelOp::gemm) s.lt_workspace = kLtWorkspaceBytes;
                }
                if (op.on_host()) s.host_work = true;
                break;
            case OpKind::collective: {
                const Collective& c = g.collectives()[static_cast<std::size_t>(op.ref)];
                const int ranks = static_cast<int>(g.communicators()[static_cast<std::size_t>(c.communicator)].size());
                const CollectiveFloats f = collective_floats(c.kind, c.bytes, ranks);
                grow(s.out, 4 * (f.send + f.recv));
                break;
            }
            case OpKind::send:
            case OpKind::recv: grow(s.out, round_up(std::max<std::int64_t>(op.bytes, 1), 256)); break;
            case OpKind::copy: {
                const CopyRoute r = copy_route(op.copy_from(), op.copy_to());
                const std::int64_t bytes = round_up(std::max<std::int64_t>(op.bytes, 1), 4096);
                if (touches_device(r)) grow(s.out, bytes);
                grow(s.pinned, bytes);   // every route stages through pinned host memory
                if (touches_file(r)) s.file = s.host_work = true;
                break;
            }
            case OpKind::timer: s.host_work = true; break;
            case OpKind::alloc:
            case OpKind::free: break;
        }
    }
    return need;
}

std::int64_t device_workspace_bytes(const OpGraph& graph, int rank) {
    std::int64_t total = 0;
    for (const StreamNeeds& s : stream_needs(graph, rank)) total += s.device_total();
    return total;
}

Channels plan_channels(const OpGraph& g) {
    using Key = std::tuple<int, int, int, int>;
    std::map<Key, std::vector<std::int32_t>> groups;
    for (std::size_t i = 0; i < g.p2ps().size(); ++i) {
        const P2P& p = g.p2ps()[i];
        groups[{p.src, p.dst, static_cast<int>(g.op(p.send).stream), static_cast<int>(g.op(p.recv).stream)}].push_back(
            static_cast<std::int32_t>(i));
    }
    Channels out;
    out.of_p2p.assign(g.p2ps().size(), -1);
    for (auto& [key, list] : groups) {
        // Sorted by send op, the receives are in order too: add_send_recv appends a send and its
        // receive to their streams together, so on one channel both follow the order of the calls.
        std::sort(list.begin(), list.end(), [&](std::int32_t a, std::int32_t b) {
            return g.p2ps()[static_cast<std::size_t>(a)].send < g.p2ps()[static_cast<std::size_t>(b)].send;
        });
        Channel c;
        c.src = std::get<0>(key);
        c.dst = std::get<1>(key);
        c.send_stream = static_cast<Stream>(std::get<2>(key));
        c.recv_stream = static_cast<Stream>(std::get<3>(key));
        c.p2ps = list;
        for (std::int32_t p : list) out.of_p2p[static_cast<std::size_t>(p)] = static_cast<std::int32_t>(out.list.size());
        out.list.push_back(std::move(c));
    }
    return out;
}

}  // namespace smol::exec::cuda

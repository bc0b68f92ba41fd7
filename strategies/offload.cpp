#include "strategies/offload.hpp"

namespace smol::strategies::detail {

Tier offload_tier(Offload o) {
    switch (o) {
        case Offload::none: return Tier::device;
        case Offload::cpu: return Tier::host;
        case Offload::nvme: return Tier::nvme;
    }
    return Tier::device;
}

namespace {

/// A partition's ops one after another: each waits for the last, the first also for the
/// previous partition's `previous`; each labelled `index` (≥ 0).
struct Chain {
    OpGraph& g;
    OpId prev;
    OpId previous;
    int index;
    bool first = true;
    OpId then(OpId op) {
        if (prev != OpGraph::kNoOp) g.depend(prev, op);
        if (first && previous != OpGraph::kNoOp) g.depend(previous, op);
        first = false;
        prev = op;
        if (index >= 0) g.set_index(op, index);
        return op;
    }
    /// An elementwise pass of `bytes` on the device.
    void pass(int rank, std::int64_t bytes, DType dtype, Stream stream, int layer, int mb) {
        const Kernel k = stream_kernel(KernelName::other, KernelClass::elementwise, bytes);
        then(g.add_kernels(rank, Phase::bwd, layer, mb, g.intern_recipe({&k, 1}), dtype, false, stream));
    }
};

}  // namespace

OffloadedPartition offload_gradient(OpGraph& g, int rank, std::int64_t elements, const GradientOffload& how, int mb,
                                    int mbs, Stream stream, OpId ready, OpId host_reader, OpId& previous, int layer,
                                    int index) {
    Chain c{g, ready, previous, index};
    OpId& prev = c.prev;
    auto then = [&](OpId op) { return c.then(op); };
    auto device_pass = [&](std::int64_t bytes) { c.pass(rank, bytes, how.dtype, stream, layer, mb); };
    const std::int64_t acc = elements * how.accumulate_bytes;
    if (mb > 0) {
        // The partition accumulated so far comes back and is added on the device.
        then(g.add_copy(rank, Tier::host, Tier::device, Bytes(acc), Phase::bwd, layer, mb));
        device_pass(3 * acc);
    }
    OffloadedPartition out;
    if (mb + 1 < mbs) {
        then(g.add_copy(rank, Tier::device, Tier::host, Bytes(acc), Phase::bwd, layer, mb));
        out.device_done = out.done = previous = prev;
        return out;
    }
    // The last micro-batch: the partition as fp32, cast on the device into a transient buffer,
    // then copied into the host's fp32 gradient partition.
    std::int32_t cast = -1;
    if (how.grad_bytes != 4 && !(mb > 0 && how.accumulate_bytes == 4)) {
        cast = g.add_buffer(rank, Tier::device, Bytes(elements * 4), BufferLabel::bucket);
        then(g.add_alloc(cast, stream, layer, mb));
        device_pass(elements * (how.grad_bytes + 4));
    }
    // (Unified memory: the host is the device; an NVMe-bound partition goes straight to the drive.)
    const Tier first_tier = how.unified ? how.to : Tier::host;
    const OpId down = then(g.add_copy(rank, Tier::device, first_tier, Bytes(elements * 4), Phase::bwd, layer, mb));
    if (host_reader != OpGraph::kNoOp) g.depend(host_reader, down);
    if (cast >= 0) g.add_free(cast, Stream::copy, layer, mb);
    out.device_done = previous = down;
    if (how.to == Tier::nvme && first_tier != Tier::nvme)
        then(g.add_copy(rank, Tier::host, Tier::nvme, Bytes(elements * 4), Phase::bwd, layer, mb));
    out.done = prev;
    return out;
}

OffloadedPartition stage3_partition_grads(OpGraph& g, int rank, std::int64_t elements, const GradientOffload& how, int mb,
                                          int mbs, Stream stream, OpId ready, OpId& previous, int index) {
    Chain c{g, ready, previous, index};
    OpId& prev = c.prev;
    auto then = [&](OpId op) { return c.then(op); };
    auto device_pass = [&](std::int64_t bytes) { c.pass(rank, bytes, how.dtype, stream, -1, mb); };
    // The copies are non_blocking on the reduction's stream (reduce_and_partition_stream), in
    // order with its kernels and collectives. On unified memory the host's buffers are the
    // device's: nothing crosses.
    auto copy = [&](Tier from, Tier to, std::int64_t bytes) {
        if (how.unified && from != Tier::nvme && to != Tier::nvme) return;
        then(to == Tier::nvme ? g.add_copy(rank, from, to, Bytes(bytes), Phase::bwd, -1, mb)
                              : g.add_copy_on(stream, rank, from, to, Bytes(bytes), Phase::bwd, -1, mb));
    };
    const bool boundary = mb + 1 == mbs;
    const std::int64_t half = elements * how.grad_bytes;
    // The partition's device copy (the 16-bit sum; at the boundary its fp32 cast too).
    const std::int32_t scratch = g.add_buffer(rank, Tier::device, Bytes(half + (boundary ? elements * 4 : 0)), BufferLabel::bucket);
    then(g.add_alloc(scratch, stream, -1, mb));
    if (mb == 0) {
        copy(Tier::device, Tier::host, half);   // grad_buffer.copy_(grad_partition)
        copy(Tier::host, Tier::device, half);   // grad_buffer.to(device)
    } else {
        copy(Tier::host, Tier::device, half);   // cuda_grad_buffer = grad_buffer.to(device)
        device_pass(3 * half);                  // cuda_grad_buffer.add_(grad_partition)
        copy(Tier::device, Tier::host, half);   // grad_buffer.copy_(cuda_grad_buffer)
    }
    OffloadedPartition out;
    if (boundary) {
        device_pass(half);                                 // _constant_buffered_norm2
        device_pass(half + elements * 4);                  // .float()
        if (how.to == Tier::device) device_pass(elements * 8);   // Twin-Flow: into the device sub-group's fp32 gradient
        else copy(Tier::device, Tier::host, elements * 4);
    }
    out.device_done = previous = prev;
    g.depend(prev, g.add_free(scratch, stream, -1, mb));
    if (boundary && how.to == Tier::nvme) copy(Tier::host, Tier::nvme, elements * 4);
    out.done = prev;
    return out;
}

}  // namespace smol::strategies::detail

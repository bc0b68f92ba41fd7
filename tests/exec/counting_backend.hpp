// A backend that counts what the runner asks of the device, per op and per buffer, then lets the
// backend it wraps (the CPU one, or the CUDA one with its asynchronous brackets) do it: the
// runner tests' check that every op of a plan executes exactly once.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/op_graph.hpp"
#include "exec/executor.hpp"

namespace smol::testing {

class CountingBackend final : public exec::Backend {
public:
    CountingBackend(exec::Backend& inner, const OpGraph& g) : inner_(inner), ran_(g.size()), allocated_(g.buffers().size()) {}

    std::string describe() const override { return inner_.describe(); }
    void prepare(const OpGraph& g, int rank, const exec::Communicators& comms) override {
        inner_.prepare(g, rank, comms);
        for (int s = 0; s < kStreams; ++s) devices_[static_cast<std::size_t>(s)] = std::make_unique<Device>(*this, static_cast<Stream>(s));
    }
    exec::StreamDevice& stream(Stream s) override { return *devices_[static_cast<std::size_t>(s)]; }
    void allocate(std::int32_t b) override {
        ++allocated_[static_cast<std::size_t>(b)];
        inner_.allocate(b);
    }
    void release(std::int32_t b) override { inner_.release(b); }
    Bytes workspace() const override { return inner_.workspace(); }
    bool asynchronous() const override { return inner_.asynchronous(); }
    void begin_step() override { inner_.begin_step(); }
    void end_step() override { inner_.end_step(); }
    void op_times(OpId id, std::int64_t origin, std::int64_t& s, std::int64_t& e, exec::ClassTimes& c) const override {
        inner_.op_times(id, origin, s, e, c);
    }
    Bytes device_peak() const override { return inner_.device_peak(); }

    int ran(OpId id) const { return ran_[id]; }
    int allocated(std::int32_t b) const { return allocated_[static_cast<std::size_t>(b)]; }

private:
    struct Device final : exec::StreamDevice {
        Device(CountingBackend& o, Stream s) : owner(o), stream(s) {}
        exec::StreamDevice& inner() { return owner.inner_.stream(stream); }
        void compute(OpId id, std::span<const Kernel> k, bool h, exec::ClassTimes& c) override {
            ++owner.ran_[id];
            inner().compute(id, k, h, c);
        }
        void collective(OpId id) override {
            ++owner.ran_[id];
            inner().collective(id);
        }
        void send(OpId id) override {
            ++owner.ran_[id];
            inner().send(id);
        }
        void recv(OpId id) override {
            ++owner.ran_[id];
            inner().recv(id);
        }
        void copy(OpId id) override {
            ++owner.ran_[id];
            inner().copy(id);
        }
        void begin(OpId id, std::span<const OpId> after) override { inner().begin(id, after); }
        void end(OpId id) override { inner().end(id); }
        void host_enter(OpId id) override { inner().host_enter(id); }
        void finish(OpId id) override { inner().finish(id); }
        CountingBackend& owner;
        Stream stream;
    };

    exec::Backend& inner_;
    std::vector<std::atomic<int>> ran_;
    std::vector<std::atomic<int>> allocated_;
    std::array<std::unique_ptr<Device>, kStreams> devices_;
};

}  // namespace smol::testing

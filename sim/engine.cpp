#include "sim/engine.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace smol::sim {

namespace {
// std::push_heap builds a max-heap; "later" as the comparison gives a min-heap on (time, seq).
struct Later {
    bool operator()(const Event& a, const Event& b) const {
        return a.time != b.time ? a.time > b.time : a.seq > b.seq;
    }
};
}  // namespace

void Engine::schedule(Time at, std::uint32_t kind, std::uint32_t id) {
    if (at < now_)
        throw Error(ErrorKind::internal, "engine: event scheduled at " + to_string(at) + ", before now (" +
                                             to_string(now_) + ")");
    heap_.push_back({at, seq_++, kind, id});
    std::push_heap(heap_.begin(), heap_.end(), Later{});
}

Event Engine::pop() {
    std::pop_heap(heap_.begin(), heap_.end(), Later{});
    Event e = heap_.back();
    heap_.pop_back();
    now_ = e.time;
    ++processed_;
    return e;
}

void Engine::advance_to(Time t, std::uint64_t events) {
    if (t < now_)
        throw Error(ErrorKind::internal, "engine: time would go backwards from " + to_string(now_) + " to " + to_string(t));
    now_ = t;
    processed_ += events;
}

}  // namespace smol::sim

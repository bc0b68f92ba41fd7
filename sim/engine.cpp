#include "sim/engine.hpp"

#include "core/error.hpp"

namespace smol::sim {

// The queue is a 4-ary min-heap on (time, seq), sifted with a hole rather than swaps: half the
// depth of a binary heap and its children share a cache line, which is what the event loop's
// pop costs (measured with bench_engine: see bench/README.md).
namespace {
constexpr std::size_t kArity = 4;
// (time, seq) as one 128-bit key: one branch-free comparison instead of two dependent branches
// on random times (the misses dominated pop; see bench/README.md).
inline unsigned __int128 key(const Event& e) {
    return static_cast<unsigned __int128>(static_cast<std::uint64_t>(e.time.count_ps())) << 64 | e.seq;
}
inline bool earlier(const Event& a, const Event& b) { return key(a) < key(b); }
}  // namespace

[[gnu::always_inline]] inline void Engine::sift_up(std::size_t hole, const Event& e) {
    while (hole > 0) {
        const std::size_t parent = (hole - 1) / kArity;
        if (!earlier(e, heap_[parent])) break;
        place(hole, heap_[parent]);
        hole = parent;
    }
    place(hole, e);
}

[[gnu::always_inline]] inline void Engine::sift_down(std::size_t hole, const Event& e) {
    const std::size_t n = heap_.size();
    const unsigned __int128 own = key(e);
    for (;;) {
        const std::size_t first = hole * kArity + 1;
        if (first >= n) break;
        std::size_t best = first;
        unsigned __int128 best_key = key(heap_[first]);
        const std::size_t end = first + kArity < n ? first + kArity : n;
        for (std::size_t c = first + 1; c < end; ++c) {
            const unsigned __int128 k = key(heap_[c]);
            const bool less = k < best_key;
            best = less ? c : best;
            best_key = less ? k : best_key;
        }
        if (best_key >= own) break;
        place(hole, heap_[best]);
        hole = best;
    }
    place(hole, e);
}

void Engine::push(Time at, std::uint32_t kind, std::uint32_t handle, std::uint32_t id) {
    if (at < now_)
        throw Error(ErrorKind::internal, "engine: event scheduled at " + to_string(at) + ", before now (" +
                                             to_string(now_) + ")");
    if (kind > 0xff) throw Error(ErrorKind::internal, "engine: event kind " + std::to_string(kind) + " above 255");
    heap_.emplace_back();
    sift_up(heap_.size() - 1, Event{at, seq_++, kind, handle, id});
}

void Engine::schedule(Time at, std::uint32_t kind, std::uint32_t id) { push(at, kind, 0, id); }

std::uint32_t Engine::schedule_movable(Time at, std::uint32_t kind, std::uint32_t id) {
    std::uint32_t h;
    if (!free_handles_.empty()) {
        h = free_handles_.back();
        free_handles_.pop_back();
    } else {
        h = static_cast<std::uint32_t>(where_.size());
        if (h >= (1u << 24)) throw Error(ErrorKind::internal, "engine: more than 16 M movable events pending");
        where_.push_back(0);
    }
    push(at, kind, h, id);
    return h;
}

void Engine::move(std::uint32_t handle, Time at) {
    if (at < now_)
        throw Error(ErrorKind::internal, "engine: event moved to " + to_string(at) + ", before now (" +
                                             to_string(now_) + ")");
    const std::size_t hole = handle < where_.size() ? where_[handle] : heap_.size();
    if (handle == 0 || hole >= heap_.size() || heap_[hole].handle != handle)
        throw Error(ErrorKind::internal, "engine: moving an event that is not pending");
    Event e = heap_[hole];
    const bool sooner = at < e.time;
    e.time = at;
    e.seq = seq_++;
    if (sooner)
        sift_up(hole, e);
    else
        sift_down(hole, e);
}

Event Engine::pop() {
    const Event top = heap_.front();
    const Event last = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) sift_down(0, last);
    if (top.handle != 0) free_handles_.push_back(top.handle);
    now_ = top.time;
    ++processed_;
    return top;
}

void Engine::advance_to(Time t, std::uint64_t events) {
    if (t < now_)
        throw Error(ErrorKind::internal, "engine: time would go backwards from " + to_string(now_) + " to " + to_string(t));
    now_ = t;
    processed_ += events;
}

}  // namespace smol::sim

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

void Engine::schedule(Time at, std::uint32_t kind, std::uint32_t id) {
    if (at < now_)
        throw Error(ErrorKind::internal, "engine: event scheduled at " + to_string(at) + ", before now (" +
                                             to_string(now_) + ")");
    const Event e{at, seq_++, kind, id};
    std::size_t hole = heap_.size();
    heap_.emplace_back();
    while (hole > 0) {
        const std::size_t parent = (hole - 1) / kArity;
        if (!earlier(e, heap_[parent])) break;
        heap_[hole] = heap_[parent];
        hole = parent;
    }
    heap_[hole] = e;
}

Event Engine::pop() {
    const Event top = heap_.front();
    const Event last = heap_.back();
    heap_.pop_back();
    const std::size_t n = heap_.size();
    if (n > 0) {
        std::size_t hole = 0;
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
            if (best_key >= key(last)) break;
            heap_[hole] = heap_[best];
            hole = best;
        }
        heap_[hole] = last;
    }
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

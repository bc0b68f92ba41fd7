// The discrete-event engine: one owner of simulated time.
//
// Events are ordered by (time, sequence number), so equal-time events run in the order they were
// scheduled and a run is reproducible bit for bit. Time never goes backwards (checked). An event
// is a plain record — a kind and an id the owner interprets — so scheduling allocates nothing
// once the heap has grown (no std::function, no per-event heap block).
//
// An event whose time may change before it fires (a compute op slowed or sped up by the
// communication beside it) is scheduled movable: the engine keeps its place in the queue, and
// move() sets its new time where a stale event and a fresh one would otherwise both be queued.
#pragma once

#include <cstdint>
#include <vector>

#include "core/units.hpp"

namespace smol::sim {

struct Event {
    Time time;
    std::uint64_t seq;
    std::uint32_t kind : 8;
    std::uint32_t handle : 24;   // a movable event's (Engine::schedule_movable); 0: not movable
    std::uint32_t id;
};

class Engine {
public:
    Time now() const { return now_; }
    /// Schedules an event at `at` (≥ now).
    void schedule(Time at, std::uint32_t kind, std::uint32_t id);
    /// Schedules an event at `at` (≥ now) that move() may reschedule until it is popped; returns
    /// its handle (valid until then).
    std::uint32_t schedule_movable(Time at, std::uint32_t kind, std::uint32_t id);
    /// Moves the pending event `handle` to `at` (≥ now). It runs after the events already
    /// scheduled at `at`, as a newly scheduled one would.
    void move(std::uint32_t handle, Time at);
    bool empty() const { return heap_.empty(); }
    /// Time of the next event; Time::max() when none is pending.
    Time next_time() const { return heap_.empty() ? Time::max() : heap_.front().time; }
    /// Removes the next event and advances the clock to it.
    Event pop();
    /// Advances the clock to `t` (≥ now) for `events` events of a resource model's own (flows
    /// completing together).
    void advance_to(Time t, std::uint64_t events = 1);
    /// Events handled so far: popped events plus those advance_to() counted.
    std::uint64_t processed() const { return processed_; }
    void reserve(std::size_t n) { heap_.reserve(n); }

private:
    void push(Time at, std::uint32_t kind, std::uint32_t handle, std::uint32_t id);
    void sift_up(std::size_t hole, const Event& e);
    void sift_down(std::size_t hole, const Event& e);
    /// Puts `e` at heap position `at`, noting a movable event's place.
    void place(std::size_t at, const Event& e) {
        heap_[at] = e;
        where_[e.handle] = static_cast<std::uint32_t>(at);   // where_[0]: a sink for the others
    }

    std::vector<Event> heap_;   // 4-ary min-heap on (time, seq)
    std::vector<std::uint32_t> where_{0};        // per handle: its event's heap position
    std::vector<std::uint32_t> free_handles_;
    Time now_;
    std::uint64_t seq_ = 0;
    std::uint64_t processed_ = 0;
};

}  // namespace smol::sim

// The discrete-event engine: one owner of simulated time.
//
// Events are ordered by (time, sequence number), so equal-time events run in the order they were
// scheduled and a run is reproducible bit for bit. Time never goes backwards (checked). An event
// is a plain record — a kind and an id the owner interprets — so scheduling allocates nothing
// once the heap has grown (no std::function, no per-event heap block).
#pragma once

#include <cstdint>
#include <vector>

#include "core/units.hpp"

namespace smol::sim {

struct Event {
    Time time;
    std::uint64_t seq;
    std::uint32_t kind;
    std::uint32_t id;
};

class Engine {
public:
    Time now() const { return now_; }
    /// Schedules an event at `at` (≥ now).
    void schedule(Time at, std::uint32_t kind, std::uint32_t id);
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
    std::vector<Event> heap_;   // 4-ary min-heap on (time, seq)
    Time now_;
    std::uint64_t seq_ = 0;
    std::uint64_t processed_ = 0;
};

}  // namespace smol::sim

// The generic runner: executes one rank's ops of a finalized op graph on a Backend, step after
// step, and records when each op ran. Backend-independent: a CUDA backend reuses all of it.
//
//   * One thread per stream of this rank that has ops; each runs its ops in id order (the order
//     they were added is the stream's order, an edge of the graph).
//   * Before an op runs, every predecessor on another stream must be done: local predecessors set
//     a completion flag (the step number, so nothing is reset between steps) and wake waiters on
//     one condition variable; predecessors on other ranks are signalled by a 3-word message on the
//     signal communicator, received by the progress thread, which sets the same flag. Such edges
//     are rare (ps-async's staleness bound) and found from the graph, not from strategy names.
//   * Steps start together: rank 0 picks an instant a few ms ahead and every rank starts its
//     threads at that instant on its own clock (clock offsets from align_clocks).
//   * Alloc and free go to the backend (real memory) and are accounted per tier, as the
//     simulator accounts them (a host buffer of a unified-memory device counts as device memory).
//   * An asynchronous backend (a GPU's: Backend::asynchronous) gets the same threads and waits,
//     but a stream's thread only enqueues: an op is "done" for the host flags once it is issued,
//     a wait on another stream of this rank becomes a wait on the device (StreamDevice::begin),
//     an op with a successor on another rank is waited for on the device before the signal, and
//     after the step the backend gives each op's device times (op_times), which replace the host
//     times; memory samples are re-timed to their ops' device times and re-accumulated in that
//     order. The CPU backend takes none of these paths.
//   * The watchdog turns a rank that finishes no op for `timeout` into an error listing each
//     stream's stuck op and what it waits for; a failure in any op (or SMOL_FAIL_AT) prints which
//     rank and op failed, tells the other ranks, and aborts the job: no hang, no orphan.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "core/op_graph.hpp"
#include "core/timeline.hpp"
#include "exec/executor.hpp"
#include "exec/mpi.hpp"
#include "topologies/cluster.hpp"

namespace smol::exec {

class Runner {
public:
    /// Prepares this rank's program: the queues, the waits, the backend (collective: every rank
    /// constructs its Runner at the same point).
    Runner(const OpGraph& graph, const topo::Cluster& cluster, Mpi& mpi, Backend& backend, const ExecOptions& options);
    ~Runner();
    Runner(const Runner&) = delete;
    Runner& operator=(const Runner&) = delete;

    /// Runs the warm-up steps and the measured step; rank 0 gets the gathered timeline. May be
    /// called again (a benchmark's repetitions).
    Measured run();

private:
    struct StreamState {
        std::vector<OpId> queue;
        std::atomic<std::size_t> position{0};        // index of the op it is at
        std::atomic<bool> running{false};            // the op at `position` has started
        std::atomic<std::int64_t> since_ns{0};       // when it started or began to wait
    };

    void run_step(std::uint32_t step, std::int64_t start_ns);
    void stream_loop(Stream s, std::uint32_t step, std::int64_t start_ns);
    void wait_ready(OpId id, std::uint32_t step);
    bool ready(OpId id, std::uint32_t step) const;
    void execute(OpId id, StreamDevice& device, std::int64_t start_ns, ClassTimes& classes);
    void memory_op(OpId id, std::int64_t start_ns);
    void finished(OpId id, std::uint32_t step);
    /// Asynchronous backends, after end_step: device times into record_, memory re-timed.
    void take_device_times(std::int64_t start_ns);
    void progress_loop();
    void watchdog_loop();
    [[noreturn]] void fail(OpId id, const std::string& what);
    /// A signal to every other rank (a failure or a watchdog notice).
    void notify_all_ranks(std::int64_t kind, OpId id);
    std::string stuck_report(std::uint32_t step) const;
    void check_fault() const;

    const OpGraph& g_;
    const topo::Cluster& cluster_;
    Mpi& mpi_;
    Backend& backend_;
    ExecOptions options_;
    int rank_;
    bool unified_;
    bool async_;                                     // backend_.asynchronous()

    std::array<StreamState, kStreams> streams_;
    std::vector<std::uint32_t> wait_begin_;          // per op of the graph: its waits in wait_list_
    std::vector<OpId> wait_list_;                    // predecessors on other streams or ranks
    std::vector<std::uint32_t> notify_begin_;        // per op: remote ranks to signal on completion
    std::vector<int> notify_list_;
    std::vector<std::uint32_t> local_index_;         // op id → its index among this rank's ops
    std::vector<OpId> mine_;                         // this rank's ops in id order
    bool remote_edges_ = false;
    std::unique_ptr<Communicators> comms_;

    std::unique_ptr<std::atomic<std::uint32_t>[]> done_;   // per op: the step it finished in
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::atomic<int> waiting_remote_{0};

    // The current step's record (this rank's ops, by local index).
    RankRecord record_;
    std::mutex memory_mu_;
    std::array<Bytes, kTiers> in_use_{};
    std::vector<std::uint8_t> live_;                 // per buffer: allocated in this step and not freed
    std::vector<OpId> memory_ops_;                   // per sample of record_.memory: its alloc or free op

    std::atomic<bool> stop_{false};
    std::atomic<bool> in_step_{false};
    std::atomic<std::uint32_t> step_{0};
    std::uint32_t steps_run_ = 0;                    // over every call of run()
    std::atomic<std::int64_t> last_progress_ns_{0};
    std::thread progress_, watchdog_;
};

}  // namespace smol::exec

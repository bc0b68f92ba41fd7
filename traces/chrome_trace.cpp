// The Chrome trace writer. The JSON is written by hand, event by event, into a buffer flushed to
// the stream every megabyte: a big run has millions of events and a DOM of them would not fit.
//
// Layout (pid, tid):
//   metadata       every process_name / process_labels / process_sort_index / thread_name /
//                  thread_sort_index first, ranks in ascending order, then "network"
//   (rank, s)      per rank, per stream s in enum order: its ops sorted by (start, end, op id),
//                  each op an "X" slice whose category is its kind ("p2p" for sends and receives)
//   (rank, kStreams) the "memory" thread: alloc / free as thread-scoped instants ("i")
//   (rank, 0)      memory counters "memory <tier>", args {"bytes"}, in sample time order
//   flows          every flow event, sorted by (ts, flow id, step)
//   (ranks, 0)     the network process: per link with samples, "C" events named after the link
// and, after "traceEvents", "metadata": {the run's model, cluster, plan, command line, version}.
//
// Flows, so that they bind to their own slices in Perfetto, in the classic trace viewer
// (catapult) and in Chrome DevTools' trace engine, whose rules differ:
//  * Each flow event sits at the exact start of its slice, on the slice's pid and tid, with the
//    slice's category. DevTools binds a flow event to the event with the same (ts, pid, tid, cat)
//    (trace engine FlowsHandler); Perfetto binds "s", "t" and "f" with "bp":"e" to the slice open
//    on the thread at that time, and its sorter runs complete slices before other events of the
//    same timestamp (trace_processor sorter, SlowOperatorLess), so that is the slice starting there.
//  * The classic viewer finds the slice at a time over closed intervals, preferring the earlier
//    slice (catapult base/sorted_array_utils findIndexInSortedClosedIntervals): a slice that ends
//    exactly where a flow's slice starts would take the arrow. So a slice that ends where the next
//    one on its thread starts is written 1 ps shorter (invisible at any zoom; the summary and the
//    timeline keep the exact time; it also keeps viewers' floating-point ts + dur from nesting the
//    next slice), and alloc / free instants, which it treats as zero-length slices, live on their
//    own thread.
//  * DevTools keys a flow's events by timestamp, so slices of one flow that start at the same time
//    show there as one (its limitation; Perfetto and the classic viewer bind each).
//  * Every viewer drops a flow whose end comes before its start, so a flow runs through its slices
//    in the order they started (ties: by rank): the first-posted of a send and its receive to the
//    other (the one that completed the rendezvous), and the members of a collective from the first
//    arrival to the last ("s", then "t" per member, then "f"). Flow events are written in that
//    time order, since DevTools matches them in file order.
// Flow ids: P2Ps first in p2p order, then collectives in collective order, from 1.
//
// Numbers: times in microseconds with exactly six fraction digits, printed from the integer
// picosecond count (never through a double), so the same Timeline gives the same bytes.
#include "traces/chrome_trace.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "core/error.hpp"

namespace smol::traces {

namespace {

/// An append-only JSON text buffer; flushes to `out` once it holds a megabyte.
class JsonOut {
public:
    explicit JsonOut(std::ostream& out) : out_(out) { buf_.reserve(kFlushAt + 4096); }
    JsonOut(const JsonOut&) = delete;
    JsonOut& operator=(const JsonOut&) = delete;

    void flush() {
        out_.write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
        buf_.clear();
    }
    void raw(std::string_view s) { buf_.append(s); }
    void ch(char c) { buf_.push_back(c); }

    /// A quoted JSON string; escapes quotes, backslashes and control characters, keeps UTF-8.
    void str(std::string_view s) {
        static constexpr char kHex[] = "0123456789abcdef";
        buf_.push_back('"');
        for (const char c : s) {
            const auto u = static_cast<unsigned char>(c);
            switch (c) {
                case '"': buf_.append("\\\""); break;
                case '\\': buf_.append("\\\\"); break;
                case '\n': buf_.append("\\n"); break;
                case '\r': buf_.append("\\r"); break;
                case '\t': buf_.append("\\t"); break;
                case '\b': buf_.append("\\b"); break;
                case '\f': buf_.append("\\f"); break;
                default:
                    if (u < 0x20) {
                        buf_.append("\\u00");
                        buf_.push_back(kHex[u >> 4]);
                        buf_.push_back(kHex[u & 15]);
                    } else {
                        buf_.push_back(c);
                    }
            }
        }
        buf_.push_back('"');
    }

    void integer(std::int64_t v) {
        char tmp[24];
        const auto r = std::to_chars(tmp, tmp + sizeof tmp, v);
        buf_.append(tmp, r.ptr);
    }

    /// Shortest round-trip form (deterministic); JSON has no NaN or infinity, so those are null.
    template <typename F>
    void real(F v) {
        if (!std::isfinite(v)) {
            buf_.append("null");
            return;
        }
        char tmp[40];
        const auto r = std::to_chars(tmp, tmp + sizeof tmp, v);
        buf_.append(tmp, r.ptr);
    }

    /// Microseconds with six fraction digits: 1,500,000 ps → 1.500000.
    void micros(Time t) {
        std::int64_t ps = t.count_ps();
        std::uint64_t mag = ps < 0 ? 0 - static_cast<std::uint64_t>(ps) : static_cast<std::uint64_t>(ps);
        if (ps < 0) buf_.push_back('-');
        char tmp[24];
        const auto r = std::to_chars(tmp, tmp + sizeof tmp, mag / 1000000);
        buf_.append(tmp, r.ptr);
        std::uint64_t frac = mag % 1000000;
        char digits[7];
        digits[0] = '.';
        for (int i = 6; i >= 1; --i) {
            digits[i] = static_cast<char>('0' + frac % 10);
            frac /= 10;
        }
        buf_.append(digits, 7);
    }

    /// Starts an event object: one per line, comma-separated.
    void begin_event() {
        buf_.append(first_ ? "\n{" : ",\n{");
        first_ = false;
    }
    void end_event() {
        buf_.push_back('}');
        if (buf_.size() >= kFlushAt) flush();
    }

private:
    static constexpr std::size_t kFlushAt = 1 << 20;
    std::ostream& out_;
    std::string buf_;
    bool first_ = true;
};

/// One flow event, bound to the slice of `op` (at its start).
struct FlowEnd {
    OpId op;
    int pid;            // the rank it is drawn on: the op's, or a mirror's of a folded graph
    Time ts;
    std::uint64_t id;
    std::uint32_t step; // position along the flow
    char ph;            // 's', 't' or 'f'
    bool collective;    // names the flow "collective", else "p2p"
};

/// What gets written for one op: its times after the no-overlap guard.
struct Slice {
    Time start, end;
    OpId id;
};

bool is_marker(OpKind k) { return k == OpKind::alloc || k == OpKind::free; }

/// Threads per rank: one per stream, then the "memory" thread of alloc / free instants.
constexpr int kLanes = kStreams + 1;

/// The category of an op's slice: its kind, except that a send and its receive share "p2p"
/// (a flow's events carry one category, and DevTools binds them to slices of that category).
const char* category(OpKind k) { return k == OpKind::send || k == OpKind::recv ? "p2p" : to_string(k); }

class TraceWriter {
public:
    TraceWriter(std::ostream& out, const OpGraph& graph, const Timeline& timeline, const TraceOptions& options)
        : out_(out), graph_(graph), tl_(timeline), options_(options) {}

    void write() {
        check_inputs();
        select_ranks();
        build_lanes();
        build_flows();
        bucket_memory();
        const bool network = options_.links && !tl_.links.empty();

        out_.raw("{\"traceEvents\":[");
        write_metadata(network);
        for (int r : ranks_) write_rank(r);
        write_flows();
        if (network) write_network();
        out_.raw("\n],\"displayTimeUnit\":\"ns\"");
        write_run_metadata();
        out_.raw("}\n");
        out_.flush();
    }

private:
    void check_inputs() const {
        if (tl_.start.size() != graph_.size() || tl_.end.size() != graph_.size())
            throw Error(ErrorKind::internal, "chrome trace: the timeline has " + std::to_string(tl_.start.size()) +
                                                 " op times for a graph of " + std::to_string(graph_.size()) + " ops");
    }

    void select_ranks() {
        const int n = graph_.ranks();
        selected_.assign(static_cast<std::size_t>(n), options_.ranks.empty());
        for (int r : options_.ranks) {
            if (r < 0 || r >= n)
                fail_input("a rank in 0.." + std::to_string(n - 1) + " to trace", "rank " + std::to_string(r));
            selected_[static_cast<std::size_t>(r)] = true;
        }
        // A folded graph's mirror rank is drawn from its representative's ops (the two run the
        // same ops at the same times), so the representative's lanes are built for it too.
        needed_.assign(static_cast<std::size_t>(n), false);
        for (int r = 0; r < n; ++r)
            if (selected_[static_cast<std::size_t>(r)]) {
                ranks_.push_back(r);
                needed_[static_cast<std::size_t>(graph_.representative(r))] = true;
            }
    }

    /// The op's slice is built (its rank is traced, or a traced mirror copies it).
    bool laned(OpId id) const {
        const Op& op = graph_.op(id);
        return needed_[static_cast<std::size_t>(op.rank)] && tl_.start[id] >= Time::zero();
    }
    /// The op is written at its own rank (flows bind to those slices only).
    bool written(OpId id) const {
        const Op& op = graph_.op(id);
        return selected_[static_cast<std::size_t>(op.rank)] && tl_.start[id] >= Time::zero();
    }
    std::size_t lane(int r, int s) const {
        return static_cast<std::size_t>(graph_.representative(r)) * kLanes + static_cast<std::size_t>(s);
    }

    std::size_t lane_of(const Op& op) const {
        return static_cast<std::size_t>(op.rank) * kLanes +
               (is_marker(op.kind) ? static_cast<std::size_t>(kStreams) : static_cast<std::size_t>(op.stream));
    }

    /// Buckets written ops by (rank, stream), sorts each lane by time and applies the no-overlap
    /// guard. The simulator keeps stream order exactly; a measured timeline can carry clock
    /// jitter, and a slice that starts before its predecessor on the stream ended is moved to
    /// that end (shortened, never below zero length) so the file keeps its promise.
    void build_lanes() {
        const std::size_t lanes = static_cast<std::size_t>(graph_.ranks()) * kLanes;
        std::vector<std::uint32_t> count(lanes + 1, 0);
        for (OpId id = 0; id < graph_.size(); ++id)
            if (laned(id)) ++count[lane_of(graph_.op(id)) + 1];
        for (std::size_t l = 0; l < lanes; ++l) count[l + 1] += count[l];
        lane_begin_ = count;
        slices_.resize(count[lanes]);
        for (OpId id = 0; id < graph_.size(); ++id) {
            if (!laned(id)) continue;
            const Time s = tl_.start[id];
            const Time e = std::max(tl_.end[id], s);  // an op that never finished: a zero-length slice
            slices_[count[lane_of(graph_.op(id))]++] = {s, e, id};
        }
        for (std::size_t l = 0; l < lanes; ++l) {
            auto first = slices_.begin() + lane_begin_[l];
            auto last = slices_.begin() + lane_begin_[l + 1];
            std::sort(first, last, [](const Slice& a, const Slice& b) {
                if (a.start != b.start) return a.start < b.start;
                if (a.end != b.end) return a.end < b.end;
                return a.id < b.id;
            });
            Time busy_until = Time::ps(std::numeric_limits<std::int64_t>::min());
            Slice* prev = nullptr;
            for (auto it = first; it != last; ++it) {
                if (is_marker(graph_.op(it->id).kind)) continue;  // instants take no room
                if (it->start < busy_until) {
                    it->start = busy_until;
                    it->end = std::max(it->end, it->start);
                    adjusted_[it->id] = {it->start, it->end};
                }
                busy_until = it->end;
                // A slice ending exactly where the next begins is written 1 ps shorter: viewers
                // add ts + dur in floating point, and a sum that rounds past the next slice's ts
                // nests it (DevTools then leaves it out), while the classic viewer binds a flow at
                // the boundary to the earlier slice (see the top of the file).
                if (prev && prev->end == it->start && prev->end > prev->start) {
                    prev->end = prev->end - Time::ps(1);
                    adjusted_[prev->id] = {prev->start, prev->end};
                }
                prev = &*it;
            }
        }
    }

    std::pair<Time, Time> times(OpId id) const {
        const auto it = adjusted_.find(id);
        if (it != adjusted_.end()) return it->second;
        return {tl_.start[id], std::max(tl_.end[id], tl_.start[id])};
    }

    /// A flow through the slices of `ends` (an op and the rank it is drawn on), in the order they
    /// started (ties: rank, then op id).
    void add_flow(std::vector<std::pair<OpId, int>> ends, bool collective) {
        const std::uint64_t id = ++flow_count_;
        if (ends.size() < 2) return;
        std::sort(ends.begin(), ends.end(), [&](const std::pair<OpId, int>& a, const std::pair<OpId, int>& b) {
            const Time ta = times(a.first).first, tb = times(b.first).first;
            if (ta != tb) return ta < tb;
            if (a.second != b.second) return a.second < b.second;
            return a.first < b.first;
        });
        for (std::size_t k = 0; k < ends.size(); ++k) {
            const char ph = k == 0 ? 's' : k + 1 == ends.size() ? 'f' : 't';
            flows_.push_back({ends[k].first, ends[k].second, times(ends[k].first).first, id, static_cast<std::uint32_t>(k), ph,
                              collective});
        }
    }

    void build_flows() {
        for (const P2P& p : graph_.p2ps()) {
            std::vector<std::pair<OpId, int>> ends;
            if (written(p.send) && written(p.recv)) ends = {{p.send, graph_.op(p.send).rank}, {p.recv, graph_.op(p.recv).rank}};
            add_flow(std::move(ends), false);
        }
        // A collective of a folded graph has ops on the representatives only; each traced mirror
        // of a member joins the flow at its representative's slice, drawn on the mirror's row.
        std::vector<std::vector<int>> mirrors(static_cast<std::size_t>(graph_.ranks()));
        for (int r : ranks_)
            if (graph_.representative(r) != r) mirrors[static_cast<std::size_t>(graph_.representative(r))].push_back(r);
        for (std::size_t c = 0; c < graph_.collectives().size(); ++c) {
            std::vector<std::pair<OpId, int>> members;
            for (OpId m : graph_.collective_ops(static_cast<std::int32_t>(c))) {
                if (m == OpGraph::kNoOp || !laned(m)) continue;
                const int rank = graph_.op(m).rank;
                if (selected_[static_cast<std::size_t>(rank)]) members.emplace_back(m, rank);
                for (int mirror : mirrors[static_cast<std::size_t>(rank)]) members.emplace_back(m, mirror);
            }
            add_flow(std::move(members), true);
        }
        std::sort(flows_.begin(), flows_.end(), [](const FlowEnd& a, const FlowEnd& b) {
            if (a.ts != b.ts) return a.ts < b.ts;
            if (a.id != b.id) return a.id < b.id;
            return a.step < b.step;
        });
    }

    /// Memory sample indices of the selected ranks, grouped by rank, in time order.
    void bucket_memory() {
        const std::size_t n = static_cast<std::size_t>(graph_.ranks());
        std::vector<std::uint32_t> count(n + 1, 0);
        for (const MemorySample& m : tl_.memory)
            if (m.rank >= 0 && static_cast<std::size_t>(m.rank) < n && needed_[static_cast<std::size_t>(m.rank)])
                ++count[static_cast<std::size_t>(m.rank) + 1];
        for (std::size_t r = 0; r < n; ++r) count[r + 1] += count[r];
        memory_begin_ = count;
        memory_.resize(count[n]);
        for (std::uint32_t i = 0; i < tl_.memory.size(); ++i) {
            const MemorySample& m = tl_.memory[i];
            if (m.rank >= 0 && static_cast<std::size_t>(m.rank) < n && needed_[static_cast<std::size_t>(m.rank)])
                memory_[count[static_cast<std::size_t>(m.rank)]++] = i;
        }
        for (std::size_t r = 0; r < n; ++r)
            std::stable_sort(memory_.begin() + memory_begin_[r], memory_.begin() + memory_begin_[r + 1],
                             [&](std::uint32_t a, std::uint32_t b) { return tl_.memory[a].time < tl_.memory[b].time; });
    }

    // ---- events --------------------------------------------------------------------------------

    void head(const char* ph, std::int64_t pid, std::int64_t tid) {
        out_.begin_event();
        out_.raw("\"ph\":\"");
        out_.raw(ph);
        out_.raw("\",\"pid\":");
        out_.integer(pid);
        out_.raw(",\"tid\":");
        out_.integer(tid);
    }

    void metadata(const char* name, std::int64_t pid, std::int64_t tid, const char* key, std::string_view text) {
        head("M", pid, tid);
        out_.raw(",\"name\":\"");
        out_.raw(name);
        out_.raw("\",\"args\":{\"");
        out_.raw(key);
        out_.raw("\":");
        out_.str(text);
        out_.raw("}");
        out_.end_event();
    }

    void metadata(const char* name, std::int64_t pid, std::int64_t tid, const char* key, std::int64_t value) {
        head("M", pid, tid);
        out_.raw(",\"name\":\"");
        out_.raw(name);
        out_.raw("\",\"args\":{\"");
        out_.raw(key);
        out_.raw("\":");
        out_.integer(value);
        out_.raw("}");
        out_.end_event();
    }

    std::string device_name(int r) const {
        const auto i = static_cast<std::size_t>(r);
        if (i < tl_.device_names.size() && !tl_.device_names[i].empty()) return tl_.device_names[i];
        return "rank " + std::to_string(r);
    }

    void write_metadata(bool network) {
        for (int r : ranks_) {
            metadata("process_name", r, 0, "name", device_name(r));
            metadata("process_labels", r, 0, "labels", "rank " + std::to_string(r));
            metadata("process_sort_index", r, 0, "sort_index", r);
            for (int s = 0; s < kLanes; ++s) {
                const std::size_t l = lane(r, s);
                if (lane_begin_[l] == lane_begin_[l + 1]) continue;
                metadata("thread_name", r, s, "name", s < kStreams ? to_string(static_cast<Stream>(s)) : "memory");
                metadata("thread_sort_index", r, s, "sort_index", s);
            }
        }
        if (network) {
            const int pid = graph_.ranks();
            metadata("process_name", pid, 0, "name", "network");
            metadata("process_sort_index", pid, 0, "sort_index", pid);
        }
    }

    void write_rank(int r) {
        for (int s = 0; s < kLanes; ++s) {
            const std::size_t l = lane(r, s);
            for (std::uint32_t i = lane_begin_[l]; i < lane_begin_[l + 1]; ++i) write_op(slices_[i], r, s);
        }
        const auto rank = static_cast<std::size_t>(graph_.representative(r));
        for (std::uint32_t i = memory_begin_[rank]; i < memory_begin_[rank + 1]; ++i) {
            const MemorySample& m = tl_.memory[memory_[i]];
            head("C", r, 0);
            out_.raw(",\"ts\":");
            out_.micros(m.time);
            out_.raw(",\"name\":\"memory ");
            out_.raw(to_string(m.tier));
            out_.raw("\",\"args\":{\"bytes\":");
            out_.integer(m.in_use.count());
            out_.raw("}");
            out_.end_event();
        }
    }

    void write_op(const Slice& slice, int r, int s) {
        const Op& op = graph_.op(slice.id);
        const bool marker = is_marker(op.kind);
        head(marker ? "i" : "X", r, s);
        out_.raw(",\"ts\":");
        out_.micros(slice.start);
        if (marker) {
            out_.raw(",\"s\":\"t\"");
        } else {
            out_.raw(",\"dur\":");
            out_.micros(slice.end - slice.start);
        }
        out_.raw(",\"name\":");
        out_.str(graph_.op_name(slice.id));
        out_.raw(",\"cat\":\"");
        out_.raw(category(op.kind));
        out_.raw("\",\"args\":{\"op\":");
        out_.integer(slice.id);
        out_.raw(",\"kind\":\"");
        out_.raw(to_string(op.kind));
        out_.ch('"');
        if (op.phase != Phase::none) {
            out_.raw(",\"phase\":\"");
            out_.raw(to_string(op.phase));
            out_.ch('"');
        }
        out_.raw(",\"bytes\":");
        out_.integer(op.bytes);
        out_.raw(",\"flops\":");
        out_.real(op.flops);
        if (op.layer >= 0) {
            out_.raw(",\"layer\":");
            out_.integer(op.layer);
        }
        if (op.microbatch >= 0) {
            out_.raw(",\"microbatch\":");
            out_.integer(op.microbatch);
        }
        if (op.index >= 0) {
            out_.raw(",\"index\":");
            out_.integer(op.index);
        }
        switch (op.kind) {
            case OpKind::compute:
                out_.raw(",\"kernel\":\"");
                out_.raw(to_string(op.kernel()));
                out_.ch('"');
                break;
            case OpKind::collective:
                out_.raw(",\"collective\":");
                out_.integer(op.ref);
                break;
            case OpKind::send:
            case OpKind::recv: {
                const P2P& p = graph_.p2ps()[static_cast<std::size_t>(op.ref)];
                out_.raw(",\"peer\":");
                out_.integer(op.kind == OpKind::send ? p.dst : p.src);
                break;
            }
            case OpKind::alloc:
            case OpKind::free:
                out_.raw(",\"buffer\":");
                out_.integer(op.ref);
                out_.raw(",\"tier\":\"");
                out_.raw(to_string(graph_.buffers()[static_cast<std::size_t>(op.ref)].tier));
                out_.ch('"');
                break;
            case OpKind::copy:
            case OpKind::timer: break;
        }
        out_.raw("}");
        out_.end_event();
    }

    void write_flows() {
        for (const FlowEnd& f : flows_) {
            const Op& op = graph_.op(f.op);
            const char ph[2] = {f.ph, '\0'};
            head(ph, f.pid, static_cast<int>(op.stream));
            out_.raw(",\"ts\":");
            out_.micros(f.ts);
            out_.raw(f.collective ? ",\"name\":\"collective\",\"cat\":\"" : ",\"name\":\"p2p\",\"cat\":\"");
            out_.raw(category(op.kind));
            out_.raw("\",\"id\":");
            out_.integer(static_cast<std::int64_t>(f.id));
            if (f.ph == 'f') out_.raw(",\"bp\":\"e\"");
            out_.end_event();
        }
    }

    void write_run_metadata() {
        if (options_.metadata.empty()) return;
        out_.raw(",\"metadata\":{");
        bool first = true;
        for (const auto& [key, value] : options_.metadata) {
            if (!first) out_.ch(',');
            first = false;
            out_.str(key);
            out_.ch(':');
            out_.str(value);
        }
        out_.ch('}');
    }

    void write_network() {
        const int pid = graph_.ranks();
        std::vector<std::uint32_t> order(tl_.links.size());
        for (std::uint32_t i = 0; i < order.size(); ++i) order[i] = i;
        std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
            const LinkSample& x = tl_.links[a];
            const LinkSample& y = tl_.links[b];
            if (x.link != y.link) return x.link < y.link;
            return x.time < y.time;
        });
        for (std::uint32_t i : order) {
            const LinkSample& s = tl_.links[i];
            head("C", pid, 0);
            out_.raw(",\"ts\":");
            out_.micros(s.time);
            out_.raw(",\"name\":");
            const auto l = static_cast<std::size_t>(s.link);
            if (s.link >= 0 && l < tl_.link_names.size() && !tl_.link_names[l].empty())
                out_.str(tl_.link_names[l]);
            else
                out_.str("link " + std::to_string(s.link));
            out_.raw(",\"args\":{\"utilisation\":");
            out_.real(s.utilisation);
            out_.raw("}");
            out_.end_event();
        }
    }

    JsonOut out_;
    const OpGraph& graph_;
    const Timeline& tl_;
    const TraceOptions& options_;

    std::vector<bool> selected_;
    std::vector<bool> needed_;   // ranks whose ops are laned: the selected ones and their representatives
    std::vector<int> ranks_;
    std::vector<std::uint32_t> lane_begin_;   // (rank * kLanes + thread) → first index in slices_
    std::vector<Slice> slices_;
    std::unordered_map<OpId, std::pair<Time, Time>> adjusted_;  // ops moved by the no-overlap guard
    std::vector<FlowEnd> flows_;              // sorted by (ts, id, step)
    std::uint64_t flow_count_ = 0;
    std::vector<std::uint32_t> memory_begin_;  // rank → first index in memory_
    std::vector<std::uint32_t> memory_;        // indices into timeline.memory
};

}  // namespace

void write_chrome_trace(std::ostream& out, const OpGraph& graph, const Timeline& timeline,
                        const TraceOptions& options) {
    TraceWriter(out, graph, timeline, options).write();
}

}  // namespace smol::traces

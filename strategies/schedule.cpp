#include "strategies/schedule.hpp"

#include <algorithm>
#include <limits>
#include <sstream>
#include <string>

#include "core/error.hpp"

namespace smol::strategies {

const char* to_string(Pass p) {
    switch (p) {
        case Pass::fwd: return "fwd";
        case Pass::bwd: return "bwd";
        case Pass::bwd_input: return "bwd_input";
        case Pass::bwd_weight: return "bwd_weight";
    }
    return "?";
}

namespace {

void gpipe(PipelineSchedule& s) {
    for (int d = 0; d < s.stages; ++d) {
        auto& out = s.steps[static_cast<std::size_t>(d)];
        for (int k = 0; k < s.microbatches; ++k) out.push_back({k, 0, Pass::fwd});
        for (int k = 0; k < s.microbatches; ++k) out.push_back({k, 0, Pass::bwd});
    }
}

void one_f_one_b(PipelineSchedule& s) {
    const int p = s.stages, m = s.microbatches;
    for (int d = 0; d < p; ++d) {
        auto& out = s.steps[static_cast<std::size_t>(d)];
        const int warmup = std::min(p - d - 1, m);
        int f = 0, b = 0;
        for (; f < warmup; ++f) out.push_back({f, 0, Pass::fwd});
        for (; f < m; ++f, ++b) {
            out.push_back({f, 0, Pass::fwd});
            out.push_back({b, 0, Pass::bwd});
        }
        for (; b < m; ++b) out.push_back({b, 0, Pass::bwd});
    }
}

/// Megatron-LM forward_backward_pipelining_with_interleaving: virtual micro-batch k runs model
/// chunk (k mod p·v) / p (reversed for backward) on micro-batch (k / p·v)·p + k mod p.
void interleaved(PipelineSchedule& s) {
    const int p = s.stages, m = s.microbatches, v = s.chunks;
    const int total = m * v;
    auto chunk = [&](int k, bool forward) {
        const int c = (k % (p * v)) / p;
        return forward ? c : v - 1 - c;
    };
    auto micro = [&](int k) { return (k / (p * v)) * p + k % p; };
    for (int d = 0; d < p; ++d) {
        auto& out = s.steps[static_cast<std::size_t>(d)];
        const int warmup = m == p ? total : std::min(total, (p - d - 1) * 2 + (v - 1) * p);
        const int steady = total - warmup;
        for (int k = 0; k < warmup; ++k) out.push_back({micro(k), chunk(k, true), Pass::fwd});
        for (int i = 0; i < steady; ++i) {
            const int k = warmup + i;
            out.push_back({micro(k), chunk(k, true), Pass::fwd});
            out.push_back({micro(i), chunk(i, false), Pass::bwd});
        }
        for (int i = steady; i < total; ++i) out.push_back({micro(i), chunk(i, false), Pass::bwd});
    }
}

/// ZB-H1: the 1F1B order with bwd_input in place of bwd; device d defers the weight pass of
/// micro-batch k until after the input pass of micro-batch k + d.
void zb_h1(PipelineSchedule& s) {
    const int p = s.stages, m = s.microbatches;
    for (int d = 0; d < p; ++d) {
        auto& out = s.steps[static_cast<std::size_t>(d)];
        const int warmup = std::min(p - d - 1, m);
        int f = 0, b = 0, w = 0;
        auto input = [&]() {
            out.push_back({b, 0, Pass::bwd_input});
            if (b - w >= d) out.push_back({w++, 0, Pass::bwd_weight});
            ++b;
        };
        for (; f < warmup; ++f) out.push_back({f, 0, Pass::fwd});
        for (; f < m; ++f) {
            out.push_back({f, 0, Pass::fwd});
            input();
        }
        while (b < m) input();
        while (w < m) out.push_back({w++, 0, Pass::bwd_weight});
    }
}

/// Dense index of a (micro-batch, virtual stage, pass kind) for completion times.
struct Index {
    int m, vs;
    std::size_t operator()(int microbatch, int virtual_stage, Pass pass) const {
        return (static_cast<std::size_t>(pass) * static_cast<std::size_t>(vs) + static_cast<std::size_t>(virtual_stage)) *
                   static_cast<std::size_t>(m) +
               static_cast<std::size_t>(microbatch);
    }
};

}  // namespace

PipelineSchedule make_schedule(Schedule kind, int stages, int microbatches, int chunks) {
    if (stages < 1) fail_input("a pipeline needs at least one stage, found " + std::to_string(stages), {"", "", "--pp"});
    if (microbatches < 1)
        fail_input("a pipeline needs at least one micro-batch, found " + std::to_string(microbatches),
                   {"", "", "--global-batch"});
    if (kind == Schedule::interleaved) {
        if (stages < 2) fail_input("the interleaved schedule needs --pp of at least 2", {"", "", "--schedule"});
        if (chunks < 1)
            fail_input("--virtual-stages must be at least 1, found " + std::to_string(chunks), {"", "", "--virtual-stages"});
        if (microbatches % stages != 0)
            fail_input("the interleaved schedule needs the micro-batches per replica (" + std::to_string(microbatches) +
                           ") to be a multiple of --pp " + std::to_string(stages) +
                           " (Megatron-LM's constraint); change --global-batch or --micro-batch",
                       {"", "", "--schedule"});
    } else if (chunks != 1) {
        fail_input(std::string("--virtual-stages ") + std::to_string(chunks) + " needs --schedule interleaved, found " +
                       to_string(kind),
                   {"", "", "--virtual-stages"});
    }
    PipelineSchedule s;
    s.kind = kind;
    s.stages = stages;
    s.microbatches = microbatches;
    s.chunks = chunks;
    s.steps.resize(static_cast<std::size_t>(stages));
    switch (kind) {
        case Schedule::gpipe: gpipe(s); break;
        case Schedule::one_f_one_b: one_f_one_b(s); break;
        case Schedule::interleaved: interleaved(s); break;
        case Schedule::zb_h1: zb_h1(s); break;
    }
    return s;
}

std::vector<Transfer> transfers(const PipelineSchedule& s) {
    std::vector<Transfer> out;
    const int last = s.virtual_stages() - 1;
    for (int d = 0; d < s.stages; ++d)
        for (const Step& st : s.steps[static_cast<std::size_t>(d)]) {
            const int vs = s.virtual_stage(d, st.chunk);
            if (st.pass == Pass::fwd && vs < last)
                out.push_back({d, s.device_of(vs + 1), st.microbatch, st.chunk, s.chunk_of(vs + 1), false});
            if ((st.pass == Pass::bwd || st.pass == Pass::bwd_input) && vs > 0)
                out.push_back({d, s.device_of(vs - 1), st.microbatch, st.chunk, s.chunk_of(vs - 1), true});
        }
    return out;
}

std::vector<std::vector<StepTime>> run_schedule(const PipelineSchedule& s,
                                                const std::function<double(int, const Step&)>& duration) {
    const int p = s.stages, vs_count = s.virtual_stages(), last = vs_count - 1;
    const Index idx{s.microbatches, vs_count};
    constexpr double kNotDone = -1;
    std::vector<double> done(idx(0, 0, Pass::bwd_weight) + static_cast<std::size_t>(vs_count * s.microbatches), kNotDone);
    std::vector<std::vector<StepTime>> times(static_cast<std::size_t>(p));
    std::vector<std::size_t> next(static_cast<std::size_t>(p), 0);
    std::vector<double> free_at(static_cast<std::size_t>(p), 0);
    for (int d = 0; d < p; ++d) times[static_cast<std::size_t>(d)].resize(s.steps[static_cast<std::size_t>(d)].size());

    // The cross-device step a step waits for, if any: its (micro-batch, virtual stage, pass).
    auto ready_at = [&](int d, const Step& st) -> double {
        const int vs = s.virtual_stage(d, st.chunk);
        double t = 0;
        auto need = [&](int k, int v, Pass pass) {
            const double e = done[idx(k, v, pass)];
            if (e < 0) return false;
            t = std::max(t, e);
            return true;
        };
        const Pass back = s.split_backward() ? Pass::bwd_input : Pass::bwd;
        switch (st.pass) {
            case Pass::fwd:
                if (vs > 0 && !need(st.microbatch, vs - 1, Pass::fwd)) return kNotDone;
                break;
            case Pass::bwd:
            case Pass::bwd_input:
                if (!need(st.microbatch, vs, Pass::fwd)) return kNotDone;
                if (vs < last && !need(st.microbatch, vs + 1, back)) return kNotDone;
                break;
            case Pass::bwd_weight:
                if (!need(st.microbatch, vs, Pass::bwd_input)) return kNotDone;
                break;
        }
        return t;
    };

    std::size_t left = 0;
    for (const auto& v : s.steps) left += v.size();
    while (left > 0) {
        bool progress = false;
        for (int d = 0; d < p; ++d) {
            auto& n = next[static_cast<std::size_t>(d)];
            const auto& steps = s.steps[static_cast<std::size_t>(d)];
            while (n < steps.size()) {
                const Step& st = steps[n];
                const double r = ready_at(d, st);
                if (r < 0) break;
                StepTime& tm = times[static_cast<std::size_t>(d)][n];
                tm.start = std::max(r, free_at[static_cast<std::size_t>(d)]);
                tm.end = tm.start + duration(d, st);
                free_at[static_cast<std::size_t>(d)] = tm.end;
                double& slot = done[idx(st.microbatch, s.virtual_stage(d, st.chunk), st.pass)];
                if (slot >= 0)
                    throw Error(ErrorKind::internal, std::string("pipeline schedule runs ") + to_string(st.pass) +
                                                         " of micro-batch " + std::to_string(st.microbatch) + " chunk " +
                                                         std::to_string(st.chunk) + " twice on device " + std::to_string(d));
                slot = tm.end;
                ++n;
                --left;
                progress = true;
            }
        }
        if (!progress) {
            std::ostringstream msg;
            msg << to_string(s.kind) << " schedule (p " << p << ", m " << s.microbatches << ", v " << s.chunks
                << ") deadlocks:";
            for (int d = 0; d < p; ++d) {
                const auto n = next[static_cast<std::size_t>(d)];
                if (n < s.steps[static_cast<std::size_t>(d)].size()) {
                    const Step& st = s.steps[static_cast<std::size_t>(d)][n];
                    msg << " device " << d << " waits in " << to_string(st.pass) << " mb " << st.microbatch << " chunk "
                        << st.chunk << ";";
                }
            }
            throw Error(ErrorKind::internal, msg.str());
        }
    }
    return times;
}

int peak_in_flight(const PipelineSchedule& s, int device) {
    const Pass release = s.split_backward() ? Pass::bwd_weight : Pass::bwd;
    int held = 0, peak = 0;
    for (const Step& st : s.steps.at(static_cast<std::size_t>(device))) {
        if (st.pass == Pass::fwd) peak = std::max(peak, ++held);
        if (st.pass == release) --held;
    }
    return peak;
}

}  // namespace smol::strategies

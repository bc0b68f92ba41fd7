// The published-measurement harness (`make validate`): every row of validation/ simulated through
// the public command line, compared with what was measured, summarised per source.
//
// Usage: bench_published [--validation DIR] [--source NAME] [--rows N] [--jobs J]
//                        [--csv FILE] [--json FILE] [--model-dir DIR]
//
// stdout (the per-source table, the rows not simulated and why, failures) is the same for the
// same input whatever --jobs is; timings go to stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <thread>

#include <CLI/CLI.hpp>

#include "bench/published.hpp"
#include "bench_util.hpp"
#include "core/error.hpp"

using namespace smol;
using namespace smol::bench;

namespace {

std::string percent(double fraction) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%+.1f %%", fraction * 100);
    return buf;
}

std::string abs_percent(double fraction) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f %%", fraction * 100);
    return buf;
}

std::string number(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return buf;
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
    std::string out;
    for (const std::string& s : items) out += (out.empty() ? "" : sep) + s;
    return out;
}

std::string reasons(const Outcome& o) {
    if (o.status == Status::failed) return o.failure;
    std::vector<std::string> parts;
    for (const Gap& g : o.mapping.gaps) parts.push_back(g.feature + ": " + g.detail);
    return join(parts, "; ");
}

std::string csv_field(const std::string& s) {
    if (s.find_first_of(",\"\n") == std::string::npos) return s;
    std::string q = "\"";
    for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
}

void write_csv(const std::string& path, const std::vector<Outcome>& outcomes) {
    std::ofstream out(path, std::ios::binary);
    if (!out) fail_input("cannot write " + path, {"", "", "--csv"});
    out << "id,source,status,metric,measured,measured_step_s,simulated_step_s,error,fits,reason,notes,command\n";
    for (const Outcome& o : outcomes) {
        const bool sim = o.status == Status::simulated;
        const Mapping& m = o.mapping;
        out << csv_field(o.row.id) << ',' << csv_field(o.row.source) << ',' << to_string(o.status) << ','
            << (m.metric ? csv_field(m.metric->key) : "") << ',' << (m.metric ? number(m.metric->value) : "") << ','
            << (sim ? number(o.measured_step_s) : "") << ',' << (sim ? number(o.simulated_step_s) : "") << ','
            << (sim ? number(o.error) : "") << ',' << (sim ? (o.fits ? "yes" : "no") : "") << ','
            << csv_field(reasons(o)) << ',' << csv_field(join(m.notes, "; ")) << ','
            << (m.args.empty() ? "" : csv_field(command_line(m.args))) << '\n';
    }
    if (!out) fail_input("cannot write " + path + " (disk full?)", {"", "", "--csv"});
}

void write_json(const std::string& path, const std::vector<Outcome>& outcomes, const std::vector<SourceSummary>& sources) {
    Json rows = Json::array();
    for (const Outcome& o : outcomes) {
        Json r{{"id", o.row.id}, {"source", o.row.source}, {"status", to_string(o.status)}};
        const Mapping& m = o.mapping;
        if (!m.args.empty()) r["command"] = command_line(m.args);
        if (m.metric) r["metric"] = {{"key", m.metric->key}, {"value", m.metric->value}, {"compared", m.metric->description}};
        if (o.status == Status::simulated) {
            r["measured_step_s"] = o.measured_step_s;
            r["simulated_step_s"] = o.simulated_step_s;
            r["error"] = o.error;
            r["fits"] = o.fits;
        }
        if (o.status == Status::failed) r["failure"] = o.failure;
        Json gaps = Json::array();
        for (const Gap& g : m.gaps) gaps.push_back({{"feature", g.feature}, {"detail", g.detail}});
        if (!gaps.empty()) r["not_representable"] = gaps;
        if (!m.notes.empty()) r["notes"] = m.notes;
        rows.push_back(std::move(r));
    }
    Json summary = Json::array();
    for (const SourceSummary& s : sources) {
        Json g = Json::object();
        for (const auto& [feature, ids] : s.gaps) g[feature] = ids;
        summary.push_back({{"source", s.source},
                           {"rows", s.rows},
                           {"simulated", s.simulated},
                           {"not_fitting", s.not_fitting},
                           {"failed", s.failed},
                           {"mape", s.stats.mape},
                           {"median_abs_error", s.stats.median_abs},
                           {"max_abs_error", s.stats.max_abs},
                           {"bias", s.stats.bias},
                           {"compared", s.compared},
                           {"not_representable", g}});
    }
    std::ofstream out(path, std::ios::binary);
    if (!out) fail_input("cannot write " + path, {"", "", "--json"});
    out << Json{{"sources", summary}, {"rows", rows}}.dump(2) << '\n';
    if (!out) fail_input("cannot write " + path + " (disk full?)", {"", "", "--json"});
}

void print_table(const std::vector<SourceSummary>& sources, const std::vector<Outcome>& outcomes) {
    std::printf("| source | rows | simulated | MAPE | median abs | max abs | bias | not fitting | failed | not representable |\n");
    std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for (const SourceSummary& s : sources) {
        std::vector<std::string> gaps;
        for (const auto& [feature, ids] : s.gaps) gaps.push_back(feature + " " + std::to_string(ids.size()));
        const bool any = s.simulated > 0;
        std::printf("| %s | %zu | %zu | %s | %s | %s | %s | %zu | %zu | %s |\n", s.source.c_str(), s.rows, s.simulated,
                    any ? abs_percent(s.stats.mape).c_str() : "–", any ? abs_percent(s.stats.median_abs).c_str() : "–",
                    any ? abs_percent(s.stats.max_abs).c_str() : "–", any ? percent(s.stats.bias).c_str() : "–",
                    s.not_fitting, s.failed, gaps.empty() ? "–" : join(gaps, ", ").c_str());
    }
    std::printf("\nError = simulated / measured step time − 1 (negative: the simulator is too fast). Compared:\n");
    for (const SourceSummary& s : sources)
        if (!s.compared.empty()) std::printf("  %-24s %s\n", s.source.c_str(), join(s.compared, "; ").c_str());

    std::printf("\nNot representable yet, by the first missing feature (every gap of a row is in --csv / --json):\n");
    for (const SourceSummary& s : sources)
        for (const auto& [feature, ids] : s.gaps)
            std::printf("  %-24s %-48s %s\n", s.source.c_str(), feature.c_str(), join(ids, " ").c_str());

    bool header = false;
    for (const Outcome& o : outcomes) {
        if (o.status == Status::simulated && o.fits) continue;
        if (o.status == Status::not_representable) continue;
        if (!header) std::printf("\nSimulator failures and plans that do not fit the simulated memory:\n");
        header = true;
        if (o.status == Status::failed)
            std::printf("  %s failed: %s\n    %s\n", o.row.id.c_str(), o.failure.c_str(), command_line(o.mapping.args).c_str());
        else
            std::printf("  %s does not fit (step time still compared: %s)\n    %s\n", o.row.id.c_str(), percent(o.error).c_str(),
                        command_line(o.mapping.args).c_str());
    }

    const std::vector<LayerCostFit> fits = vtrain_layer_costs(outcomes);
    if (fits.empty()) return;
    std::printf("\nvTrain, pp = 1: one layer's cost per micro-batch, c of t = a + L·d + n·b + n·L·c fitted to each cell's\n"
                "rows (n micro-batches per replica, L layers; b: a micro-batch's embedding, head and loss; d: a layer's\n"
                "share of the step's gradient all-reduce and optimizer); '<' marks a measured c below that of a smaller\n"
                "micro-batch:\n\n");
    std::printf("| hidden | tp | micro-batch | rows | c measured | c simulated | c error | b measured | b simulated | d measured | d simulated |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const LayerCostFit& f : fits) {
        bool cheaper = false;
        for (const LayerCostFit& o : fits)
            cheaper = cheaper || (o.hidden == f.hidden && o.tp == f.tp && o.micro_batch < f.micro_batch && o.measured_c > f.measured_c);
        std::printf("| %d | %d | %d | %zu | %.3f ms%s | %.3f ms | %s | %.2f ms | %.2f ms | %.2f ms | %.2f ms |\n", f.hidden, f.tp,
                    f.micro_batch, f.rows, f.measured_c * 1e3, cheaper ? " <" : "", f.simulated_c * 1e3,
                    percent(f.simulated_c / f.measured_c - 1).c_str(), f.measured_b * 1e3, f.simulated_b * 1e3, f.measured_d * 1e3,
                    f.simulated_d * 1e3);
    }
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"Runs every row of validation/ through `smolcluster simulate --json` and compares it with the measurement"};
    std::string validation = SMOL_VALIDATION_DIR, source, csv, json;
    std::string model_dir = (std::filesystem::temp_directory_path() / "smolcluster-published-models").string();
    int rows = 0;
    int jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    app.add_option("--validation", validation, "folder with vtrain-single-node.csv, vtrain-multi-node.csv and published.jsonl")->capture_default_str();
    app.add_option("--source", source, "only this source (vtrain, llama3-herd, dgxc-benchmarking, …)");
    app.add_option("--rows", rows, "only the first N rows of each source (0: all)")->capture_default_str();
    app.add_option("--jobs", jobs, "simulations run at once")->capture_default_str();
    app.add_option("--csv", csv, "write every row (id, source, command, measured, simulated, error or reason) as CSV");
    app.add_option("--json", json, "write every row and the per-source summary as JSON");
    app.add_option("--model-dir", model_dir, "where the model JSON files of the command lines are written (kept, so the "
                                             "commands in --csv can be rerun)")->capture_default_str();
    CLI11_PARSE(app, argc, argv);

    try {
        if (jobs < 1) fail_input("at least 1", std::to_string(jobs), {"", "", "--jobs"});
        if (rows < 0) fail_input("at least 0", std::to_string(rows), {"", "", "--rows"});
        std::vector<Row> all = read_validation(validation);
        std::vector<std::string> names;
        for (const Row& r : all)
            if (std::find(names.begin(), names.end(), r.source) == names.end()) names.push_back(r.source);
        if (!source.empty() && std::find(names.begin(), names.end(), source) == names.end())
            fail_input("a source of " + validation + " (" + join(names, ", ") + ")" , "'" + source + "'" + did_you_mean(source, names),
                       {"", "", "--source"});
        std::vector<Row> selected;
        std::map<std::string, int> taken;
        for (Row& r : all)
            if ((source.empty() || r.source == source) && (rows == 0 || taken[r.source]++ < rows)) selected.push_back(std::move(r));

        const auto t0 = std::chrono::steady_clock::now();
        const std::vector<Outcome> outcomes = run_rows(selected, model_dir, jobs);
        const double wall = seconds_since(t0);
        const std::vector<SourceSummary> sources = summarize(outcomes);

        const auto held_out = std::count_if(sources.begin(), sources.end(), [](const SourceSummary& s) { return s.source == kVtrainHeldOut; });
        std::printf("Published measurements (%s): %zu rows, %zu sources\n\n", validation.c_str(), selected.size(),
                    sources.size() - static_cast<std::size_t>(held_out));
        print_table(sources, outcomes);
        std::fflush(stdout);
        if (!csv.empty()) write_csv(csv, outcomes);
        if (!json.empty()) write_json(json, outcomes, sources);

        std::vector<const Outcome*> slow;
        std::size_t simulations = 0;
        for (const Outcome& o : outcomes)
            if (o.status != Status::not_representable) {
                slow.push_back(&o);
                ++simulations;
            }
        std::sort(slow.begin(), slow.end(), [](const Outcome* a, const Outcome* b) { return a->wall_s > b->wall_s; });
        std::fprintf(stderr, "\n%zu simulations in %.1f s on %d threads (peak RSS %.0f MB); slowest:", simulations, wall, jobs,
                     peak_rss_mb());
        for (std::size_t i = 0; i < std::min<std::size_t>(5, slow.size()); ++i)
            std::fprintf(stderr, " %s %.1f s%s", slow[i]->row.id.c_str(), slow[i]->wall_s, i + 1 < std::min<std::size_t>(5, slow.size()) ? "," : "");
        std::fprintf(stderr, "\n");
        if (!csv.empty() || !json.empty()) std::fprintf(stderr, "model files in %s\n", model_dir.c_str());
    } catch (const Error& e) {
        std::fprintf(stderr, "bench_published: error: %s\n", e.what());
        return exit_status(e.kind());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_published: internal error: %s\n", e.what());
        return 1;
    }
    return 0;
}

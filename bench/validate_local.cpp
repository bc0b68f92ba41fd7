// The simulator against this machine: calibrates it (mpirun -np 2 smolcluster calibrate), then
// validates each plan of the exec tests on 2 ranks of the localhost cluster with that profile,
// and prints the table — plan, simulated step, measured step, step error, per-class errors —
// with the median and largest |step error|. Targets: median ≤ 5 %, largest ≤ 10 %.
//
//   validate_local [--quick] [--model gpt-tiny] [--profile FILE (skip calibrating)] [--repeat N]
//
// --repeat N validates each plan N times and keeps the run with the median step error (the
// machine may be shared: one noisy run should not decide a row).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.hpp"

namespace {

struct Plan {
    const char* name;
    const char* flags;
};

const std::vector<Plan> plans{
    {"ddp", "--strategy ddp"},
    {"ddp flash", "--strategy ddp --attention flash"},   // PyTorch's CPU flash kernel, causal
    {"ring", "--strategy ring"},
    {"ps", "--strategy ps"},
    {"ps-async", "--strategy ps-async --staleness 1"},
    {"zero1", "--strategy zero1"},
    {"zero2", "--strategy zero2"},
    {"zero3", "--strategy zero3"},
    {"fsdp", "--strategy fsdp"},
    {"tp 2", "--tp 2"},
    {"pp 2 gpipe", "--pp 2 --schedule gpipe --global-batch 4"},
    {"pp 2 1f1b", "--pp 2 --schedule 1f1b --global-batch 4"},
    {"pp 2 interleaved", "--pp 2 --schedule interleaved --virtual-stages 2 --global-batch 4"},
};

const char* classes[] = {"gemm", "attention", "elementwise", "optimizer", "collective", "p2p"};

std::string mpirun() {
    std::string m = "mpirun -np 2 --oversubscribe --mca btl self,vader,tcp --mca btl_tcp_if_include lo";
    if (geteuid() == 0) m += " --allow-run-as-root";
    return m + " ";
}

/// Runs a command and returns its standard output (its exit status in `code`).
std::string capture(const std::string& cmd, int& code) {
    std::string out;
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return out;
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    const int status = pclose(p);
    code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    return out;
}

/// The 1-minute load average: the machine may be shared, and a loaded one measures noise.
std::string load() {
    FILE* f = std::fopen("/proc/loadavg", "r");
    char buf[64] = {};
    if (f) {
        if (!std::fgets(buf, sizeof buf, f)) buf[0] = 0;
        std::fclose(f);
    }
    std::string s(buf);
    return s.substr(0, s.find(' '));
}

std::string pct(double e) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%+.1f%%", e * 100);
    return buf;
}

}  // namespace

int main(int argc, char** argv) {
    bool quick = false;
    std::string model = "gpt-tiny", profile;
    int repeat = 1;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--quick") quick = true;
        else if (a == "--model" && i + 1 < argc) model = argv[++i];
        else if (a == "--profile" && i + 1 < argc) profile = argv[++i];
        else if (a == "--repeat" && i + 1 < argc) repeat = std::max(1, std::atoi(argv[++i]));
        else {
            std::fprintf(stderr, "usage: validate_local [--quick] [--model M] [--profile FILE] [--repeat N]\n");
            return 2;
        }
    }
    const std::string bin = SMOLCLUSTER_BIN;
    int code = 0;
    std::printf("load average %s at the start\n", load().c_str());
    if (profile.empty()) {
        profile = (std::filesystem::temp_directory_path() / ("validate-local-" + std::to_string(getpid()) + ".json")).string();
        const auto t0 = std::chrono::steady_clock::now();
        std::printf("%s", capture(mpirun() + bin + " calibrate --force --out " + profile + (quick ? " --quick" : ""), code).c_str());
        if (code != 0) {
            std::fprintf(stderr, "calibrate failed (exit %d)\n", code);
            return 1;
        }
        std::printf("calibrated in %.1f s\n\n", smol::bench::seconds_since(t0));
    }

    std::printf("%-18s %11s %11s %8s", "plan", "simulated", "measured", "step");
    for (const char* c : classes) std::printf(" %11s", c);
    std::printf("\n");
    std::vector<double> errors;
    for (const Plan& p : plans) {
        std::vector<nlohmann::json> runs;
        for (int r = 0; r < repeat; ++r) {
            const std::string out = capture(mpirun() + bin + " validate --model " + model + " --cluster localhost " + p.flags +
                                                " --profile " + profile + " --tolerance 1e9 --json",
                                            code);
            if (code != 0) {
                std::printf("%-18s failed (exit %d)\n", p.name, code);
                break;
            }
            runs.push_back(nlohmann::json::parse(out));
        }
        if (runs.size() != static_cast<std::size_t>(repeat)) continue;
        std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a["step_error"].template get<double>() < b["step_error"].template get<double>(); });
        const nlohmann::json& j = runs[runs.size() / 2];
        const double e = j["step_error"].get<double>();
        errors.push_back(std::fabs(e));
        std::printf("%-18s %9.1f ms %9.1f ms %8s", p.name, j["simulated_step_s"].get<double>() * 1e3,
                    j["measured_step_s"].get<double>() * 1e3, pct(e).c_str());
        for (const char* c : classes)
            std::printf(" %11s", j["per_class"].contains(c) ? pct(j["per_class"][c]["error"].get<double>()).c_str() : "—");
        std::printf("\n");
    }
    if (errors.empty()) return 1;
    std::sort(errors.begin(), errors.end());
    const double median = errors[errors.size() / 2], largest = errors.back();
    std::printf("\nmedian |step error| %.1f %% (target ≤ 5 %%), largest %.1f %% (target ≤ 10 %%); load average %s at the end\n",
                median * 100, largest * 100, load().c_str());
    return 0;
}

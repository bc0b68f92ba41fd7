// `smolcluster run` as users start it: under mpirun (spawned by the test, loopback only), and the
// ways it refuses or fails — without mpirun, a wrong number of processes, ranks that built
// different graphs, a plan too big for the host, a rank that fails or hangs mid-step. Every
// failure must end the whole job with a message; `timeout` bounds each job, and no process of
// the job may outlive it.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "exec/executor.hpp"
#include "strategies/plan.hpp"
#include "topologies/profile.hpp"
#include "tools/execution.hpp"
#include "topologies/localhost.hpp"
#include "traces/trace_checks.hpp"

using namespace smol;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

struct Job {
    int code = -1;
    std::string output;   // stdout and stderr together
};

/// A marker in the environment of every process of the job, to find any that outlive it.
std::string marker() { return "smol-exec-test-" + std::to_string(getpid()); }

/// Runs `command` under a 120 s `timeout`; code 124 means the job had to be killed.
Job shell(const std::string& command) {
    const std::string full = "SMOL_TEST_MARK=" + marker() + " timeout 120 " + command + " 2>&1";
    Job j;
    FILE* p = popen(full.c_str(), "r");
    REQUIRE(p);
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) j.output.append(buf, n);
    const int status = pclose(p);
    j.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return j;
}

std::string mpirun(int ranks) {
    return "mpirun --allow-run-as-root --oversubscribe --mca btl self,vader,tcp --mca btl_tcp_if_include lo -np " +
           std::to_string(ranks) + " ";
}

const std::string bin = SMOLCLUSTER_BIN;

/// Processes (other than this one) whose environment carries the job marker.
int survivors() {
    const std::string mark = "SMOL_TEST_MARK=" + marker();
    int n = 0;
    for (const auto& e : fs::directory_iterator("/proc")) {
        const std::string name = e.path().filename();
        if (name.find_first_not_of("0123456789") != std::string::npos || name == std::to_string(getpid())) continue;
        std::ifstream in(e.path() / "environ", std::ios::binary);
        const std::string env((std::istreambuf_iterator<char>(in)), {});
        if (env.find(mark) != std::string::npos) ++n;
    }
    return n;
}

/// Waits up to 10 s for the job's processes to be gone (mpirun reaps them as it exits).
int survivors_after_job() {
    for (int i = 0; i < 100; ++i) {
        if (survivors() == 0) return 0;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return survivors();
}

/// An op of `rank` in the middle of the ddp gpt-tiny graph on 2 localhost ranks (what `run` builds).
OpId middle_op_of(int rank) {
    const topo::Cluster c = topo::cluster_from_json(JsonView(topo::localhost_json(topo::read_host_facts(), 2), "localhost"));
    strategies::Plan plan;
    plan.fold = false;
    plan.seq = 64;
    const strategies::Built b = strategies::build(model_preset("gpt-tiny"), c, plan);
    std::vector<OpId> mine;
    for (OpId id = 0; id < b.graph.size(); ++id)
        if (b.graph.op(id).rank == rank && b.graph.op(id).kind == OpKind::compute) mine.push_back(id);
    REQUIRE(!mine.empty());
    return mine[mine.size() / 2];
}

const std::string tiny = " run --model gpt-tiny --cluster localhost --seq 64 --warmup 0";

}  // namespace

TEST_CASE("run without mpirun exits 2 and prints the mpirun command to use", "[exec][cli]") {
    const Job j = shell(bin + " run --model gpt-tiny --cluster pi5-1gbe --strategy ddp");
    CHECK(j.code == 2);
    CHECK_THAT(j.output, Contains("started by mpirun"));
    CHECK_THAT(j.output, Contains("-np 4 " + bin + " run --model gpt-tiny --cluster pi5-1gbe --strategy ddp"));
}

TEST_CASE("run with a world size that does not match the plan exits 2 with the right command", "[exec][cli]") {
    const Job j = shell(mpirun(2) + bin + " run --model gpt-tiny --cluster pi5-1gbe --warmup 0");
    CHECK(j.code == 2);
    CHECK_THAT(j.output, Contains("mpirun started 2 processes but the plan runs on 4 devices"));
    CHECK_THAT(j.output, Contains("-np 4"));
    CHECK(survivors_after_job() == 0);
}

TEST_CASE("run --json prints simulate's keys, measured, and writes the same Chrome trace", "[exec][cli]") {
    const fs::path trace = fs::temp_directory_path() / ("smol-run-trace-" + std::to_string(getpid()) + ".json");
    const Job j = shell(mpirun(2) + bin + tiny + " --json --trace " + trace.string() + " --force");
    REQUIRE(j.code == 0);
    const auto json = nlohmann::json::parse(j.output);
    for (const char* key : {"iteration_time_s", "samples_per_s", "tokens_per_s", "model_flops_per_iteration",
                            "tflops_per_device", "mfu", "peak_memory_bytes", "fits", "oom", "exposed_comm_s",
                            "bubble_fraction", "per_device", "events", "sim_wall_s", "executor", "clocks",
                            "resident_peak_bytes"})
        CHECK(json.contains(key));
    CHECK(json["measured"] == true);
    CHECK(json["iteration_time_s"].get<double>() > 0);
    CHECK(json["per_device"].size() == 2);
    CHECK(json["fits"] == true);
    std::ifstream in(trace);
    const auto doc = nlohmann::json::parse(in);
    test::check_no_overlap(doc);
    test::check_flows(doc);
    fs::remove(trace);
}

TEST_CASE("a rank that fails mid-step stops every rank, naming the failing rank and op", "[exec][cli]") {
    const OpId op = middle_op_of(1);
    const Job j = shell("env SMOL_FAIL_AT=1:" + std::to_string(op) + " " + mpirun(2) + bin + tiny);
    CHECK(j.code != 0);
    CHECK(j.code != 124);   // ended by itself, not by the test's timeout
    CHECK_THAT(j.output, Contains("rank 1 failed at op " + std::to_string(op)));
    CHECK_THAT(j.output, Contains("injected failure"));
    CHECK(survivors_after_job() == 0);
}

TEST_CASE("a hang becomes an error listing the stuck ops (--timeout)", "[exec][cli]") {
    const OpId op = middle_op_of(1);
    const Job j = shell("env SMOL_FAIL_AT=1:" + std::to_string(op) + ":hang " + mpirun(2) + bin + tiny + " --timeout 2");
    CHECK(j.code != 0);
    CHECK(j.code != 124);
    CHECK_THAT(j.output, Contains("finished no op for 2 s (--timeout); stuck ops:"));
    CHECK_THAT(j.output, Contains("stream compute: op " + std::to_string(op)));
    CHECK(survivors_after_job() == 0);
}

TEST_CASE("ranks that build different graphs exit 2, each naming the first differing op", "[exec][cli]") {
    // mpirun's MPMD form starts rank 0 with ddp and rank 1 with zero1.
    const std::string common = " run --model gpt-tiny --cluster localhost --seq 64 --warmup 0";
    const Job j = shell("mpirun --allow-run-as-root --oversubscribe --mca btl self,vader,tcp --mca btl_tcp_if_include lo -np 1 " +
                        bin + common + " --strategy ddp : -np 1 " + bin + common + " --strategy zero1");
    CHECK(j.code == 2);
    std::size_t at = 0, times = 0;
    while ((at = j.output.find("the ranks built different op graphs", at)) != std::string::npos) ++times, ++at;
    CHECK(times == 2);
    CHECK_THAT(j.output, Contains("the first difference is op "));
    CHECK_THAT(j.output, Contains("ranks that differ from rank 0: 1"));
    CHECK(survivors_after_job() == 0);
}

TEST_CASE("a plan too big for the machine is refused before it runs", "[exec][cli]") {
    const Job j = shell(mpirun(2) + bin + " run --model gpt3-175b --cluster localhost --warmup 0");
    CHECK(j.code == 3);
    CHECK_THAT(j.output, Contains("does not fit"));
    CHECK(survivors_after_job() == 0);
}

TEST_CASE("calibrate --quick under mpirun writes a profile that simulate reads", "[exec][cli]") {
    const fs::path profile = fs::temp_directory_path() / ("smol-profile-" + std::to_string(getpid()) + ".json");
    const Job j = shell(mpirun(2) + bin + " calibrate --quick --force --out " + profile.string());
    REQUIRE(j.code == 0);
    CHECK_THAT(j.output, Contains("2 ranks per host"));
    CHECK_THAT(j.output, Contains("profile written to"));
    const topo::Profile p = topo::load_profile(profile.string());
    CHECK(p.ranks_per_node == 2);
    CHECK(p.nodes == 1);
    CHECK_FALSE(p.compute.gemm.empty());
    // Flash attention timed without a mask and under the causal one, on the same grid.
    for (const topo::ShapeTable* t : {&p.compute.flash_fwd, &p.compute.flash_bwd, &p.compute.flash_fwd_causal, &p.compute.flash_bwd_causal}) {
        CHECK(t->m == p.compute.flash_fwd.m);
        CHECK(t->k == p.compute.flash_fwd.k);
        CHECK(t->rate.size() == t->m.size() * t->n.size() * t->k.size());
    }
    CHECK(p.compute.comm_slowdown >= 1.0);
    for (const char* kind : {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all", "barrier"}) {
        bool found = false;
        for (const auto& t : p.network.transfers) found = found || (!t.p2p && std::string(to_string(t.kind)) == kind);
        INFO(kind);
        CHECK(found);
    }
    CHECK(p.network.p2p(1) != nullptr);
    // simulate reads it for a 2-device localhost, and refuses it for another number of devices.
    const Job ok = shell(bin + " simulate --model gpt-tiny --cluster localhost --devices 1 --json --profile " + profile.string());
    CHECK(ok.code == 2);
    CHECK_THAT(ok.output, Contains("measured with 2 ranks per node"));
    fs::remove(profile);
}

TEST_CASE("calibrate --backend cuda writes a GPU's profile, or says why it cannot", "[exec][cli]") {
    const fs::path profile = fs::temp_directory_path() / ("smol-gpu-profile-" + std::to_string(getpid()) + ".json");
    const Job j = shell(mpirun(1) + bin + " calibrate --backend cuda --quick --force --out " + profile.string());
    INFO(j.output);
    if (j.code == 0) {   // a machine with a GPU
        const topo::Profile p = topo::load_profile(profile.string());
        CHECK(p.compute.on_gpu());
        CHECK_FALSE(p.compute.gemm_bf16.empty());
        CHECK_FALSE(p.has_memory);
        fs::remove(profile);
    } else {             // CI: no GPU, or no CUDA backend in the build
        CHECK(j.code == 2);
        CHECK_THAT(j.output, exec::cuda_built() ? Contains("no usable GPU") : Contains("built without the CUDA backend"));
        CHECK_FALSE(fs::exists(profile));
    }
    CHECK(survivors_after_job() == 0);
}

TEST_CASE("validate under mpirun compares the simulated and measured steps, exiting 1 beyond --tolerance", "[exec][cli]") {
    const Job j = shell(mpirun(2) + bin + " validate --model gpt-tiny --cluster localhost --seq 64 --warmup 0 --tolerance 1000 --json");
    REQUIRE(j.code == 0);
    const auto json = nlohmann::json::parse(j.output);
    for (const char* key : {"simulated_step_s", "measured_step_s", "step_error", "per_class", "passed", "tolerance"})
        CHECK(json.contains(key));
    CHECK(json["passed"] == true);
    CHECK(json["step_error"].get<double>() == Approx(json["simulated_step_s"].get<double>() / json["measured_step_s"].get<double>() - 1));
    for (const char* cls : {"gemm", "attention", "elementwise", "optimizer", "collective"}) {
        INFO(cls);
        REQUIRE(json["per_class"].contains(cls));
        CHECK(json["per_class"][cls]["measured_s"].get<double>() > 0);
        CHECK(json["per_class"][cls]["simulated_s"].get<double>() > 0);
    }
    // No tolerance at all: the two steps are never equal to the picosecond.
    const Job strict = shell(mpirun(2) + bin + " validate --model gpt-tiny --cluster localhost --seq 64 --warmup 0 --tolerance 0");
    CHECK(strict.code == 1);
    CHECK_THAT(strict.output, Contains("FAILED: |step error|"));
}

TEST_CASE("run --attention flash on CPUs runs the executor's flash kernels", "[exec][cli]") {
    const Job j = shell(mpirun(2) + bin + tiny + " --attention flash --json");
    REQUIRE(j.code == 0);
    const auto json = nlohmann::json::parse(j.output);
    CHECK(json["measured"] == true);
    CHECK(json["attention"] == "flash");
    CHECK(json["iteration_time_s"].get<double>() > 0);
}

TEST_CASE("the backend follows the cluster's devices, --backend and --tf32 are checked", "[exec][cli]") {
    using tools::BackendKind;
    CHECK(tools::pick_backend("auto", topo::cluster_preset("pi5-1gbe")) == BackendKind::cpu);
    CHECK(tools::pick_backend("auto", topo::cluster_preset("hgx-h200")) == BackendKind::cuda);
    CHECK(tools::pick_backend("cpu", topo::cluster_preset("hgx-h200")) == BackendKind::cpu);
    CHECK(tools::pick_backend("cuda", topo::cluster_preset("pi5-1gbe")) == BackendKind::cuda);
    SECTION("a cluster of GPUs and CPU boards") {
        const topo::Cluster mixed = topo::compose_clusters("pi5-1gbe:1,workstation-4gpu:1");
        try {
            tools::pick_backend("auto", mixed);
            FAIL("a mixed cluster needs --backend");
        } catch (const Error& e) {
            CHECK(e.kind() == ErrorKind::bad_input);
            CHECK_THAT(std::string(e.what()), Contains("--backend cpu or --backend cuda"));
        }
    }
    SECTION("--tf32 on the CPU backend") {
        const Job j = shell(mpirun(2) + bin + tiny + " --tf32");
        CHECK(j.code == 2);
        CHECK_THAT(j.output, Contains("--tf32"));
        CHECK(survivors_after_job() == 0);
    }
    SECTION("an unknown backend") {
        const Job j = shell(bin + tiny + " --backend gpu");
        CHECK(j.code == 2);
        CHECK_THAT(j.output, Contains("--backend"));
    }
    SECTION("a GPU plan where the CUDA backend cannot run it") {
        // Without the CUDA backend in this build, or without a GPU on this machine: exit 2, saying which.
        const bool gpu_machine = std::system("nvidia-smi -L >/dev/null 2>&1") == 0;
        if (!gpu_machine) {
            const Job j = shell(mpirun(1) + bin + " run --model gpt-tiny --cluster hgx-h200 --devices 1 --seq 64 --warmup 0");
            CHECK(j.code == 2);
            CHECK_THAT(j.output, Contains(exec::cuda_built() ? "no usable GPU" : "built without the CUDA backend"));
            CHECK(survivors_after_job() == 0);
        }
    }
}

TEST_CASE("sweep under mpirun splits the plans over the ranks and prints what one process prints", "[exec][cli]") {
    // gpt2-small on one dgx-a100, --tp 1,2 --pp 1,2 at micro-batch 2 (a hundred-odd plans: four
    // sweeps must finish within the test's time under the sanitizers): the same --json file, byte
    // for byte, and the same table from rank 0 alone; analytic with --refine, the refinement split
    // over 3 ranks.
    const fs::path dir = fs::temp_directory_path() / ("smol-sweep-mpi-" + std::to_string(getpid()));
    fs::create_directories(dir);
    const auto read = [](const fs::path& p) {
        std::ifstream in(p, std::ios::binary);
        return std::string((std::istreambuf_iterator<char>(in)), {});
    };
    const std::string base =
        bin + " sweep --model gpt2-small --cluster dgx-a100 --global-batch 16 --tp 1,2 --pp 1,2 --micro-batch 2 --jobs 1";
    for (const auto& [extra, ranks] : {std::pair<std::string, int>{"", 2}, {" --network analytic --refine 7", 3}}) {
        const fs::path one = dir / "one.json", many = dir / "many.json";
        const Job single = shell(base + extra + " --json " + one.string() + " --force");
        const Job split = shell(mpirun(ranks) + base + extra + " --json " + many.string() + " --force");
        REQUIRE(single.code == 0);
        REQUIRE(split.code == 0);
        const std::string a = read(one), b = read(many);
        CHECK(a.size() > 10000);
        CHECK(a == b);
        // The table once (rank 0's), the same as one process's but for the file's name.
        std::string expected = single.output;
        expected.replace(expected.find(one.string()), one.string().size(), many.string());
        CHECK(split.output == expected);
        CHECK(survivors_after_job() == 0);
    }
    fs::remove_all(dir);
}

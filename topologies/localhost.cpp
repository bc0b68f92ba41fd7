#include "topologies/localhost.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace smol::topo {

namespace {

/// The value after "key<spaces>:" on the first line of `file` that starts with `key`, or "".
std::string proc_field(const std::string& file, const std::string& key) {
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind(key, 0) != 0) continue;
        const auto colon = line.find(':');
        if (colon == std::string::npos) continue;
        // The key must be followed only by blanks up to the colon ("cpu MHz" is not "cpu MHz2").
        if (line.find_first_not_of(" \t", key.size()) != colon) continue;
        std::string v = line.substr(colon + 1);
        v.erase(0, v.find_first_not_of(" \t"));
        while (!v.empty() && (v.back() == ' ' || v.back() == '\t' || v.back() == '\n')) v.pop_back();
        return v;
    }
    return "";
}

bool has_flag(const std::string& flags, const std::string& flag) {
    std::istringstream s(flags);
    std::string f;
    while (s >> f)
        if (f == flag) return true;
    return false;
}

int env_int(const char* name) {
    const char* v = std::getenv(name);
    if (!v || !*v) return 0;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    return end && *end == '\0' && n > 0 && n < 1'000'000 ? static_cast<int>(n) : 0;
}

std::string quantity(double value, const char* unit) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.12g %s", value, unit);
    return buf;
}

}  // namespace

HostFacts read_host_facts() {
    HostFacts f;
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) == 0) f.hostname = host;
    f.cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));

    // x86 says "model name"; a Raspberry Pi's kernel says "Model"; other ARM boards name only
    // the implementer and part.
    f.cpu_model = proc_field("/proc/cpuinfo", "model name");
    if (f.cpu_model.empty()) f.cpu_model = proc_field("/proc/cpuinfo", "Model");
    if (f.cpu_model.empty()) {
        const std::string part = proc_field("/proc/cpuinfo", "CPU part");
        f.cpu_model = part.empty() ? "unknown CPU" : "ARM CPU part " + part;
    }

    const std::string mem = proc_field("/proc/meminfo", "MemTotal");   // "24000000 kB"
    f.memory = Bytes(std::atoll(mem.c_str()) * 1024);

    if (std::ifstream freq("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"); freq) {
        long khz = 0;
        if (freq >> khz && khz > 0) {
            f.clock_ghz = static_cast<double>(khz) * 1e-6;
            f.clock_source = "cpufreq cpuinfo_max_freq";
        }
    }
    if (f.clock_ghz == 0) {
        const double mhz = std::atof(proc_field("/proc/cpuinfo", "cpu MHz").c_str());
        if (mhz > 0) {
            f.clock_ghz = mhz * 1e-3;
            f.clock_source = "/proc/cpuinfo cpu MHz";
        }
    }

    const std::string x86 = proc_field("/proc/cpuinfo", "flags");
    const std::string arm = proc_field("/proc/cpuinfo", "Features");
    if (has_flag(x86, "avx2") && has_flag(x86, "fma")) {
        f.flops_per_cycle = 32;
        f.isa = has_flag(x86, "avx512f") ? "avx512f+avx2+fma" : "avx2+fma";
    } else if (has_flag(x86, "avx")) {
        f.flops_per_cycle = 16;
        f.isa = "avx";
    } else if (has_flag(arm, "asimd")) {
        f.flops_per_cycle = 16;
        f.isa = "asimd";
    } else {
        f.flops_per_cycle = 8;
        f.isa = x86.empty() ? "unknown" : "sse";
    }

    std::error_code ec;
    const auto space = std::filesystem::space(std::filesystem::temp_directory_path(ec), ec);
    if (!ec) f.scratch_free = Bytes(static_cast<std::int64_t>(space.available));
    return f;
}

int mpi_local_size_from_env() {
    if (const int n = env_int("OMPI_COMM_WORLD_LOCAL_SIZE")) return n;
    return env_int("MPI_LOCALNRANKS");
}

Json localhost_json(const HostFacts& f, int devices) {
    devices = std::max(1, devices);
    // Without a known clock the peak is priced at 2 GHz and says so.
    const double ghz = f.clock_ghz > 0 ? f.clock_ghz : 2.0;
    const double host_peak = f.cores * ghz * 1e9 * f.flops_per_cycle;
    const double host_bandwidth = f.cores * 6.4e9;
    const double memory = static_cast<double>(std::max<std::int64_t>(f.memory.count(), 1 << 30));

    Json device = {
        {"cpu", true},
        {"peak", {{"fp32", quantity(host_peak / devices, "FLOP/s")}}},
        {"memory", quantity(memory / devices, "B")},
        {"memory_bandwidth", quantity(host_bandwidth / devices, "B/s")},
        {"unified_memory", true},
        {"launch_overhead", "1 us"},
        {"gemm_efficiency", 0.7},
        {"gemm_half_dim", 64},
        {"memory_efficiency", 0.6},
        {"comm_slowdown", 1.0},
        {"notes",
         {"peak = " + std::to_string(f.cores) + " cores × " + quantity(ghz, "GHz") +
              (f.clock_ghz > 0 ? " (" + f.clock_source + ")" : " (clock unknown: 2 GHz assumed)") + " × " +
              std::to_string(f.flops_per_cycle) + " fp32 FLOP/cycle (" + f.isa + "), over " + std::to_string(devices) +
              " ranks",
          "memory bandwidth: 6.4 GB/s per core, a lead (the OS does not report it); gemm and memory "
          "efficiencies, launch overhead and comm_slowdown are leads too: calibrate replaces them"}}};
    Json group = {
        {"name", "localhost"},
        {"count", 1},
        {"device", "cpu"},
        {"devices_per_node", devices},
        {"host_memory", quantity(memory, "B")},
        {"host_memory_bandwidth", quantity(host_bandwidth, "B/s")},
        {"intra",
         {{"kind", devices > 1 ? "shm" : "none"},
          {"bandwidth", quantity(host_bandwidth / 2, "B/s")},
          {"latency", "0.5 us"}}},
        // The NIC of a one-node cluster carries nothing; it is narrower than shared memory so
        // no route between two ranks goes through it.
        {"host_link", {{"bandwidth", "1.25 GB/s"}, {"latency", "0 us"}}},
        {"nics", {{"count", 1}, {"bandwidth", "1.25 GB/s"}, {"latency", "10 us"}}},
    };
    if (f.scratch_free.count() > 0)
        group["nvme"] = {{"capacity", quantity(static_cast<double>(f.scratch_free.count()), "B")},
                         {"read", "0.5 GB/s"},
                         {"write", "0.5 GB/s"}};
    return {
        {"name", "localhost"},
        {"description", "this machine (" + (f.hostname.empty() ? std::string("localhost") : f.hostname) + "): " +
                            f.cpu_model + ", " + std::to_string(f.cores) + " cores, " + std::to_string(devices) +
                            " CPU ranks"},
        {"sources",
         {"/proc/cpuinfo (model, ISA flags, clock), /proc/meminfo (MemTotal), sysconf(_SC_NPROCESSORS_ONLN)",
          "ranks: the MPI local size under mpirun, else one per core"}},
        {"device_kinds", {{"cpu", device}}},
        {"node_groups", Json::array({group})},
        {"network", {{"fabric", "switch"}, {"switch_latency", "0 us"}}},
    };
}

Cluster localhost_cluster() {
    const HostFacts facts = read_host_facts();
    const int local = mpi_local_size_from_env();
    const Json json = localhost_json(facts, local > 0 ? local : facts.cores);
    return cluster_from_json(JsonView(json, "preset localhost"));
}

}  // namespace smol::topo

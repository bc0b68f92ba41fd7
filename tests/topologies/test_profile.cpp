// Calibration profiles: the JSON round trip, strict reading (one SECTION per bad input), and what
// applying a profile changes in a cluster.
#include <catch2/catch.hpp>

#include "core/error.hpp"
#include "test_support.hpp"
#include "topologies/localhost.hpp"
#include "topologies/profile.hpp"

using namespace smol;
using namespace smol::topo;
using Catch::Matchers::Contains;
using smol::test::bad_input_message;

namespace {

Profile sample(int ranks_per_node = 2) {
    Profile p;
    p.hosts = {"box"};
    p.cpu_model = "Test CPU";
    p.cores = 8;
    p.nodes = 1;
    p.ranks_per_node = ranks_per_node;
    p.blas = "OpenBLAS 0.3.21";
    p.blas_threads = 4;
    p.mpi = "Open MPI v4.1.4";
    p.date = "2025-01-01T00:00:00Z";
    MeasuredCompute& c = p.compute;
    c.gemm.m = c.gemm.n = c.gemm.k = {64, 1024};
    c.gemm.rate = {1e10, 2e10, 2e10, 3e10, 2e10, 3e10, 3e10, 8e10};
    c.flash_fwd = c.flash_bwd = c.gemm;
    c.flash_fwd_causal = c.flash_bwd_causal = c.gemm;
    for (double& r : c.flash_fwd_causal.rate) r /= 2;
    c.stream = {{1e4, 1e8}, {5e10, 1e10}};
    c.softmax = {{1e4, 1e7}, {5e8, 4e8}};
    c.adam = {{1e4, 1e7}, {2e9, 1e9}};
    c.arithmetic = 3e10;
    c.dispatch = Time::ns(50);
    c.comm_slowdown = 1.5;
    p.memcpy = Bandwidth::gb_per_s(8);
    p.file_read = Bandwidth::gb_per_s(2);
    p.file_write = Bandwidth::gb_per_s(1);
    p.direct_io = true;
    MeasuredTransfer ar;
    ar.kind = CollectiveKind::all_reduce;
    ar.time = {{1024, 1 << 20}, {2e-6, 5e-4}};
    MeasuredTransfer pp;
    pp.p2p = true;
    pp.time = {{1024, 1 << 20}, {1e-6, 2.01e-4}};
    p.network.transfers = {ar, pp};
    return p;
}

std::string read_error(const Json& doc) {
    return bad_input_message([&] { profile_from_json(JsonView(doc, "p.json")); });
}

/// A GPU's profile as calibrate --backend cuda writes it (exec/cuda/profile.cpp fill_profile):
/// 16-bit GEMM tables, no arithmetic rate or comm_slowdown, pinned copies, no memory section.
Profile gpu_sample(int ranks_per_node = 1) {
    Profile p = sample(ranks_per_node);
    p.blas = "cuBLASLt";
    p.blas_threads = 1;
    MeasuredCompute& c = p.compute;
    c.gpu = "NVIDIA H200 (compute capability 9.0, 132 SMs, 139.8 GiB)";
    c.sms = 132;
    c.gemm_bf16 = c.gemm_fp16 = c.gemm;
    for (double& r : c.gemm_bf16.rate) r *= 10;
    for (double& r : c.gemm_fp16.rate) r *= 9;
    c.arithmetic = 0;
    c.comm_slowdown = 0;
    c.stream = {{1e6, 1e9}, {1e12, 4e12}};
    p.has_memory = false;
    // Host to device: 10 us at 64 KiB, 1 GiB in 20 ms; device to host slower: 12 us, 25 ms.
    p.h2d = {{65536, 1073741824}, {10e-6, 20e-3}};
    p.d2h = {{65536, 1073741824}, {12e-6, 25e-3}};
    return p;
}

Cluster localhost(int devices) {
    HostFacts f;
    f.cores = 8;
    f.memory = Bytes::gb(16);
    f.clock_ghz = 3;
    f.cpu_model = "Test CPU";
    f.scratch_free = Bytes::gb(10);
    return cluster_from_json(JsonView(localhost_json(f, devices), "localhost"));
}

}  // namespace

TEST_CASE("a profile survives its JSON round trip", "[topologies][profile]") {
    const Profile p = sample();
    const Json j = to_json(p);
    const Profile q = profile_from_json(JsonView(j, "p.json"));
    CHECK(to_json(q) == j);
    CHECK(q.ranks_per_node == 2);
    CHECK(q.compute.gemm.rate == p.compute.gemm.rate);
    CHECK(q.compute.flash_fwd_causal.rate == p.compute.flash_fwd_causal.rate);
    CHECK(q.compute.flash_bwd_causal.rate == p.compute.flash_bwd_causal.rate);
    CHECK(q.compute.dispatch == Time::ns(50));
    REQUIRE(q.network.transfers.size() == 2);
    CHECK(q.network.p2p(1) != nullptr);
    CHECK(q.network.collective(CollectiveKind::all_reduce, 2, 1) != nullptr);
    CHECK(q.network.collective(CollectiveKind::all_reduce, 4, 1) == nullptr);
}

TEST_CASE("bad profiles are bad_input errors naming the JSON path", "[topologies][profile]") {
    Json doc = to_json(sample());
    SECTION("an unknown key") {
        doc["compute"]["gemm_rate"] = 1;
        const std::string m = read_error(doc);
        CHECK_THAT(m, Contains("p.json: at /compute/gemm_rate"));
    }
    SECTION("another format") {
        doc["smolcluster_profile"] = 4;
        const std::string m = read_error(doc);
        CHECK_THAT(m, Contains("at /smolcluster_profile"));
        CHECK_THAT(m, Contains("format 3 (this smolcluster's)"));
    }
    SECTION("a CPU's profile with a GPU's 16-bit table") {
        doc["compute"]["gemm_bf16"] = doc["compute"]["gemm"];
        const std::string m = read_error(doc);
        CHECK_THAT(m, Contains("at /compute/gemm_bf16"));
        CHECK_THAT(m, Contains("no 16-bit GEMM table in a CPU's profile"));
    }
    SECTION("a CPU's profile with pinned copies") {
        doc["host_link"] = {{"h2d", doc["compute"]["stream"]}, {"d2h", doc["compute"]["stream"]}};
        CHECK_THAT(read_error(doc), Contains("no host_link (a GPU's pinned copies) in a profile without measured_on.gpu"));
    }
    SECTION("a GPU in a format-2 profile") {
        doc["smolcluster_profile"] = 2;
        doc["measured_on"]["gpu"] = "NVIDIA A100";
        CHECK_THAT(read_error(doc), Contains("no GPU in a format-2 profile"));
    }
    SECTION("a format-2 profile reads as before") {
        doc["smolcluster_profile"] = 2;
        const Profile p = profile_from_json(JsonView(doc, "p.json"));
        CHECK_FALSE(p.compute.on_gpu());
        CHECK(p.compute.comm_slowdown == 1.5);
    }
    SECTION("a format-1 profile's compute section, timed without the causal mask") {
        doc["smolcluster_profile"] = 1;
        doc["compute"].erase("flash_forward_causal");
        doc["compute"].erase("flash_backward_causal");
        const std::string m = read_error(doc);
        CHECK_THAT(m, Contains("at /compute"));
        CHECK_THAT(m, Contains("run smolcluster calibrate again"));
    }
    SECTION("a compute section without the causal tables") {
        doc["compute"].erase("flash_backward_causal");
        CHECK_THAT(read_error(doc), Contains("flash_backward_causal"));
    }
    SECTION("sizes that do not increase") {
        doc["compute"]["stream"]["bytes"] = {1e8, 1e4};
        CHECK_THAT(read_error(doc), Contains("at /compute/stream/bytes/1"));
    }
    SECTION("a rate that is not positive") {
        doc["compute"]["adam"]["parameters_per_s"][0] = 0;
        CHECK_THAT(read_error(doc), Contains("at /compute/adam/parameters_per_s/0"));
    }
    SECTION("a table of the wrong size") {
        doc["compute"]["gemm"]["flops_per_s"].erase(0);
        const std::string m = read_error(doc);
        CHECK_THAT(m, Contains("at /compute/gemm/flops_per_s"));
        CHECK_THAT(m, Contains("m × n × k = 8 values"));
    }
    SECTION("a curve with fewer times than sizes") {
        doc["network"][0]["seconds"].erase(0);
        CHECK_THAT(read_error(doc), Contains("at /network/0/seconds"));
    }
    SECTION("an unknown collective kind") {
        doc["network"][0]["kind"] = "allreduce";
        const std::string m = read_error(doc);
        CHECK_THAT(m, Contains("at /network/0/kind"));
        CHECK_THAT(m, Contains("did you mean 'all_reduce'?"));
    }
    SECTION("a slowdown below 1") {
        doc["compute"]["comm_slowdown"] = 0.5;
        CHECK_THAT(read_error(doc), Contains("at /compute/comm_slowdown"));
    }
    SECTION("two curves for one kind and group") {
        doc["network"].push_back(doc["network"][0]);
        CHECK_THAT(read_error(doc), Contains("one curve per kind, ranks and nodes"));
    }
}

TEST_CASE("a format-1 profile without compute still reads: its network and memory are unchanged", "[topologies][profile]") {
    Json doc = to_json(sample());
    doc.erase("compute");
    Json old = doc;
    old["smolcluster_profile"] = 1;
    const Profile p = profile_from_json(JsonView(old, "p.json"));
    CHECK_FALSE(p.has_compute);
    CHECK(p.network.transfers.size() == 2);
    CHECK(p.file_read.bytes_per_second() == Approx(2e9));
    CHECK(to_json(p) == doc);   // written back as this format
}

TEST_CASE("a profile replaces the cluster's leads with what was measured", "[topologies][profile]") {
    const Cluster c = apply_profile(localhost(2), sample(2), "p.json");
    const NodeGroup& g = c.groups[0];
    REQUIRE(g.device.measured);
    CHECK(g.device.measured->gemm.at(1024, 1024, 1024) == Approx(8e10));
    CHECK(g.device.launch_overhead == Time::ns(50));
    CHECK(g.device.comm_slowdown == 1.5);
    CHECK(g.device.memory_bandwidth.bytes_per_second() == Approx(1e10));   // the largest pass's rate
    CHECK(g.device.memory_efficiency == 1.0);
    CHECK(g.host_memory_bandwidth.bytes_per_second() == Approx(8e9));
    CHECK(g.nvme_read.bytes_per_second() == Approx(2e9));
    CHECK(g.nvme_write.bytes_per_second() == Approx(1e9));
    // Point to point within the host: 1 us at 1 KiB, 1 MiB in 201 us → 1 MiB / 200 us over two
    // shared-memory hops of half the latency each.
    CHECK(g.intra_link.latency == Time::ns(500));
    CHECK(g.intra_link.bandwidth.bytes_per_second() == Approx((1 << 20) / 2e-4));
    REQUIRE(c.measured_network);
    CHECK(c.profile == "p.json");
}

TEST_CASE("a profile measured with another number of ranks per node is refused", "[topologies][profile]") {
    const std::string m = bad_input_message([] { apply_profile(localhost(4), sample(2), "p.json"); });
    CHECK_THAT(m, Contains("measured with 2 ranks per node"));
    CHECK_THAT(m, Contains("4 devices per node"));
    CHECK_THAT(m, Contains("mpirun -np 4"));
}

TEST_CASE("a profile of collective curves alone keeps the cluster's compute and memory", "[topologies][profile]") {
    Profile p = sample(8);
    p.has_compute = p.has_memory = false;
    p.source = "nccl-tests on a published node";
    p.cpu_model = p.blas = p.mpi = "";
    p.cores = p.blas_threads = 1;
    const Json j = to_json(p);
    CHECK_FALSE(j.contains("compute"));
    CHECK_FALSE(j.contains("memory"));
    CHECK(j["measured_on"]["source"] == "nccl-tests on a published node");
    const Profile q = profile_from_json(JsonView(j, "p.json"));
    CHECK_FALSE(q.has_compute);
    CHECK_FALSE(q.has_memory);
    CHECK(to_json(q) == j);

    // Only a profile's compute and memory rates depend on the ranks sharing a host: these curves
    // fit a node of any size (2 devices here, 8 ranks measured).
    const Cluster before = localhost(2);
    const Cluster c = apply_profile(before, q, "p.json");
    const NodeGroup& g = c.groups[0];
    CHECK_FALSE(g.device.measured);
    CHECK(g.device.launch_overhead == before.groups[0].device.launch_overhead);
    CHECK(g.device.memory_bandwidth == before.groups[0].device.memory_bandwidth);
    CHECK(g.host_memory_bandwidth == before.groups[0].host_memory_bandwidth);
    REQUIRE(c.measured_network);
    CHECK(c.measured_network->collective(CollectiveKind::all_reduce, 2, 1) != nullptr);

    SECTION("measured_on still needs its date") {
        Json bad = j;
        bad["measured_on"].erase("date");
        CHECK_THAT(read_error(bad), Contains("date"));
    }
}

TEST_CASE("a GPU's profile survives its JSON round trip: 16-bit tables and pinned copies, no arithmetic or slowdown",
          "[topologies][profile]") {
    const Json j = to_json(gpu_sample());
    CHECK(j["smolcluster_profile"] == 3);
    CHECK(j["measured_on"]["gpu"] == "NVIDIA H200 (compute capability 9.0, 132 SMs, 139.8 GiB)");
    CHECK(j["measured_on"]["sms"] == 132);
    CHECK_FALSE(j["compute"].contains("arithmetic_flops_per_s"));
    CHECK_FALSE(j["compute"].contains("comm_slowdown"));
    CHECK_FALSE(j.contains("memory"));
    const Profile q = profile_from_json(JsonView(j, "gpu.json"));
    CHECK(to_json(q) == j);
    CHECK(q.compute.on_gpu());
    CHECK(q.compute.gemm_bf16.rate == gpu_sample().compute.gemm_bf16.rate);
    CHECK(q.compute.comm_slowdown == 0);
    CHECK(q.compute.arithmetic == 0);
    CHECK(q.h2d.y == gpu_sample().h2d.y);
    // The table a GEMM is priced from: a GPU's by its dtype (fp32 elements: the fp32 table), a
    // CPU's fp32 one whatever it is asked.
    CHECK(q.compute.gemm_table(DType::bf16, 2) == &q.compute.gemm_bf16);
    CHECK(q.compute.gemm_table(DType::fp16, 2) == &q.compute.gemm_fp16);
    CHECK(q.compute.gemm_table(DType::bf16, 4) == &q.compute.gemm);
    CHECK(q.compute.gemm_table(DType::fp32, 4) == &q.compute.gemm);
    const Profile cpu = sample();
    CHECK(cpu.compute.gemm_table(DType::bf16, 2) == &cpu.compute.gemm);

    SECTION("a GPU's profile needs both 16-bit tables") {
        Json bad = j;
        bad["compute"].erase("gemm_fp16");
        CHECK_THAT(read_error(bad), Contains("gemm_fp16"));
    }
    SECTION("an empty GPU name") {
        Json bad = j;
        bad["measured_on"]["gpu"] = "";
        CHECK_THAT(read_error(bad), Contains("at /measured_on/gpu"));
    }
    SECTION("a GPU's profile needs its SM count, a whole number above zero") {
        Json bad = j;
        bad["measured_on"].erase("sms");
        CHECK_THAT(read_error(bad), Contains("sms"));
        bad["measured_on"]["sms"] = 0;
        CHECK_THAT(read_error(bad), Contains("at /measured_on/sms"));
        bad["measured_on"]["sms"] = 13.5;
        CHECK_THAT(read_error(bad), Contains("at /measured_on/sms"));
    }
    SECTION("a CPU's profile with an SM count") {
        Json bad = to_json(sample());
        bad["measured_on"]["sms"] = 132;
        CHECK_THAT(read_error(bad), Contains("no streaming multiprocessors in a profile without measured_on.gpu"));
    }
}

TEST_CASE("a GPU's profile fits a node of any size, keeps the cluster's slowdown and sets the host link",
          "[topologies][profile]") {
    const Cluster before = cluster_preset("dgx-h100");
    const Cluster c = apply_profile(before, gpu_sample(1), "gpu.json");   // one GPU measured, eight in the node
    const NodeGroup& g = c.groups[0];
    REQUIRE(g.device.measured);
    CHECK(g.device.measured->on_gpu());
    CHECK(g.device.launch_overhead == Time::ns(50));
    CHECK(g.device.comm_slowdown == before.groups[0].device.comm_slowdown);   // not measured on a GPU
    CHECK(g.device.memory_bandwidth.bytes_per_second() == Approx(4e12));
    CHECK(g.host_memory_bandwidth == before.groups[0].host_memory_bandwidth);   // no memory section
    // The slower direction (device to host): 12 us, 1 GiB in 25 ms less the 12 us.
    CHECK(g.host_link.latency == Time::us(12));
    CHECK(g.host_link.bandwidth.bytes_per_second() == Approx(1073741824.0 / (25e-3 - 12e-6)));
    // The measured GPU's SMs replace the file's (an H100 PCIe has 114).
    CHECK(g.device.sms == 132);
    auto pcie = gpu_sample(1);
    pcie.compute.sms = 114;
    CHECK(apply_profile(before, pcie, "gpu.json").groups[0].device.sms == 114);
}

TEST_CASE("a GPU's profile on a CPU board is refused", "[topologies][profile]") {
    const std::string m = bad_input_message([] { apply_profile(localhost(1), gpu_sample(1), "gpu.json"); });
    CHECK_THAT(m, Contains("gpu.json was measured on a GPU (NVIDIA H200"));
    CHECK_THAT(m, Contains("devices are CPUs"));
}

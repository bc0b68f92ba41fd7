// The localhost cluster: this machine from the OS's figures, one node of CPU ranks that meet
// through shared memory.
#include <catch2/catch.hpp>

#include "topologies/localhost.hpp"
#include "topologies/topology.hpp"

using namespace smol;
using namespace smol::topo;

namespace {

HostFacts facts() {
    HostFacts f;
    f.hostname = "box";
    f.cpu_model = "Test CPU";
    f.cores = 8;
    f.memory = Bytes::gib(32);
    f.clock_ghz = 3.0;
    f.clock_source = "test";
    f.flops_per_cycle = 32;
    f.isa = "avx2+fma";
    f.scratch_free = Bytes::gb(100);
    return f;
}

}  // namespace

TEST_CASE("localhost splits the host's cores, memory and bandwidth over its ranks", "[topologies][localhost]") {
    const Cluster c = cluster_from_json(JsonView(localhost_json(facts(), 4), "localhost"));
    CHECK(c.name == "localhost");
    REQUIRE(c.groups.size() == 1);
    const NodeGroup& g = c.groups[0];
    CHECK(c.num_nodes() == 1);
    CHECK(c.num_devices() == 4);
    CHECK(g.intra == IntraKind::shm);
    CHECK(g.device.is_cpu);
    CHECK(g.device.unified_memory);
    // 8 cores × 3 GHz × 32 FLOP/cycle over 4 ranks.
    CHECK(g.device.peak_for(DType::fp32).per_second() == Approx(8 * 3e9 * 32 / 4));
    CHECK(g.device.memory.as_double() == Approx(Bytes::gib(32).as_double() / 4).epsilon(1e-9));
    CHECK(g.host_memory.as_double() == Approx(Bytes::gib(32).as_double()).epsilon(1e-9));
    // 6.4 GB/s per core, shared by the ranks; shared memory at half of it (a copy in and out).
    CHECK(g.host_memory_bandwidth.bytes_per_second() == Approx(8 * 6.4e9));
    CHECK(g.device.memory_bandwidth.bytes_per_second() == Approx(8 * 6.4e9 / 4));
    CHECK(g.intra_link.bandwidth.bytes_per_second() == Approx(8 * 6.4e9 / 2));
    CHECK(g.device.default_dtype() == DType::fp32);
    REQUIRE(g.nvme_capacity);
    CHECK(*g.nvme_capacity == Bytes::gb(100));
    CHECK(c.device_name(3) == "node0/cpu3");
}

TEST_CASE("one localhost rank has no shared-memory link", "[topologies][localhost]") {
    const Cluster c = cluster_from_json(JsonView(localhost_json(facts(), 1), "localhost"));
    CHECK(c.num_devices() == 1);
    CHECK(c.groups[0].intra == IntraKind::none);
}

TEST_CASE("two CPU ranks of one host talk through the shared-memory vertex", "[topologies][localhost]") {
    const Cluster c = cluster_from_json(JsonView(localhost_json(facts(), 2), "localhost"));
    const Topology t(c);
    const auto route = t.route(t.device_vertex(0), t.device_vertex(1));
    REQUIRE(route.size() == 2);
    CHECK(t.vertices()[static_cast<std::size_t>(t.links()[static_cast<std::size_t>(route[0])].to)].kind == VertexKind::shm);
    CHECK(t.route_bandwidth(t.device_vertex(0), t.device_vertex(1)).bytes_per_second() == Approx(8 * 6.4e9 / 2));
    CHECK(t.route_latency(t.device_vertex(0), t.device_vertex(1)) == Time::us(1));   // 0.5 us per link
    // Host memory is one link away from each rank, as on a board.
    CHECK(t.route(t.device_vertex(1), t.host_vertex(1)).size() == 1);
}

TEST_CASE("this machine's facts are read from the OS", "[topologies][localhost]") {
    const HostFacts f = read_host_facts();
    CHECK(f.cores >= 1);
    CHECK(f.memory > Bytes(0));
    CHECK_FALSE(f.cpu_model.empty());
    CHECK(f.flops_per_cycle >= 8);
    const Cluster c = cluster_preset("localhost");
    CHECK(c.num_devices() == (mpi_local_size_from_env() > 0 ? mpi_local_size_from_env() : f.cores));
}

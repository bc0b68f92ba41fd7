// The routed topology: vertex layout per node kind, routes (hops, latency, bandwidth), ECMP or d-mod-k over
// spines, and the rule that routes never pass through an endpoint.
#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "topologies/topology.hpp"

using namespace smol;
using namespace smol::topo;

namespace {

/// The vertices a route visits, source and destination included.
std::vector<VertexId> path_vertices(const Topology& t, VertexId a, VertexId b) {
    std::vector<VertexId> out{a};
    for (LinkId l : t.route(a, b)) {
        CHECK(t.links()[l].from == out.back());  // links chain
        out.push_back(t.links()[l].to);
    }
    return out;
}

std::vector<std::string> path_names(const Topology& t, VertexId a, VertexId b) {
    std::vector<std::string> out;
    for (VertexId v : path_vertices(t, a, b)) out.push_back(t.vertices()[v].name);
    return out;
}

std::vector<VertexKind> path_kinds(const Topology& t, VertexId a, VertexId b) {
    std::vector<VertexKind> out;
    for (VertexId v : path_vertices(t, a, b)) out.push_back(t.vertices()[v].kind);
    return out;
}

bool is_endpoint(VertexKind k) {
    return k == VertexKind::device || k == VertexKind::host_memory || k == VertexKind::nvme;
}

int count_kind(const Topology& t, VertexKind k) {
    int n = 0;
    for (const auto& v : t.vertices()) n += v.kind == k;
    return n;
}

int rank_of(const Cluster& c, int node, int local) { return c.first_rank_of_node(node) + local; }

}  // namespace

TEST_CASE("DGX: GPUs inside a node talk through the NVSwitch", "[topologies][topology]") {
    const Topology t(cluster_preset("dgx-a100"));
    const VertexId g0 = t.device_vertex(0), g1 = t.device_vertex(1);
    CHECK(t.vertices()[g0].name == "node0/gpu0");
    REQUIRE(t.route(g0, g1).size() == 2);
    CHECK(path_names(t, g0, g1) == std::vector<std::string>{"node0/gpu0", "node0/nvswitch", "node0/gpu1"});
    CHECK(t.link_name(t.route(g0, g1)[0]) == "node0/gpu0->node0/nvswitch");
    CHECK(t.route_bandwidth(g0, g1).to_gb_per_s() == Approx(300));
    CHECK(t.route_latency(g0, g1) == Time::us(1.0));  // 2 × 0.5 us NVSwitch hops
    // One node: host, nvme, 8 GPUs, 8 NICs, the PCIe root, 8 PCIe switches, the NVSwitch, and one
    // leaf per rail (no spines for a single pod).
    CHECK(t.vertices().size() == 1 + 1 + 8 + 8 + 1 + 8 + 1 + 8);
    CHECK(count_kind(t, VertexKind::network_switch) == 8);
}

TEST_CASE("DGX: routes between nodes go through NICs and leaves", "[topologies][topology]") {
    const Cluster c = cluster_preset("dgx-a100").with_nodes(2);
    const Topology t(c);
    const VertexId a = t.device_vertex(rank_of(c, 0, 0)), b = t.device_vertex(rank_of(c, 1, 0));
    CHECK(path_names(t, a, b) == std::vector<std::string>{"node0/gpu0", "node0/pcie0", "node0/nic0", "leaf0",
                                                          "node1/nic0", "node1/pcie0", "node1/gpu0"});
    CHECK(t.route_bandwidth(a, b).to_gb_per_s() == Approx(25));
    // 4 PCIe hops of 0.25 us, 2 NIC hops of 1 us, one switch of 0.13 us.
    CHECK(t.route_latency(a, b).to_us() == Approx(4 * 0.25 + 2 * 1.0 + 0.13));

    SECTION("GPU k uses rail k") {
        for (int k = 0; k < 8; ++k) {
            const auto names = path_names(t, t.device_vertex(rank_of(c, 0, k)), t.device_vertex(rank_of(c, 1, k)));
            REQUIRE(names.size() == 7);
            CHECK(names[2] == "node0/nic" + std::to_string(k));
            CHECK(names[3] == "leaf" + std::to_string(k));
        }
    }
    SECTION("cross-rail routes stay shortest and never cross a device") {
        const auto kinds = path_kinds(t, t.device_vertex(rank_of(c, 0, 0)), t.device_vertex(rank_of(c, 1, 3)));
        CHECK(kinds.size() == 9);
        for (std::size_t i = 1; i + 1 < kinds.size(); ++i) CHECK_FALSE(is_endpoint(kinds[i]));
    }
}

TEST_CASE("DGX: offload routes go over PCIe to host memory and NVMe", "[topologies][topology]") {
    const Topology t(cluster_preset("dgx-a100"));
    const VertexId g = t.device_vertex(5);
    CHECK(path_names(t, g, t.host_vertex(5)) ==
          std::vector<std::string>{"node0/gpu5", "node0/pcie5", "node0/pcie", "node0/host"});
    CHECK(t.route_bandwidth(g, t.host_vertex(5)).to_gb_per_s() == Approx(31.5));
    REQUIRE(t.nvme_vertex(5) >= 0);
    CHECK(t.route_bandwidth(t.nvme_vertex(5), g).to_gb_per_s() == Approx(7.45));  // read
    CHECK(t.route_bandwidth(g, t.nvme_vertex(5)).to_gb_per_s() == Approx(6.9));   // write
    CHECK(t.route(g, t.host_vertex(5)).size() == t.route(t.host_vertex(5), g).size());
}

TEST_CASE("DGX-2: two GPUs share each NIC", "[topologies][topology]") {
    const Cluster c = cluster_preset("dgx2-v100").with_nodes(2);
    const Topology t(c);
    CHECK(count_kind(t, VertexKind::nic) == 16);
    const auto names = path_names(t, t.device_vertex(rank_of(c, 0, 3)), t.device_vertex(rank_of(c, 1, 3)));
    REQUIRE(names.size() == 7);
    CHECK(names[2] == "node0/nic1");
    CHECK(t.route_bandwidth(t.device_vertex(0), t.device_vertex(15)).to_gb_per_s() == Approx(150));
    // GPUs 0 and 1 share a PCIe switch, as short a path as the NVSwitch: the wider one wins.
    CHECK(path_names(t, t.device_vertex(0), t.device_vertex(1)) ==
          std::vector<std::string>{"node0/gpu0", "node0/nvswitch", "node0/gpu1"});
    for (int i = 0; i < 16; ++i) {
        for (int j = 0; j < 16; ++j) {
            if (i == j) continue;
            INFO("gpu" << i << " -> gpu" << j);
            CHECK(t.route_bandwidth(t.device_vertex(i), t.device_vertex(j)).to_gb_per_s() == Approx(150));
        }
    }
}

TEST_CASE("Pi cluster: pi → nic → switch → nic → pi", "[topologies][topology]") {
    const Topology t(cluster_preset("pi5-1gbe"));
    const VertexId a = t.device_vertex(0), b = t.device_vertex(2);
    CHECK(path_names(t, a, b) ==
          std::vector<std::string>{"node0/cpu0", "node0/nic0", "switch", "node2/nic0", "node2/cpu0"});
    CHECK(path_kinds(t, a, b) == std::vector<VertexKind>{VertexKind::device, VertexKind::nic,
                                                         VertexKind::network_switch, VertexKind::nic,
                                                         VertexKind::device});
    // host links 0 us, NIC hops 10 us each, one switch 2 us.
    CHECK(t.route_latency(a, b) == Time::us(0 + 10 + 10 + 0) + Time::us(2));
    CHECK(t.route_bandwidth(a, b).to_gb_per_s() == Approx(0.125));
    // The host memory is one memory-bandwidth link away: the board's device is its host.
    CHECK(t.route(a, t.host_vertex(0)).size() == 1);
    CHECK(t.route_bandwidth(a, t.host_vertex(0)).to_gb_per_s() == Approx(17.1));
    CHECK(t.nvme_vertex(0) == -1);
}

TEST_CASE("Jetson: unified memory keeps a host vertex one link away", "[topologies][topology]") {
    const Topology t(cluster_preset("jetson-orin-nano"));
    CHECK(t.vertices()[t.device_vertex(1)].name == "node1/gpu0");
    CHECK(t.route(t.device_vertex(1), t.host_vertex(1)).size() == 1);
    CHECK(t.route_bandwidth(t.device_vertex(1), t.host_vertex(1)).to_gb_per_s() == Approx(68));
}

TEST_CASE("Workstation: GPUs peer through the PCIe root", "[topologies][topology]") {
    const Topology t(cluster_preset("workstation-4gpu"));
    CHECK(path_names(t, t.device_vertex(0), t.device_vertex(3)) ==
          std::vector<std::string>{"node0/gpu0", "node0/pcie", "node0/gpu3"});
    CHECK(t.route_bandwidth(t.device_vertex(0), t.device_vertex(3)).to_gb_per_s() == Approx(31.5));
    CHECK(t.route_latency(t.device_vertex(0), t.device_vertex(3)) == Time::us(1.0));
    CHECK(count_kind(t, VertexKind::nvswitch) == 0);
}

TEST_CASE("Fat tree: spines only between pods, and routes spread over them", "[topologies][topology]") {
    SECTION("one pod has no spines") {
        const Topology t(cluster_preset("dgx-a100").with_nodes(20));
        for (const auto& v : t.vertices()) CHECK(v.name.rfind("spine", 0) != 0);
    }
    SECTION("two pods: every cross-pod route climbs exactly one spine, and several spines are used") {
        const Cluster c = cluster_preset("dgx-a100").with_nodes(40);  // 20 nodes per leaf → 2 pods
        const Topology t(c);
        CHECK(count_kind(t, VertexKind::network_switch) == 2 * 8 + 20);
        std::set<std::string> spines;
        for (int i = 0; i < 20; ++i) {
            for (int k = 0; k < 8; ++k) {
                const auto names = path_names(t, t.device_vertex(rank_of(c, i, k)), t.device_vertex(rank_of(c, 20 + i, k)));
                int climbed = 0;
                for (const auto& n : names) {
                    if (n.rfind("spine", 0) == 0) {
                        ++climbed;
                        spines.insert(n);
                    }
                }
                CHECK(climbed == 1);
                CHECK(names.size() == 9);
            }
        }
        CHECK(spines.size() > 1);
        CHECK(spines.size() >= 10);  // 160 routes over 20 spines
    }
    SECTION("destination routing (d-mod-k): node i of one pod reaches node i of another by spine i, whatever the source") {
        Cluster c = cluster_preset("dgx-a100").with_nodes(60);   // 3 pods of 20
        c.network.routing = Routing::destination;
        const Topology t(c);
        auto spine_of = [&](int src_node, int dst_node, int k) {
            std::string spine;
            for (const auto& n : path_names(t, t.device_vertex(rank_of(c, src_node, k)), t.device_vertex(rank_of(c, dst_node, k))))
                if (n.rfind("spine", 0) == 0) spine = n;
            return spine;
        };
        for (int k = 0; k < 8; ++k) {
            std::set<std::string> used;
            for (int i = 0; i < 20; ++i) {
                // A shift between pods: 20 routes on rail k, each over a spine of its own.
                const std::string s = spine_of(i, 20 + i, k);
                CHECK(s == "spine" + std::to_string(i));
                used.insert(s);
                // The spine is the destination's: from any node of any other pod.
                CHECK(spine_of(40 + (i + 7) % 20, 20 + i, k) == s);
            }
            CHECK(used.size() == 20);
        }
    }
    SECTION("oversubscription thins the spine layer") {
        Cluster c = cluster_preset("dgx-a100").with_nodes(40);
        c.network.oversubscription = 2.0;
        const Topology t(c);
        CHECK(count_kind(t, VertexKind::network_switch) == 2 * 8 + 10);
    }
}

TEST_CASE("Routes are symmetric in hops and cached and never pass through an endpoint", "[topologies][topology]") {
    const char* name = GENERATE("dgx-a100", "dgx2-v100", "workstation-4gpu", "pi5-1gbe", "jetson-agx-orin", "dgx-h100",
                                "hgx-a100-4hdr", "grand-teton-h100", "ndm-a100-v4");
    INFO(name);
    Cluster c = cluster_preset(name);
    if (c.num_nodes() == 1) c = c.with_nodes(3);
    if (c.network.fabric == FabricKind::fat_tree) c.network.nodes_per_leaf = 2;  // 2 pods, with spines
    const Topology t(c);
    std::vector<VertexId> ends;
    for (VertexId v = 0; v < static_cast<VertexId>(t.vertices().size()); ++v) {
        if (is_endpoint(t.vertices()[v].kind)) ends.push_back(v);
    }
    for (VertexId a : ends) {
        for (VertexId b : ends) {
            const auto r = t.route(a, b);
            if (a == b) {
                CHECK(r.empty());
                CHECK(std::isinf(t.route_bandwidth(a, b).bytes_per_second()));
                continue;
            }
            REQUIRE_FALSE(r.empty());
            CHECK(r.size() == t.route(b, a).size());
            CHECK(t.links()[r.front()].from == a);
            CHECK(t.links()[r.back()].to == b);
            for (std::size_t i = 0; i + 1 < r.size(); ++i) {
                const VertexKind k = t.vertices()[t.links()[r[i]].to].kind;
                if (is_endpoint(k)) FAIL("route " << t.vertices()[a].name << " -> " << t.vertices()[b].name
                                                  << " passes through " << t.vertices()[t.links()[r[i]].to].name);
            }
            CHECK(t.route(a, b).data() == r.data());  // cached, stable
            CHECK(t.route_bandwidth(a, b).bytes_per_second() > 0);
        }
    }
}

TEST_CASE("Mixed cluster: groups share one switch", "[topologies][topology]") {
    const Cluster c = load_cluster(std::string(SMOL_TEST_DATA) + "/cluster-mixed-pi.json");
    const Topology t(c);
    CHECK(t.vertices()[t.device_vertex(3)].name == "node3/cpu0");
    CHECK(path_names(t, t.device_vertex(1), t.device_vertex(2)) ==
          std::vector<std::string>{"node1/cpu0", "node1/nic0", "switch", "node2/nic0", "node2/cpu0"});
}

TEST_CASE("A node cut short by --devices keeps a working topology", "[topologies][topology]") {
    const Cluster c = cluster_preset("dgx2-v100").with_nodes(2).first_devices(21);
    const Topology t(c);
    CHECK(t.vertices()[t.device_vertex(20)].name == "node1/gpu4");
    const auto names = path_names(t, t.device_vertex(4), t.device_vertex(20));
    REQUIRE(names.size() == 7);
    CHECK(names[2] == "node0/nic2");
    CHECK(names[4] == "node1/nic2");
}

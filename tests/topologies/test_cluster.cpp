// Cluster descriptions: presets against their public sources (datasheets, specifications), rank arithmetic, --nodes / --devices,
// and one SECTION per bad input (each a bad_input smol::Error naming the file and JSON path).
#include <catch2/catch.hpp>

#include <map>

#include <algorithm>
#include <functional>
#include <string>

#include "core/error.hpp"
#include "core/json.hpp"
#include "topologies/cluster.hpp"
#include "test_support.hpp"

using namespace smol;
using namespace smol::topo;
using Catch::Matchers::Contains;
using smol::test::bad_input_message;

namespace {

std::string data_file(const std::string& name) { return std::string(SMOL_TEST_DATA) + "/" + name; }


double tflops(const DeviceKind& d, DType t) { return d.peak_for(t).to_tflops(); }
double gb_per_s(Bandwidth b) { return b.to_gb_per_s(); }

/// The dgx-a100 preset file as a mutable JSON document, for the bad-input sections.
Json dgx_a100_json() { return load_json_file(std::string(SMOL_SOURCE_DIR) + "/topologies/presets/dgx-a100.json"); }

std::string load_error(const Json& doc) {
    return bad_input_message([&] { cluster_from_json(JsonView(doc, "cluster.json")); });
}

}  // namespace

TEST_CASE("every preset loads and names itself and its sources", "[topologies][cluster]") {
    const auto names = cluster_preset_names();
    for (const char* expected : {"pi5-1gbe", "pi4-1gbe", "jetson-orin-nano", "jetson-agx-orin", "workstation-4gpu",
                                 "dgx-a100", "dgx-h100", "dgx2-v100", "hgx-a100-4hdr", "grand-teton-h100",
                                 "ndm-a100-v4", "hgx-h200"}) {
        CHECK(std::find(names.begin(), names.end(), expected) != names.end());
    }
    for (const auto& name : names) {
        INFO(name);
        const Cluster c = cluster_preset(name);
        CHECK(c.name == name);
        CHECK_FALSE(c.sources.empty());
        CHECK_FALSE(c.description.empty());
        REQUIRE(c.groups.size() == 1);
        CHECK(c.num_devices() >= 1);
        // Boards default to 4 nodes; workstation and DGX nodes to 1 (--nodes scales them).
        const bool board = name.starts_with("pi") || name.starts_with("jetson");
        CHECK(c.num_nodes() == (board ? 4 : 1));
        CHECK(load_cluster(name).num_devices() == c.num_devices());
    }
}

TEST_CASE("preset figures are their sources'", "[topologies][cluster]") {
    SECTION("dgx-a100") {
        const Cluster c = cluster_preset("dgx-a100");
        const NodeGroup& g = c.groups[0];
        CHECK(g.devices_per_node == 8);
        CHECK(tflops(g.device, DType::bf16) == Approx(312));
        CHECK(tflops(g.device, DType::fp32) == Approx(19.5));
        CHECK(g.device.memory == Bytes::gib(80));   // vendors' "80 GB" of HBM is 80 GiB (JEDEC)
        CHECK(gb_per_s(g.device.memory_bandwidth) == Approx(2039));
        CHECK(g.intra == IntraKind::nvswitch);
        CHECK(gb_per_s(g.intra_link.bandwidth) == Approx(300));  // 600 GB/s total NVLink
        CHECK(gb_per_s(g.host_link.bandwidth) == Approx(31.5));  // PCIe Gen4 x16
        CHECK(g.nics == 8);
        CHECK(gb_per_s(g.nic_link.bandwidth) == Approx(25));     // HDR
        REQUIRE(g.nvme_capacity);
        CHECK(gb_per_s(g.nvme_read) == Approx(7.45));
        CHECK(gb_per_s(g.nvme_write) == Approx(6.9));
        CHECK(c.network.fabric == FabricKind::fat_tree);
        CHECK(g.device.default_dtype() == DType::bf16);
    }
    SECTION("dgx-h100") {
        const NodeGroup g = cluster_preset("dgx-h100").groups[0];   // a copy: the Cluster is a temporary
        CHECK(tflops(g.device, DType::bf16) == Approx(989));
        CHECK(tflops(g.device, DType::fp32) == Approx(67));
        CHECK(gb_per_s(g.device.memory_bandwidth) == Approx(3350));
        CHECK(gb_per_s(g.intra_link.bandwidth) == Approx(450));
        CHECK(gb_per_s(g.host_link.bandwidth) == Approx(63.0));  // PCIe Gen5 x16
        CHECK(gb_per_s(g.nic_link.bandwidth) == Approx(50));     // NDR
    }
    SECTION("GEMM curves and attention rates: the H100 parts' from OpenXLA's table and the FlashAttention-3 paper; others one curve") {
        for (const char* name : {"dgx-h100", "grand-teton-h100", "hgx-h200"}) {
            const DeviceKind d = cluster_preset(name).groups[0].device;
            CHECK(d.gemm_half_dim == 88);
            CHECK(d.gemm_fixed_time == Time::ns(6250));
            REQUIRE(d.attention_rates != nullptr);
            CHECK(d.attention_rates->name == "h100-sxm5");
            CHECK(d.flash_half_dim == 0);
        }
        const DeviceKind a100 = cluster_preset("dgx-a100").groups[0].device;
        REQUIRE(a100.attention_rates != nullptr);
        CHECK(a100.attention_rates->name == "a100-sxm4");
        CHECK(cluster_preset("workstation-4gpu").groups[0].device.attention_rates == nullptr);
        CHECK(a100.flash_half_dim == 0);   // the GEMM curve's size
        CHECK(a100.gemm_fixed_time == Time::zero());
    }
    SECTION("hgx-h200: the H200 datasheet's dense figures; --devices 1 is the one-GPU machine") {
        const Cluster c = cluster_preset("hgx-h200");
        const NodeGroup& g = c.groups[0];
        CHECK(g.devices_per_node == 8);
        CHECK(tflops(g.device, DType::bf16) == Approx(989.5));   // 1,979 with sparsity
        CHECK(tflops(g.device, DType::fp16) == Approx(989.5));
        CHECK(tflops(g.device, DType::fp32) == Approx(67));
        CHECK(g.device.memory == Bytes::gib(141));
        CHECK(gb_per_s(g.device.memory_bandwidth) == Approx(4800));
        CHECK(g.device.compute_capability == Approx(9.0));
        CHECK(g.cpu_vendor == CpuVendor::intel);                  // DGX H200: 2 × Xeon Platinum 8480C
        CHECK(g.intra == IntraKind::nvswitch);
        CHECK(gb_per_s(g.intra_link.bandwidth) == Approx(450));  // 900 GB/s total NVLink 4
        CHECK(gb_per_s(g.host_link.bandwidth) == Approx(63.0));  // PCIe Gen5 x16
        CHECK(g.nics == 8);
        CHECK(gb_per_s(g.nic_link.bandwidth) == Approx(50));     // ConnectX-7, 400 Gb/s
        CHECK(g.host_memory == Bytes::gib(2048));
        const Cluster one = c.first_devices(1);
        CHECK(one.num_devices() == 1);
        CHECK_FALSE(one.device_kind(0).is_cpu);
        CHECK(one.device_kind(0).default_dtype() == DType::bf16);
    }
    SECTION("every GPU preset states its SMs (the architecture whitepapers'), no CPU board does") {
        const std::map<std::string, int> sms{{"dgx-a100", 108},         {"hgx-a100-4hdr", 108}, {"ndm-a100-v4", 108},
                                             {"dgx-h100", 132},         {"grand-teton-h100", 132}, {"hgx-h200", 132},
                                             {"dgx2-v100", 80},         {"workstation-4gpu", 128}, {"jetson-agx-orin", 16},
                                             {"jetson-orin-nano", 8},   {"pi5-1gbe", 0},        {"pi4-1gbe", 0},
                                             {"localhost", 0}};
        for (const std::string& name : cluster_preset_names()) {
            INFO(name);
            REQUIRE(sms.count(name) == 1);
            CHECK(cluster_preset(name).groups[0].device.sms == sms.at(name));
        }
    }
    SECTION("dgx2-v100: 8 NICs for 16 GPUs, no bf16") {
        const NodeGroup g = cluster_preset("dgx2-v100").groups[0];   // a copy: the Cluster is a temporary
        CHECK(g.devices_per_node == 16);
        CHECK(g.nics == 8);
        CHECK(g.nic_of(0) == 0);
        CHECK(g.nic_of(3) == 1);
        CHECK(g.nic_of(15) == 7);
        CHECK(tflops(g.device, DType::fp16) == Approx(125));
        CHECK(tflops(g.device, DType::fp32) == Approx(15.7));
        CHECK_FALSE(g.device.supports(DType::bf16));
        CHECK(g.device.default_dtype() == DType::fp16);
        CHECK_THAT(bad_input_message([&] { g.device.peak_for(DType::bf16); }), Contains("no bf16"));
        CHECK(g.device.memory == Bytes::gib(32));
        CHECK(gb_per_s(g.device.memory_bandwidth) == Approx(900));
        CHECK(gb_per_s(g.intra_link.bandwidth) == Approx(150));  // 6 × 25 GB/s per direction
        CHECK(gb_per_s(g.host_link.bandwidth) == Approx(15.75)); // PCIe Gen3 x16
        CHECK(gb_per_s(g.nic_link.bandwidth) == Approx(12.5));   // EDR
        // 2 × Xeon Platinum 8168: 48 cores × 2.7 GHz × 32 fp32 FLOP per cycle (AVX-512, two FMA units).
        REQUIRE(g.host_peak);
        CHECK(g.host_peak->per_second() == Approx(48 * 2.7e9 * 32));
        CHECK(g.host_memory == Bytes::gib(1.5 * 1024));
    }
    SECTION("hgx-a100-4hdr: vTrain's node, 4 HDR NICs for 8 GPUs") {
        const Cluster c = cluster_preset("hgx-a100-4hdr");
        const NodeGroup& g = c.groups[0];
        CHECK(g.devices_per_node == 8);
        CHECK(tflops(g.device, DType::fp16) == Approx(312));
        CHECK(g.device.memory == Bytes::gib(80));   // vendors' "80 GB" of HBM is 80 GiB (JEDEC)
        CHECK(gb_per_s(g.device.memory_bandwidth) == Approx(2039));
        CHECK(gb_per_s(g.intra_link.bandwidth) == Approx(300));
        CHECK(g.nics == 4);                                      // vTrain: 800 Gb/s per node
        CHECK(g.nics * gb_per_s(g.nic_link.bandwidth) == Approx(800.0 / 8));
        CHECK(g.nic_of(1) == 0);
        CHECK(g.nic_of(7) == 3);
        CHECK(c.network.fabric == FabricKind::single_switch);
    }
    SECTION("grand-teton-h100: 400 Gb/s RoCE per GPU, pods of 3,072 GPUs, 1:7 between pods") {
        const Cluster c = cluster_preset("grand-teton-h100");
        const NodeGroup& g = c.groups[0];
        CHECK(tflops(g.device, DType::bf16) == Approx(989));
        CHECK(g.device.memory == Bytes::gib(80));   // vendors' "80 GB" of HBM is 80 GiB (JEDEC)
        CHECK(gb_per_s(g.device.memory_bandwidth) == Approx(3350));
        CHECK(gb_per_s(g.intra_link.bandwidth) == Approx(450));
        CHECK(g.nics == 8);
        CHECK(gb_per_s(g.nic_link.bandwidth) == Approx(400.0 / 8));
        CHECK(c.network.nodes_per_leaf * g.devices_per_node == 3072);
        CHECK(c.network.oversubscription == Approx(7));
        CHECK(c.network.routing == Routing::ecmp);   // Ethernet hashes each flow
        for (const char* ib : {"dgx-a100", "dgx-h100", "dgx2-v100", "hgx-h200"})
            CHECK(cluster_preset(ib).network.routing == Routing::destination);   // InfiniBand forwards by destination
    }
    SECTION("ndm-a100-v4: 8 x 200 Gb/s HDR per VM, 1,900 GiB host memory") {
        const NodeGroup g = cluster_preset("ndm-a100-v4").groups[0];   // a copy: the Cluster is a temporary
        CHECK(g.device.memory == Bytes::gib(80));   // vendors' "80 GB" of HBM is 80 GiB (JEDEC)
        CHECK(g.nics == 8);
        CHECK(gb_per_s(g.nic_link.bandwidth) == Approx(25));
        CHECK(g.host_memory == Bytes::gib(1900));
        CHECK_FALSE(g.nvme_capacity);  // Azure publishes no rates for its temporary NVMe
    }
    SECTION("pi5-1gbe") {
        const Cluster c = cluster_preset("pi5-1gbe");
        const NodeGroup& g = c.groups[0];
        CHECK(g.device.is_cpu);
        CHECK(g.device.peak_for(DType::fp32).per_second() == Approx(2 * 30.2e9));  // 2 × HPL FP64
        CHECK_FALSE(g.device.supports(DType::bf16));
        CHECK(g.device.default_dtype() == DType::fp32);
        CHECK(g.device.memory == Bytes::gib(8));
        CHECK(gb_per_s(g.device.memory_bandwidth) == Approx(17.1));
        CHECK(gb_per_s(g.nic_link.bandwidth) == Approx(0.125));  // 1 GbE line rate
        CHECK(g.intra == IntraKind::none);
        CHECK(c.network.fabric == FabricKind::single_switch);
    }
    SECTION("pi4-1gbe") {
        const NodeGroup g = cluster_preset("pi4-1gbe").groups[0];   // a copy: the Cluster is a temporary
        CHECK(g.device.peak_for(DType::fp32).per_second() == Approx(2 * 11.9e9));
        CHECK(gb_per_s(g.nic_link.bandwidth) == Approx(0.125));
    }
    SECTION("jetson-orin-nano") {
        const NodeGroup g = cluster_preset("jetson-orin-nano").groups[0];   // a copy: the Cluster is a temporary
        CHECK(tflops(g.device, DType::fp16) == Approx(40.0 / 2 / 2));  // 40 TOPS INT8 sparse
        CHECK(g.device.unified_memory);
        CHECK_FALSE(g.device.is_cpu);
        CHECK(g.device.memory == Bytes::gib(8));
        CHECK(gb_per_s(g.device.memory_bandwidth) == Approx(68));
    }
    SECTION("jetson-agx-orin") {
        const NodeGroup g = cluster_preset("jetson-agx-orin").groups[0];   // a copy: the Cluster is a temporary
        CHECK(tflops(g.device, DType::fp16) == Approx(170.0 / 2 / 2));
        CHECK(tflops(g.device, DType::fp32) == Approx(5.3));
        CHECK(g.device.memory == Bytes::gib(64));
        CHECK(gb_per_s(g.device.memory_bandwidth) == Approx(204.8));
        CHECK(gb_per_s(g.nic_link.bandwidth) == Approx(1.25));  // 10 GbE
    }
    SECTION("workstation-4gpu") {
        const NodeGroup g = cluster_preset("workstation-4gpu").groups[0];   // a copy: the Cluster is a temporary
        CHECK(g.devices_per_node == 4);
        CHECK(g.intra == IntraKind::pcie);
        CHECK(gb_per_s(g.intra_link.bandwidth) == Approx(31.5));
        CHECK(g.device.memory == Bytes::gib(24));
        CHECK(gb_per_s(g.device.memory_bandwidth) == Approx(1008));
        CHECK(gb_per_s(g.nic_link.bandwidth) == Approx(1.25));
    }
}

TEST_CASE("ranks are numbered group by group then node by node", "[topologies][cluster]") {
    SECTION("dgx-a100 × 2") {
        const Cluster c = cluster_preset("dgx-a100").with_nodes(2);
        CHECK(c.num_nodes() == 2);
        CHECK(c.num_devices() == 16);
        CHECK(c.device_name(0) == "node0/gpu0");
        CHECK(c.device_name(11) == "node1/gpu3");
        const DeviceRef d = c.device(11);
        CHECK(d.group == 0);
        CHECK(d.node == 1);
        CHECK(d.local == 3);
        CHECK(c.first_rank_of_node(1) == 8);
        CHECK(c.device_kind(15).name == "a100-80gb");
    }
    SECTION("mixed Pi cluster from a file") {
        const Cluster c = load_cluster(data_file("cluster-mixed-pi.json"));
        CHECK(c.name == "mixed-pi");
        REQUIRE(c.groups.size() == 2);
        CHECK(c.num_nodes() == 4);
        CHECK(c.num_devices() == 4);
        CHECK(c.device_name(0) == "node0/cpu0");
        CHECK(c.device_name(3) == "node3/cpu0");
        CHECK(c.group_of(1).name == "pi5");
        CHECK(c.group_of(2).name == "pi4");
        CHECK(c.device_kind(3).peak_for(DType::fp32).per_second() == Approx(23.8e9));
        CHECK(c.first_rank_of_node(2) == 2);
        // Defaults: a CPU is unified memory, efficiencies 0.8 unless given.
        CHECK(c.groups[0].device.unified_memory);
        CHECK(c.groups[0].device.gemm_efficiency == Approx(0.8));
        CHECK(c.groups[1].device.gemm_efficiency == Approx(0.9));
    }
}

TEST_CASE("with_nodes (--nodes) scales a single-group cluster", "[topologies][cluster]") {
    const Cluster dgx = cluster_preset("dgx-a100");
    CHECK(dgx.with_nodes(4).num_devices() == 32);
    CHECK(dgx.with_nodes(4).num_nodes() == 4);
    CHECK(cluster_preset("pi5-1gbe").with_nodes(16).num_devices() == 16);

    SECTION("zero nodes") {
        CHECK_THAT(bad_input_message([&] { dgx.with_nodes(0); }), Contains("--nodes must be at least 1, found 0"));
    }
    SECTION("negative nodes") {
        CHECK_THAT(bad_input_message([&] { dgx.with_nodes(-3); }), Contains("found -3"));
    }
    SECTION("a cluster of several groups") {
        const Cluster mixed = load_cluster(data_file("cluster-mixed-pi.json"));
        const std::string m = bad_input_message([&] { mixed.with_nodes(8); });
        CHECK_THAT(m, Contains("node groups"));
        CHECK_THAT(m, Contains("pi5 (2 nodes)"));
    }
}

TEST_CASE("first_devices (--devices) takes the first devices", "[topologies][cluster]") {
    SECTION("whole nodes") {
        const Cluster c = cluster_preset("dgx-a100").with_nodes(4).first_devices(16);
        CHECK(c.num_nodes() == 2);
        CHECK(c.num_devices() == 16);
        CHECK(c.groups.size() == 1);
    }
    SECTION("a node cut short becomes a group of its own") {
        const Cluster c = cluster_preset("dgx-a100").with_nodes(2).first_devices(12);
        REQUIRE(c.groups.size() == 2);
        CHECK(c.groups[0].count == 1);
        CHECK(c.groups[1].count == 1);
        CHECK(c.groups[1].devices_per_node == 4);
        CHECK(c.groups[1].nics == 4);
        CHECK(c.num_devices() == 12);
        CHECK(c.device_name(11) == "node1/gpu3");
    }
    SECTION("fewer devices than one node") {
        const Cluster c = cluster_preset("workstation-4gpu").first_devices(2);
        CHECK(c.num_devices() == 2);
        CHECK(c.num_nodes() == 1);
    }
    SECTION("shared NICs keep their sharing") {
        const Cluster c = cluster_preset("dgx2-v100").first_devices(5);
        const NodeGroup& g = c.groups.at(0);
        CHECK(g.devices_per_node == 5);
        CHECK(g.nics == 3);
        CHECK(g.nic_of(1) == 0);
        CHECK(g.nic_of(2) == 1);
        CHECK(g.nic_of(4) == 2);
    }
    SECTION("across groups") {
        const Cluster c = load_cluster(data_file("cluster-mixed-pi.json")).first_devices(3);
        REQUIRE(c.groups.size() == 2);
        CHECK(c.groups[0].count == 2);
        CHECK(c.groups[1].count == 1);
        CHECK(c.group_of(2).name == "pi4");
    }
    SECTION("zero devices") {
        CHECK_THAT(bad_input_message([] { cluster_preset("dgx-a100").first_devices(0); }),
                   Contains("--devices must be between 1 and 8"));
    }
    SECTION("more devices than the cluster has") {
        CHECK_THAT(bad_input_message([] { cluster_preset("dgx-a100").first_devices(9); }), Contains("found 9"));
    }
}

TEST_CASE("presets and files are found by name or path", "[topologies][cluster]") {
    SECTION("unknown preset suggests the nearest and lists them") {
        const std::string m = bad_input_message([] { load_cluster("dgx-a10"); });
        CHECK_THAT(m, Contains("unknown cluster preset \"dgx-a10\""));
        CHECK_THAT(m, Contains("did you mean 'dgx-a100'?"));
        CHECK_THAT(m, Contains("pi5-1gbe"));
    }
    SECTION("unknown preset through cluster_preset") {
        CHECK_THAT(bad_input_message([] { cluster_preset("pi6-1gbe"); }), Contains("did you mean"));
    }
    SECTION("missing file") {
        CHECK_THAT(bad_input_message([] { load_cluster("no/such/cluster.json"); }), Contains("no/such/cluster.json"));
    }
}

TEST_CASE("bad cluster files are bad_input errors naming file and JSON path", "[topologies][cluster]") {
    SECTION("malformed JSON") {
        const std::string file = data_file("cluster-malformed.json");
        const std::string m = bad_input_message([&] { load_cluster(file); });
        CHECK_THAT(m, Contains(file));
        CHECK_THAT(m, Contains("line 4"));
    }
    SECTION("typo in a key (file)") {
        const std::string file = data_file("cluster-typo-key.json");
        const std::string m = bad_input_message([&] { load_cluster(file); });
        CHECK_THAT(m, Contains(file));
        CHECK_THAT(m, Contains("at /node_groups/0/devices_per_nod:"));
        CHECK_THAT(m, Contains("did you mean 'devices_per_node'?"));
    }
    SECTION("zero nodes (file)") {
        const std::string file = data_file("cluster-zero-nodes.json");
        const std::string m = bad_input_message([&] { load_cluster(file); });
        CHECK_THAT(m, Contains(file));
        CHECK_THAT(m, Contains("at /node_groups/0/count:"));
        CHECK_THAT(m, Contains("zero nodes"));
    }
    Json doc = dgx_a100_json();
    SECTION("negative bandwidth") {
        doc["node_groups"][0]["nics"]["bandwidth"] = "-3 GB/s";
        const std::string m = load_error(doc);
        CHECK_THAT(m, Contains("cluster.json: at /node_groups/0/nics/bandwidth:"));
        CHECK_THAT(m, Contains("-3 GB/s"));
    }
    SECTION("zero bandwidth as a number") {
        doc["node_groups"][0]["host_link"]["bandwidth"] = 0;
        CHECK_THAT(load_error(doc), Contains("at /node_groups/0/host_link/bandwidth:"));
    }
    SECTION("shared memory between discrete GPUs") {
        doc["node_groups"][0]["intra"]["kind"] = "shm";
        const std::string m = load_error(doc);
        CHECK_THAT(m, Contains("at /node_groups/0/intra/kind:"));
        CHECK_THAT(m, Contains("shm joins CPU ranks of one host"));
    }
    SECTION("unknown unit") {
        doc["device_kinds"]["a100-80gb"]["memory_bandwidth"] = "2039 GB/sec";
        const std::string m = load_error(doc);
        CHECK_THAT(m, Contains("at /device_kinds/a100-80gb/memory_bandwidth:"));
        CHECK_THAT(m, Contains("unknown unit"));
    }
    SECTION("zero nodes") {
        doc["node_groups"][0]["count"] = 0;
        const std::string m = load_error(doc);
        CHECK_THAT(m, Contains("at /node_groups/0/count:"));
        CHECK_THAT(m, Contains("expected at least 1 node"));
    }
    SECTION("no node groups") {
        doc["node_groups"] = Json::array();
        CHECK_THAT(load_error(doc), Contains("at /node_groups: expected at least one node group"));
    }
    SECTION("zero devices per node") {
        doc["node_groups"][0]["devices_per_node"] = 0;
        CHECK_THAT(load_error(doc), Contains("at /node_groups/0/devices_per_node:"));
    }
    SECTION("unknown device kind") {
        doc["node_groups"][0]["device"] = "a100-80g";
        const std::string m = load_error(doc);
        CHECK_THAT(m, Contains("at /node_groups/0/device:"));
        CHECK_THAT(m, Contains("did you mean 'a100-80gb'?"));
        CHECK_THAT(m, Contains("found \"a100-80g\""));
    }
    SECTION("typo in a key") {
        doc["network"]["nodes_per_leef"] = 4;
        const std::string m = load_error(doc);
        CHECK_THAT(m, Contains("at /network/nodes_per_leef:"));
        CHECK_THAT(m, Contains("did you mean 'nodes_per_leaf'?"));
    }
    SECTION("a negative GEMM fixed time, a zero FlashAttention size") {
        doc["device_kinds"]["a100-80gb"]["gemm_fixed_time"] = "-2 us";
        CHECK_THAT(load_error(doc), Contains("at /device_kinds/a100-80gb/gemm_fixed_time:"));
        doc["device_kinds"]["a100-80gb"]["gemm_fixed_time"] = "2 us";
        doc["device_kinds"]["a100-80gb"]["flash_half_dim"] = 0;
        const std::string m = load_error(doc);
        CHECK_THAT(m, Contains("at /device_kinds/a100-80gb/flash_half_dim:"));
        CHECK_THAT(m, Contains("a FlashAttention size above zero"));
    }
    SECTION("attention rates: an unknown table, a CPU") {
        doc["device_kinds"]["a100-80gb"]["attention_rates"] = "h100-sxm";
        std::string m = load_error(doc);
        CHECK_THAT(m, Contains("at /device_kinds/a100-80gb/attention_rates:"));
        CHECK_THAT(m, Contains("a built-in table of measured attention kernels (a100-sxm4, h100-sxm5)"));
        CHECK_THAT(m, Contains("did you mean 'h100-sxm5'?"));
        doc["device_kinds"]["a100-80gb"]["attention_rates"] = 7;
        CHECK_THAT(load_error(doc), Contains("at /device_kinds/a100-80gb/attention_rates:"));
        doc["device_kinds"]["a100-80gb"]["attention_rates"] = "h100-sxm5";
        doc["device_kinds"]["a100-80gb"]["cpu"] = true;
        m = load_error(doc);
        CHECK_THAT(m, Contains("no fused attention rates on a CPU device"));
    }
    SECTION("an unaligned-GEMM factor outside (0, 1], or on a CPU") {
        doc["device_kinds"]["a100-80gb"]["gemm_unaligned_factor"] = 1.2;
        CHECK_THAT(load_error(doc), Contains("at /device_kinds/a100-80gb/gemm_unaligned_factor:"));
        doc["device_kinds"]["a100-80gb"]["gemm_unaligned_factor"] = 0;
        CHECK_THAT(load_error(doc), Contains("at /device_kinds/a100-80gb/gemm_unaligned_factor:"));
        doc["device_kinds"]["a100-80gb"]["gemm_unaligned_factor"] = 0.7;
        doc["device_kinds"]["a100-80gb"].erase("attention_rates");
        doc["device_kinds"]["a100-80gb"]["cpu"] = true;
        CHECK_THAT(load_error(doc), Contains("no unaligned-GEMM factor on a CPU device"));
    }
    SECTION("SMs: none, a fraction, on a CPU") {
        doc["device_kinds"]["a100-80gb"]["sms"] = 0;
        std::string m = load_error(doc);
        CHECK_THAT(m, Contains("at /device_kinds/a100-80gb/sms:"));
        CHECK_THAT(m, Contains("at least 1 SM"));
        doc["device_kinds"]["a100-80gb"]["sms"] = 107.5;
        CHECK_THAT(load_error(doc), Contains("at /device_kinds/a100-80gb/sms:"));
        doc["device_kinds"]["a100-80gb"]["sms"] = 108;
        doc["device_kinds"]["a100-80gb"].erase("attention_rates");
        doc["device_kinds"]["a100-80gb"]["cpu"] = true;
        CHECK_THAT(load_error(doc), Contains("no streaming multiprocessors on a CPU device"));
    }
    SECTION("efficiency above 1") {
        doc["device_kinds"]["a100-80gb"]["gemm_efficiency"] = 1.5;
        CHECK_THAT(load_error(doc), Contains("at /device_kinds/a100-80gb/gemm_efficiency:"));
    }
    SECTION("host CPU peak without a FLOP rate") {
        doc["node_groups"][0]["host_cpu"]["peak"] = "9 TB/s";
        CHECK_THAT(load_error(doc), Contains("at /node_groups/0/host_cpu/peak:"));
    }
    SECTION("host CPU streaming efficiency above 1") {
        doc["node_groups"][0]["host_cpu"]["memory_efficiency"] = 1.2;
        CHECK_THAT(load_error(doc), Contains("at /node_groups/0/host_cpu/memory_efficiency:"));
    }
    SECTION("a typo in host_cpu") {
        doc["node_groups"][0]["host_cpu"]["peek"] = "1 TFLOP/s";
        CHECK_THAT(load_error(doc), Contains("did you mean 'peak'?"));
    }
    SECTION("efficiency of 0") {
        doc["device_kinds"]["a100-80gb"]["memory_efficiency"] = 0;
        CHECK_THAT(load_error(doc), Contains("at /device_kinds/a100-80gb/memory_efficiency:"));
    }
    SECTION("no dtype peak") {
        doc["device_kinds"]["a100-80gb"]["peak"] = Json::object();
        CHECK_THAT(load_error(doc), Contains("at /device_kinds/a100-80gb/peak: expected a dense matrix peak"));
    }
    SECTION("unknown dtype in peak") {
        doc["device_kinds"]["a100-80gb"]["peak"]["fp4"] = "624 TFLOP/s";
        CHECK_THAT(load_error(doc), Contains("at /device_kinds/a100-80gb/peak/fp4:"));
    }
    SECTION("an FP8 efficiency without an FP8 peak") {
        doc["device_kinds"]["a100-80gb"]["fp8_gemm_efficiency"] = 0.7;
        const std::string m = load_error(doc);
        CHECK_THAT(m, Contains("at /device_kinds/a100-80gb/fp8_gemm_efficiency:"));
        CHECK_THAT(m, Contains("without an FP8 peak"));
    }
    SECTION("an FP8 efficiency above 1") {
        doc["device_kinds"]["a100-80gb"]["peak"]["fp8"] = "624 TFLOP/s";
        doc["device_kinds"]["a100-80gb"]["fp8_gemm_efficiency"] = 1.5;
        CHECK_THAT(load_error(doc), Contains("at /device_kinds/a100-80gb/fp8_gemm_efficiency:"));
    }
    SECTION("NIC count that does not divide the devices") {
        doc["node_groups"][0]["nics"]["count"] = 3;
        const std::string m = load_error(doc);
        CHECK_THAT(m, Contains("at /node_groups/0/nics/count:"));
        CHECK_THAT(m, Contains("one of 1, 2, 4, 8"));
    }
    SECTION("unknown intra kind") {
        doc["node_groups"][0]["intra"]["kind"] = "nvswich";
        const std::string m = load_error(doc);
        CHECK_THAT(m, Contains("at /node_groups/0/intra/kind:"));
        CHECK_THAT(m, Contains("did you mean 'nvswitch'?"));
    }
    SECTION("no intra link for several devices") {
        doc["node_groups"][0]["intra"] = Json{{"kind", "none"}};
        CHECK_THAT(load_error(doc), Contains("at /node_groups/0/intra:"));
    }
    SECTION("unknown fabric") {
        doc["network"]["fabric"] = "fat_tree";
        const std::string m = load_error(doc);
        CHECK_THAT(m, Contains("at /network/fabric:"));
        CHECK_THAT(m, Contains("did you mean 'fat-tree'?"));
    }
    SECTION("routing: a fat tree's, ecmp or destination") {
        doc["network"] = Json{{"fabric", "switch"}, {"switch_latency", "1 us"}, {"routing", "destination"}};
        CHECK_THAT(load_error(doc), Contains("at /network/routing:"));   // a single switch has no spines
        doc["network"]["fabric"] = "fat-tree";
        doc["network"]["routing"] = "dmodk";
        CHECK_THAT(load_error(doc), Contains("\"ecmp\""));
        CHECK_THAT(load_error(doc), Contains("found \"dmodk\""));
    }
    SECTION("oversubscription below 1") {
        doc["network"]["oversubscription"] = 0.5;
        CHECK_THAT(load_error(doc), Contains("at /network/oversubscription:"));
    }
    SECTION("negative latency") {
        doc["node_groups"][0]["nics"]["latency"] = "-1 us";
        CHECK_THAT(load_error(doc), Contains("at /node_groups/0/nics/latency:"));
    }
    SECTION("missing network") {
        doc.erase("network");
        CHECK_THAT(load_error(doc), Contains("/network"));
    }
    SECTION("a source that is not a string") {
        doc["sources"][0] = 42;
        CHECK_THAT(load_error(doc), Contains("at /sources/0:"));
    }
    SECTION("duplicate group names") {
        doc["node_groups"].push_back(doc["node_groups"][0]);
        CHECK_THAT(load_error(doc), Contains("at /node_groups/1/name:"));
    }
}

TEST_CASE("a cluster composed of presets has their devices in order, joined by one switch", "[topologies][cluster]") {
    const Cluster c = load_cluster("jetson-agx-orin:4,workstation-4gpu:1");
    REQUIRE(c.groups.size() == 2);
    CHECK(c.num_nodes() == 5);
    CHECK(c.num_devices() == 4 + 4);
    for (int r = 0; r < 4; ++r) CHECK(c.device_kind(r).name == "agx-orin-64gb");
    for (int r = 4; r < 8; ++r) CHECK(c.device_kind(r).name == "rtx-4090");
    CHECK(c.device(4).node == 4);
    CHECK(c.device_name(7) == "node4/gpu3");
    CHECK(c.network.fabric == FabricKind::single_switch);
    // The larger of the two presets' switch latencies (both 1 us), and the default said aloud.
    CHECK(c.network.switch_latency == Time::us(1));
    CHECK_THAT(c.description, Contains("one switch"));
    CHECK_THAT(c.description, Contains("--cluster-network"));

    const Cluster twice = compose_clusters("dgx-a100:2,dgx-a100:1", JoinNetwork::fat_tree);
    CHECK(twice.num_devices() == 24);
    CHECK(twice.groups[0].name != twice.groups[1].name);
    CHECK(twice.network.fabric == FabricKind::fat_tree);
    CHECK(is_composed_spec("dgx-a100:2"));
    CHECK_FALSE(is_composed_spec("dgx-a100"));
}

TEST_CASE("a bad composed cluster names the item", "[topologies][cluster]") {
    using smol::test::bad_input_message;
    SECTION("zero nodes") {
        CHECK_THAT(bad_input_message([] { load_cluster("jetson-agx-orin:0,workstation-4gpu:1"); }),
                   Contains("'jetson-agx-orin:0'"));
    }
    SECTION("not a number") {
        CHECK_THAT(bad_input_message([] { load_cluster("jetson-agx-orin:4,workstation-4gpu:x"); }),
                   Contains("'workstation-4gpu:x'"));
    }
    SECTION("unknown preset") {
        const std::string m = bad_input_message([] { load_cluster("jetson-agx-orn:4,workstation-4gpu:1"); });
        CHECK_THAT(m, Contains("jetson-agx-orn"));
        CHECK_THAT(m, Contains("did you mean 'jetson-agx-orin'?"));
    }
    SECTION("empty item") {
        CHECK_THAT(bad_input_message([] { load_cluster("jetson-agx-orin:4,,pi5-1gbe"); }), Contains("--cluster"));
    }
    SECTION("unknown network") {
        CHECK_THAT(bad_input_message([] { parse_join_network("ring"); }), Contains("--cluster-network"));
    }
}

TEST_CASE("slow devices: a group's speed, --slow per rank, the NIC they use", "[topologies][cluster]") {
    const Cluster pis = cluster_preset("pi5-1gbe").with_nodes(8);
    CHECK(pis.uniform_speed());
    CHECK(pis.compute_speed(3) == 1.0);
    const Cluster slow = pis.with_slow_devices("3:0.5,5:0.8:nic=0.25");
    CHECK_FALSE(slow.uniform_speed());
    CHECK(slow.compute_speed(3) == 0.5);
    CHECK(slow.nic_speed(3, 0) == 1.0);      // rank 3's NIC is left as it is
    CHECK(slow.compute_speed(5) == 0.8);
    CHECK(slow.nic_speed(5, 0) == 0.25);     // one Pi per node: node 5's NIC is rank 5's
    CHECK(slow.compute_speed(0) == 1.0);
    // A DGX A100 has one NIC per GPU: slowing GPU 2's NIC leaves GPU 3's.
    const Cluster dgx = cluster_preset("dgx-a100").with_slow_devices("2:1:nic=0.5");
    CHECK(dgx.nic_speed(0, 2) == 0.5);
    CHECK(dgx.nic_speed(0, 3) == 1.0);
    CHECK(dgx.compute_speed(2) == 1.0);
    // The workstation's four GPUs share one NIC: the slowest factor given to any of them.
    const Cluster ws = cluster_preset("workstation-4gpu").with_slow_devices("1:1:nic=0.5,2:1:nic=0.8");
    CHECK(ws.nic_speed(0, 0) == 0.5);

    // A node group's "speed" and "nic_speed" multiply with --slow's factors.
    Json doc = load_json_file(std::string(SMOL_SOURCE_DIR) + "/topologies/presets/pi5-1gbe.json");
    doc["node_groups"][0]["speed"] = 0.5;
    doc["node_groups"][0]["nic_speed"] = 0.5;
    const Cluster file = cluster_from_json(JsonView(doc, "cluster.json")).with_slow_devices("1:0.5:nic=0.5");
    CHECK(file.groups[0].speed == 0.5);
    CHECK(file.compute_speed(0) == 0.5);
    CHECK(file.compute_speed(1) == 0.25);
    CHECK(file.nic_speed(1, 0) == 0.25);
    // A group speed alone keeps the group uniform (its replicas still mirror one another).
    CHECK(cluster_from_json(JsonView(doc, "cluster.json")).uniform_speed());
    CHECK_FALSE(pis.with_jitter(5, 1).uniform_speed());
    CHECK(pis.with_jitter(0, 1).uniform_speed());
}

TEST_CASE("bad slow devices and jitter are bad_input naming the flag or the JSON path", "[topologies][cluster]") {
    const Cluster pis = cluster_preset("pi5-1gbe").with_nodes(8);
    const auto slow_error = [&](const std::string& spec) { return bad_input_message([&] { pis.with_slow_devices(spec); }); };
    SECTION("rank out of range") {
        const std::string m = slow_error("8:0.5");
        CHECK_THAT(m, Contains("--slow"));
        CHECK_THAT(m, Contains("a rank from 0 to 7"));
    }
    SECTION("factor zero") { CHECK_THAT(slow_error("3:0"), Contains("--slow")); }
    SECTION("factor negative") { CHECK_THAT(slow_error("3:-0.5"), Contains("above 0 and at most 100")); }
    SECTION("factor above 100") { CHECK_THAT(slow_error("3:101"), Contains("above 0 and at most 100")); }
    SECTION("NIC factor zero") { CHECK_THAT(slow_error("3:1:nic=0"), Contains("above 0 and at most 100")); }
    SECTION("not a number") { CHECK_THAT(slow_error("3:half"), Contains("RANK:FACTOR")); }
    SECTION("no factor") { CHECK_THAT(slow_error("3"), Contains("RANK:FACTOR")); }
    SECTION("negative rank") { CHECK_THAT(slow_error("-1:0.5"), Contains("RANK:FACTOR")); }
    SECTION("unknown third part") { CHECK_THAT(slow_error("3:0.5:disk=0.5"), Contains("nic=FACTOR")); }
    SECTION("empty item") { CHECK_THAT(slow_error("3:0.5,"), Contains("--slow")); }
    SECTION("a rank twice") { CHECK_THAT(slow_error("3:0.5,3:0.8"), Contains("rank 3 twice")); }
    SECTION("jitter below 0") {
        const std::string m = bad_input_message([&] { pis.with_jitter(-1, 1); });
        CHECK_THAT(m, Contains("--jitter"));
    }
    SECTION("jitter of 100 % or more") {
        const std::string m = bad_input_message([&] { pis.with_jitter(100, 1); });
        CHECK_THAT(m, Contains("--jitter"));
        CHECK_THAT(m, Contains("below 100"));
    }
    Json doc = load_json_file(std::string(SMOL_SOURCE_DIR) + "/topologies/presets/pi5-1gbe.json");
    SECTION("a group speed of 0") {
        doc["node_groups"][0]["speed"] = 0;
        CHECK_THAT(load_error(doc), Contains("at /node_groups/0/speed:"));
    }
    SECTION("a group speed above 100") {
        doc["node_groups"][0]["speed"] = 250;
        CHECK_THAT(load_error(doc), Contains("at /node_groups/0/speed:"));
    }
    SECTION("a negative NIC speed") {
        doc["node_groups"][0]["nic_speed"] = -1;
        CHECK_THAT(load_error(doc), Contains("at /node_groups/0/nic_speed:"));
    }
    SECTION("a speed that is not a number") {
        doc["node_groups"][0]["speed"] = "fast";
        CHECK_THAT(load_error(doc), Contains("/node_groups/0/speed"));
    }
}

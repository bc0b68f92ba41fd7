// The cluster description: what hardware a plan runs on.
//
// A cluster is a list of node groups (small clusters are often mixed: two Pi 5 beside two Pi 4,
// a Jetson beside a workstation), each group `count` identical nodes of `devices_per_node`
// devices of one kind, plus the network that joins the nodes. Ranks are numbered group by group,
// node by node, device by device: rank = first rank of the node + local index.
//
// Every figure is a datasheet lead that a calibration profile replaces; the preset files under
// topologies/presets name their public sources (datasheets, specifications, papers).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/json.hpp"
#include "core/model.hpp"
#include "core/units.hpp"
#include "topologies/attention_rates.hpp"
#include "topologies/measured.hpp"

namespace smol::topo {

struct DeviceKind {
    std::string name;                     // "a100-80gb"
    bool is_cpu = false;                  // a CPU board (Pi): fp32 by default, compute on the host
    std::array<std::optional<FlopRate>, 3> peak;  // dense matrix peak per DType (bf16, fp16, fp32)
    /// FP8 tensor cores (Hopper, Ada): the dense FP8 peak with fp32 accumulation ("peak": {"fp8"});
    /// unset where the device has none or its description does not say. Only FP8 GEMMs use it
    /// (core/kernel.hpp Fp8Recipe).
    std::optional<FlopRate> fp8_peak;
    /// The fraction of fp8_peak a large FP8 GEMM reaches (default: gemm_efficiency). FP8 GEMMs
    /// run on the 16-bit curve's shape (sim/compute.cpp gemm_efficiency).
    std::optional<double> fp8_gemm_efficiency;
    Bytes memory;                         // device memory capacity (the node's DRAM for CPUs)
    Bandwidth memory_bandwidth;
    bool unified_memory = false;          // Jetson / CPU: device memory is host memory
    Time launch_overhead;                 // per kernel (per op for CPUs)
    double gemm_efficiency = 0.8;         // fraction of peak a large GEMM reaches
    double gemm_half_dim = 128;           // GEMM size (cube root of m·n·k) at half that efficiency
    /// A GEMM kernel's time beyond its FLOPs at that efficiency (the fill and drain of a kernel
    /// too small for the device): t = gemm_fixed_time + FLOPs / (peak · e). Zero unless measured.
    Time gemm_fixed_time;
    /// Fused attention kernels' measured rates ("attention_rates": the name of a built-in table,
    /// topologies/attention_rates.hpp), or null: they then run on the GEMM curve, at
    /// flash_half_dim.
    const AttentionRates* attention_rates = nullptr;
    /// FlashAttention's half-efficiency size where the device has no attention_rates (its kernels
    /// run on the same curve as GEMMs, with their own size); 0: gemm_half_dim's.
    double flash_half_dim = 0;
    /// The fraction of its aligned rate a 16-bit GEMM reaches when a leading dimension is not a
    /// multiple of 8 elements (Kernel::unaligned: cuBLAS's align1 kernels); 1 where not measured
    /// for the device (every shape at the aligned rate).
    double gemm_unaligned_factor = 1.0;
    double memory_efficiency = 0.8;       // fraction of memory bandwidth streaming kernels reach
    double comm_slowdown = 1.0;           // compute runs this much slower while comm kernels run
    /// Streaming multiprocessors ("sms", from the GPU's datasheet). Each thread block of a running
    /// NCCL call holds one, and the GEMMs and attention kernels beside it get the rest
    /// (sim/simulator.cpp slowdown); 0 where not given (CPUs): no such slowdown.
    int sms = 0;
    /// CUDA compute capability (8.0 for A100, 9.0 for H100): picks NCCL's per-architecture tables
    /// and speeds (sim/nccl_tuner). 8.0 when a GPU's file does not say; 0 for CPUs.
    double compute_capability = 0;
    /// Rates measured by `smolcluster calibrate` (a profile, profile.hpp), or null: the simulator
    /// then prices fp32 kernels from these tables instead of the roofline above.
    std::shared_ptr<const MeasuredCompute> measured;

    bool supports(DType d) const { return peak[static_cast<int>(d)].has_value(); }
    /// Peak for `d`; bad_input naming the device when it has none.
    FlopRate peak_for(DType d) const;
    /// bf16 where the device has 16-bit matrix units, else fp32 (CPUs such as the Pi's).
    DType default_dtype() const;
};

/// How the devices of one node reach each other. `shm`: the devices are processes of one host
/// (CPU ranks) exchanging through shared memory, as MPI's shared-memory transport (Open MPI's
/// vader BTL) moves messages: a copy in and a copy out of a shared segment.
enum class IntraKind { none, nvswitch, nvlink, pcie, shm };
const char* to_string(IntraKind k);

struct LinkSpec {
    Bandwidth bandwidth;   // per direction
    Time latency;          // per hop
};

/// The host CPU's maker: NCCL charges 1 µs per network post on Intel, 2 µs on AMD, and its LL
/// bandwidth limits differ (src/graph/tuning.cc getNetOverhead, llMaxBws).
enum class CpuVendor { intel, amd, other };
const char* to_string(CpuVendor v);

struct NodeGroup {
    std::string name;                 // "pi5"
    int count = 1;                    // nodes in this group
    int devices_per_node = 1;
    DeviceKind device;
    // Host side of each node.
    CpuVendor cpu_vendor = CpuVendor::other;
    /// The host CPU that runs offloaded optimizer steps ("host_cpu"): its fp32 vector peak, all
    /// cores (cores × clock × FLOPs per cycle; unset: the cores never limit a host step), and the
    /// fraction of host_memory_bandwidth a streaming pass reaches (default 0.78: STREAM triad
    /// reaches 78 % of the DDR4 wire rate, TI SPRAD45A Table 3-3).
    std::optional<FlopRate> host_peak;
    double host_memory_efficiency = 0.78;
    Bytes host_memory;                // DRAM capacity (shared with the devices if unified)
    Bandwidth host_memory_bandwidth;
    std::optional<Bytes> nvme_capacity;
    Bandwidth nvme_read, nvme_write;
    // Inside a node.
    IntraKind intra = IntraKind::none;
    LinkSpec intra_link;              // device ↔ NVSwitch / peer / PCIe switch, per device
    LinkSpec host_link;               // PCIe root link shared by the node's devices and NICs
    /// Every device of the group computes at `speed` × its kind's rates, and every NIC
    /// of the group moves `nic_speed` × its bandwidth (a thermally throttled or older board; 1 by
    /// default; from 0 exclusive to 100). The simulator applies them (sim/simulator.cpp).
    double speed = 1.0;
    double nic_speed = 1.0;
    // Out of the node.
    int nics = 1;                     // 1: shared by all devices; devices_per_node: one per device
    LinkSpec nic_link;                // NIC ↔ first switch
    // Any NIC count that divides devices_per_node is allowed: each NIC serves
    // devices_per_node / nics consecutive devices (a DGX-2 has 8 NICs for 16 GPUs). A node cut
    // short by Cluster::first_devices keeps its original sharing through devices_per_nic.
    int devices_per_nic = 0;          // consecutive devices per NIC; 0: ceil(devices_per_node / nics)
    /// The NIC, counted from 0 within the node, that local device `local` uses.
    int nic_of(int local) const;
};

enum class FabricKind { single_switch, fat_tree };
const char* to_string(FabricKind k);

/// How a fat tree picks among equal-cost spines. `ecmp`: a hash of (source, destination), as an
/// Ethernet (RoCE) switch hashes a flow's headers. `destination`: by the destination alone, as an
/// InfiniBand switch forwards by the destination LID in its linear forwarding table, which
/// OpenSM's fat-tree routing fills so that destination d leaves a leaf by up-port d mod k (d-mod-k):
/// a shift between pods (node i of one to node i of another) then meets no other flow on a spine.
enum class Routing { ecmp, destination };

struct Network {
    FabricKind fabric = FabricKind::single_switch;
    Time switch_latency;              // per switch traversal
    // Fat tree (leaf/spine), rail-optimized when nodes have one NIC per device:
    int nodes_per_leaf = 0;           // 0: one leaf per rail holding every node (two levels only if needed)
    double oversubscription = 1.0;    // leaf downlink : uplink bandwidth ratio (1 = non-blocking)
    Routing routing = Routing::ecmp;  // fat tree: the spine a route takes
};

/// One device slowed on the command line (--slow RANK:FACTOR[:nic=FACTOR]): its compute
/// at `compute` × its group's speed, the NIC it uses at `nic` × its group's NIC speed.
struct DeviceSpeed {
    double compute = 1.0;
    double nic = 1.0;
};

/// --jitter PCT --seed N: every compute op's time is multiplied by 1 + PCT/100 · u, u
/// uniform in [−1, 1), a pure function of (seed, op id) (sim/simulator.cpp jitter_factor).
struct ComputeJitter {
    double percent = 0;
    std::uint64_t seed = 1;
};

struct DeviceRef {
    int group = 0;
    int node = 0;     // global node index
    int local = 0;    // index within the node
};

class Cluster {
public:
    std::string name;
    std::string description;
    std::vector<std::string> sources;
    std::vector<NodeGroup> groups;
    Network network;
    /// Collectives and point-to-point transfers timed by a profile, or null.
    std::shared_ptr<const MeasuredNetwork> measured_network;
    std::string profile;              // the profile applied, for messages ("" when none)
    /// Devices slowed by --slow, by rank (empty: every device at its group's speed).
    std::map<int, DeviceSpeed> slow_devices;
    ComputeJitter jitter;

    /// The factor on rank's compute rates: its group's speed × its --slow factor.
    double compute_speed(int rank) const;
    /// The factor on the bandwidth of NIC `nic` of global node `node`: the group's
    /// nic_speed × the smallest --slow nic factor of the ranks that use it.
    double nic_speed(int node, int nic) const;
    /// True when no device differs from its group's others and no jitter is on:
    /// what folding identical replicas needs (strategies::resolve).
    bool uniform_speed() const { return slow_devices.empty() && jitter.percent == 0; }

    int num_nodes() const;
    int num_devices() const;
    DeviceRef device(int rank) const;
    const DeviceKind& device_kind(int rank) const;
    const NodeGroup& group_of(int rank) const;
    int first_rank_of_node(int node) const;
    /// "node1/gpu3" (or "node0/cpu0" for CPU boards); nodes and devices counted from 0.
    std::string device_name(int rank) const;

    /// --nodes N: the same cluster with N nodes. Single-group clusters only; zero is bad_input.
    Cluster with_nodes(int n) const;
    /// --devices N: the first N devices (whole groups and nodes trimmed); bad_input if N is out of range.
    Cluster first_devices(int n) const;
    /// --slow "RANK:FACTOR[:nic=FACTOR],…": the same cluster with those devices slowed
    /// (factors from 0 exclusive to 100, ranks of this cluster, each once); bad_input names --slow.
    Cluster with_slow_devices(const std::string& spec) const;
    /// --jitter PCT (0 ≤ PCT < 100) with --seed; bad_input names --jitter.
    Cluster with_jitter(double percent, std::uint64_t seed) const;
};

std::vector<std::string> cluster_preset_names();
Cluster cluster_preset(const std::string& name);
Cluster cluster_from_json(const JsonView& json);
/// `spec` is a preset name, a path to a JSON file, or presets and files composed with node
/// counts ("jetson-agx-orin:4,workstation-4gpu:1", see compose_clusters; default network).
Cluster load_cluster(const std::string& spec);

/// True for a composed spec: more than one item, or one item with a ":N" node count.
bool is_composed_spec(const std::string& spec);
/// How a composed cluster's groups are joined (--cluster-network).
enum class JoinNetwork { single_switch, fat_tree };
JoinNetwork parse_join_network(const std::string& text);   // "switch" | "fat-tree"; bad_input names --cluster-network
/// A cluster composed of presets (or files) on the command line: "NAME:N,NAME:M,…", each item a
/// preset name or JSON path with an optional node count (an item of one node group gets N nodes;
/// without a count, its own). The groups keep their order, so ranks go item by item. Every
/// node keeps its own NICs; the items' networks are replaced by one `join` network over all
/// NICs: one switch (default) or a rail-optimized non-blocking fat tree, with the largest of
/// the items' switch latencies. Traffic between two groups runs at the slower group's NIC rate.
/// The description says all of this (the summary prints it). Bad items are bad_input naming the
/// item and --cluster.
Cluster compose_clusters(const std::string& spec, JoinNetwork join = JoinNetwork::single_switch);

}  // namespace smol::topo

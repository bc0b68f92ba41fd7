// The routed topology graph: vertices and duplex links built from a Cluster, and routes found by
// a bidirectional breadth-first search, one level at a time, over the topology's own adjacency
// lists.
//
// Inside a node (every line is a duplex pair of links; figures from the NodeGroup):
//
//   SoC board: intra none and a CPU or unified-memory device (Raspberry Pi, Jetson). The device
//   is the host: memory one link away, NIC hanging off the device, and off the DRAM too (the NIC
//   DMAs without the cores, so host memory can reach other nodes).
//
//        cpu0 ──host_link── nic0 ── (network)
//        │    \              │
//    memory   [nvme]         │ host_link
//        │                   │
//      [host] ───────────────┘
//
//   Several CPU ranks on one host (intra shm: MPI processes, one per core or group of cores):
//   each rank is laid out as above and the ranks also meet at a shared-memory vertex, one intra
//   link each (what Open MPI's shared-memory transport moves between two processes).
//
//        cpu0   cpu1  …        (each also: memory, nvme and NIC links as above)
//           \   /
//          [ shm ]
//
//   GPU node with NVSwitch or NVLink and one NIC per device (DGX A100 / H100): a PCIe switch per
//   NIC pairs each GPU with its NIC, as on the board, and uplinks to the root (the CPU).
//
//                 [ nvswitch ]              intra bandwidth per GPU
//                /     |      \       NVLink
//            gpu0    gpu1  …   gpu7
//              │ host_link       │
//           [pcie0] ── nic0   [pcie7] ── nic7     (NIC links: host_link)
//               \               /
//                [ pcie root ] ── host (host memory bandwidth)
//                      └── nvme (read / write rates)
//
//   With k NICs for d devices (DGX-2: 8 for 16) switch j holds devices j·d/k … (j+1)·d/k − 1.
//   With a single NIC there are no per-NIC switches: GPUs and the NIC hang off the root.
//
//   PCIe tree (intra pcie: workstation): every slot is an intra link into the root, the only
//   GPU-to-GPU path; the root also holds host memory, the NIC (host_link) and NVMe.
//
//      gpu0  gpu1  gpu2  gpu3
//         \    |     |    /        intra: each slot
//         [ pcie root ] ── host
//           │       └── nvme
//          nic0
//
//  * host_link is a PCIe link: a GPU's own link to its PCIe switch (except in a pcie node, where
//    the slot is the intra link), a NIC's link, and a per-NIC switch's uplink to the root.
//  * The root ↔ host memory link carries the host DRAM bandwidth, shared by every offload copy.
//  * nvlink (direct GPU-to-GPU links) is modelled like an NVSwitch: full connectivity at the
//    per-device bandwidth, through a vertex named "nodeN/nvlink". Real NVLink meshes without a
//    switch split that bandwidth over peers; a calibration profile captures what one delivers.
//  * A discrete GPU with intra none (one GPU per node) gets the GPU-node layout, no NVSwitch.
//  * NVMe links have no latency; a drive's latency is small next to the offload copies it serves.
//
// Between nodes (NIC links use the group's nics spec; Network::switch_latency is added for every
// network switch a route passes through, and nothing for NVSwitch or PCIe switches, whose links
// carry their own latency):
//
//   single switch:   nic ── [switch] ── nic   (every NIC of every node)
//
//   fat tree, rail-optimized: NIC k of node n plugs into leaf k of pod n / nodes_per_leaf (rail k).
//   With more than one pod, every leaf plugs into every spine; there are
//   ceil(nodes_per_leaf / oversubscription) spines and each leaf-spine link runs at the fastest
//   NIC rate, so uplink capacity = downlink capacity / oversubscription. nodes_per_leaf = 0 puts
//   every node on one leaf per rail and builds no spines; then, as with a single pod, traffic
//   between rails crosses the PCIe tree of the source or destination node.
//
//        [spine0]    [spine1]   …   [spineS-1]        (every leaf ↔ every spine)
//          |    \______/   \_______   |
//       [leaf0] … [leaf7]          [leaf8] … [leaf15]      leaf index = pod · rails + rail
//        |  |        |  |            |         |
//       n0 n1 …     n0 n1 …        n20 …      n20 …        (NIC k of each node on leaf k of its pod)
//
// Routes: fewest hops; among equally short routes the widest (largest bottleneck bandwidth, so
// GPU-to-GPU traffic inside a DGX-2 takes the NVSwitch rather than the PCIe switch two GPUs
// share); among equally wide ones a hash of (source, destination, vertex) picks each hop, like
// ECMP, so different pairs use different spines. Routes are cached.
#include "topologies/topology.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include <deque>

#include "core/error.hpp"

namespace smol::topo {
namespace {

bool is_endpoint(VertexKind k) {
    return k == VertexKind::device || k == VertexKind::host_memory || k == VertexKind::nvme;
}

/// A Topology's adjacency for one search from `source`: endpoints other than the source have
/// no out-edges, so the search never passes through a device, a host memory or an NVMe drive.
struct RouteGraph {
    const std::vector<Vertex>* vertices;
    const std::vector<Link>* links;
    const std::vector<std::vector<LinkId>>* out;
    VertexId source;
};

using OutEdgeIter = std::vector<LinkId>::const_iterator;

std::pair<OutEdgeIter, OutEdgeIter> out_edges(VertexId v, const RouteGraph& g) {
    const auto& list = (*g.out)[static_cast<std::size_t>(v)];
    if (v != g.source && is_endpoint((*g.vertices)[static_cast<std::size_t>(v)].kind)) {
        return {list.end(), list.end()};
    }
    return {list.begin(), list.end()};
}

/// One direction of a bidirectional search, advanced one BFS level at a time. Sized to the
/// largest topology seen and reset after each search by visiting only what it touched.
struct Side {
    std::vector<int> depth;     // hops from this side's start; -1 when not reached
    std::vector<double> width;  // widest bottleneck (bytes/s) over the shortest routes to the start
    std::vector<VertexId> touched;
    /// (vertex, link) for every link of a shortest route from the start into the vertex, as the
    /// route runs (the backward side records y → x for the x → y it walked against): what the
    /// walk back from the meeting point chooses among, without scanning a spine's thousand ports.
    std::vector<std::pair<VertexId, LinkId>> parents;
    std::deque<VertexId> queue;    // the frontier: every vertex `level` hops away
    int level = 0;

    void fit(std::size_t n) {
        if (depth.size() >= n) return;
        depth.resize(n, -1);
        width.resize(n, 0.0);
    }
    void start(VertexId v) {
        level = 0;
        reach(v, 0, std::numeric_limits<double>::infinity());
        queue.push_back(v);
    }
    void reach(VertexId v, int d, double w) {
        depth[v] = d;
        width[v] = w;
        touched.push_back(v);
    }
    void reset() {
        for (VertexId v : touched) {
            depth[v] = -1;
            width[v] = 0.0;
        }
        touched.clear();
        parents.clear();
        queue.clear();
    }
};

struct Scratch {
    Side forward;   // from the source, along links
    Side backward;  // from the destination, against links
};

thread_local Scratch scratch;

/// Expands every vertex `level` hops from the side's start (a breadth-first search resumed from
/// the side's queue, stopped at the first vertex of the next level), recording each reached
/// vertex's depth and widest bottleneck. Every edge out of level d is examined before any vertex
/// of level d + 1 is, so a vertex's width is final once its level is reached. The backward side
/// walks a link x → y against its direction, so the bandwidth that counts is that of y → x.
void expand_level(const RouteGraph& g, Side& s, const std::vector<Link>& links, bool backward) {
    while (!s.queue.empty()) {
        const VertexId u = s.queue.front();
        if (s.depth[static_cast<std::size_t>(u)] > s.level) break;
        s.queue.pop_front();
        const auto [first, last] = out_edges(u, g);
        for (auto it = first; it != last; ++it) {
            const Link& l = links[static_cast<std::size_t>(*it)];
            const Link& carried = backward ? links[static_cast<std::size_t>(*it ^ 1)] : l;
            const int du = s.depth[static_cast<std::size_t>(l.from)];
            const double w = std::min(s.width[static_cast<std::size_t>(l.from)], carried.bandwidth.bytes_per_second());
            if (s.depth[static_cast<std::size_t>(l.to)] < 0) {
                s.reach(l.to, du + 1, w);
                s.queue.push_back(l.to);
            } else if (s.depth[static_cast<std::size_t>(l.to)] != du + 1) {
                continue;
            } else if (w > s.width[static_cast<std::size_t>(l.to)]) {
                s.width[static_cast<std::size_t>(l.to)] = w;
            }
            s.parents.emplace_back(l.to, backward ? *it ^ 1 : *it);
        }
    }
    ++s.level;
}

std::uint64_t mix(std::uint64_t x) {  // splitmix64 finaliser
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

std::uint64_t route_key(VertexId a, VertexId b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}

std::string node_prefix(int node) { return "node" + std::to_string(node) + "/"; }

}  // namespace

// ---------------------------------------------------------------------------------------------

VertexId Topology::add_vertex(VertexKind kind, std::string name) {
    vertices_.push_back({kind, std::move(name)});
    out_links_.emplace_back();
    node_of_vertex_.push_back(building_node_);
    return static_cast<VertexId>(vertices_.size() - 1);
}

// Links come in pairs: 2k is a → b and 2k + 1 is b → a, so the reverse of link l is l ^ 1.
void Topology::add_duplex(VertexId a, VertexId b, const LinkSpec& spec) {
    const auto id = static_cast<LinkId>(links_.size());
    links_.push_back({a, b, spec.bandwidth, spec.latency});
    links_.push_back({b, a, spec.bandwidth, spec.latency});
    out_links_[static_cast<std::size_t>(a)].push_back(id);
    out_links_[static_cast<std::size_t>(b)].push_back(id + 1);
}

Topology::Topology(const Cluster& cluster) : switch_latency_(cluster.network.switch_latency) {
    const Time no_latency = Time::zero();
    std::vector<std::vector<VertexId>> nics_of_node;
    std::vector<const NodeGroup*> group_of_node;

    int node = 0, rank = 0;
    for (const NodeGroup& g : cluster.groups) {
        const bool soc = (g.intra == IntraKind::none || g.intra == IntraKind::shm) &&
                         (g.device.is_cpu || g.device.unified_memory);
        const LinkSpec memory_link{g.host_memory_bandwidth, no_latency};
        for (int i = 0; i < g.count; ++i, ++node) {
            building_node_ = node;
            const std::string prefix = node_prefix(node);
            const VertexId host = add_vertex(VertexKind::host_memory, prefix + "host");
            host_vertex_of_node_.push_back(host);
            VertexId nvme = -1;
            if (g.nvme_capacity) nvme = add_vertex(VertexKind::nvme, prefix + "nvme");
            nvme_vertex_of_node_.push_back(nvme);

            std::vector<VertexId> devices;
            for (int k = 0; k < g.devices_per_node; ++k, ++rank) {
                devices.push_back(add_vertex(VertexKind::device, prefix + (g.device.is_cpu ? "cpu" : "gpu") +
                                                                     std::to_string(k)));
                device_vertex_.push_back(devices.back());
                node_of_rank_.push_back(node);
            }
            std::vector<VertexId> nics;
            for (int j = 0; j < g.nics; ++j) nics.push_back(add_vertex(VertexKind::nic, prefix + "nic" + std::to_string(j)));

            // nvme → x reads at the read rate, x → nvme writes at the write rate.
            auto attach_nvme = [&](VertexId x) {
                if (nvme < 0) return;
                add_duplex(x, nvme, {g.nvme_write, no_latency});
                links_.back().bandwidth = g.nvme_read;
            };

            if (soc) {
                for (int k = 0; k < g.devices_per_node; ++k) {
                    add_duplex(devices[k], host, memory_link);
                    attach_nvme(devices[k]);
                    add_duplex(devices[k], nics[static_cast<std::size_t>(g.nic_of(k))], g.host_link);
                }
                // The NIC DMAs from DRAM without the cores, so host memory reaches other nodes too.
                for (VertexId nic : nics) add_duplex(host, nic, g.host_link);
                if (g.intra == IntraKind::shm) {
                    const VertexId shm = add_vertex(VertexKind::shm, prefix + "shm");
                    for (VertexId d : devices) add_duplex(d, shm, g.intra_link);
                }
            } else {
                const VertexId root = add_vertex(VertexKind::pcie_switch, prefix + "pcie");
                add_duplex(root, host, memory_link);
                attach_nvme(root);
                std::vector<VertexId> attach(static_cast<std::size_t>(g.nics), root);
                if (g.nics > 1) {
                    for (int j = 0; j < g.nics; ++j) {
                        attach[j] = add_vertex(VertexKind::pcie_switch, prefix + "pcie" + std::to_string(j));
                        add_duplex(attach[j], root, g.host_link);
                    }
                }
                for (int j = 0; j < g.nics; ++j) add_duplex(nics[j], attach[j], g.host_link);
                const LinkSpec& slot = g.intra == IntraKind::pcie ? g.intra_link : g.host_link;
                for (int k = 0; k < g.devices_per_node; ++k) {
                    add_duplex(devices[k], attach[static_cast<std::size_t>(g.nic_of(k))], slot);
                }
                if (g.intra == IntraKind::nvswitch || g.intra == IntraKind::nvlink) {
                    const VertexId sw = add_vertex(VertexKind::nvswitch,
                                                   prefix + (g.intra == IntraKind::nvswitch ? "nvswitch" : "nvlink"));
                    for (VertexId d : devices) add_duplex(d, sw, g.intra_link);
                }
            }
            nics_of_node.push_back(std::move(nics));
            group_of_node.push_back(&g);
        }
    }

    building_node_ = -1;
    const Network& net = cluster.network;
    const int nodes = node;
    routing_ = net.routing;
    // A NIC slowed by its group's nic_speed or by --slow RANK:F:nic=F moves that fraction of its
    // bandwidth; its latency stays (the wire is the same, the host side feeds it slower).
    const auto nic_spec = [&](int n, std::size_t j) {
        LinkSpec spec = group_of_node[n]->nic_link;
        const double speed = cluster.nic_speed(n, static_cast<int>(j));
        if (speed != 1.0) spec.bandwidth = spec.bandwidth * speed;
        return spec;
    };
    if (net.fabric == FabricKind::single_switch) {
        const VertexId sw = add_vertex(VertexKind::network_switch, "switch");
        for (int n = 0; n < nodes; ++n) {
            for (std::size_t j = 0; j < nics_of_node[n].size(); ++j) add_duplex(nics_of_node[n][j], sw, nic_spec(n, j));
        }
        return;
    }

    // Fat tree, rail-optimized (see the diagram at the top).
    int rails = 1;
    Bandwidth port;
    for (const NodeGroup& g : cluster.groups) {
        rails = std::max(rails, g.nics);
        port = std::max(port, g.nic_link.bandwidth);
    }
    const int per_leaf = net.nodes_per_leaf > 0 ? std::min(net.nodes_per_leaf, nodes) : std::max(nodes, 1);
    nodes_per_leaf_ = per_leaf;
    const int pods = (nodes + per_leaf - 1) / per_leaf;
    std::vector<VertexId> leaves;
    for (int i = 0; i < pods * rails; ++i) leaves.push_back(add_vertex(VertexKind::network_switch, "leaf" + std::to_string(i)));
    for (int n = 0; n < nodes; ++n) {
        const int pod = n / per_leaf;
        for (std::size_t j = 0; j < nics_of_node[n].size(); ++j) {
            add_duplex(nics_of_node[n][j], leaves[static_cast<std::size_t>(pod * rails) + j], nic_spec(n, j));
        }
    }
    if (pods > 1) {
        const int spines = std::max(1, static_cast<int>(std::ceil(per_leaf / net.oversubscription - 1e-9)));
        std::vector<VertexId> spine_ids;
        for (int s = 0; s < spines; ++s) spine_ids.push_back(add_vertex(VertexKind::network_switch, "spine" + std::to_string(s)));
        for (VertexId leaf : leaves) {
            for (VertexId spine : spine_ids) add_duplex(leaf, spine, {port, no_latency});
        }
    }
}

std::string Topology::link_name(LinkId l) const {
    const Link& link = links_.at(static_cast<std::size_t>(l));
    return vertices_[static_cast<std::size_t>(link.from)].name + "->" + vertices_[static_cast<std::size_t>(link.to)].name;
}

VertexId Topology::host_vertex(int rank) const {
    return host_vertex_of_node_.at(static_cast<std::size_t>(node_of_rank_.at(static_cast<std::size_t>(rank))));
}

VertexId Topology::nvme_vertex(int rank) const {
    return nvme_vertex_of_node_.at(static_cast<std::size_t>(node_of_rank_.at(static_cast<std::size_t>(rank))));
}

std::span<const LinkId> Topology::route(VertexId a, VertexId b) const {
    if (a == b) return {};
    auto it = routes_.find(route_key(a, b));
    if (it == routes_.end()) {
        compute_route(a, b);
        it = routes_.find(route_key(a, b));
    }
    return it->second;
}

// Bidirectional breadth-first search: each step expands one full level on the side with the
// smaller frontier. When a level ends with a vertex reached from both sides, the route length is
// D = forward level + backward level (the previous step found no common vertex, so D is at least
// that), and every shortest route crosses a vertex reached at exactly those two depths. Among
// those meeting vertices the widest wins, ties broken by the ECMP hash; each half is then walked
// back to its start the same way. A route across a 512-node fat tree touches a few hundred
// vertices instead of the whole fabric.
void Topology::compute_route(VertexId a, VertexId b) const {
    const auto n = static_cast<VertexId>(vertices_.size());
    if (a < 0 || a >= n || b < 0 || b >= n) {
        throw Error(ErrorKind::internal, "route between vertices " + std::to_string(a) + " and " + std::to_string(b) +
                                             ": the topology has " + std::to_string(n) + " vertices");
    }
    Scratch& s = scratch;
    Side& fwd = s.forward;
    Side& bwd = s.backward;
    fwd.fit(vertices_.size());
    bwd.fit(vertices_.size());
    struct Reset {
        Scratch& s;
        ~Reset() {
            s.forward.reset();
            s.backward.reset();
        }
    } reset{s};

    auto kind = [&](VertexId v) { return vertices_[static_cast<std::size_t>(v)].kind; };
    // A route may pass through v only if v is not an endpoint (its own ends excepted).
    auto passable = [&](VertexId v) { return v == a || v == b || !is_endpoint(kind(v)); };

    const RouteGraph forward_graph{&vertices_, &links_, &out_links_, a};
    const RouteGraph backward_graph{&vertices_, &links_, &out_links_, b};
    fwd.start(a);
    bwd.start(b);
    // The links a level's expansion would examine: a switch with a port per node is one vertex
    // of a frontier but thousands of links.
    auto links_out = [&](const Side& side, const RouteGraph& g) {
        std::size_t n = 0;
        for (VertexId v : side.queue) {
            const auto [first, last] = out_edges(v, g);
            n += static_cast<std::size_t>(last - first);
        }
        return n;
    };
    std::vector<VertexId> meet;
    while (meet.empty()) {
        // The smaller frontier grows, unless it has far more links to examine than the other
        // (a single switch of a thousand boards: reaching it from the other side is cheaper).
        bool forward = fwd.queue.size() <= bwd.queue.size();
        if (!fwd.queue.empty() && !bwd.queue.empty()) {
            const std::size_t f = links_out(fwd, forward_graph), w = links_out(bwd, backward_graph);
            if (forward && f > 16 * w + 64) forward = false;
            else if (!forward && w > 16 * f + 64) forward = true;
        }
        Side& grow = forward ? fwd : bwd;
        const Side& other = forward ? bwd : fwd;
        if (grow.queue.empty()) {
            throw Error(ErrorKind::internal, "no route from " + vertices_[a].name + " to " + vertices_[b].name);
        }
        const std::size_t first_new = grow.touched.size();
        expand_level(forward ? forward_graph : backward_graph, grow, links_, !forward);
        for (std::size_t i = first_new; i < grow.touched.size(); ++i) {
            const VertexId v = grow.touched[i];
            if (other.depth[v] >= 0 && passable(v)) meet.push_back(v);
        }
    }

    const std::uint64_t pair = mix(route_key(a, b));
    // Destination routing (d-mod-k): every choice among equal links or meeting vertices, which
    // are the spines in link and vertex order, by the destination node's port on its leaf.
    const std::int32_t b_node = node_of_vertex_[static_cast<std::size_t>(b)];
    const bool by_destination = routing_ == Routing::destination && b_node >= 0;
    const auto port = static_cast<std::uint64_t>(by_destination ? b_node % nodes_per_leaf_ : 0);
    auto pick = [&](const std::vector<LinkId>& choices, VertexId at) {
        return choices[(by_destination ? port : mix(pair ^ static_cast<std::uint64_t>(at))) % choices.size()];
    };
    double widest = 0;
    for (VertexId v : meet) widest = std::max(widest, std::min(fwd.width[v], bwd.width[v]));
    std::vector<VertexId> widest_meet;
    for (VertexId v : meet) {
        if (std::min(fwd.width[v], bwd.width[v]) >= widest) widest_meet.push_back(v);
    }
    if (by_destination) std::sort(widest_meet.begin(), widest_meet.end());
    const VertexId middle = widest_meet[(by_destination ? port : pair) % widest_meet.size()];

    auto lost = [&](VertexId v) {
        return Error(ErrorKind::internal, "route search from " + vertices_[a].name + " to " + vertices_[b].name +
                                              " lost its way at " + vertices_[v].name);
    };
    std::vector<LinkId> path;
    std::vector<LinkId> choices;
    // The links of a shortest route into (forward) or out of (backward) v that keep the route at
    // its widest, in link order (the order of v's own adjacency list, which the ECMP hash indexes).
    auto candidates = [&](const Side& side, VertexId v, bool forward) {
        choices.clear();
        for (const auto& [x, link] : side.parents) {
            if (x != v) continue;
            const Link& l = links_[static_cast<std::size_t>(link)];
            const VertexId near = forward ? l.from : l.to;
            if (!passable(near) || std::min(side.width[near], l.bandwidth.bytes_per_second()) < widest) continue;
            choices.push_back(link);
        }
        std::sort(choices.begin(), choices.end());
    };
    // First half: from the middle back to a, over links u → v one level nearer a.
    for (VertexId v = middle; v != a;) {
        candidates(fwd, v, true);
        if (choices.empty()) throw lost(v);
        const LinkId chosen = pick(choices, v);
        path.push_back(chosen);
        v = links_[static_cast<std::size_t>(chosen)].from;
    }
    std::reverse(path.begin(), path.end());
    // Second half: from the middle on to b, over links v → u one level nearer b.
    for (VertexId v = middle; v != b;) {
        candidates(bwd, v, false);
        if (choices.empty()) throw lost(v);
        const LinkId chosen = pick(choices, v);
        path.push_back(chosen);
        v = links_[static_cast<std::size_t>(chosen)].to;
    }
    routes_.emplace(route_key(a, b), std::move(path));
}

Time Topology::route_latency(VertexId a, VertexId b) const {
    const auto r = route(a, b);
    Time t = Time::zero();
    for (std::size_t i = 0; i < r.size(); ++i) {
        const Link& l = links_[static_cast<std::size_t>(r[i])];
        t += l.latency;
        if (i + 1 < r.size() && vertices_[static_cast<std::size_t>(l.to)].kind == VertexKind::network_switch) {
            t += switch_latency_;
        }
    }
    return t;
}

Bandwidth Topology::route_bandwidth(VertexId a, VertexId b) const {
    const auto r = route(a, b);
    Bandwidth bw = Bandwidth::bytes_per_s(std::numeric_limits<double>::infinity());
    for (LinkId l : r) bw = std::min(bw, links_[static_cast<std::size_t>(l)].bandwidth);
    return bw;
}

}  // namespace smol::topo

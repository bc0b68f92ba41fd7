#include "sim/collectives.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <map>
#include <limits>
#include <optional>
#include <unordered_map>

#include "core/error.hpp"

namespace smol::sim {

const char* to_string(CollectiveAlgo a) {
    switch (a) {
        case CollectiveAlgo::automatic: return "auto";
        case CollectiveAlgo::ring: return "ring";
        case CollectiveAlgo::tree: return "tree";
        case CollectiveAlgo::halving_doubling: return "halving-doubling";
        case CollectiveAlgo::hierarchical: return "hierarchical";
        case CollectiveAlgo::direct: return "direct";
        case CollectiveAlgo::nvls: return "nvls";
        case CollectiveAlgo::pat: return "pat";
    }
    return "?";
}

CollectiveAlgo parse_collective_algo(const std::string& text) {
    std::vector<std::string> names;
    for (auto a : {CollectiveAlgo::automatic, CollectiveAlgo::ring, CollectiveAlgo::tree, CollectiveAlgo::halving_doubling,
                   CollectiveAlgo::hierarchical, CollectiveAlgo::direct, CollectiveAlgo::nvls, CollectiveAlgo::pat}) {
        if (text == to_string(a)) return a;
        names.emplace_back(to_string(a));
    }
    fail_input("one of auto, ring, tree, halving-doubling, hierarchical, direct, nvls, pat",
               "'" + text + "'" + did_you_mean(text, names), {"", "", "--collective-algo"});
}

const char* to_string(Protocol p) {
    switch (p) {
        case Protocol::ll: return "LL";
        case Protocol::ll128: return "LL128";
        case Protocol::simple: return "Simple";
        case Protocol::host: return "host";
    }
    return "?";
}

const ProtocolCosts& protocol_costs(Protocol p) {
    // NVIDIA/nccl v2.30.7 src/graph/tuning.cc:151-181: base latencies (µs) Ring 6.6 / 14 / 8.4,
    // Tree 6.8 / 14 / 8.4 for LL / LL128 / Simple; Ring per-step latencies over NVLink
    // 0.6 / 1.9 / 3.4 and over the network 2.7 / 4 / 14. Used by point-to-point transfers and
    // the non-NCCL algorithms on GPUs. Efficiencies: LL sends 4 bytes of flag per 4 bytes of data
    // (1/2); LL128 sends 8 bytes of flag per 128 (15/16).
    static const ProtocolCosts ll{Time::us(6.6), Time::us(6.8), Time::us(0.6), Time::us(2.7), 0.5};
    static const ProtocolCosts ll128{Time::us(14), Time::us(14), Time::us(1.9), Time::us(4), 120.0 / 128.0};
    static const ProtocolCosts simple{Time::us(8.4), Time::us(8.4), Time::us(3.4), Time::us(14), 1.0};
    // MPI over the host stack: no extra latency beyond the topology's own link and switch
    // latencies (the Pi presets fold the TCP stack into their switch latency).
    static const ProtocolCosts host{Time::zero(), Time::zero(), Time::zero(), Time::zero(), 1.0};
    switch (p) {
        case Protocol::ll: return ll;
        case Protocol::ll128: return ll128;
        case Protocol::simple: return simple;
        case Protocol::host: return host;
    }
    return simple;
}

namespace {

/// "an all_reduce", "a broadcast": a collective's name for messages.
std::string with_article(const char* kind) {
    return std::string(std::strchr("aeiou", kind[0]) != nullptr ? "an " : "a ") + kind;
}


int ceil_log2(std::size_t p) { return p <= 1 ? 0 : static_cast<int>(std::bit_width(p - 1)); }

/// Members grouped by node, in member order; with `equal`, empty when the nodes hold different
/// numbers of them (the hierarchical algorithm needs one rank per node for each local index).
std::vector<std::vector<int>> by_node(const std::vector<int>& members, const std::function<int(int)>& node_of,
                                      bool equal = true) {
    std::map<int, std::vector<int>> groups;
    std::vector<int> order;
    for (int r : members) {
        auto [it, fresh] = groups.try_emplace(node_of(r));
        if (fresh) order.push_back(it->first);
        it->second.push_back(r);
    }
    std::vector<std::vector<int>> out;
    for (int n : order) out.push_back(std::move(groups[n]));
    if (equal)
        for (const auto& g : out)
            if (g.size() != out[0].size()) return {};
    return out;
}

void ring_flows(CollectivePhase& ph, const std::vector<int>& ring, Bytes per_flow) {
    if (ring.size() < 2) return;
    for (std::size_t i = 0; i < ring.size(); ++i)
        ph.flows.push_back({ring[i], ring[(i + 1) % ring.size()], per_flow});
}

/// Ring phase for a collective kind over `ring` with buffer `s`.
CollectivePhase ring_phase(CollectiveKind kind, const std::vector<int>& ring, Bytes s) {
    const auto p = static_cast<std::int64_t>(ring.size());
    CollectivePhase ph;
    switch (kind) {
        case CollectiveKind::all_reduce:
            ring_flows(ph, ring, s * (2.0 * static_cast<double>(p - 1) / static_cast<double>(p)));
            ph.steps = static_cast<int>(2 * (p - 1));
            break;
        case CollectiveKind::reduce_scatter:
        case CollectiveKind::all_gather:
            ring_flows(ph, ring, s * (static_cast<double>(p - 1) / static_cast<double>(p)));
            ph.steps = static_cast<int>(p - 1);
            break;
        default: break;
    }
    return ph;
}

/// A chain from the root (broadcast) or to it (reduce): pipelined, so every edge carries S.
CollectivePhase chain_phase(CollectiveKind kind, const std::vector<int>& members, int root, Bytes s) {
    const auto p = members.size();
    const auto start = static_cast<std::size_t>(std::find(members.begin(), members.end(), root) - members.begin());
    CollectivePhase ph;
    for (std::size_t i = 0; i + 1 < p; ++i) {
        const int a = members[(start + i) % p], b = members[(start + i + 1) % p];
        if (kind == CollectiveKind::broadcast)
            ph.flows.push_back({a, b, s});
        else
            ph.flows.push_back({b, a, s});
    }
    ph.steps = static_cast<int>(p - 1);
    return ph;
}

/// Binary tree over `order` (heap numbering: the parent of position i is (i − 1) / 2).
void tree_edges(const std::vector<int>& order, Bytes s, bool up, bool down, CollectivePhase& ph) {
    for (std::size_t i = 1; i < order.size(); ++i) {
        const int child = order[i], parent = order[(i - 1) / 2];
        if (up) ph.flows.push_back({child, parent, s});
        if (down) ph.flows.push_back({parent, child, s});
    }
}

}  // namespace

namespace {

/// One rank per distinct NIC among `node`'s, in member order: the GPUs NCCL's channels leave
/// the node from (one NIC per channel, spread over the NICs).
std::vector<int> rail_ranks(const std::vector<int>& node, const CollectiveContext& ctx) {
    std::vector<int> out, seen;
    for (int r : node) {
        const int nic = ctx.nic_of(r);
        if (std::find(seen.begin(), seen.end(), nic) == seen.end()) {
            seen.push_back(nic);
            out.push_back(r);
        }
    }
    return out;
}

/// A node-aware ring for NCCL: the members node by node; inside a node consecutive GPUs pass
/// the ring's bytes over NVLink/PCIe, and between nodes the ring leaves on every rail the
/// node's members reach the network by — NCCL's channels each take one NIC, and with PXN a GPU
/// forwards over NVLink to the GPU on the destination's rail — so the inter-node bytes split
/// evenly over those rails, each NIC talking to the same rail of the next node.
void rail_ring_flows(CollectivePhase& ph, const std::vector<std::vector<int>>& nodes, Bytes per_edge,
                     const CollectiveContext& ctx) {
    for (std::size_t n = 0; n < nodes.size(); ++n) {
        const std::vector<int>& here = nodes[n];
        const std::vector<int>& next = nodes[(n + 1) % nodes.size()];
        for (std::size_t i = 0; i + 1 < here.size(); ++i) ph.flows.push_back({here[i], here[i + 1], per_edge});
        if (nodes.size() == 1) {
            if (here.size() > 1) ph.flows.push_back({here.back(), here.front(), per_edge});
            continue;
        }
        // One GPU per distinct NIC on each side, paired in order (rail k to rail k).
        const std::vector<int> from = rail_ranks(here, ctx), to = rail_ranks(next, ctx);
        const std::size_t k = std::min(from.size(), to.size());
        for (std::size_t j = 0; j < k; ++j)
            ph.flows.push_back({from[j], to[j], per_edge * (1.0 / static_cast<double>(k))});
    }
}

/// NCCL's tree all-reduce: within a node a chain through its GPUs (reduce up, broadcast down),
/// across nodes a double binary tree between the chains' heads, the two trees each carrying half
/// (src/graph/trees.cc; the second is the first shifted by one node, so most nodes are a leaf in
/// one and inner in the other). Every channel is such a tree pair, headed on its node by the GPU
/// of the channel's NIC (src/graph/connect.cc connectTrees), and NCCL spreads the channels over
/// the NICs as it does a ring's: each rail carries 1/k of the buffer, k the NICs of the node with
/// the fewest — not two NICs per node for the whole buffer.
void nccl_tree_flows(CollectivePhase& ph, const std::vector<std::vector<int>>& nodes, Bytes s, const CollectiveContext& ctx) {
    auto chain = [&ph](const std::vector<int>& order, Bytes b) {
        for (std::size_t i = 0; i + 1 < order.size(); ++i) {
            ph.flows.push_back({order[i + 1], order[i], b});
            ph.flows.push_back({order[i], order[i + 1], b});
        }
    };
    if (nodes.size() < 2) {
        for (const auto& node : nodes) chain(node, s);
        return;
    }
    std::vector<std::vector<int>> rails;
    std::size_t k = std::numeric_limits<std::size_t>::max();
    for (const auto& node : nodes) {
        rails.push_back(rail_ranks(node, ctx));
        k = std::min(k, rails.back().size());
    }
    const Bytes share = s * (1.0 / static_cast<double>(k));
    for (std::size_t j = 0; j < k; ++j) {
        for (std::size_t n = 0; n < nodes.size(); ++n) {   // the chain from rail j's GPU through the node's others
            std::vector<int> order{rails[n][j]};
            for (int r : nodes[n])
                if (r != rails[n][j]) order.push_back(r);
            chain(order, share);
        }
        for (std::size_t t = 0; t < 2; ++t) {
            std::vector<int> heads;
            for (std::size_t n = 0; n < nodes.size(); ++n) heads.push_back(rails[(n + t) % nodes.size()][j]);
            tree_edges(heads, share * 0.5, true, true, ph);
        }
    }
}

bool nccl_algo(CollectiveAlgo a) {
    return a == CollectiveAlgo::ring || a == CollectiveAlgo::tree || a == CollectiveAlgo::nvls || a == CollectiveAlgo::pat;
}

std::optional<nccl::Func> nccl_func(CollectiveKind k) {
    switch (k) {
        case CollectiveKind::all_reduce: return nccl::Func::all_reduce;
        case CollectiveKind::reduce_scatter: return nccl::Func::reduce_scatter;
        case CollectiveKind::all_gather: return nccl::Func::all_gather;
        case CollectiveKind::broadcast: return nccl::Func::broadcast;
        case CollectiveKind::reduce: return nccl::Func::reduce;
        case CollectiveKind::barrier: return nccl::Func::all_reduce;   // frameworks all-reduce one element
        case CollectiveKind::all_to_all: return std::nullopt;           // grouped send/recv in NCCL
    }
    return std::nullopt;
}

nccl::Algo to_nccl(CollectiveAlgo a) {
    switch (a) {
        case CollectiveAlgo::tree: return nccl::Algo::tree;
        case CollectiveAlgo::nvls: return nccl::Algo::nvls;
        case CollectiveAlgo::pat: return nccl::Algo::pat;
        default: return nccl::Algo::ring;
    }
}

CollectiveAlgo from_nccl(nccl::Algo a) {
    switch (a) {
        case nccl::Algo::tree: return CollectiveAlgo::tree;
        case nccl::Algo::nvls: return CollectiveAlgo::nvls;
        case nccl::Algo::nvls_tree: return CollectiveAlgo::tree;   // NVLS in the node, a tree across: laid out as the tree
        case nccl::Algo::pat: return CollectiveAlgo::pat;
        default: return CollectiveAlgo::ring;
    }
}

Protocol from_nccl(nccl::Proto p) {
    switch (p) {
        case nccl::Proto::ll: return Protocol::ll;
        case nccl::Proto::ll128: return Protocol::ll128;
        default: return Protocol::simple;
    }
}

}  // namespace

nccl::Communicator nccl_communicator(const std::vector<int>& members, const CollectiveContext& ctx) {
    const std::vector<std::vector<int>> nodes = by_node(members, ctx.node_of, false);
    double cc = 100;
    bool nvlink = true, nvswitch = true;
    double gpu_link = std::numeric_limits<double>::max(), nic = std::numeric_limits<double>::max();
    topo::CpuVendor vendor = topo::CpuVendor::other;
    for (int r : members) {
        const topo::NodeGroup& g = ctx.cluster->group_of(r);
        cc = std::min(cc, g.device.compute_capability > 0 ? g.device.compute_capability : 8.0);
        const bool nv = g.intra == topo::IntraKind::nvswitch || g.intra == topo::IntraKind::nvlink;
        nvlink = nvlink && nv;
        nvswitch = nvswitch && g.intra == topo::IntraKind::nvswitch;
        // The GPU's link as NCCL's topology counts it: NVLinks of 25 GB/s per direction each
        // at NCCL's per-link figure (src/graph/topo.h), or PCIe at NCCL's 12 GB/s per Gen3 x16
        // (topo.h PCI_BW) of its 15.75 GB/s line rate.
        const double link = g.intra_link.bandwidth.to_gb_per_s();
        double as_nccl = link > 0 ? link * 12.0 / 15.75 : 12.0;
        if (nv) as_nccl = std::max(1.0, std::round(link / 25.0)) * nccl::nvlink_bw_per_link(cc);
        gpu_link = std::min(gpu_link, as_nccl);
        nic = std::min(nic, g.nic_link.bandwidth.to_gb_per_s());
        vendor = g.cpu_vendor;
    }
    // NICs serving the communicator's GPUs on a node: the fewest of any node (NCCL's channel
    // count is the minimum over the ranks' ring graphs, src/init.cc).
    std::size_t nics = std::numeric_limits<std::size_t>::max();
    for (const std::vector<int>& node : nodes) nics = std::min(nics, rail_ranks(node, ctx).size());
    const nccl::CpuVendor cpu = vendor == topo::CpuVendor::amd     ? nccl::CpuVendor::amd
                                : vendor == topo::CpuVendor::intel ? nccl::CpuVendor::intel
                                                                   : nccl::CpuVendor::other;
    return nccl::make_communicator(static_cast<int>(members.size()), static_cast<int>(nodes.size()), cc, nvlink,
                                   nvswitch, cpu, gpu_link, nic, static_cast<int>(nics));
}

bool applicable(CollectiveAlgo algo, CollectiveKind kind, const std::vector<int>& members, const CollectiveContext& ctx) {
    const std::size_t p = members.size();
    const auto& node_of = ctx.node_of;
    switch (algo) {
        case CollectiveAlgo::automatic: return true;
        case CollectiveAlgo::ring:
            return kind != CollectiveKind::all_to_all && kind != CollectiveKind::barrier;
        case CollectiveAlgo::tree:
            if (ctx.gpu) return kind == CollectiveKind::all_reduce || kind == CollectiveKind::barrier;  // NCCL trees
            return kind == CollectiveKind::all_reduce || kind == CollectiveKind::broadcast ||
                   kind == CollectiveKind::reduce || kind == CollectiveKind::barrier;
        case CollectiveAlgo::halving_doubling:
            return std::has_single_bit(p) && p >= 2 &&
                   (kind == CollectiveKind::all_reduce || kind == CollectiveKind::reduce_scatter ||
                    kind == CollectiveKind::all_gather);
        case CollectiveAlgo::hierarchical: {
            if (kind != CollectiveKind::all_reduce && kind != CollectiveKind::reduce_scatter &&
                kind != CollectiveKind::all_gather)
                return false;
            const auto groups = by_node(members, node_of);
            return groups.size() >= 2 && groups[0].size() >= 2;
        }
        case CollectiveAlgo::direct:
            return kind != CollectiveKind::barrier;
        case CollectiveAlgo::nvls:
        case CollectiveAlgo::pat: {
            if (!ctx.gpu || !ctx.cluster || p < 2) return false;
            const auto f = nccl_func(kind);
            if (!f) return false;
            const nccl::Communicator c = nccl_communicator(members, ctx);
            for (int pi = 0; pi < nccl::kProtos; ++pi)
                if (nccl::model(*f, to_nccl(algo), static_cast<nccl::Proto>(pi), c).enabled()) return true;
            return false;
        }
    }
    return false;
}

CollectiveSchedule decompose(CollectiveKind kind, const std::vector<int>& members, Bytes s, int root,
                             CollectiveAlgo algo, const CollectiveContext& ctx) {
    const auto& node_of = ctx.node_of;
    if (!applicable(algo, kind, members, ctx))
        throw Error(ErrorKind::bad_input, std::string("the ") + to_string(algo) + " algorithm cannot run " +
                                              with_article(to_string(kind)) + " over " + std::to_string(members.size()) + " ranks",
                    {"", "", "--collective-algo"});
    CollectiveSchedule out;
    out.algo = algo;
    const std::size_t p = members.size();
    const double pd = static_cast<double>(p);
    if (p < 2) return out;  // a collective of one rank moves nothing
    if (kind == CollectiveKind::barrier) {
        // Dissemination barrier: ⌈log2 p⌉ rounds of empty messages.
        CollectivePhase ph;
        ph.steps = ceil_log2(p);
        out.phases.push_back(ph);
        if (algo == CollectiveAlgo::ring) out.phases.back().steps = static_cast<int>(p - 1);
        return out;
    }
    if (kind == CollectiveKind::all_to_all) {
        CollectivePhase ph;
        for (int a : members)
            for (int b : members)
                if (a != b) ph.flows.push_back({a, b, s * (1.0 / pd)});
        ph.steps = 1;
        out.phases.push_back(std::move(ph));
        return out;
    }
    switch (algo) {
        case CollectiveAlgo::automatic:
        case CollectiveAlgo::ring:
            if (kind == CollectiveKind::broadcast || kind == CollectiveKind::reduce) {
                out.phases.push_back(chain_phase(kind, members, root, s));
            } else if (ctx.gpu) {
                CollectivePhase ph = ring_phase(kind, members, s);   // for its steps and bytes per edge
                const Bytes per_edge = ph.flows.empty() ? Bytes(0) : ph.flows.front().bytes;
                ph.flows.clear();
                // NCCL builds each node's rings from its own GPUs and NICs, whatever the others
                // hold, with the channel count all ranks agree on (the fewest: init.cc takes the
                // minimum of every rank's graph): nodes of unequal size keep their rails.
                rail_ring_flows(ph, by_node(members, node_of, false), per_edge, ctx);
                out.phases.push_back(std::move(ph));
            } else {
                out.phases.push_back(ring_phase(kind, members, s));
            }
            break;
        case CollectiveAlgo::tree: {
            CollectivePhase ph;
            if (ctx.gpu) {
                nccl_tree_flows(ph, by_node(members, node_of, false), s, ctx);   // a chain per node, whatever its size
                ph.steps = 2 * ceil_log2(p + 1);
            } else if (kind == CollectiveKind::all_reduce) {
                // Double binary tree (NCCL 2.4): two trees, each reducing up and broadcasting down
                // half of the buffer, pipelined; the second tree is the first shifted by one rank so
                // most ranks are a leaf in one tree and an inner node in the other.
                std::vector<int> shifted(members.begin() + 1, members.end());
                shifted.push_back(members.front());
                tree_edges(members, s * 0.5, true, true, ph);
                tree_edges(shifted, s * 0.5, true, true, ph);
                ph.steps = 2 * ceil_log2(p + 1);
            } else {
                std::vector<int> order = members;
                std::rotate(order.begin(), std::find(order.begin(), order.end(), root), order.end());
                tree_edges(order, s, kind == CollectiveKind::reduce, kind == CollectiveKind::broadcast, ph);
                ph.steps = ceil_log2(p + 1);
            }
            out.phases.push_back(std::move(ph));
            break;
        }
        case CollectiveAlgo::nvls: {
            // NVLink SHARP: each GPU sends its data into the NVSwitch, which reduces (multimem
            // ld_reduce) and multicasts the result back: S up and S down per GPU for an
            // all-reduce, (p−1)/p·S for a reduce-scatter or all-gather — the load of a ring
            // of flows of that size through the switch.
            CollectivePhase ph;
            const Bytes each = kind == CollectiveKind::all_reduce ? s : s * ((pd - 1) / pd);
            ring_flows(ph, members, each);
            ph.steps = 1;
            out.phases.push_back(std::move(ph));
            break;
        }
        case CollectiveAlgo::pat:
            // Parallel aggregated trees (one GPU per node): log-depth, but every rank still sends
            // and receives (p−1)/p·S.
            out.phases.push_back(ring_phase(kind, members, s));
            out.phases.back().steps = ceil_log2(p);
            break;
        case CollectiveAlgo::halving_doubling: {
            // Recursive halving (reduce-scatter): partners at distance p/2, p/4, …, 1 exchange
            // half of what they still hold; recursive doubling (all-gather) undoes it.
            std::vector<CollectivePhase> halving;
            Bytes chunk = s;
            for (std::size_t dist = p / 2; dist >= 1; dist /= 2) {
                chunk = chunk / 2;
                CollectivePhase ph;
                for (std::size_t i = 0; i < p; ++i) ph.flows.push_back({members[i], members[i ^ dist], chunk});
                halving.push_back(std::move(ph));
            }
            if (kind != CollectiveKind::all_gather)
                for (const auto& ph : halving) out.phases.push_back(ph);
            if (kind != CollectiveKind::reduce_scatter)
                for (auto it = halving.rbegin(); it != halving.rend(); ++it) out.phases.push_back(*it);
            break;
        }
        case CollectiveAlgo::hierarchical: {
            // All-reduce: intra-node reduce-scatter → inter-node all-reduce of each node's 1/g
            // shard among the ranks with the same local index (one ring per rail) → intra-node
            // all-gather. Reduce-scatter: the first two steps with an inter-node reduce-scatter
            // (each rank ends with a fully reduced 1/p); all-gather: the mirror image.
            const auto groups = by_node(members, node_of);
            const std::size_t g = groups[0].size();
            const Bytes shard = s * (1.0 / static_cast<double>(g));
            CollectivePhase intra, inter;
            for (const auto& node : groups) {
                auto a = ring_phase(CollectiveKind::reduce_scatter, node, s);
                intra.flows.insert(intra.flows.end(), a.flows.begin(), a.flows.end());
                intra.steps = a.steps;
            }
            const CollectiveKind across = kind == CollectiveKind::all_reduce ? CollectiveKind::all_reduce : kind;
            for (std::size_t j = 0; j < g; ++j) {
                std::vector<int> rail;
                for (const auto& node : groups) rail.push_back(node[j]);
                auto a = ring_phase(across, rail, shard);
                inter.flows.insert(inter.flows.end(), a.flows.begin(), a.flows.end());
                inter.steps = a.steps;
            }
            switch (kind) {
                case CollectiveKind::all_reduce: out.phases = {intra, std::move(inter), intra}; break;
                case CollectiveKind::reduce_scatter: out.phases = {std::move(intra), std::move(inter)}; break;
                default: out.phases = {std::move(inter), std::move(intra)}; break;  // all-gather
            }
            break;
        }
        case CollectiveAlgo::direct: {
            // Many-to-one and one-to-many, as a parameter server does it.
            const int r = root >= 0 ? root : members[0];
            CollectivePhase gather, scatter;
            for (int m : members)
                if (m != r) {
                    gather.flows.push_back({m, r, s});
                    scatter.flows.push_back({r, m, s});
                }
            switch (kind) {
                case CollectiveKind::reduce: out.phases.push_back(std::move(gather)); break;
                case CollectiveKind::broadcast: out.phases.push_back(std::move(scatter)); break;
                case CollectiveKind::all_reduce:
                    out.phases.push_back(std::move(gather));
                    out.phases.push_back(std::move(scatter));
                    break;
                case CollectiveKind::reduce_scatter:
                case CollectiveKind::all_gather: {
                    CollectivePhase ph;
                    for (int a : members)
                        for (int b : members)
                            if (a != b) ph.flows.push_back({a, b, s * (1.0 / pd)});
                    out.phases.push_back(std::move(ph));
                    break;
                }
                default: break;
            }
            break;
        }
    }
    for (auto& ph : out.phases)
        for (const auto& f : ph.flows)
            if (node_of(f.src) != node_of(f.dst)) ph.crosses_network = true;
    return out;
}

Time base_latency(CollectiveAlgo algo, Protocol p) {
    const ProtocolCosts& c = protocol_costs(p);
    return algo == CollectiveAlgo::tree ? c.base_tree : c.base_ring;
}

const PhaseRouteCache::Routes& PhaseRouteCache::of(const CollectivePhase& phase, const RouteInfo& routes) {
    // FNV-1a over the endpoints; a hit is confirmed by comparing them all.
    std::uint64_t h = 1469598103934665603ull;
    for (const auto& f : phase.flows) {
        h = (h ^ static_cast<std::uint32_t>(f.src)) * 1099511628211ull;
        h = (h ^ static_cast<std::uint32_t>(f.dst)) * 1099511628211ull;
    }
    auto& bucket = by_hash_[h];
    const auto same = [&](const Stored& s) {
        if (s.ends.size() != 2 * phase.flows.size()) return false;
        for (std::size_t i = 0; i < phase.flows.size(); ++i)
            if (s.ends[2 * i] != phase.flows[i].src || s.ends[2 * i + 1] != phase.flows[i].dst) return false;
        return true;
    };
    for (const Stored& s : bucket)
        if (same(s)) return s.routes;
    Stored s;
    s.ends.reserve(2 * phase.flows.size());
    if (count_.size() < routes.link_bandwidth.size()) count_.resize(routes.link_bandwidth.size(), 0);
    for (const auto& f : phase.flows) {
        s.ends.push_back(f.src);
        s.ends.push_back(f.dst);
        s.routes.wire = std::max(s.routes.wire, routes.latency(f.src, f.dst));
        for (std::int32_t l : routes.route(f.src, f.dst))
            if (count_[static_cast<std::size_t>(l)]++ == 0) s.routes.links.emplace_back(l, 0);
    }
    for (auto& [l, n] : s.routes.links) {
        n = count_[static_cast<std::size_t>(l)];
        count_[static_cast<std::size_t>(l)] = 0;
    }
    bucket.push_back(std::move(s));
    return bucket.back().routes;
}

Time step_latency(const CollectivePhase& phase, Protocol p, const RouteInfo& routes) {
    const ProtocolCosts& c = protocol_costs(p);
    Time wire;
    if (routes.cache) {
        wire = routes.cache->of(phase, routes).wire;
    } else {
        for (const auto& f : phase.flows) wire = std::max(wire, routes.latency(f.src, f.dst));
    }
    return wire + (phase.crosses_network ? c.hop_net : c.hop_intra);
}

namespace {

/// The most loaded link's time within one phase, without other traffic.
Time link_bound(const CollectivePhase& ph, double eff, const RouteInfo& routes) {
    // Bytes per link, in scratch indexed by link (a phase of a collective over a whole cluster
    // crosses hundreds of thousands of links), cleared after.
    // Flows of equal bytes (every algorithm's, but a chain's or a tree's uneven splits): each
    // link's load is those bytes added once per flow crossing it, the same sum the loop below
    // makes, from the routes the cache found once for these endpoints.
    const bool even = std::all_of(ph.flows.begin(), ph.flows.end(), [&](const FlowSpec& f) { return f.bytes == ph.flows.front().bytes; });
    if (routes.cache && even && !ph.flows.empty()) {
        const double x = ph.flows.front().bytes.as_double() / eff;
        double worst = 0;  // seconds
        for (const auto& [l, n] : routes.cache->of(ph, routes).links) {
            double b = 0;
            for (std::uint32_t k = 0; k < n; ++k) b += x;
            worst = std::max(worst, b / routes.link_bandwidth[static_cast<std::size_t>(l)].bytes_per_second());
        }
        return Time::seconds(worst);
    }
    thread_local std::vector<double> load;
    thread_local std::vector<std::int32_t> touched;
    if (load.size() < routes.link_bandwidth.size()) load.resize(routes.link_bandwidth.size(), 0.0);
    touched.clear();
    for (const auto& f : ph.flows)
        for (std::int32_t l : routes.route(f.src, f.dst)) {
            double& b = load[static_cast<std::size_t>(l)];
            if (b == 0) touched.push_back(l);
            b += f.bytes.as_double() / eff;
        }
    double worst = 0;  // seconds
    for (std::int32_t l : touched) {
        double& b = load[static_cast<std::size_t>(l)];
        worst = std::max(worst, b / routes.link_bandwidth[static_cast<std::size_t>(l)].bytes_per_second());
        b = 0;
    }
    return Time::seconds(worst);
}

}  // namespace

Time predict(const CollectiveSchedule& s, const RouteInfo& routes) {
    const double eff = protocol_costs(s.protocol).efficiency;
    if (s.nccl) {
        Time links;
        for (const auto& ph : s.phases) links = std::max(links, link_bound(ph, eff, routes));
        return s.latency + std::max(s.bandwidth_time, links);
    }
    Time total = base_latency(s.algo, s.protocol);
    for (const auto& ph : s.phases)
        total += step_latency(ph, s.protocol, routes) * static_cast<std::int64_t>(ph.steps) + link_bound(ph, eff, routes);
    return total;
}

CollectiveSchedule choose(CollectiveKind kind, const std::vector<int>& members, Bytes bytes, int root,
                          CollectiveAlgo forced, const CollectiveContext& ctx) {
    // NCCL on GPUs: its tuner picks (or, forced, prices) the algorithm and protocol.
    const auto func = nccl_func(kind);
    if (ctx.gpu && ctx.cluster && func && members.size() > 1 && (forced == CollectiveAlgo::automatic || nccl_algo(forced))) {
        const nccl::Communicator comm = nccl_communicator(members, ctx);
        const std::int64_t n = kind == CollectiveKind::barrier ? 4 : bytes.count();
        const nccl::Choice best = forced == CollectiveAlgo::automatic
                                      ? nccl::choose(*func, comm, n)
                                      : nccl::choose(*func, comm, n, to_nccl(forced));
        if (best.time_us < 0 && forced != CollectiveAlgo::automatic)
            throw Error(ErrorKind::bad_input, std::string("NCCL's ") + to_string(forced) + " algorithm cannot run " +
                                                  with_article(to_string(kind)) + " over these " + std::to_string(members.size()) + " ranks",
                        {"", "", "--collective-algo"});
        if (best.time_us >= 0) {
            const CollectiveAlgo algo = from_nccl(best.algo);
            CollectiveSchedule s = decompose(kind, members, bytes, root, algo, ctx);
            s.protocol = from_nccl(best.proto);
            s.nccl = true;
            s.latency = Time::us(best.latency_us);
            s.bandwidth_time = Time::us(std::max(0.0, best.time_us - best.latency_us));
            s.thread_blocks = nccl::thread_blocks(best.algo, best.proto, comm, n);
            return s;
        }
    }
    std::vector<CollectiveAlgo> algos;
    if (forced != CollectiveAlgo::automatic) {
        algos.push_back(forced);
    } else {
        // MPI libraries (CPU boards) choose among ring, tree, recursive halving-doubling,
        // hierarchical and direct exchanges; NCCL's all-to-all is a group of sends and receives.
        for (auto a : {CollectiveAlgo::ring, CollectiveAlgo::tree, CollectiveAlgo::halving_doubling,
                       CollectiveAlgo::hierarchical, CollectiveAlgo::direct})
            if (!ctx.gpu && applicable(a, kind, members, ctx)) algos.push_back(a);
        if (algos.empty()) algos.push_back(CollectiveAlgo::direct);
    }
    std::vector<Protocol> protocols = ctx.gpu ? std::vector<Protocol>{Protocol::ll, Protocol::ll128, Protocol::simple}
                                              : std::vector<Protocol>{Protocol::host};
    CollectiveSchedule best;
    Time best_time = Time::max();
    for (auto a : algos) {
        CollectiveSchedule s = decompose(kind, members, bytes, root, a, ctx);
        for (auto p : protocols) {
            s.protocol = p;
            const Time t = predict(s, ctx.routes);
            if (t < best_time) {
                best_time = t;
                best = s;
            }
        }
    }
    return best;
}

}  // namespace smol::sim

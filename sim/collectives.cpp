#include "sim/collectives.hpp"

#include <algorithm>
#include <bit>
#include <map>
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
    }
    return "?";
}

CollectiveAlgo parse_collective_algo(const std::string& text) {
    for (auto a : {CollectiveAlgo::automatic, CollectiveAlgo::ring, CollectiveAlgo::tree,
                   CollectiveAlgo::halving_doubling, CollectiveAlgo::hierarchical, CollectiveAlgo::direct})
        if (text == to_string(a)) return a;
    fail_input("one of auto, ring, tree, halving-doubling, hierarchical, direct", "'" + text + "'",
               {"", "", "--collective-algo"});
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
    // NCCL src/graph/tuning.cc (v2.30), quoted in HARDWARE.md. Base latencies (µs): Ring
    // 6.6 / 14 / 8.4, Tree 6.8 / 14 / 8.4 for LL / LL128 / Simple. Per-hop latencies (µs) over
    // NVLink 0.6 / 1.9 / 3.4 and over the network 2.7 / 4 / 14. Efficiencies: LL sends 4 bytes
    // of flag per 4 bytes of data (1/2); LL128 sends 8 bytes of flag per 128 (15/16).
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

int ceil_log2(std::size_t p) { return p <= 1 ? 0 : static_cast<int>(std::bit_width(p - 1)); }

/// Members grouped by node, in member order; empty when the grouping is not uniform.
std::vector<std::vector<int>> by_node(const std::vector<int>& members, const std::function<int(int)>& node_of) {
    std::map<int, std::vector<int>> groups;
    std::vector<int> order;
    for (int r : members) {
        auto [it, fresh] = groups.try_emplace(node_of(r));
        if (fresh) order.push_back(it->first);
        it->second.push_back(r);
    }
    std::vector<std::vector<int>> out;
    for (int n : order) out.push_back(std::move(groups[n]));
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

bool applicable(CollectiveAlgo algo, CollectiveKind kind, const std::vector<int>& members,
                const std::function<int(int)>& node_of) {
    const std::size_t p = members.size();
    switch (algo) {
        case CollectiveAlgo::automatic: return true;
        case CollectiveAlgo::ring:
            return kind != CollectiveKind::all_to_all && kind != CollectiveKind::barrier;
        case CollectiveAlgo::tree:
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
    }
    return false;
}

CollectiveSchedule decompose(CollectiveKind kind, const std::vector<int>& members, Bytes s, int root,
                             CollectiveAlgo algo, const std::function<int(int)>& node_of) {
    if (!applicable(algo, kind, members, node_of))
        throw Error(ErrorKind::bad_input, std::string("the ") + to_string(algo) + " algorithm cannot run a " +
                                              to_string(kind) + " over " + std::to_string(members.size()) + " ranks",
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
            if (kind == CollectiveKind::broadcast || kind == CollectiveKind::reduce)
                out.phases.push_back(chain_phase(kind, members, root, s));
            else
                out.phases.push_back(ring_phase(kind, members, s));
            break;
        case CollectiveAlgo::tree: {
            CollectivePhase ph;
            if (kind == CollectiveKind::all_reduce) {
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

Time step_latency(const CollectivePhase& phase, Protocol p, const RouteInfo& routes) {
    const ProtocolCosts& c = protocol_costs(p);
    Time wire;
    for (const auto& f : phase.flows) wire = std::max(wire, routes.latency(f.src, f.dst));
    return wire + (phase.crosses_network ? c.hop_net : c.hop_intra);
}

Time predict(const CollectiveSchedule& s, const RouteInfo& routes) {
    const double eff = protocol_costs(s.protocol).efficiency;
    Time total = base_latency(s.algo, s.protocol);
    std::unordered_map<std::int32_t, double> load;  // bytes per link within one phase
    for (const auto& ph : s.phases) {
        load.clear();
        for (const auto& f : ph.flows)
            for (std::int32_t l : routes.route(f.src, f.dst)) load[l] += f.bytes.as_double() / eff;
        double worst = 0;  // seconds
        for (const auto& [l, bytes] : load)
            worst = std::max(worst, bytes / routes.link_bandwidth[static_cast<std::size_t>(l)].bytes_per_second());
        total += step_latency(ph, s.protocol, routes) * static_cast<std::int64_t>(ph.steps) + Time::seconds(worst);
    }
    return total;
}

CollectiveSchedule choose(CollectiveKind kind, const std::vector<int>& members, Bytes bytes, int root,
                          CollectiveAlgo forced, bool gpu, const std::function<int(int)>& node_of,
                          const RouteInfo& routes) {
    std::vector<CollectiveAlgo> algos;
    if (forced != CollectiveAlgo::automatic) {
        algos.push_back(forced);
    } else {
        // NCCL (GPUs) chooses among ring and tree, whose inter-node tree over intra-node chains
        // the hierarchical schedule stands for; MPI libraries (CPU boards) also use recursive
        // halving-doubling and direct exchanges.
        for (auto a : {CollectiveAlgo::ring, CollectiveAlgo::tree, CollectiveAlgo::halving_doubling,
                       CollectiveAlgo::hierarchical, CollectiveAlgo::direct}) {
            const bool nccl = a == CollectiveAlgo::ring || a == CollectiveAlgo::tree || a == CollectiveAlgo::hierarchical;
            if ((nccl || !gpu) && applicable(a, kind, members, node_of)) algos.push_back(a);
        }
        if (algos.empty()) algos.push_back(CollectiveAlgo::direct);  // all-to-all
    }
    std::vector<Protocol> protocols =
        gpu ? std::vector<Protocol>{Protocol::ll, Protocol::ll128, Protocol::simple} : std::vector<Protocol>{Protocol::host};
    CollectiveSchedule best;
    Time best_time = Time::max();
    for (auto a : algos) {
        CollectiveSchedule s = decompose(kind, members, bytes, root, a, node_of);
        for (auto p : protocols) {
            s.protocol = p;
            const Time t = predict(s, routes);
            if (t < best_time) {
                best_time = t;
                best = s;
            }
        }
    }
    return best;
}

}  // namespace smol::sim

#include "sim/measured.hpp"

#include <algorithm>

namespace smol::sim {

std::optional<Time> measured_collective_time(const topo::Cluster& cluster, CollectiveKind kind,
                                             const std::vector<int>& members, Bytes bytes,
                                             const std::function<int(int)>& node_of) {
    if (!cluster.measured_network || members.size() < 2) return std::nullopt;
    std::vector<int> nodes;
    for (int r : members) nodes.push_back(node_of(r));
    std::sort(nodes.begin(), nodes.end());
    const int hosts = static_cast<int>(std::unique(nodes.begin(), nodes.end()) - nodes.begin());
    const topo::MeasuredTransfer* t = cluster.measured_network->collective(kind, static_cast<int>(members.size()), hosts);
    if (!t) return std::nullopt;
    return Time::seconds(t->time.time_at(std::max(1.0, bytes.as_double())));
}

std::optional<Time> measured_p2p_time(const topo::Cluster& cluster, int src, int dst, Bytes bytes) {
    if (!cluster.measured_network) return std::nullopt;
    const int hosts = cluster.device(src).node == cluster.device(dst).node ? 1 : 2;
    const topo::MeasuredTransfer* t = cluster.measured_network->p2p(hosts);
    if (!t) return std::nullopt;
    return Time::seconds(t->time.time_at(std::max(1.0, bytes.as_double())));
}

}  // namespace smol::sim

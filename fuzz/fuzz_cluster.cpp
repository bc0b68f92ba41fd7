// Fuzzes the cluster reader: a cluster JSON either loads — and then its rank arithmetic, device
// names, --nodes / --devices reshaping and (for small clusters) its topology and routes work —
// or it is a smol::Error. Seeds: fuzz/corpus/cluster (the presets); dictionary: fuzz/cluster.dict.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "core/json.hpp"
#include "topologies/cluster.hpp"
#include "topologies/topology.hpp"

using namespace smol;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    try {
        const Json doc = parse_json_text(text, "cluster.json");
        const topo::Cluster c = topo::cluster_from_json(JsonView(doc, "cluster.json"));
        const int n = c.num_devices();
        (void)c.device_name(n - 1);
        (void)c.first_devices(1 + n / 2);
        if (c.groups.size() == 1) (void)c.with_nodes(2);
        if (n <= 256) {
            const topo::Topology t(c);
            (void)t.route(t.device_vertex(0), t.device_vertex(n - 1));
            (void)t.route_bandwidth(t.device_vertex(0), t.device_vertex(n - 1));
        }
    } catch (const Error&) {
    }
    return 0;
}

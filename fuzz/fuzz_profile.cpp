// Fuzzes the calibration-profile reader: a profile JSON either loads — and then applies to a GPU
// node (a GPU's profile) or a CPU host (a CPU's), and prices a kernel of every kind and a
// collective from its tables — or it is a smol::Error. Seeds: fuzz/corpus/profile (a quick CPU
// calibration, a GPU's profile, a network-only one); dictionary: fuzz/profile.dict.
#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "core/json.hpp"
#include "core/kernel.hpp"
#include "sim/compute.hpp"
#include "topologies/cluster.hpp"
#include "topologies/localhost.hpp"
#include "topologies/profile.hpp"

using namespace smol;

namespace {

const topo::Cluster& gpu_node() {
    static const topo::Cluster c = topo::cluster_preset("dgx-h100");
    return c;
}

/// This host as `localhost` describes it, with `devices` ranks (a CPU's profile must match them).
topo::Cluster cpu_host(int devices) {
    topo::HostFacts f;
    f.cores = 8;
    f.memory = Bytes::gb(16);
    f.clock_ghz = 3;
    f.cpu_model = "Fuzz CPU";
    f.scratch_free = Bytes::gb(10);
    return topo::cluster_from_json(JsonView(topo::localhost_json(f, devices), "localhost"));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    try {
        const Json doc = parse_json_text(text, "profile.json");
        const topo::Profile p = topo::profile_from_json(JsonView(doc, "profile.json"));
        (void)topo::to_json(p);
        const topo::Cluster c =
            topo::apply_profile(p.compute.on_gpu() ? gpu_node() : cpu_host(std::min(p.ranks_per_node, 64)), p, "profile.json");
        const topo::NodeGroup& g = c.groups[0];
        const DType dtype = p.compute.on_gpu() ? DType::bf16 : DType::fp32;
        const int e = p.compute.on_gpu() ? 2 : 4;
        for (const Kernel& k : {gemm_kernel(KernelName::qkv, KernelClass::gemm, 1000, 3000, 700, 3, e, true),
                                flash_kernel(8, 777, 2000, 64, e, false, true), flash_kernel(8, 777, 2000, 128, e, true),
                                softmax_kernel(300, 1024, e), stream_kernel(KernelName::norm, KernelClass::elementwise, 123456, 1e7),
                                adam_kernel(1'000'000, 28)})
            (void)sim::kernel_time(k, dtype, false, g);
        if (c.measured_network)
            for (const topo::MeasuredTransfer& t : c.measured_network->transfers) (void)t.time.time_at(12345.0);
    } catch (const Error&) {
    }
    return 0;
}

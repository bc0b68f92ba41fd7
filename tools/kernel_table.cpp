#include "tools/kernel_table.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "sim/compute.hpp"

namespace smol::tools {

namespace {

std::string g9(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return buf;
}

}  // namespace

std::string kernel_table_csv(const OpGraph& graph, const topo::Cluster& cluster, const std::vector<int>& ranks) {
    std::ostringstream out;
    out << "rank,device,runs_on,op,phase,layer,microbatch,kernel,class,kind,m,n,k,batch,elements,flops,bytes,start_s,run_s,"
           "flop_per_s,bytes_per_s,op_s\n";
    // A folded graph's mirror ranks have no ops of their own: each listed rank shows the ops of
    // the rank whose program it runs (OpGraph::representative).
    std::vector<std::vector<int>> shown(static_cast<std::size_t>(graph.ranks()));
    for (int r : ranks) shown[static_cast<std::size_t>(graph.representative(r))].push_back(r);
    for (OpId id = 0; id < static_cast<OpId>(graph.size()); ++id) {
        const Op& op = graph.op(id);
        if (op.kind != OpKind::compute || shown[static_cast<std::size_t>(op.rank)].empty() || op.microbatch > 0) continue;
        const auto kernels = graph.kernels_of(id);
        if (kernels.empty()) continue;
        const sim::KernelSchedule s = sim::kernel_schedule(op, kernels, cluster.group_of(op.rank), graph.dispatch_overhead());
        for (const int rank : shown[static_cast<std::size_t>(op.rank)])
            for (std::size_t i = 0; i < kernels.size(); ++i) {
                const Kernel& k = kernels[i];
                const double run = s.kernels[i].run.to_seconds();
                const bool shaped = k.op == KernelOp::gemm || k.op == KernelOp::flash;
                out << rank << ',' << cluster.device_name(rank) << ',' << (op.on_host() ? "host" : "device") << ',' << id << ','
                    << to_string(op.phase) << ',' << op.layer << ',' << op.microbatch << ',' << to_string(k.name) << ','
                    << to_string(k.cls) << ',' << to_string(k.op) << ',';
                if (shaped)
                    out << k.m << ',' << k.n << ',' << k.k << ',' << k.batch << ',';
                else
                    out << ",,,,";
                out << (k.op == KernelOp::adam ? std::to_string(k.elements) : "") << ',' << g9(k.flops) << ',' << k.bytes << ','
                    << g9(s.kernels[i].start.to_seconds()) << ',' << g9(run) << ',' << (run > 0 ? g9(k.flops / run) : "") << ','
                    << (run > 0 ? g9(static_cast<double>(k.bytes) / run) : "") << ',' << g9(s.total.to_seconds()) << '\n';
            }
    }
    return out.str();
}

}  // namespace smol::tools

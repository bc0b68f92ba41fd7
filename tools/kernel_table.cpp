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
    std::vector<char> listed(static_cast<std::size_t>(graph.ranks()), 0);
    for (int r : ranks) listed[static_cast<std::size_t>(r)] = 1;
    for (OpId id = 0; id < static_cast<OpId>(graph.size()); ++id) {
        const Op& op = graph.op(id);
        if (op.kind != OpKind::compute || !listed[static_cast<std::size_t>(op.rank)] || op.microbatch > 0) continue;
        const auto kernels = graph.kernels_of(id);
        if (kernels.empty()) continue;
        const topo::NodeGroup& group = cluster.group_of(op.rank);
        const sim::KernelSchedule s = sim::kernel_schedule(op, kernels, group, graph.dispatch_overhead());
        const std::string device = cluster.device_name(op.rank);
        for (std::size_t i = 0; i < kernels.size(); ++i) {
            const Kernel& k = kernels[i];
            const double run = s.kernels[i].run.to_seconds();
            const bool shaped = k.op == KernelOp::gemm || k.op == KernelOp::flash;
            out << op.rank << ',' << device << ',' << (op.on_host() ? "host" : "device") << ',' << id << ',' << to_string(op.phase) << ',' << op.layer << ',' << op.microbatch
                << ',' << to_string(k.name) << ',' << to_string(k.cls) << ',' << to_string(k.op) << ',';
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

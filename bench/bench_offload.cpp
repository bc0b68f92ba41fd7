// Big models on one GPU: GPT-2-style models of 1.5 B, 6 B, 10 B and 13 B parameters on one V100
// 32 GB (a DGX-2's) and one RTX 4090 (the workstation's), each with DDP, ZeRO-2, ZeRO-2 with the
// optimizer on the CPU (ZeRO-Offload), ZeRO-3 with parameters and optimizer on NVMe
// (ZeRO-Infinity) and LoRA — whether it fits, the simulated step, TFLOP/s per GPU (model FLOPs
// with the recompute counted, as the ZeRO-Offload paper's throughput counts activation
// checkpointing) and the device's peak.
//
// Shapes are the ZeRO-Offload paper's (Ren et al. 2021, the DeepSpeed tutorial's 10 B: 50 layers
// of 4096): 1.5 B is GPT-2 XL (48 × 1600), 6 B is 53 × 3072, 10 B 50 × 4096, 13 B 65 × 4096,
// heads of 128; batch 8 of 1,024 tokens, full activation checkpointing, fp16 on the V100 and
// bf16 on the 4090; LoRA rank 16 on every linear layer.
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "strategies/plan.hpp"
#include "tools/simulation.hpp"
#include "traces/summary.hpp"

using namespace smol;
using namespace smol::strategies;

namespace {

Model gpt(const std::string& name, int layers, int hidden, int heads) {
    TransformerShape s;
    s.layers = layers;
    s.hidden = hidden;
    s.heads = s.kv_heads = heads;
    s.ffn_hidden = 4 * hidden;
    s.vocab = 50304;
    s.max_seq = 1024;
    return Model::transformer(name, s);
}

struct Variant {
    const char* label;
    Plan plan;
};

std::vector<Variant> variants() {
    std::vector<Variant> v;
    auto add = [&](const char* label, DataParallel s) {
        Plan p;
        p.strategy = s;
        p.recompute = Recompute::full;
        p.micro_batch = 8;
        v.push_back({label, p});
        return &v.back().plan;
    };
    add("ddp", DataParallel::ddp);
    add("zero2", DataParallel::zero2);
    add("zero2 + CPU offload", DataParallel::zero2)->offload = Offload::cpu;
    add("zero3 + NVMe offload", DataParallel::zero3)->offload = Offload::nvme;
    add("LoRA r16 (ddp)", DataParallel::ddp)->finetune = parse_finetune("lora:16");
    return v;
}

}  // namespace

int main() {
    const std::vector<Model> models{gpt("gpt-1.5b", 48, 1600, 25), gpt("gpt-6b", 53, 3072, 24), gpt("gpt-10b", 50, 4096, 32),
                                    gpt("gpt-13b", 65, 4096, 32)};
    const std::vector<std::pair<std::string, topo::Cluster>> gpus{
        {"V100 32GB (dgx2-v100)", topo::cluster_preset("dgx2-v100").first_devices(1)},
        {"RTX 4090 (workstation-4gpu)", topo::cluster_preset("workstation-4gpu").first_devices(1)}};
    std::printf("| GPU | model | parameters | plan | fits | step | TFLOP/s | device peak | host peak | NVMe |\n");
    std::printf("|---|---|---:|---|---|---:|---:|---:|---:|---:|\n");
    for (const auto& [gpu, cluster] : gpus) {
        const topo::Topology topology(cluster);
        for (const Model& m : models)
            for (const Variant& v : variants()) {
                std::printf("| %s | %s | %.3g | %s | ", gpu.c_str(), m.name().c_str(), static_cast<double>(m.parameters()), v.label);
                try {
                    sim::SimOptions opt;
                    opt.record_memory = false;
                    const tools::Simulation run = tools::simulate_plan(m, cluster, v.plan, opt, &topology);
                    const traces::Summary& s = run.summary;
                    std::printf("%s | %s | %.1f | %s | %s | %s |\n", s.fits() ? "yes" : "no", to_string(s.iteration).c_str(),
                                s.tflops_per_device, to_string_binary(s.peak_memory).c_str(),
                                to_string_binary(run.timeline.peak[0][static_cast<int>(Tier::host)]).c_str(),
                                to_string_binary(run.timeline.peak[0][static_cast<int>(Tier::nvme)]).c_str());
                } catch (const Error& e) {
                    std::printf("– | – | – | – | – | – (%s) |\n", e.what());
                }
            }
    }
    return 0;
}

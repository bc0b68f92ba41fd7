// Plan search (tools/sweep.*) and `smolcluster sweep`: the same ranking on any number of threads,
// pruned plans that really are impossible, a memory bound that never exceeds the simulated peak,
// shards that gather into the whole, and the files it writes.
#include <catch2/catch.hpp>

#include <bit>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/json.hpp"
#include "strategies/plan.hpp"
#include "strategies/zero.hpp"
#include "test_support.hpp"
#include "tools/cli_fixtures.hpp"
#include "tools/progress.hpp"
#include "tools/simulation.hpp"
#include "tools/sweep.hpp"

using namespace smol;
using namespace smol::tools;
namespace fs = std::filesystem;
using namespace smol::test;

namespace {

/// The analytic screen alone (no flow-level refinement), two jobs, global batch `batch`.
SweepOptions analytic_screen(int batch = 8) {
    SweepOptions o;
    o.global_batch = batch;
    o.jobs = 2;
    o.network = sim::NetworkMode::analytic;
    o.refine = 0;
    return o;
}

SweepResult gpt2_on_dgx(int jobs, sim::NetworkMode network = sim::NetworkMode::flow) {
    SweepOptions o;
    o.global_batch = 16;
    o.jobs = jobs;
    o.network = network;
    return sweep(model_preset("gpt2-small"), topo::cluster_preset("dgx-a100"), o);
}

/// A sweep's CSV: the header's columns in order, and every plan's row as a map from column name to
/// cell (RFC 4180: a quoted cell may hold commas and doubled quotes); `ranked`: only the plans
/// ranked.
std::pair<std::vector<std::string>, std::vector<std::map<std::string, std::string>>> read_csv(const fs::path& csv,
                                                                                              bool ranked = true) {
    const auto cells = [](const std::string& line) {
        std::vector<std::string> out(1);
        bool quoted = false;
        for (std::size_t i = 0; i < line.size(); ++i) {
            const char ch = line[i];
            if (quoted && ch == '"' && i + 1 < line.size() && line[i + 1] == '"') {
                out.back() += '"';
                ++i;
            } else if (ch == '"') {
                quoted = !quoted;
            } else if (ch == ',' && !quoted) {
                out.emplace_back();
            } else {
                out.back() += ch;
            }
        }
        return out;
    };
    std::ifstream in(csv);
    std::string line;
    std::getline(in, line);
    const std::vector<std::string> header = cells(line);
    std::vector<std::map<std::string, std::string>> rows;
    while (std::getline(in, line)) {
        const std::vector<std::string> row = cells(line);
        REQUIRE(row.size() == header.size());
        std::map<std::string, std::string> named;
        for (std::size_t i = 0; i < row.size(); ++i) named[header[i]] = row[i];
        if (!ranked || named["status"] == "ranked") rows.push_back(std::move(named));
    }
    return {header, rows};
}

/// A simulated twin (ZeRO++, MiCS) of a sweep: named by `flags` in its description, its memory
/// bound below its simulated peak, its step what simulate gives the same plan.
void check_twin(const Model& m, const topo::Cluster& c, const PlanResult& p, const std::string& flags) {
    INFO(describe_plan(p));
    CHECK(describe_plan(p).find(flags) != std::string::npos);
    CHECK(p.memory_bound <= p.result->peak_memory);
    sim::SimOptions so;
    so.network = sim::NetworkMode::analytic;
    CHECK(simulate_plan(m, c, p.plan, so).summary.iteration == p.result->iteration);
}

/// `smolcluster sweep ARGS EXTRA --quiet --force --json OUT`: what it printed and the JSON it wrote.
std::pair<std::string, Json> sweep_cli(std::vector<std::string> args, const std::vector<std::string>& extra, const fs::path& out) {
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"--quiet", "--force", "--json", out.string()});
    const Result r = cli(args);
    INFO(r.err);
    REQUIRE(r.code == 0);
    std::ifstream in(out);
    return {r.out, Json::parse(in)};
}

/// The plans of `r` that were simulated (not pruned), each checked to step as simulate steps it.
std::vector<const PlanResult*> simulated_as_simulate(const Model& m, const topo::Cluster& c, const SweepResult& r) {
    std::vector<const PlanResult*> out;
    for (const PlanResult& p : r.plans) {
        if (p.status == PlanStatus::pruned) continue;
        REQUIRE(p.result);
        CHECK(p.result->iteration == tools::simulate_plan(m, c, p.plan, {}).summary.iteration);
        out.push_back(&p);
    }
    return out;
}

/// `smolcluster sweep ARGS --quiet --force --csv FILE` (a temporary file named after `name`):
/// what it printed, and the CSV's header and ranked rows (read_csv).
struct SweepCsv {
    std::string out;
    std::vector<std::string> header;
    std::vector<std::map<std::string, std::string>> rows;
};
SweepCsv sweep_csv(std::vector<std::string> args, const std::string& name) {
    const fs::path csv = fs::temp_directory_path() / ("smol-sweep-" + name + "-" + std::to_string(::getpid()) + ".csv");
    args.insert(args.end(), {"--quiet", "--force", "--csv", csv.string()});
    const Result r = cli(args);
    INFO(r.err);
    REQUIRE(r.code == 0);
    auto [header, rows] = read_csv(csv);
    fs::remove(csv);
    return {r.out, std::move(header), std::move(rows)};
}

}  // namespace

TEST_CASE("a sweep ranks the same plans the same way on one thread and on two", "[tools][sweep]") {
    const SweepResult one = gpt2_on_dgx(1), two = gpt2_on_dgx(2);
    REQUIRE(one.plans.size() == two.plans.size());
    REQUIRE(one.ranking.size() > 100);
    CHECK(one.ranking == two.ranking);
    for (std::size_t i = 0; i < one.plans.size(); ++i) {
        CHECK(one.plans[i].status == two.plans[i].status);
        if (one.plans[i].result) CHECK(one.plans[i].result->iteration == two.plans[i].result->iteration);
    }
    // Best first, by step time.
    for (std::size_t k = 1; k < one.ranking.size(); ++k)
        CHECK(one.plans[one.ranking[k - 1]].result->iteration <= one.plans[one.ranking[k]].result->iteration);
    // Every dimension of the table shows up among the ranked plans.
    bool pipeline = false, interleaved = false, sp = false, recompute = false, micro = false;
    for (std::size_t i : one.ranking) {
        const strategies::Plan& p = one.plans[i].plan;
        pipeline |= p.pp > 1;
        interleaved |= p.schedule == strategies::Schedule::interleaved && p.virtual_stages > 1;
        sp |= p.sequence_parallel;
        recompute |= p.recompute == Recompute::full;
        micro |= p.micro_batch > 1;
    }
    CHECK((pipeline && interleaved && sp && recompute && micro));
    // Every plan fits its 80 GB A100s without offload, so no offload variant is listed.
    for (const PlanResult& p : one.plans) CHECK(offload_flags(p.plan).empty());
}

TEST_CASE("plans pruned by resolve fail to build, and the memory bound never exceeds the peak", "[tools][sweep]") {
    const Model model = model_preset("gpt2-small");
    const topo::Cluster cluster = topo::cluster_preset("dgx-a100");
    const SweepResult r = gpt2_on_dgx(2);
    const auto reasons = r.pruned_by_reason();
    CHECK(reasons.count("--virtual-stages") == 1);
    CHECK(reasons.count("--strategy") == 1);
    // Spot-check every reason: the first three plans pruned for it fail strategies::build the same way.
    std::map<std::string, int> checked;
    for (const PlanResult& p : r.plans) {
        if (p.status != PlanStatus::pruned || checked[p.reason_key]++ >= 3) continue;
        const std::string message =
            test::bad_input_message([&] { (void)strategies::build(model, cluster, p.plan); });
        CHECK(message.find(p.reason) != std::string::npos);
    }
    CHECK(checked.size() == reasons.size());
    // Invariant: the bound is below the simulated peak of every plan.
    for (const PlanResult& p : r.plans)
        if (p.result) CHECK(p.memory_bound <= p.result->peak_memory);
}

TEST_CASE("an FP8 sweep runs every plan on Megatron core in FP8, its memory bound below the peak", "[tools][sweep][fp8]") {
    SweepOptions o = analytic_screen();
    o.fp8 = Fp8Recipe::delayed;
    o.space.tp = {1, 2};
    o.space.pp = {1, 2};
    const Model model = model_preset("gpt2-small");
    const topo::Cluster cluster = topo::cluster_preset("dgx-h100").first_devices(4);
    const SweepResult r = sweep(model, cluster, o);
    REQUIRE_FALSE(r.ranking.empty());
    bool single = false;
    for (std::size_t i : r.ranking) {
        const strategies::Plan& p = r.plans[i].plan;
        CHECK(p.fp8 == Fp8Recipe::delayed);
        CHECK(p.framework == "megatron");
        single |= p.tp == 1 && p.pp == 1;   // Megatron runs plain data parallelism too
        CHECK(strategies::resolve(model, cluster, p).fp8 == Fp8Recipe::delayed);
    }
    CHECK(single);
    // FSDP and ZeRO-2/3 are not Megatron's: pruned, by the framework.
    const auto reasons = r.pruned_by_reason();
    CHECK(reasons.count("--framework") == 1);
    for (const PlanResult& p : r.plans)
        if (p.result) CHECK(p.memory_bound <= p.result->peak_memory);
}

TEST_CASE("a QLoRA sweep trains every plan's adapters with its optimizer, FSDP sharding the frozen weights, its bound below the peak",
          "[tools][sweep][finetune]") {
    // Llama 3 8B on the four RTX 4090s: QLoRA with bitsandbytes' 8-bit AdamW (QLoRA's paged
    // optimizer), tp and pp 1 (fine-tuning is modelled for data parallelism).
    SweepOptions o = analytic_screen(8);
    o.seq = 2048;
    o.finetune = strategies::parse_finetune("qlora:16");
    o.optimizer = strategies::Optimizer::adamw_8bit;
    o.space.tp = {1};
    o.space.pp = {1};
    const Model model = model_preset("llama3-8b");
    const topo::Cluster cluster = topo::cluster_preset("workstation-4gpu");
    const SweepResult r = sweep(model, cluster, o);
    REQUIRE_FALSE(r.ranking.empty());
    std::set<strategies::DataParallel> ranked;
    for (std::size_t i : r.ranking) {
        const strategies::Plan& p = r.plans[i].plan;
        CHECK(p.finetune == o.finetune);
        CHECK(p.optimizer == strategies::Optimizer::adamw_8bit);
        ranked.insert(p.strategy);
    }
    CHECK(ranked.count(strategies::DataParallel::fsdp) == 1);
    CHECK(ranked.count(strategies::DataParallel::ddp) == 1);
    // ZeRO-3 does not train adapters here: pruned, naming --finetune.
    CHECK(r.pruned_by_reason().count("--finetune") == 1);
    // The bound counts the frozen weights (whole, or a quarter under FSDP) and the adapters'
    // states, below every simulated peak: with ddp at least the frozen weights, counted by hand
    // (NF4 block linears, bf16 embedding, head and norms: test_finetune.cpp's QLoRA case).
    const double nf4 = (4 + 8.0 / 64 + 32.0 / (64 * 256)) / 8;
    const double frozen = 32.0 * (4096.0 * (4096 + 1024 + 1024 + 4096) + 3.0 * 4096 * 14336) * nf4 +
                          2 * (32.0 * 2 * 4096 + 2.0 * 128256 * 4096 + 4096);
    for (const PlanResult& p : r.plans) {
        if (!p.result) continue;
        CHECK(p.memory_bound <= p.result->peak_memory);
        if (p.plan.strategy == strategies::DataParallel::ddp) CHECK(p.memory_bound.as_double() >= frozen);
    }
}

TEST_CASE("a sweep with --attention-backend runs every plan's flash attention on that kernel", "[tools][sweep][attention]") {
    SweepOptions o = analytic_screen();
    o.space.tp = {1, 2};
    o.space.pp = {1};
    const Model model = model_preset("gpt2-small");
    const topo::Cluster cluster = topo::cluster_preset("dgx-h100").first_devices(4);
    // By default each plan's framework picks: Megatron's plans cuDNN's, PyTorch's FSDP FlashAttention-2.
    const SweepResult plain = sweep(model, cluster, o);
    std::set<AttentionBackend> defaults;
    for (std::size_t i : plain.ranking) defaults.insert(strategies::resolve(model, cluster, plain.plans[i].plan).attention_backend);
    CHECK(defaults.size() == 2);
    o.attention_backend = AttentionBackend::flash;
    const SweepResult r = sweep(model, cluster, o);
    REQUIRE(r.ranking.size() == plain.ranking.size());
    for (std::size_t i : r.ranking)
        CHECK(strategies::resolve(model, cluster, r.plans[i].plan).attention_backend == AttentionBackend::flash);
}

TEST_CASE("a sweep with --attention flash on CPUs runs every plan on the CPU flash kernel, in less memory", "[tools][sweep][attention]") {
    SweepOptions o = analytic_screen();
    o.space.pp = {1};
    const Model model = model_preset("gpt2-small");
    const topo::Cluster cluster = topo::cluster_preset("pi5-1gbe");
    // CPUs default to eager attention; with --attention flash every plan runs flash, and no plan's
    // peak memory grows: eager attention keeps the scores (Korthikanti's 5·a·s²·b per layer),
    // which sets the peak where activations do, and not where the optimizer step does.
    const SweepResult eager = sweep(model, cluster, o);
    o.attention = Attention::flash;
    const SweepResult flash = sweep(model, cluster, o);
    REQUIRE_FALSE(flash.ranking.empty());
    REQUIRE(flash.ranking.size() == eager.ranking.size());
    REQUIRE(flash.plans.size() == eager.plans.size());   // the same plans, enumerated alike
    for (std::size_t i : flash.ranking) CHECK(strategies::resolve(model, cluster, flash.plans[i].plan).attention == Attention::flash);
    for (std::size_t i : eager.ranking) CHECK(strategies::resolve(model, cluster, eager.plans[i].plan).attention == Attention::eager);
    int smaller = 0;
    for (std::size_t i : flash.ranking) {
        REQUIRE(eager.plans[i].result);
        CHECK(flash.plans[i].result->peak_memory <= eager.plans[i].result->peak_memory);
        smaller += flash.plans[i].result->peak_memory < eager.plans[i].result->peak_memory;
    }
    CHECK(smaller > 0);
    // On a GPU before Ampere, flash attention is impossible: every plan is pruned, naming the flag.
    const SweepResult v100 = sweep(model, topo::cluster_preset("dgx2-v100"), o);
    CHECK(v100.ranking.empty());
    bool named = false;
    for (const auto& p : v100.plans) named = named || p.reason.find("--attention flash needs GPUs") != std::string::npos;
    CHECK(named);
}

TEST_CASE("a sweep searches --cp when asked: context-parallel plans ranked, their memory bound below the peak", "[tools][sweep]") {
    // Llama 3 8B at 8,192 tokens on one DGX H100, cp 1, 2 or 4.
    SweepOptions o = analytic_screen();
    o.space.strategies = {strategies::DataParallel::ddp, strategies::DataParallel::zero1, strategies::DataParallel::zero3};
    o.space.tp = {1, 2};
    o.space.pp = {1};
    o.space.cp = {1, 2, 4};
    o.space.micro_batch = {1};
    const SweepResult r = sweep(model_preset("llama3-8b"), topo::cluster_preset("dgx-h100"), o);
    std::set<int> ranked_cp;
    for (std::size_t i : r.ranking) ranked_cp.insert(r.plans[i].plan.cp);
    CHECK(ranked_cp == std::set<int>{1, 2, 4});
    bool zero3_cp_pruned = false;
    for (const PlanResult& p : r.plans) {
        if (p.result) CHECK(p.memory_bound <= p.result->peak_memory);
        if (p.plan.cp > 1 && p.plan.strategy == strategies::DataParallel::zero3) {
            CHECK(p.status == PlanStatus::pruned);
            zero3_cp_pruned |= p.reason.find("context parallelism") != std::string::npos;
        }
    }
    CHECK(zero3_cp_pruned);
    // The table names the degree.
    for (std::size_t i : r.ranking)
        if (r.plans[i].plan.cp == 2) {
            CHECK(describe_plan(r.plans[i]).find(" cp 2") != std::string::npos);
            break;
        }
}

TEST_CASE("a sweep tries each --cp-comm on context-parallel plans only, and simulates each as simulate would", "[tools][sweep]") {
    const Model model = model_preset("llama3-8b");
    const topo::Cluster cluster = topo::cluster_preset("dgx-h100");
    SweepOptions o = analytic_screen();
    o.space.strategies = {strategies::DataParallel::zero1};
    o.space.tp = {1};
    o.space.pp = {1};
    o.space.cp = {1, 2};
    o.space.micro_batch = {1};
    const SweepResult ring = sweep(model, cluster, o);
    o.space.cp_comm = {CpComm::p2p, CpComm::all_gather, CpComm::all_to_all};
    const SweepResult both = sweep(model, cluster, o);
    auto count = [](const SweepResult& r, int cp, CpComm comm) {
        return std::count_if(r.plans.begin(), r.plans.end(),
                             [&](const PlanResult& p) { return p.plan.cp == cp && p.plan.cp_comm == comm; });
    };
    // cp 1 plans once, cp 2 plans once per exchange.
    CHECK(count(both, 1, CpComm::p2p) == count(ring, 1, CpComm::p2p));
    CHECK(count(both, 1, CpComm::all_gather) == 0);
    CHECK(count(both, 2, CpComm::p2p) == count(ring, 2, CpComm::p2p));
    CHECK(count(both, 2, CpComm::all_gather) == count(ring, 2, CpComm::p2p));
    CHECK(count(both, 2, CpComm::all_to_all) == count(ring, 2, CpComm::p2p));
    CHECK(count(ring, 2, CpComm::p2p) > 0);
    bool checked = false;
    for (const PlanResult& p : both.plans) {
        if (p.plan.cp_comm != CpComm::all_gather || !p.result) continue;
        CHECK(describe_plan(p).find(" cp 2 all-gather") != std::string::npos);
        sim::SimOptions so;
        so.network = sim::NetworkMode::analytic;
        const tools::Simulation alone = tools::simulate_plan(model, cluster, p.plan, so);
        CHECK(alone.summary.iteration == p.result->iteration);
        checked = true;
        break;
    }
    CHECK(checked);
}

TEST_CASE("a sweep of a mixture of experts tries every expert-parallel size dividing dp and the experts", "[tools][sweep][moe]") {
    // Mixtral-8x7B (8 experts) on one DGX H100: with tp 1 and pp 1, dp 8 takes ep 1, 2, 4, 8; with
    // pp 2, dp 4 takes 1, 2, 4. --ep lists replace that; a dense model stays at ep 1.
    const Model mixtral = load_model(std::string(SMOL_TEST_DATA) + "/hf/Mixtral-8x7B-v0.1.json");
    const topo::Cluster cluster = topo::cluster_preset("dgx-h100");
    SweepOptions o = analytic_screen();
    o.space.strategies = {strategies::DataParallel::zero1, strategies::DataParallel::fsdp};
    o.space.tp = {1};
    o.space.pp = {1, 2};
    o.space.micro_batch = {1};
    auto eps = [](const SweepResult& r, int pp) {
        std::set<int> out;
        for (const PlanResult& p : r.plans)
            if (p.plan.pp == pp && p.plan.strategy == strategies::DataParallel::zero1 && p.plan.recompute == Recompute::full)
                out.insert(p.plan.ep);
        return out;
    };
    const SweepResult all = sweep(mixtral, cluster, o);
    CHECK(eps(all, 1) == std::set<int>{1, 2, 4, 8});
    CHECK(eps(all, 2) == std::set<int>{1, 2, 4});
    // FSDP with expert parallelism is simulated, and its line names the expert-parallel size.
    bool fsdp_ep = false;
    for (const PlanResult& p : all.plans)
        if (p.plan.strategy == strategies::DataParallel::fsdp && p.plan.ep == 8 && p.result) {
            CHECK(describe_plan(p).find(" ep 8 ") != std::string::npos);
            fsdp_ep = true;
        }
    CHECK(fsdp_ep);
    o.space.ep = {2};
    CHECK(eps(sweep(mixtral, cluster, o), 1) == std::set<int>{2});
    o.space.ep.clear();
    for (const PlanResult& p : sweep(model_preset("llama3-8b"), cluster, o).plans) CHECK(p.plan.ep == 1);
}

TEST_CASE("a sweep tries FSDP's hybrid sharding where the replicas span more than one node", "[tools][sweep][fsdp]") {
    // Two DGX A100: with pp 1 the 16 replicas span both nodes (full and hybrid); with pp 2 a stage's
    // 8 replicas fill one node, where hybrid is full (not tried). One node: full only.
    SweepOptions o = analytic_screen(16);
    o.space.strategies = {strategies::DataParallel::fsdp};
    o.space.tp = {1};
    o.space.pp = {1, 2};
    o.space.micro_batch = {1};
    auto shardings = [](const SweepResult& r, int pp) {
        std::set<strategies::FsdpSharding> out;
        for (const PlanResult& p : r.plans)
            if (p.plan.pp == pp && p.plan.recompute == Recompute::none) out.insert(p.plan.fsdp_sharding);
        return out;
    };
    const Model m = model_preset("gpt2-small");
    const SweepResult two = sweep(m, topo::cluster_preset("dgx-a100").with_nodes(2), o);
    CHECK(shardings(two, 1) == std::set<strategies::FsdpSharding>{strategies::FsdpSharding::full, strategies::FsdpSharding::hybrid});
    CHECK(shardings(two, 2) == std::set<strategies::FsdpSharding>{strategies::FsdpSharding::full});
    bool named = false;
    for (const PlanResult& p : two.plans)
        if (p.plan.fsdp_sharding == strategies::FsdpSharding::hybrid && p.result) {
            CHECK(describe_plan(p).rfind("fsdp hybrid tp 1", 0) == 0);
            named = true;
        }
    CHECK(named);
    CHECK(shardings(sweep(m, topo::cluster_preset("dgx-a100"), o), 1) == std::set<strategies::FsdpSharding>{strategies::FsdpSharding::full});
    o.space.fsdp_sharding = {strategies::FsdpSharding::grad_op};
    CHECK(shardings(sweep(m, topo::cluster_preset("dgx-a100").with_nodes(2), o), 1) ==
          std::set<strategies::FsdpSharding>{strategies::FsdpSharding::grad_op});
}

TEST_CASE("sweep --zeropp tries ZeRO++ on zero3 over several GPU nodes, each twin simulated as simulate would",
          "[tools][sweep][zeropp]") {
    SweepOptions o = analytic_screen(16);
    o.space.strategies = {strategies::DataParallel::zero3};
    o.space.tp = {1, 2};
    o.space.micro_batch = {1};
    const Model m = model_preset("gpt2-small");
    const topo::Cluster two = topo::cluster_preset("dgx-a100").with_nodes(2);
    auto variants = [](const SweepResult& r, int tp) {
        std::set<std::string> out;
        for (const PlanResult& p : r.plans)
            if (p.plan.tp == tp && p.plan.recompute == Recompute::none) out.insert(zeropp_flags(p.plan));
        return out;
    };
    CHECK(variants(sweep(m, two, o), 1) == std::set<std::string>{""});   // only when asked
    o.space.zeropp = true;
    const SweepResult r = sweep(m, two, o);
    // tp 1 over 16 ranks: none, hpZ over a node, and all three; with tp 2 (hpZ and qgZ would mix
    // tensor ranks) and on one node (nothing crosses nodes) none is tried.
    CHECK(variants(r, 1) == std::set<std::string>{"", "--zero-hpz-partition-size 8",
                                                  "--zero-quantized-weights --zero-hpz-partition-size 8 --zero-quantized-gradients"});
    CHECK(variants(r, 2) == std::set<std::string>{""});
    CHECK(variants(sweep(m, topo::cluster_preset("dgx-a100"), o), 1) == std::set<std::string>{""});
    int checked = 0;
    for (const PlanResult& p : r.plans) {
        if (!p.result || p.plan.zero_hpz_partition_size == 1) continue;
        check_twin(m, two, p, "--zero-hpz-partition-size 8");   // the bound counts hpZ's slices
        ++checked;
    }
    CHECK(checked >= 2);
}

TEST_CASE("sweep --mics tries MiCS over a node on zero3 over several GPU nodes, each twin simulated as simulate would",
          "[tools][sweep][mics]") {
    SweepOptions o = analytic_screen(16);
    o.space.strategies = {strategies::DataParallel::zero3};
    o.space.tp = {1, 2};
    o.space.micro_batch = {1};
    const Model m = model_preset("gpt2-small");
    const topo::Cluster two = topo::cluster_preset("dgx-a100").with_nodes(2);
    auto shard_sizes = [](const SweepResult& r, int tp) {
        std::set<int> out;
        for (const PlanResult& p : r.plans)
            if (p.plan.tp == tp) out.insert(p.plan.zero_mics_shard_size);
        return out;
    };
    CHECK(shard_sizes(sweep(m, two, o), 1) == std::set<int>{0});   // only when asked
    o.space.mics = true;
    o.space.zeropp = true;
    const SweepResult r = sweep(m, two, o);
    // tp 1 over 16 ranks: ZeRO-3 and MiCS over a node (not with ZeRO++'s twins); with tp 2 (its
    // groups would mix tensor ranks) and on one node none is tried.
    CHECK(shard_sizes(r, 1) == std::set<int>{0, 8});
    CHECK(shard_sizes(r, 2) == std::set<int>{0});
    CHECK(shard_sizes(sweep(m, topo::cluster_preset("dgx-a100"), o), 1) == std::set<int>{0});
    int checked = 0;
    for (const PlanResult& p : r.plans) {
        if (p.plan.zero_mics_shard_size == 0) continue;
        CHECK(zeropp_flags(p.plan).empty());
        if (!p.result) continue;
        check_twin(m, two, p, "--mics-shard-size 8");   // the bound shards the states over the group
        ++checked;
    }
    CHECK(checked >= 2);
}

TEST_CASE("sweep --recompute-modules tries Megatron core's module sets under selective recompute, each simulated as simulate would",
          "[tools][sweep][recompute]") {
    SweepOptions o = analytic_screen(16);
    o.space.strategies = {strategies::DataParallel::zero1};
    o.space.tp = {2};
    o.space.pp = {1};
    o.space.micro_batch = {2};
    const Model m = model_preset("gpt2-small");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    auto sets = [](const SweepResult& r) {
        std::set<std::string> out;
        for (const PlanResult& p : r.plans) out.insert(std::string(to_string(p.plan.recompute)) + " " + to_string(p.plan.recompute_modules));
        return out;
    };
    // Without the flag: none, selective (the attention core), full.
    CHECK(sets(sweep(m, c, o)) == std::set<std::string>{"none core_attn", "selective core_attn", "full core_attn"});
    o.space.recompute_modules = true;
    const SweepResult r = sweep(m, c, o);
    // gpt2-small is dense with its norms fused into its linear layers: the MLP beside the core.
    CHECK(sets(r) == std::set<std::string>{"none core_attn", "selective core_attn", "selective core_attn,mlp", "full core_attn"});
    int checked = 0;
    for (const PlanResult& p : r.plans) {
        if (!(p.plan.recompute_modules == parse_recompute_modules("core_attn,mlp", {})) || !p.result) continue;
        CHECK(p.layout.framework.name == strategies::FrameworkName::megatron);
        check_twin(m, c, p, "--recompute-modules core_attn,mlp");
        ++checked;
    }
    CHECK(checked >= 1);
    // From the command line: the recompute column names the modules, --json a field for them.
    const fs::path out = fs::temp_directory_path() / "smol-sweep-recompute-modules.json";
    const auto [text, json] = sweep_cli({"sweep", "--model", "gpt2-small", "--cluster", "dgx-a100", "--global-batch", "16",
                                         "--strategies", "zero1", "--tp", "2", "--pp", "1", "--micro-batch", "2",
                                         "--network", "analytic", "--top", "10"},
                                        {"--recompute-modules"}, out);
    fs::remove(out);
    CHECK_THAT(text, Catch::Contains("selective core_attn,mlp"));
    bool field = false;
    for (const Json& p : json.at("sweeps").at(0).at("plans")) field |= p.at("recompute_modules") == "core_attn,mlp";
    CHECK(field);
    // A layer list has nothing but the attention core to offer: the flag is refused.
    const Result cnn = cli({"sweep", "--model", "resnet50", "--cluster", "dgx-a100", "--global-batch", "64", "--recompute-modules"});
    CHECK(cnn.code == 2);
    CHECK_THAT(cnn.err, Catch::Contains("--recompute-modules") && Catch::Contains("has no effect here"));
}

TEST_CASE("plans above the memory bound do not fit when simulated", "[tools][sweep]") {
    // Llama-2-7B on four 24 GB RTX 4090: DDP's 16 bytes per parameter (108 GB) cannot fit, ZeRO-3's 27 GB
    // per device neither; the pipeline plans may.
    const Model model = model_preset("llama2-7b");
    const topo::Cluster cluster = topo::cluster_preset("workstation-4gpu");
    SweepOptions o;
    o.global_batch = 4;
    o.seq = 512;
    o.jobs = 2;
    o.network = sim::NetworkMode::analytic;
    o.refine = 0;
    o.space.strategies = {strategies::DataParallel::ddp, strategies::DataParallel::zero3};
    o.space.micro_batch = {1};
    const SweepResult r = sweep(model, cluster, o);
    std::size_t checked = 0;
    sim::SimOptions sim_options;
    sim_options.network = sim::NetworkMode::analytic;
    sim_options.record_memory = false;
    for (const PlanResult& p : r.plans) {
        if (p.status != PlanStatus::pruned || p.reason_key != "memory bound") continue;
        if (checked++ % 3 != 0) continue;   // every third one: a spot check, kept short
        const Simulation s = simulate_plan(model, cluster, p.plan, sim_options);
        CHECK_FALSE(s.summary.fits());
        CHECK(p.memory_bound <= s.summary.peak_memory);
    }
    CHECK(checked >= 3);
    for (const PlanResult& p : r.plans)
        if (p.result) CHECK(p.memory_bound <= p.result->peak_memory);
}

TEST_CASE("a sweep offloads the plans that cannot fit without: Llama 3 8B on four 24 GB GPUs", "[tools][sweep]") {
    // ZeRO-3 keeps 16 bytes per parameter over 4 ranks, 4 × 8.03e9 = 32 GB a device, above 24 GiB
    // (25.8 GB); ZeRO-2 more, FSDP as ZeRO-3: without offload nothing fits.
    const Model model = model_preset("llama3-8b");
    const topo::Cluster cluster = topo::cluster_preset("workstation-4gpu");
    SweepOptions o;
    o.global_batch = 4;
    o.seq = 2048;
    o.jobs = 2;
    o.network = sim::NetworkMode::analytic;
    o.refine = 0;
    o.space.strategies = {strategies::DataParallel::zero2, strategies::DataParallel::zero3, strategies::DataParallel::fsdp};
    o.space.tp = {1};
    o.space.pp = {1};
    o.space.micro_batch = {1};
    o.space.offload = {strategies::Offload::none};
    const SweepResult none = sweep(model, cluster, o);
    CHECK(none.ranking.empty());
    for (const PlanResult& p : none.plans) CHECK(offload_flags(p.plan).empty());

    o.space.offload = {};   // the default: host memory
    const SweepResult r = sweep(model, cluster, o);
    REQUIRE_FALSE(r.ranking.empty());
    const double allowed = static_cast<double>(cluster.device_kind(0).memory.count());
    const auto twin_of = [&](const PlanResult& v) -> const PlanResult& {
        for (const PlanResult& p : r.plans)
            if (offload_flags(p.plan).empty() && p.plan.strategy == v.plan.strategy && p.plan.recompute == v.plan.recompute &&
                p.plan.micro_batch == v.plan.micro_batch)
                return p;
        FAIL("no plan without offload for " << describe_plan(v));
        return v;
    };
    std::set<std::string> flags;
    for (std::size_t i : r.ranking) CHECK_FALSE(offload_flags(r.plans[i].plan).empty());
    for (const PlanResult& p : r.plans) {
        if (p.result) CHECK(p.memory_bound <= p.result->peak_memory);
        const std::string f = offload_flags(p.plan);
        if (f.empty()) continue;
        flags.insert(std::string(strategies::to_string(p.plan.strategy)) + " " + f);
        // Listed only after a plan that cannot fit without it, and saving what it moves: ZeRO-3's
        // optimizer offload keeps 2 of its 16 bytes per parameter (sharded 4 ways) on the device,
        // its full offload none.
        const PlanResult& twin = twin_of(p);
        CHECK(static_cast<double>(twin.memory_bound.count()) > allowed);
        // Twin-Flow's fractions keep their device sub-groups' fp32 gradients and Adam state (16
        // bytes an element) there.
        if (p.plan.strategy == strategies::DataParallel::zero3) {
            const double saved = static_cast<double>(twin.memory_bound.count() - p.memory_bound.count());
            const double per_param = saved / static_cast<double>(model.parameters());
            double kept = 0;
            if (const auto split = strategies::twin_flow_split(model, strategies::resolve(model, cluster, p.plan), p.plan))
                kept = 16.0 * static_cast<double>(split->params - split->cpu_params) / static_cast<double>(model.parameters());
            CHECK(per_param == Approx((p.plan.offload == strategies::Offload::cpu ? 16.0 / 4 : 14.0 / 4) - kept).epsilon(1e-9));
        }
    }
    // A rank's 2.0 B elements in three sub-groups, two of weights and the last one the norms'
    // (65 × 4,096 / 4 = 66,560): Twin-Flow tries 0.4 (one on the host); 0.7 (two) would leave the
    // norms alone on the device.
    CHECK(flags == std::set<std::string>{"zero2 --offload-optimizer cpu", "zero3 --offload-optimizer cpu", "zero3 --offload cpu",
                                         "fsdp --offload cpu", "zero3 --offload-optimizer cpu --optimizer-offload-fraction 0.4",
                                         "zero3 --offload cpu --optimizer-offload-fraction 0.4"});
    // The variants come right after their plan, so shards enumerate them alike.
    for (std::size_t i = 1; i < r.plans.size(); ++i)
        if (!offload_flags(r.plans[i].plan).empty())
            CHECK(r.plans[i - 1].plan.strategy == r.plans[i].plan.strategy);
}

TEST_CASE("an analytic screen re-simulates its best plans flow-level and ranks them first", "[tools][sweep]") {
    const SweepResult r = gpt2_on_dgx(2, sim::NetworkMode::analytic);
    REQUIRE(r.refined == 10);
    for (std::size_t k = 0; k < r.ranking.size(); ++k) {
        const PlanResult& p = r.plans[r.ranking[k]];
        CHECK((p.result->network == sim::NetworkMode::flow) == (k < 10));
        CHECK(p.screen.has_value() == (k < 10));
    }
}

TEST_CASE("shards of a sweep gather into the whole sweep", "[tools][sweep]") {
    SweepOptions o;
    o.global_batch = 8;
    o.jobs = 1;
    o.space.tp = {1, 2};
    o.space.micro_batch = {1};
    const Model model = model_preset("gpt2-small");
    const topo::Cluster cluster = topo::cluster_preset("dgx-a100");
    const SweepResult whole = sweep(model, cluster, o);
    std::vector<SweepResult> shards;
    for (int k = 0; k < 3; ++k) {
        SweepOptions mine = o;
        mine.shard_index = k;
        mine.shard_count = 3;
        shards.push_back(sweep(model, cluster, mine));
        CHECK(shards.back().count(PlanStatus::pending) > 0);
    }
    const SweepResult merged = merge_shards(std::move(shards), o);
    CHECK(merged.count(PlanStatus::pending) == 0);
    CHECK(merged.ranking == whole.ranking);
}

TEST_CASE("shards exchanged as text and refined split again equal the one-process sweep", "[tools][sweep]") {
    // What `mpirun -np 3 smolcluster sweep --network analytic` does (tools/cmd_sweep.cpp), in one
    // process: every shard takes over every shard's export, refines its part of the best plans,
    // and takes over every refined export again.
    SweepOptions o;
    o.global_batch = 8;
    o.jobs = 1;
    o.network = sim::NetworkMode::analytic;
    o.refine = 5;
    o.space.tp = {1, 2};
    o.space.micro_batch = {1};
    const Model model = model_preset("gpt2-small");
    const topo::Cluster cluster = topo::cluster_preset("dgx-a100");
    const SweepResult whole = sweep(model, cluster, o);
    REQUIRE(whole.refined == 5);
    const int shards = 3;
    std::vector<SweepOptions> opts(shards, o);
    std::vector<SweepResult> part;
    for (int k = 0; k < shards; ++k) {
        opts[k].shard_index = k;
        opts[k].shard_count = shards;
        part.push_back(sweep(model, cluster, opts[k]));
        CHECK(part.back().refined == 0);
    }
    const auto exchange = [&](const std::vector<std::vector<std::size_t>>& which) {
        std::vector<std::string> texts;
        for (int k = 0; k < shards; ++k) texts.push_back(export_plans(part[k], which[k]));
        for (SweepResult& r : part)
            for (const std::string& t : texts) import_plans(r, t);
    };
    std::vector<std::vector<std::size_t>> mine;
    for (int k = 0; k < shards; ++k) mine.push_back(shard_plans(part[k], opts[k]));
    exchange(mine);
    std::size_t refined_here = 0;
    for (int k = 0; k < shards; ++k) {
        mine[k] = refine(model, part[k], opts[k]);
        refined_here += mine[k].size();
        CHECK(part[k].refined == 5);
    }
    CHECK(refined_here == 5);   // each of the best plans re-simulated by exactly one shard
    exchange(mine);
    for (const SweepResult& r : part) {
        CHECK(r.count(PlanStatus::pending) == 0);
        CHECK(ranking(r.plans, o.objective) == whole.ranking);
        for (std::size_t i = 0; i < whole.plans.size(); ++i) {
            const PlanResult &a = whole.plans[i], &b = r.plans[i];
            CHECK(a.status == b.status);
            CHECK(a.reason == b.reason);
            REQUIRE(a.result.has_value() == b.result.has_value());
            if (a.result) {
                CHECK(a.result->iteration == b.result->iteration);
                CHECK(a.result->network == b.result->network);
                // Bit for bit, not approximately: the text carries the doubles' bit patterns.
                CHECK(std::bit_cast<std::uint64_t>(a.result->mfu) == std::bit_cast<std::uint64_t>(b.result->mfu));
                CHECK(std::bit_cast<std::uint64_t>(a.result->tokens_per_s) == std::bit_cast<std::uint64_t>(b.result->tokens_per_s));
                CHECK(a.result->peak_memory == b.result->peak_memory);
            }
            REQUIRE(a.screen.has_value() == b.screen.has_value());
            if (a.screen) CHECK(a.screen->iteration == b.screen->iteration);
        }
    }
}

TEST_CASE("the progress line shows done, total, rate and time left", "[tools][sweep]") {
    const std::string line = ProgressBar::line(50, 100, 10.0, "plans");
    CHECK(line.find("50/100 plans") != std::string::npos);
    CHECK(line.find("5 plans/s") != std::string::npos);
    CHECK(line.find("ETA 0:10") != std::string::npos);
    // Not a terminal: nothing is drawn.
    std::ostringstream sink;
    {
        ProgressBar bar(sink, false, "plans");
        bar.update(1, 2);
    }
    CHECK(sink.str().empty());
}

TEST_CASE("smolcluster sweep prints the ranking and writes every plan to --csv and --json", "[tools][sweep]") {
    const fs::path dir = fs::temp_directory_path() / "smol-sweep-test";
    fs::remove_all(dir);
    const std::string csv = (dir / "plans.csv").string(), json = (dir / "plans.json").string();
    const Result r = cli({"sweep", "--model", "gpt2-small", "--cluster", "dgx-a100", "--global-batch", "8", "--tp", "1,2",
                          "--micro-batch", "1", "--jobs", "2", "--top", "3", "--csv", csv, "--json", json});
    REQUIRE(r.code == 0);
    CHECK(r.out.find("candidate plans") != std::string::npos);
    CHECK(r.out.find("  1     ") != std::string::npos);
    CHECK(r.err.empty());   // not a terminal: no progress bar
    const Json j = Json::parse(std::ifstream(json));
    const std::size_t plans = j["sweeps"][0]["plans"].size();
    CHECK(plans == j["sweeps"][0]["candidates"].get<std::size_t>());
    CHECK(j["sweeps"][0]["plans"][0]["ep"] == 1);
    CHECK(j["sweeps"][0]["plans"][0].contains("fsdp_sharding"));
    const auto [header, rows] = read_csv(csv, false);
    std::string columns;
    for (const std::string& h : header) columns += "," + h;
    CHECK(columns.find(",strategy,fsdp_sharding,tp,pp,cp,cp_comm,ep,dp,") != std::string::npos);
    CHECK(columns.find(",offload,compress,overlap_grad_reduce,framework,partition,") != std::string::npos);
    CHECK(rows.size() == plans);
    for (const auto& row : rows)   // a simulated plan names its framework's release
        if (row.at("status") == "ranked") CHECK(row.at("framework").find('@') != std::string::npos);

    SECTION("an existing file is kept without --force") {
        const Result again = cli({"sweep", "--model", "gpt2-small", "--cluster", "dgx-a100", "--global-batch", "8",
                                  "--csv", csv});
        CHECK(again.code == 2);
        CHECK(again.err.find("--force") != std::string::npos);
    }
    fs::remove_all(dir);
}

TEST_CASE("sweep --nodes prints a scaling table per strategy", "[tools][sweep]") {
    const Result r = cli({"sweep", "--model", "gpt2-small", "--cluster", "dgx-a100", "--nodes", "1,2", "--global-batch",
                          "32", "--strategies", "ddp", "--tp", "1", "--pp", "1", "--micro-batch", "1,2,4", "--jobs", "2"});
    REQUIRE(r.code == 0);
    const auto at = r.out.find("scaling");
    REQUIRE(at != std::string::npos);
    CHECK(r.out.find("ddp       1      ", at) != std::string::npos);
    CHECK(r.out.find("ddp       2      ", at) != std::string::npos);
    CHECK(r.out.find("1.00×", at) != std::string::npos);
}

TEST_CASE("sweep refuses bad flags with exit 2, naming the flag", "[tools][sweep]") {
    const std::vector<std::string> base{"sweep", "--model", "gpt2-small", "--cluster", "dgx-a100", "--global-batch", "8"};
    auto with = [&](std::vector<std::string> extra) {
        std::vector<std::string> args = base;
        args.insert(args.end(), extra.begin(), extra.end());
        return cli(args);
    };
    // The flags added to `base`, and what the error must say.
    const std::vector<std::pair<std::vector<std::string>, std::string>> refused{
        {{"--strategies", "zero1", "--fsdp-sharding", "hybrid"}, "--fsdp-sharding: has no effect here"},
        {{"--strategies", "zero2,fsdp", "--zeropp"}, "--zeropp: has no effect here"},
        {{"--strategies", "zero2,fsdp", "--mics"}, "--mics: has no effect here"},
        {{"--refine", "3"}, "--refine: has no effect here"},
        {{"--network", "analytic", "--refine", "-1"}, "--refine must be at least 0"},
        {{"--ep", "1,0"}, "--ep values must be at least 1, found 0"},
        {{"--objective", "speed"}, "--objective"},
        {{"--attention", "fast"}, "--attention: expected flash or eager"},
        {{"--finetune", "lora:x"}, "--finetune"},
        {{"--optimizer", "adamw8"}, "--optimizer"},
        {{"--min-headroom", "1.5"}, "--min-headroom"},
        {{"--max-memory", "lots"}, "--max-memory"},
        {{"--jobs", "-1", "--tp", "1", "--pp", "1"}, "--jobs"},
        {{"--strategies", "ddp,zero4"}, "zero4"},
        {{"--dispatch-overhead", "fast"}, "--dispatch-overhead"},
        {{"--offload", "none,cpu"}, "--offload"},
        {{"--offload", "disk"}, "--offload"},
        // Asked for, but no strategy searched can offload (there), or none to NVMe.
        {{"--strategies", "ddp,ring", "--offload", "cpu"}, "--offload: no effect here"},
        {{"--strategies", "zero2,fsdp", "--offload", "cpu,nvme"}, "only zero3"},
        // Asked of every plan, but every plan searched runs as its framework does.
        {{"--tp", "1", "--tp-comm-overlap"}, "--tp-comm-overlap: has no effect here: every plan searched runs as its framework does (it runs the tensor-parallel collectives of plans with sequence parallelism, and no plan searched has a --tp of 2"},
        {{"--tp", "1,2", "--framework", "deepspeed", "--tp-comm-overlap"}, "has no tensor-parallel communication overlap"},
        {{"--strategies", "ddp,zero2", "--overlap-param-gather"}, "--overlap-param-gather: has no effect here: every plan searched runs as its framework does (it overlaps the parameter all-gather of Megatron's distributed optimizer"},
        {{"--strategies", "zero3", "--overlap-grad-reduce"}, "--overlap-grad-reduce: has no effect here"},
    };
    for (const auto& [extra, says] : refused) {
        INFO(says);
        const Result r = with(extra);
        CHECK(r.code == 2);
        CHECK(r.err.find(says) != std::string::npos);
    }
    SECTION("no plan fits: exit 3") {
        const Result r = with({"--max-memory", "1 MB", "--tp", "1", "--pp", "1"});
        CHECK(r.code == 3);
        CHECK(r.out.find("no plan fits") != std::string::npos);
    }
}

TEST_CASE("a sweep of jittered devices gives the same figures on one thread and on two", "[tools][sweep][speed]") {
    // Jitter is a function of (seed, op), not of the order plans or events run in.
    SweepOptions o;
    o.global_batch = 8;
    o.space.strategies = {strategies::DataParallel::ddp, strategies::DataParallel::zero1};
    o.space.micro_batch = {1, 2};
    const topo::Cluster pis = topo::cluster_preset("pi5-1gbe").with_slow_devices("1:0.7").with_jitter(10, 5);
    auto run = [&](int jobs) {
        o.jobs = jobs;
        return sweep(model_preset("gpt2-small"), pis, o);
    };
    const SweepResult one = run(1), two = run(2);
    REQUIRE(one.plans.size() == two.plans.size());
    CHECK(one.ranking == two.ranking);
    std::size_t compared = 0;
    for (std::size_t i = 0; i < one.plans.size(); ++i) {
        REQUIRE(one.plans[i].result.has_value() == two.plans[i].result.has_value());
        if (!one.plans[i].result) continue;
        CHECK(one.plans[i].result->iteration == two.plans[i].result->iteration);
        ++compared;
    }
    CHECK(compared >= 2);
}

TEST_CASE("a sweep with a dispatch overhead prices every plan with it", "[tools][sweep]") {
    SweepOptions o;
    o.global_batch = 8;
    o.space.tp = {1};
    o.space.pp = {1};
    const SweepResult plain = sweep(model_preset("gpt2-small"), topo::cluster_preset("dgx-a100"), o);
    o.dispatch = Time::ms(1);
    const SweepResult slow = sweep(model_preset("gpt2-small"), topo::cluster_preset("dgx-a100"), o);
    REQUIRE(plain.plans.size() == slow.plans.size());
    std::size_t compared = 0;
    for (std::size_t i = 0; i < plain.plans.size(); ++i) {
        if (!plain.plans[i].result || !slow.plans[i].result) continue;
        CHECK(slow.plans[i].plan.framework_overrides.dispatch_per_kernel == Time::ms(1));
        // GPT-2 small's 12 layers issue at least 26 kernels each per micro-batch (11 forward, 15 backward).
        CHECK(slow.plans[i].result->iteration.to_seconds() >= 12 * 26 * 1e-3);
        CHECK(slow.plans[i].result->iteration > plain.plans[i].result->iteration);
        ++compared;
    }
    CHECK(compared > 0);
}

TEST_CASE("sweep --profile prices every plan with the measured rates, as simulate --profile does", "[tools][sweep]") {
    // vTrain's nccl-tests all-reduces of its A100 node (validation/): slower than the NCCL model,
    // so every tp 8 plan that all-reduces gets longer, and each equals simulate's with the profile.
    const std::string profile = (fs::path(SMOL_SOURCE_DIR) / "validation/vtrain-a100-nccl.json").string();
    const fs::path out = fs::temp_directory_path() / ("smol-sweep-measured-" + std::to_string(::getpid()) + ".json");
    auto swept = [&](const std::vector<std::string>& extra) {
        const auto [text, json] = sweep_cli({"sweep", "--model", "gpt2-medium", "--cluster", "hgx-a100-4hdr", "--global-batch", "8",
                                             "--tp", "8", "--pp", "1", "--strategies", "ddp", "--micro-batch", "1"},
                                            extra, out);
        return std::make_pair(text, json["sweeps"][0]);
    };
    const auto [plain_text, plain] = swept({});
    const auto [text, measured] = swept({"--profile", profile});
    CHECK_THAT(text, Catch::Contains("  profile " + profile + ": measured all_reduce over 2-8 ranks on 1 host\n"));
    CHECK_THAT(plain_text, !Catch::Contains("profile"));
    CHECK(plain["profile"].is_null());
    CHECK(measured["profile"] == profile);
    REQUIRE(measured["plans"].size() == plain["plans"].size());
    std::size_t compared = 0;
    for (std::size_t i = 0; i < measured["plans"].size(); ++i) {
        const Json& p = measured["plans"][i];
        // With sequence parallelism the tensor collectives are reduce-scatters and all-gathers,
        // which the profile did not measure: those plans keep their time.
        if (p["sp"].get<bool>()) {
            CHECK(p["iteration_time_s"].get<double>() == plain["plans"][i]["iteration_time_s"].get<double>());
            continue;
        }
        CHECK(p["iteration_time_s"].get<double>() > plain["plans"][i]["iteration_time_s"].get<double>());
        const Result s = cli({"simulate", "--model", "gpt2-medium", "--cluster", "hgx-a100-4hdr", "--global-batch", "8", "--tp", "8",
                              "--strategy", "ddp", "--micro-batch", "1", "--recompute", p["recompute"].get<std::string>(),
                              "--profile", profile, "--json"});
        REQUIRE(s.code == 0);
        CHECK(Json::parse(s.out)["iteration_time_s"].get<double>() == Approx(p["iteration_time_s"].get<double>()).epsilon(1e-12));
        ++compared;
    }
    CHECK(compared == 3);   // recompute none, selective and full without sp
    fs::remove(out);
}

TEST_CASE("sweep --slow and --jitter price every plan as simulate does with them, and say so", "[tools][sweep][speed]") {
    // Four Pis, one at half speed: each data-parallel plan waits for it, as simulate --slow says.
    const fs::path out = fs::temp_directory_path() / ("smol-sweep-speed-" + std::to_string(::getpid()) + ".json");
    auto swept = [&](const std::vector<std::string>& extra) {
        return sweep_cli({"sweep", "--model", "gpt2-small", "--cluster", "pi5-1gbe", "--nodes", "4", "--global-batch", "8",
                          "--strategies", "ddp", "--tp", "1", "--pp", "1", "--micro-batch", "2"},
                         extra, out);
    };
    auto simulated = [](const Json& plan, std::vector<std::string> extra) {
        std::vector<std::string> args{"simulate", "--model", "gpt2-small", "--cluster", "pi5-1gbe", "--nodes", "4", "--global-batch",
                                      "8", "--strategy", "ddp", "--micro-batch", "2", "--recompute",
                                      plan["recompute"].get<std::string>(), "--json"};
        args.insert(args.end(), extra.begin(), extra.end());
        const Result r = cli(args);
        REQUIRE(r.code == 0);
        return Json::parse(r.out)["iteration_time_s"].get<double>();
    };
    const auto [plain_text, plain] = swept({});
    const auto [slow_text, slow] = swept({"--slow", "1:0.5"});
    const auto [jitter_text, jittered] = swept({"--jitter", "10", "--seed", "3"});
    CHECK_THAT(slow_text, Catch::Contains("  every plan with slow devices 1:0.5\n"));
    CHECK_THAT(jitter_text, Catch::Contains("  every plan with jitter ±10 % (seed 3)\n"));
    CHECK_THAT(plain_text, !Catch::Contains("every plan with"));
    CHECK(slow["slow"] == "1:0.5");
    CHECK(jittered["jitter_pct"] == 10);
    CHECK(jittered["seed"] == 3);
    CHECK_FALSE(plain.contains("slow"));
    const Json& plans = plain["sweeps"][0]["plans"];
    REQUIRE(plans.size() == 3);   // recompute none, selective, full
    for (std::size_t i = 0; i < plans.size(); ++i) {
        const Json& s = slow["sweeps"][0]["plans"][i];
        const Json& j = jittered["sweeps"][0]["plans"][i];
        CHECK(s["iteration_time_s"].get<double>() > 1.5 * plans[i]["iteration_time_s"].get<double>());
        CHECK(s["iteration_time_s"].get<double>() == Approx(simulated(s, {"--slow", "1:0.5"})).epsilon(1e-12));
        CHECK(j["iteration_time_s"].get<double>() != plans[i]["iteration_time_s"].get<double>());
        CHECK(j["iteration_time_s"].get<double>() == Approx(simulated(j, {"--jitter", "10", "--seed", "3"})).epsilon(1e-12));
    }
    const Result seed = cli({"sweep", "--model", "gpt2-small", "--cluster", "pi5-1gbe", "--global-batch", "8", "--seed", "3"});
    CHECK(seed.code == 2);
    CHECK_THAT(seed.err, Catch::Contains("--seed: has no effect here"));
    fs::remove(out);
}

TEST_CASE("a sweep tries each --compress on the strategies that compress, and simulates each as simulate would",
          "[tools][sweep][compression]") {
    // Four Pi 5 on 1 GbE: PowerSGD's and 1-bit's exchanges on ddp and ring; zero1 exchanges its
    // gradients another way, so its compressed plans are pruned naming --compress.
    SweepOptions o;
    o.global_batch = 8;
    o.space.strategies = {strategies::DataParallel::ddp, strategies::DataParallel::ring, strategies::DataParallel::zero1};
    o.space.tp = {1};
    o.space.pp = {1};
    o.space.micro_batch = {2};
    o.space.compress = {strategies::parse_compression("none"), strategies::parse_compression("powersgd:4"),
                        strategies::parse_compression("1bit")};
    const Model m = model_preset("gpt2-small");
    const topo::Cluster pis = topo::cluster_preset("pi5-1gbe").with_nodes(4);
    const SweepResult r = sweep(m, pis, o);
    std::map<std::pair<strategies::DataParallel, strategies::CompressionMethod>, int> simulated, pruned;
    for (const PlanResult& p : r.plans) {
        const auto key = std::make_pair(p.plan.strategy, p.plan.compress.method);
        if (p.status == PlanStatus::pruned) {
            ++pruned[key];
            CHECK(p.reason_key == "--compress");
            continue;
        }
        REQUIRE(p.result);
        ++simulated[key];
        CHECK(p.result->iteration == tools::simulate_plan(m, pis, p.plan, {}).summary.iteration);
    }
    for (const auto d : {strategies::DataParallel::ddp, strategies::DataParallel::ring})
        for (const auto c : {strategies::CompressionMethod::none, strategies::CompressionMethod::powersgd, strategies::CompressionMethod::onebit})
            CHECK(simulated[{d, c}] == 3);   // recompute none, selective, full
    CHECK(simulated[{strategies::DataParallel::zero1, strategies::CompressionMethod::none}] == 3);
    CHECK(pruned[{strategies::DataParallel::zero1, strategies::CompressionMethod::powersgd}] == 1);
    CHECK(pruned[{strategies::DataParallel::zero1, strategies::CompressionMethod::onebit}] == 1);

    const Result bad = cli({"sweep", "--model", "gpt2-small", "--cluster", "pi5-1gbe", "--global-batch", "8", "--strategies",
                            "zero1,fsdp", "--compress", "powersgd:4"});
    CHECK(bad.code == 2);
    CHECK_THAT(bad.err, Catch::Contains("--compress: no effect here: only ddp and ring compress"));
    const Result typo = cli({"sweep", "--model", "gpt2-small", "--cluster", "pi5-1gbe", "--global-batch", "8", "--compress", "powersgd"});
    CHECK(typo.code == 2);
    CHECK_THAT(typo.err, Catch::Contains("--compress"));
}

TEST_CASE("sweep --make-vocab-size-divisible-by pads the vocabulary of Megatron's plans alone", "[tools][sweep][framework]") {
    SweepOptions o;
    o.global_batch = 16;
    o.space.tp = {2};
    o.space.pp = {1};
    o.space.micro_batch = {2};
    o.space.strategies = {strategies::DataParallel::zero1, strategies::DataParallel::zero3};
    o.frameworks = {"deepspeed", "megatron"};
    o.vocab_multiple = 1;
    const Model m = model_preset("gpt2-small");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    const SweepResult r = sweep(m, c, o);
    int megatron = 0, deepspeed = 0;
    for (const PlanResult& p : r.plans) {
        if (p.status == PlanStatus::pruned) continue;
        REQUIRE(p.result);
        // Megatron pads GPT-2's 50,257 rows to 1 × tp 2 (50,258) instead of its default 128 × 2
        // (50,432); DeepSpeed trains 50,257 and runs with the flag cleared, not pruned.
        const bool on_megatron = p.layout.framework.name == strategies::FrameworkName::megatron;
        (on_megatron ? megatron : deepspeed) += 1;
        CHECK(p.plan.vocab_multiple == (on_megatron ? std::optional<int>(1) : std::nullopt));
        CHECK(p.layout.framework.vocab_multiple == 1);
        const tools::Simulation same = tools::simulate_plan(m, c, p.plan, {});
        CHECK(p.result->iteration == same.summary.iteration);
        if (on_megatron) {
            strategies::Plan unpadded = p.plan;
            unpadded.vocab_multiple.reset();
            CHECK(tools::simulate_plan(m, c, unpadded, {}).summary.iteration > p.result->iteration);
        }
    }
    CHECK(megatron > 0);
    CHECK(deepspeed > 0);
    // Refused up front: out of range, a layer list, frameworks none of which pads.
    const std::vector<std::string> gpt2 = {"sweep", "--model", "gpt2-small", "--cluster", "dgx-a100", "--global-batch", "16"};
    const auto with = [](std::vector<std::string> args, std::initializer_list<std::string> extra) {
        args.insert(args.end(), extra);
        return cli(args);
    };
    const Result zero = with(gpt2, {"--make-vocab-size-divisible-by", "0"});
    CHECK(zero.code == 2);
    CHECK_THAT(zero.err, Catch::Contains("--make-vocab-size-divisible-by: expected a whole number from 1 to 65536, found 0"));
    const Result cnn = cli({"sweep", "--model", "resnet50", "--cluster", "dgx-a100", "--global-batch", "16",
                            "--make-vocab-size-divisible-by", "8"});
    CHECK(cnn.code == 2);
    CHECK_THAT(cnn.err, Catch::Contains("resnet50 is a layer list"));
    const Result idle = with(gpt2, {"--framework", "deepspeed,pytorch", "--make-vocab-size-divisible-by", "8"});
    CHECK(idle.code == 2);
    CHECK_THAT(idle.err, Catch::Contains("--make-vocab-size-divisible-by: has no effect here"));
    // The heading and --json say it.
    const Result ok = with(gpt2, {"--tp", "2", "--pp", "1", "--micro-batch", "2", "--make-vocab-size-divisible-by", "64", "--quiet"});
    REQUIRE(ok.code == 0);
    CHECK_THAT(ok.out, Catch::Contains("vocabulary padded to a multiple of 64 × tp on Megatron"));
    const fs::path out = fs::temp_directory_path() / ("smol-sweep-vocab-" + std::to_string(::getpid()) + ".json");
    REQUIRE(with(gpt2, {"--tp", "2", "--pp", "1", "--micro-batch", "2", "--make-vocab-size-divisible-by", "64", "--quiet", "--json",
                        out.string(), "--force"})
                .code == 0);
    std::ifstream in(out);
    const Json j = Json::parse(in);
    CHECK(j["make_vocab_size_divisible_by"] == 64);
    // Each resolved plan says the rows it trains: 50,257 to a multiple of 64 × 2 on Megatron and
    // Megatron-DeepSpeed (ZeRO-2/3 with tp; 50,304), to a multiple of 2 under PyTorch's FSDP (50,258).
    int seen = 0;
    for (const Json& p : j["sweeps"][0]["plans"])
        if (p.contains("framework")) {
            const bool megatron = p["framework"].get<std::string>().rfind("megatron", 0) == 0;
            CHECK(p["padded_vocab"] == (megatron ? 50304 : 50258));
            ++seen;
        }
    CHECK(seen > 0);
    fs::remove(out);
}

TEST_CASE("sweep --framework tries every plan on each framework, pruning the strategies one does not run",
          "[tools][sweep][framework]") {
    SweepOptions o;
    o.global_batch = 16;
    o.space.tp = {1, 2};
    o.space.pp = {1};
    o.space.micro_batch = {2};
    o.frameworks = {"deepspeed@0.5", "megatron"};
    o.overlap_grad_reduce = true;
    const Model m = model_preset("gpt2-small");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    const SweepResult r = sweep(m, c, o);
    std::map<std::string, std::set<std::string>> pruned_by_framework, simulated;   // framework → strategies
    for (const PlanResult& p : r.plans) {
        const std::string s = strategies::to_string(p.plan.strategy);
        if (p.status == PlanStatus::pruned) {
            if (p.reason_key == "--framework") pruned_by_framework[p.plan.framework].insert(s);
            continue;
        }
        REQUIRE(p.result);
        simulated[p.plan.framework].insert(s);
        const bool deepspeed = p.plan.framework == "deepspeed@0.5";
        CHECK(p.layout.framework.name == (deepspeed ? strategies::FrameworkName::deepspeed : strategies::FrameworkName::megatron));
        // Every plan overlaps its gradient reduction; ZeRO-3 and Megatron-FSDP do already, so
        // their flag is cleared.
        CHECK(p.plan.overlap_grad_reduce ==
              (p.plan.strategy != strategies::DataParallel::zero3 && p.plan.strategy != strategies::DataParallel::fsdp));
        CHECK(p.result->iteration == tools::simulate_plan(m, c, p.plan, {}).summary.iteration);
    }
    // DeepSpeed runs DDP and its ZeRO stages, Megatron DDP, its distributed optimizer (zero1) and
    // Megatron-FSDP; Horovod's ring is neither's, nor PyTorch's FSDP DeepSpeed's.
    CHECK(simulated["deepspeed@0.5"] == std::set<std::string>{"ddp", "zero1", "zero2", "zero3"});
    CHECK(simulated["megatron"] == std::set<std::string>{"ddp", "zero1", "fsdp"});
    CHECK(pruned_by_framework["deepspeed@0.5"] == std::set<std::string>{"fsdp", "ring"});
    CHECK(pruned_by_framework["megatron"] == std::set<std::string>{"ring", "zero2", "zero3"});
    // --json says per plan whether it overlaps.
    const fs::path out = fs::temp_directory_path() / ("smol-sweep-framework-" + std::to_string(::getpid()) + ".json");
    const Result ok = cli({"sweep", "--model", "gpt2-small", "--cluster", "dgx-a100", "--global-batch", "16", "--tp", "1", "--pp",
                           "1", "--micro-batch", "2", "--framework", "deepspeed@0.5", "--overlap-grad-reduce", "--quiet", "--json",
                           out.string(), "--force"});
    REQUIRE(ok.code == 0);
    CHECK_THAT(ok.out, Catch::Contains("framework deepspeed@0.5, overlap-grad-reduce"));
    {
        std::ifstream in(out);
        const Json j = Json::parse(in);
        CHECK(j["frameworks"] == Json::array({"deepspeed@0.5"}));
        for (const Json& p : j["sweeps"][0]["plans"])
            if (p["status"] == "ranked") {
                CHECK(p["overlap_grad_reduce"].get<bool>() == (p["strategy"] != "zero3"));
                CHECK(p["framework"] == "deepspeed@0.5");
            }
    }
    // Two frameworks: a framework column, each plan's resolved release.
    const Result two = cli({"sweep", "--model", "gpt2-small", "--cluster", "dgx-a100", "--global-batch", "16", "--tp", "1", "--pp",
                            "1", "--micro-batch", "2", "--framework", "deepspeed@0.5,megatron", "--quiet"});
    REQUIRE(two.code == 0);
    CHECK_THAT(two.out, Catch::Contains("frameworks deepspeed@0.5, megatron"));
    CHECK_THAT(two.out, Catch::Contains("  rank  strategy  framework"));
    CHECK_THAT(two.out, Catch::Contains(" deepspeed@0.5 "));
    const Result twice = cli({"sweep", "--model", "gpt2-small", "--cluster", "dgx-a100", "--global-batch", "16", "--framework",
                              "megatron,megatron"});
    CHECK(twice.code == 2);
    CHECK_THAT(twice.err, Catch::Contains("--framework: a framework listed twice"));
    fs::remove(out);

    const Result bad = cli({"sweep", "--model", "gpt2-small", "--cluster", "dgx-a100", "--global-batch", "8", "--framework", "jax"});
    CHECK(bad.code == 2);
    CHECK_THAT(bad.err, Catch::Contains("--framework"));
    const Result fp8 = cli({"sweep", "--model", "gpt2-small", "--cluster", "dgx-h100", "--global-batch", "8", "--fp8", "delayed",
                            "--framework", "deepspeed"});
    CHECK(fp8.code == 2);
    CHECK_THAT(fp8.err, Catch::Contains("--fp8 runs through Transformer Engine on Megatron core"));
}

TEST_CASE("sweep --overlap-param-gather: Megatron's zero1 plans gather under the forward and the others run as they do",
          "[tools][sweep][framework]") {
    SweepOptions o;
    o.global_batch = 16;
    o.space.tp = {1, 2, 8};
    o.space.pp = {1};
    o.space.micro_batch = {2};
    o.frameworks = {"megatron"};
    o.overlap_grad_reduce = true;
    o.overlap_param_gather = true;
    const Model m = model_preset("gpt2-small");
    const topo::Cluster c = topo::cluster_preset("dgx-a100");
    const SweepResult r = sweep(m, c, o);
    int gathered = 0;
    for (const PlanResult* p : simulated_as_simulate(m, c, r)) {
        // zero1 (the distributed optimizer) on more than one data-parallel rank; tp 8 leaves one.
        const bool zero1 = p->plan.strategy == strategies::DataParallel::zero1;
        CHECK(p->plan.overlap_param_gather == (zero1 && p->layout.dp > 1));
        CHECK(p->layout.framework.overlap_param_gather == p->plan.overlap_param_gather);
        gathered += p->plan.overlap_param_gather;
    }
    CHECK(gathered > 0);
    // The CSV's last column but one says it per plan, the summary once.
    const SweepCsv csv = sweep_csv({"sweep", "--model", "gpt2-small", "--cluster", "dgx-a100", "--global-batch", "16", "--tp", "1",
                                    "--pp", "1", "--micro-batch", "2", "--framework", "megatron", "--overlap-param-gather"},
                                   "param-gather");
    CHECK_THAT(csv.out, Catch::Contains("framework megatron, overlap-param-gather"));
    // The three last columns: overlap_param_gather, tp_comm_overlap, fp8_param_gather.
    REQUIRE(csv.header.size() > 3);
    CHECK(csv.header[csv.header.size() - 3] == "overlap_param_gather");
    int zero1_rows = 0;
    for (const auto& row : csv.rows) {
        const bool zero1 = row.at("strategy") == "zero1";
        CHECK(row.at("overlap_param_gather") == (zero1 ? "true" : "false"));   // tp 1 on 8 GPUs: dp 8
        zero1_rows += zero1;
    }
    CHECK(zero1_rows > 0);
}

TEST_CASE("sweep --fp8-param-gather: Megatron's zero1 FP8 plans keep their weights in FP8 and the others run as they do",
          "[tools][sweep][framework]") {
    SweepOptions o;
    o.global_batch = 16;
    o.space.tp = {1, 2};
    o.space.pp = {1};
    o.space.micro_batch = {2};
    o.frameworks = {"megatron"};
    o.fp8 = Fp8Recipe::tensorwise;
    o.fp8_param_gather = true;
    const Model m = model_preset("gpt2-small");
    const topo::Cluster c = topo::cluster_preset("dgx-h100");
    const SweepResult r = sweep(m, c, o);
    int kept = 0;
    for (const PlanResult* p : simulated_as_simulate(m, c, r)) {
        // The distributed optimizer and Megatron-FSDP (Megatron's assert), nothing else.
        CHECK(p->plan.fp8_param_gather == (p->plan.strategy == strategies::DataParallel::zero1 ||
                                           p->plan.strategy == strategies::DataParallel::fsdp));
        CHECK(p->layout.fp8_param_gather == p->plan.fp8_param_gather);
        CHECK(p->memory_bound <= p->result->peak_memory);   // a bound still, with FSDP's one-byte shards
        kept += p->plan.fp8_param_gather;
    }
    CHECK(kept > 0);
    // The CSV's last column says it per plan, the summary once; without --fp8 the flag is refused.
    const SweepCsv csv = sweep_csv({"sweep", "--model", "gpt2-small", "--cluster", "dgx-h100", "--global-batch", "16", "--tp", "1",
                                    "--pp", "1", "--micro-batch", "2", "--framework", "megatron", "--fp8", "tensorwise",
                                    "--fp8-param-gather"},
                                   "fp8-params");
    CHECK_THAT(csv.out, Catch::Contains("fp8-param-gather"));
    CHECK(csv.header.back() == "fp8_param_gather");
    for (const auto& row : csv.rows) {
        const bool sharded = row.at("strategy") == "zero1" || row.at("strategy") == "fsdp";
        CHECK(row.at("fp8_param_gather") == (sharded ? "true" : "false"));
    }
    CHECK(!csv.rows.empty());
    const Result plain = cli({"sweep", "--model", "gpt2-small", "--cluster", "dgx-h100", "--global-batch", "16", "--framework",
                              "megatron", "--fp8-param-gather"});
    CHECK(plain.code == 2);
    CHECK_THAT(plain.err, Catch::Contains("--fp8-param-gather") && Catch::Contains("without --fp8"));
}

TEST_CASE("sweep --tp-comm-overlap: plans with sequence parallelism on Megatron core run userbuffers, the others as they do",
          "[tools][sweep][framework]") {
    SweepOptions o;
    o.global_batch = 16;
    o.space.tp = {1, 2};
    o.space.pp = {1};
    o.space.micro_batch = {2};
    o.frameworks = {"megatron"};
    o.tp_comm_overlap = true;
    const Model m = model_preset("gpt2-small");
    const topo::Cluster c = topo::cluster_preset("dgx-h100");
    const SweepResult r = sweep(m, c, o);
    int overlapped = 0;
    for (const PlanResult* p : simulated_as_simulate(m, c, r)) {
        // Megatron asserts sequence parallelism (and tp > 1 for it); Megatron-FSDP runs without.
        CHECK(p->plan.tp_comm_overlap == (p->plan.sequence_parallel && p->plan.strategy != strategies::DataParallel::fsdp));
        overlapped += p->plan.tp_comm_overlap;
    }
    CHECK(overlapped > 0);
    // The CSV's last column but one says it per plan, the summary once.
    const SweepCsv csv = sweep_csv({"sweep", "--model", "gpt2-small", "--cluster", "dgx-h100", "--global-batch", "16", "--tp", "2",
                                    "--pp", "1", "--micro-batch", "2", "--framework", "megatron", "--tp-comm-overlap"},
                                   "tp-overlap");
    CHECK_THAT(csv.out, Catch::Contains("tp-comm-overlap"));
    CHECK(csv.header[csv.header.size() - 2] == "tp_comm_overlap");
    for (const auto& row : csv.rows)
        CHECK(row.at("tp_comm_overlap") == (row.at("strategy") == "fsdp" ? std::string("false") : row.at("sp")));
    CHECK(!csv.rows.empty());
}

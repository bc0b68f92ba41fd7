// `smolcluster export --format chakra`: the files a real plan writes, read back and checked
// against the op graph the same plan builds; folded and unfolded builds export the same traces;
// bad input exits 2 naming the flag.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/model.hpp"
#include "strategies/plan.hpp"
#include "tools/cli_fixtures.hpp"
#include "tools/plan_flags.hpp"
#include "tools/simulation.hpp"
#include "traces/chakra_reader.hpp"

using namespace smol;
using namespace smol::test;
namespace fs = std::filesystem;
namespace pb = ChakraProtoMsg;

namespace {

/// A fresh folder under the system's temporary folder, removed at the end of the test.
struct TempDir {
    fs::path path;
    explicit TempDir(const std::string& name) : path(fs::temp_directory_path() / name) { fs::remove_all(path); }
    ~TempDir() { fs::remove_all(path); }
    std::string str() const { return path.string(); }
};

std::vector<std::string> export_args(const std::string& out, std::vector<std::string> plan) {
    std::vector<std::string> args{"export", "--format", "chakra", "--out", out};
    args.insert(args.end(), plan.begin(), plan.end());
    return args;
}

/// The graph the plan flags build, as the command line builds it.
strategies::Built build_plan(const std::string& model, const std::string& cluster, int tp, bool fold) {
    tools::PlanFlags f;
    f.model = model;
    f.cluster = cluster;
    f.tp = tp;
    f.no_fold = !fold;
    return strategies::build(load_model(model), tools::resolve_cluster(f), tools::resolve_plan(f));
}

std::map<std::string, std::vector<int>> groups_of(const fs::path& json_file) {
    std::map<std::string, std::vector<int>> out;
    const nlohmann::json j = nlohmann::json::parse(read(json_file));
    for (const auto& [k, v] : j.items()) out[k] = v.get<std::vector<int>>();
    return out;
}

pb::CollectiveCommType expected_comm_type(CollectiveKind k) {
    // Chakra's CollectiveCommType numbers (et_def.proto): ALL_REDUCE 0, REDUCE 1, ALL_GATHER 2,
    // BROADCAST 5, ALL_TO_ALL 6, REDUCE_SCATTER 7, BARRIER 9.
    switch (k) {
        case CollectiveKind::all_reduce: return static_cast<pb::CollectiveCommType>(0);
        case CollectiveKind::reduce: return static_cast<pb::CollectiveCommType>(1);
        case CollectiveKind::all_gather: return static_cast<pb::CollectiveCommType>(2);
        case CollectiveKind::broadcast: return static_cast<pb::CollectiveCommType>(5);
        case CollectiveKind::all_to_all: return static_cast<pb::CollectiveCommType>(6);
        case CollectiveKind::reduce_scatter: return static_cast<pb::CollectiveCommType>(7);
        case CollectiveKind::barrier: return static_cast<pb::CollectiveCommType>(9);
    }
    return pb::CollectiveCommType_MIN;
}

bool has_node(OpKind k) {
    return k == OpKind::compute || k == OpKind::collective || k == OpKind::send || k == OpKind::recv || k == OpKind::copy;
}

}  // namespace

TEST_CASE("a tp 2 plan on one dgx-a100 exports 8 traces that hold its op graph", "[tools][export]") {
    TempDir dir("smol_export_tp2");
    const Result r = cli(export_args(dir.str(), {"--model", "gpt2-small", "--cluster", "dgx-a100", "--tp", "2"}));
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK(r.out.find("wrote 8 Chakra traces") != std::string::npos);

    std::set<std::string> files;
    for (const auto& e : fs::directory_iterator(dir.path)) files.insert(e.path().filename().string());
    std::set<std::string> expected{"smolcluster.comm_group.json"};
    for (int rank = 0; rank < 8; ++rank) expected.insert("smolcluster." + std::to_string(rank) + ".et");
    REQUIRE(files == expected);

    const strategies::Built built = build_plan("gpt2-small", "dgx-a100", 2, true);
    const OpGraph& g = built.graph;
    REQUIRE(g.ranks() == 8);
    REQUIRE_FALSE(g.folded());   // tp 2 on an 8-GPU node: every replica shares the node, no folding
    const auto groups = groups_of(dir.path / "smolcluster.comm_group.json");
    // One group per communicator of the graph (all distinct here), members in communicator order.
    std::set<std::vector<int>> listed, in_graph(g.communicators().begin(), g.communicators().end());
    for (const auto& [name, members] : groups) listed.insert(members);
    CHECK(listed == in_graph);
    CHECK(groups.size() == g.communicators().size());

    // The op before each op on its (rank, stream), as OpGraph::add chains them.
    std::map<std::pair<int, int>, OpId> last;
    std::vector<OpId> stream_prev(g.size(), OpGraph::kNoOp);
    for (OpId id = 0; id < g.size(); ++id) {
        auto key = std::pair{g.op(id).rank, static_cast<int>(g.op(id).stream)};
        if (last.count(key)) stream_prev[id] = last[key];
        last[key] = id;
    }
    std::vector<std::vector<OpId>> preds(g.size());
    for (OpId u = 0; u < g.size(); ++u)
        for (OpId v : g.successors(u)) preds[v].push_back(u);

    std::size_t checked_edges = 0;
    for (int rank = 0; rank < 8; ++rank) {
        INFO("rank " << rank);
        const ChakraTrace t = read_chakra(read(dir.path / ("smolcluster." + std::to_string(rank) + ".et")));
        std::set<std::uint64_t> want;
        for (OpId id = 0; id < g.size(); ++id)
            if (g.op(id).rank == rank && has_node(g.op(id).kind)) want.insert(id);
        std::set<std::uint64_t> got;
        for (const auto& n : t.nodes) got.insert(n.id());
        REQUIRE(got == want);
        REQUIRE(got.size() == t.nodes.size());

        for (const auto& n : t.nodes) {
            const OpId id = static_cast<OpId>(n.id());
            const Op& o = g.op(id);
            const auto a = attrs(n);
            CHECK(a.at("is_cpu_op").bool_val() == (o.kind == OpKind::compute && o.on_host()));
            switch (o.kind) {
                case OpKind::compute:
                    CHECK(n.type() == pb::COMP_NODE);
                    CHECK(a.at("num_ops").int64_val() == std::llround(o.flops));
                    CHECK(a.at("tensor_size").uint64_val() == static_cast<std::uint64_t>(o.bytes));
                    break;
                case OpKind::collective: {
                    CHECK(n.type() == pb::COMM_COLL_NODE);
                    const Collective& c = g.collectives()[static_cast<std::size_t>(o.ref)];
                    const std::vector<int>& members = g.communicators()[static_cast<std::size_t>(c.communicator)];
                    CHECK(a.at("comm_type").int64_val() == expected_comm_type(c.kind));
                    const auto p = static_cast<std::int64_t>(members.size());
                    CHECK(a.at("comm_size").int64_val() ==
                          (c.kind == CollectiveKind::all_gather ? (o.bytes + p - 1) / p : o.bytes));
                    CHECK(groups.at(a.at("pg_name").string_val()) == members);
                    break;
                }
                case OpKind::send:
                case OpKind::recv: {
                    CHECK(n.type() == (o.kind == OpKind::send ? pb::COMM_SEND_NODE : pb::COMM_RECV_NODE));
                    const P2P& p = g.p2ps()[static_cast<std::size_t>(o.ref)];
                    CHECK(a.at("comm_src").int32_val() == p.src);
                    CHECK(a.at("comm_dst").int32_val() == p.dst);
                    CHECK(a.at("comm_size").int64_val() == o.bytes);
                    break;
                }
                case OpKind::copy:
                    CHECK(n.type() == (o.copy_to() == Tier::device ? pb::MEM_LOAD_NODE : pb::MEM_STORE_NODE));
                    CHECK(a.at("tensor_size").uint64_val() == static_cast<std::uint64_t>(o.bytes));
                    break;
                default: FAIL("an op without a node was written");
            }
            // Every edge into it from an op with a node on its rank is there, ctrl exactly when
            // that op is its stream predecessor.
            const std::set<std::uint64_t> c(n.ctrl_deps().begin(), n.ctrl_deps().end());
            const std::set<std::uint64_t> d(n.data_deps().begin(), n.data_deps().end());
            CHECK(c.size() + d.size() == static_cast<std::size_t>(n.ctrl_deps_size() + n.data_deps_size()));
            for (OpId u : preds[id]) {
                if (g.op(u).rank != rank || !has_node(g.op(u).kind)) continue;
                ++checked_edges;
                if (u == stream_prev[id])
                    CHECK(c.count(u) == 1);
                else
                    CHECK((d.count(u) == 1 || c.count(u) == 1));
            }
            for (auto u : c) CHECK(g.op(static_cast<OpId>(u)).stream == o.stream);
        }
    }
    CHECK(checked_edges > 500);

    SECTION("the same plan writes the same bytes") {
        TempDir again("smol_export_tp2_again");
        REQUIRE(cli(export_args(again.str(), {"--model", "gpt2-small", "--cluster", "dgx-a100", "--tp", "2"})).code == 0);
        for (const auto& name : expected) CHECK(read(dir.path / name) == read(again.path / name));
    }
}

TEST_CASE("folded and unfolded builds of a plan export the same traces", "[tools][export]") {
    // Pure data parallelism folds every replica into rank 0; tp 8 over two dgx-a100 nodes folds
    // the second node's replica into the first (mirrors with their own tensor-parallel groups);
    // tp 4 · pp 2 over four nodes keeps the two replicas of each stage's first node and folds the
    // other node's two into them; FSDP with tp 2 over two nodes keeps the first node's four
    // replicas and folds the second's.
    const auto [plan, name] = GENERATE(table<std::vector<std::string>, std::string>(
        {{{"--model", "gpt2-small", "--cluster", "dgx-a100", "--devices", "4"}, "ddp"},
         {{"--model", "gpt2-small", "--cluster", "dgx-a100", "--nodes", "2", "--strategy", "fsdp", "--tp", "2"}, "fsdp-tp2x2"},
         {{"--model", "gpt2-medium", "--cluster", "dgx-a100", "--nodes", "2", "--tp", "8"}, "tp8x2"},
         {{"--model", "gpt2-small", "--cluster", "dgx-a100", "--nodes", "4", "--tp", "4", "--pp", "2", "--global-batch", "16"},
          "tp4pp2x4"},
         {{"--model", "gpt2-small", "--cluster", "dgx-a100", "--nodes", "4", "--strategy", "fsdp", "--tp", "2", "--pp", "2",
           "--global-batch", "16"},
          "fsdp-tp2pp2x4"}}));
    INFO(name);
    TempDir folded("smol_export_folded_" + name), full("smol_export_full_" + name);
    const Result f = cli(export_args(folded.str(), plan));
    REQUIRE(f.code == 0);
    CHECK(f.out.find("folded replicas written out rank by rank") != std::string::npos);   // the graph was folded
    std::vector<std::string> no_fold = plan;
    no_fold.push_back("--no-fold");
    const Result r = cli(export_args(full.str(), no_fold));
    REQUIRE(r.code == 0);
    CHECK(r.out.find("folded") == std::string::npos);
    CHECK(cli(export_args(folded.str(), plan)).err.find("exists") != std::string::npos);

    const auto groups = groups_of(folded.path / "smolcluster.comm_group.json");
    CHECK(groups == groups_of(full.path / "smolcluster.comm_group.json"));
    // Nodes without ids and tags (numbers of the graph), dependencies by name.
    auto canonical = [&](const ChakraTrace& t) {
        std::map<std::uint64_t, std::string> names;
        for (const auto& n : t.nodes) names[n.id()] = n.name();
        std::multiset<std::string> out;
        for (const auto& n : t.nodes) {
            std::string s = n.name() + " type " + std::to_string(n.type());
            for (const auto& [k, a] : attrs(n))
                if (k != "comm_tag") s += " " + k + "=" + a.ShortDebugString();
            std::multiset<std::string> deps;
            for (auto d : n.ctrl_deps()) deps.insert("ctrl:" + names.at(d));
            for (auto d : n.data_deps()) deps.insert("data:" + names.at(d));
            for (const auto& d : deps) s += " " + d;
            out.insert(s);
        }
        return out;
    };
    int ranks = 0;
    for (const auto& e : fs::directory_iterator(full.path)) ranks += e.path().extension() == ".et";
    CHECK(ranks == (name == "ddp" ? 4 : name == "tp4pp2x4" || name == "fsdp-tp2pp2x4" ? 32 : 16));
    for (int rank = 0; rank < ranks; ++rank) {
        INFO("rank " << rank);
        const std::string file = "smolcluster." + std::to_string(rank) + ".et";
        const ChakraTrace a = read_chakra(read(folded.path / file)), b = read_chakra(read(full.path / file));
        CHECK(a.nodes.size() == b.nodes.size());
        CHECK(canonical(a) == canonical(b));
    }
}

TEST_CASE("export --durations gives each node its simulated duration", "[tools][export]") {
    TempDir dir("smol_export_durations");
    const Result r = cli(export_args(dir.str(), {"--model", "gpt2-small", "--cluster", "dgx-a100", "--devices", "2",
                                                 "--tp", "2", "--durations"}));
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK(r.out.find("durations simulated") != std::string::npos);
    // The same plan simulated here: the simulator is deterministic.
    tools::PlanFlags f;
    f.model = "gpt2-small";
    f.cluster = "dgx-a100";
    f.devices = 2;
    f.tp = 2;
    const tools::Simulation sim = tools::simulate_plan(load_model(f.model), tools::resolve_cluster(f),
                                                       tools::resolve_plan(f), tools::resolve_sim_options(f));
    int with_duration = 0;
    for (int rank = 0; rank < 2; ++rank) {
        const ChakraTrace t = read_chakra(read(dir.path / ("smolcluster." + std::to_string(rank) + ".et")));
        REQUIRE_FALSE(t.nodes.empty());
        for (const auto& n : t.nodes) {
            const Time d = sim.timeline.duration(static_cast<OpId>(n.id()));
            CHECK(n.duration_micros() == static_cast<std::uint64_t>(std::llround(d.to_us())));
            with_duration += n.duration_micros() > 0;
        }
    }
    CHECK(with_duration > 50);

    SECTION("a plan that does not fit is written, exits 3 and says so") {
        TempDir oom("smol_export_oom");
        const Result o = cli(export_args(oom.str(), {"--model", "gpt2-xl", "--cluster", "pi5-1gbe", "--durations"}));
        CHECK(o.code == 3);
        CHECK(o.err.find("does not fit: node0/cpu0") != std::string::npos);
        CHECK(fs::exists(oom.path / "smolcluster.0.et"));
        CHECK(fs::exists(oom.path / "smolcluster.comm_group.json"));
    }
}

TEST_CASE("export: bad input exits 2 naming the flag", "[tools][export]") {
    TempDir dir("smol_export_bad");
    const std::vector<std::string> plan{"--model", "gpt2-small", "--cluster", "dgx-a100", "--devices", "2"};

    SECTION("existing files without --force") {
        REQUIRE(cli(export_args(dir.str(), plan)).code == 0);
        const Result again = cli(export_args(dir.str(), plan));
        CHECK(again.code == 2);
        CHECK(again.err.find("smolcluster.0.et exists; pass --force to overwrite it") != std::string::npos);
        CHECK(again.err.find("--out") != std::string::npos);
        std::vector<std::string> forced = export_args(dir.str(), plan);
        forced.push_back("--force");
        CHECK(cli(forced).code == 0);
    }
    SECTION("an unknown format") {
        std::vector<std::string> args{"export", "--format", "chakr", "--out", dir.str()};
        args.insert(args.end(), plan.begin(), plan.end());
        const Result r = cli(args);
        CHECK(r.code == 2);
        CHECK(r.err.find("--format") != std::string::npos);
        CHECK(r.err.find("'chakr'") != std::string::npos);
        CHECK(r.err.find("chakra") != std::string::npos);
        CHECK_FALSE(fs::exists(dir.path));   // refused before anything is written
    }
    SECTION("no --format, no --out") {
        std::vector<std::string> args{"export", "--out", dir.str()};
        args.insert(args.end(), plan.begin(), plan.end());
        CHECK(cli(args).code == 2);
        args = {"export", "--format", "chakra"};
        args.insert(args.end(), plan.begin(), plan.end());
        const Result r = cli(args);
        CHECK(r.code == 2);
        CHECK(r.err.find("--out") != std::string::npos);
    }
    SECTION("a prefix with a folder in it") {
        std::vector<std::string> args = export_args(dir.str(), plan);
        args.insert(args.end(), {"--prefix", "a/b"});
        const Result r = cli(args);
        CHECK(r.code == 2);
        CHECK(r.err.find("--prefix") != std::string::npos);
    }
    SECTION("--out naming a file") {
        TempFile file("smol_export_not_a_dir", "x");
        const Result r = cli(export_args(file.path.string(), plan));
        CHECK(r.code == 2);
        CHECK(r.err.find("--out") != std::string::npos);
    }
    SECTION("a plan that cannot be built") {
        std::vector<std::string> args = export_args(dir.str(), plan);
        args.insert(args.end(), {"--tp", "3"});
        CHECK(cli(args).code == 2);
        CHECK_FALSE(fs::exists(dir.path));
    }
}

// Errors and JSON views: message format, JSON pointer paths, typed getters, unit-bearing members,
// unknown-key suggestions, syntax errors with line and column, missing files.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.hpp"
#include "core/json.hpp"

using namespace smol;
using Catch::Matchers::Contains;
using Catch::Matchers::Equals;

namespace {

template <typename F>
Error caught(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e;
    }
    FAIL("no error thrown");
    return Error(ErrorKind::internal, "unreachable");
}

const char* cluster_text = R"({
  "name": "test",
  "count": 4,
  "big": 4000000000,
  "float_int": 1e3,
  "half": 0.5,
  "flag": true,
  "node_groups": [
    {"nics": {"bandwidth": "25 GB/s", "bad_bw": "-3 GB/s", "odd_bw": "25 GB/h", "zero_bw": 0,
              "bw_number": 12.5e9, "mem": "80 GiB", "mem_number": 1024, "lat": "2 us",
              "lat_number": 1.5e-6, "peak": "312 TFLOP/s", "peak_number": 1e12, "neg": -1}}
  ],
  "a/b": {"c~d": 1}
})";

}  // namespace

TEST_CASE("Error message format", "[core][json]") {
    SECTION("file and path") {
        Error e(ErrorKind::bad_input, "expected x, found y", {"cluster.json", "/a/0", ""});
        CHECK(std::string(e.what()) == "cluster.json: at /a/0: expected x, found y");
        CHECK(e.detail() == "expected x, found y");
    }
    SECTION("flag only") {
        Error e(ErrorKind::bad_input, "expected a positive integer, found 0", {"", "", "--micro-batch"});
        CHECK(std::string(e.what()) == "--micro-batch: expected a positive integer, found 0");
    }
    SECTION("no context") {
        CHECK(std::string(Error(ErrorKind::internal, "boom").what()) == "boom");
    }
    SECTION("file only") {
        CHECK(std::string(Error(ErrorKind::bad_input, "bad", {"f.json", "", ""}).what()) == "f.json: bad");
    }
    SECTION("with_context fills only empty parts") {
        Error inner(ErrorKind::deadlock, "stuck", {"", "/x", ""});
        Error outer = inner.with_context({"plan.json", "/ignored", "--tp"});
        CHECK(outer.kind() == ErrorKind::deadlock);
        CHECK(outer.context().file == "plan.json");
        CHECK(outer.context().json_path == "/x");
        CHECK(std::string(outer.what()) == "plan.json: at /x: --tp: stuck");
    }
    SECTION("fail_input joins expected and found") {
        Error e = caught([] { fail_input("an integer", "\"four\"", {"f.json", "/n", ""}); });
        CHECK(e.kind() == ErrorKind::bad_input);
        CHECK(std::string(e.what()) == "f.json: at /n: expected an integer, found \"four\"");
    }
}

TEST_CASE("nearest_name", "[core][json]") {
    const std::vector<std::string> keys{"bandwidth", "latency", "count", "name"};
    CHECK(nearest_name("bandwith", keys) == "bandwidth");
    CHECK(nearest_name("latncy", keys) == "latency");
    CHECK(nearest_name("cnt", keys) == "count");
    CHECK(nearest_name("nme", keys) == "name");
    CHECK(nearest_name("zzzzzzzz", keys).empty());
    CHECK(nearest_name("gpt2-smal", {"gpt2-small", "gpt2-medium", "llama2-7b"}) == "gpt2-small");
    CHECK(nearest_name("x", {}).empty());
}

TEST_CASE("describe_json", "[core][json]") {
    CHECK(describe_json(Json("-3 GB/s")) == "\"-3 GB/s\"");
    CHECK(describe_json(Json(42)) == "42");
    CHECK(describe_json(Json(nullptr)) == "null");
    CHECK(describe_json(Json(true)) == "true");
    CHECK(describe_json(Json::object({{"a", 1}})) == "an object");
    CHECK(describe_json(Json::array({1, 2, 3})) == "an array of 3");
    CHECK(describe_json(Json(std::string(200, 'x'))).size() < 70);
}

TEST_CASE("JsonView typed getters and paths", "[core][json]") {
    const Json doc = parse_json_text(cluster_text, "cluster.json");
    const JsonView root(doc, "cluster.json");
    CHECK(root.path() == "/");
    CHECK(root.string("name") == "test");
    CHECK(root.integer("count") == 4);
    CHECK(root.positive_integer("count") == 4);
    CHECK(root.integer("big") == 4'000'000'000);
    CHECK(root.integer("float_int") == 1000);
    CHECK(root.number("half") == 0.5);
    CHECK(root.fraction("half") == 0.5);
    CHECK(root.boolean("flag"));
    CHECK(root.has("name"));
    CHECK_FALSE(root.has("nothing"));
    CHECK_FALSE(root.find("nothing").has_value());
    CHECK(root.at("node_groups").size() == 1);
    CHECK(root.keys().size() == 8);

    const JsonView nics = root.at("node_groups").at(std::size_t{0}).at("nics");
    CHECK(nics.path() == "/node_groups/0/nics");
    CHECK(nics.file() == "cluster.json");
    CHECK(nics.bandwidth("bandwidth").bytes_per_second() == Approx(25e9));
    CHECK(nics.bandwidth("bw_number").bytes_per_second() == Approx(12.5e9));
    CHECK(nics.bytes("mem").count() == 80LL << 30);
    CHECK(nics.bytes("mem_number").count() == 1024);
    CHECK(nics.time("lat") == Time::us(2));
    CHECK(nics.time("lat_number") == Time::ns(1500));
    CHECK(nics.flop_rate("peak").to_tflops() == Approx(312));
    CHECK(nics.flop_rate("peak_number").per_second() == Approx(1e12));
    CHECK(root.at("a/b").path() == "/a~1b");
    CHECK(root.at("a/b").at("c~d").path() == "/a~1b/c~0d");

    // Defaults apply only when the key is absent.
    CHECK(nics.bandwidth_or("absent", Bandwidth::gb_per_s(1)).to_gb_per_s() == Approx(1));
    CHECK(root.integer_or("absent", 7) == 7);
    CHECK(root.integer_or("count", 7) == 4);
    CHECK(root.string_or("absent", "x") == "x");
    CHECK(root.number_or("absent", 2.5) == 2.5);
    CHECK(root.fraction_or("absent", 0.25) == 0.25);
    CHECK(root.boolean_or("absent", false) == false);
    CHECK(root.bytes_or("absent", Bytes(3)).count() == 3);
    CHECK(root.time_or("absent", Time::ns(4)) == Time::ns(4));
}

TEST_CASE("JsonView errors name the path and say what was expected", "[core][json]") {
    const Json doc = parse_json_text(cluster_text, "cluster.json");
    const JsonView root(doc, "cluster.json");
    const JsonView nics = root.at("node_groups").at(std::size_t{0}).at("nics");
    auto what = [](auto f) { return std::string(caught(f).what()); };

    SECTION("negative bandwidth string") {
        CHECK(what([&] { nics.bandwidth("bad_bw"); }) ==
              "cluster.json: at /node_groups/0/nics/bad_bw: expected a bandwidth above zero such as \"25 GB/s\", "
              "found \"-3 GB/s\"");
    }
    SECTION("unknown unit") {
        CHECK_THAT(what([&] { nics.bandwidth("odd_bw"); }),
                   Contains("cluster.json: at /node_groups/0/nics/odd_bw: unknown unit 'GB/h' in \"25 GB/h\""));
    }
    SECTION("zero bandwidth number") {
        CHECK_THAT(what([&] { nics.bandwidth("zero_bw"); }),
                   Contains("at /node_groups/0/nics/zero_bw: expected a bandwidth from 1 KB/s to 1 PB/s"));
    }
    SECTION("negative size number") {
        CHECK_THAT(what([&] { nics.bytes("neg"); }), Contains("expected a non-negative size in bytes, found -1"));
    }
    SECTION("negative duration") {
        CHECK_THAT(what([&] { nics.time("neg"); }), Contains("expected a duration from 0 to 1 s such as \"2 us\" or a number of seconds, found -1"));
    }
    SECTION("negative FLOP rate") {
        CHECK_THAT(what([&] { nics.flop_rate("neg"); }), Contains("expected a FLOP rate from 1 MFLOP/s to 10 EFLOP/s"));
    }
    SECTION("wrong type for a bandwidth") {
        CHECK_THAT(what([&] { nics.bandwidth("neg"); }), Contains("found -1"));
        CHECK_THAT(what([&] { root.bandwidth("flag"); }), Contains("at /flag: expected a bandwidth such as \"25 GB/s\""));
    }
    SECTION("missing key") {
        CHECK(what([&] { nics.bandwidth("latency"); }) ==
              "cluster.json: at /node_groups/0/nics/latency: missing required key 'latency'");
    }
    SECTION("string instead of integer") {
        CHECK(what([&] { root.integer("name"); }) == "cluster.json: at /name: expected an integer, found \"test\"");
    }
    SECTION("float instead of integer") {
        CHECK_THAT(what([&] { root.integer("half"); }), Contains("expected an integer, found 0.5"));
    }
    SECTION("zero is not a positive integer") {
        const Json z = Json::parse(R"({"n": 0})");
        CHECK_THAT(what([&] { JsonView(z, "f.json").positive_integer("n"); }),
                   Contains("at /n: expected a positive integer, found 0"));
    }
    SECTION("fraction out of range") {
        CHECK_THAT(what([&] { root.fraction("count"); }), Contains("expected a fraction in (0, 1], found 4"));
    }
    SECTION("number instead of string") {
        CHECK_THAT(what([&] { root.string("count"); }), Contains("expected a string, found 4"));
    }
    SECTION("not a boolean") {
        CHECK_THAT(what([&] { root.boolean("count"); }), Contains("expected true or false, found 4"));
    }
    SECTION("not a number") {
        CHECK_THAT(what([&] { root.number("name"); }), Contains("expected a number, found \"test\""));
    }
    SECTION("member of a non-object") {
        CHECK(what([&] { root.at("count").at("x"); }) == "cluster.json: at /count: expected an object, found 4");
    }
    SECTION("index of a non-array") {
        CHECK_THAT(what([&] { root.at(std::size_t{0}); }), Contains("at /: expected an array, found an object"));
    }
    SECTION("index out of range") {
        CHECK_THAT(what([&] { root.at("node_groups").at(std::size_t{3}); }),
                   Contains("at /node_groups: expected an array with at least 4 elements, found an array of 1"));
    }
    SECTION("bad value is not replaced by the default") {
        CHECK_THAT(what([&] { nics.bandwidth_or("bad_bw", Bandwidth::gb_per_s(1)); }), Contains("-3 GB/s"));
    }
    SECTION("unknown key with a suggestion") {
        const Json n = Json::parse(R"({"bandwith": "1 GB/s", "latency": "1 us"})");
        CHECK(what([&] { JsonView(n, "net.json", "/network").expect_only({"bandwidth", "latency"}); }) ==
              "net.json: at /network/bandwith: unknown key 'bandwith' (did you mean 'bandwidth'?)");
    }
    SECTION("unknown key without a suggestion lists known keys") {
        const Json n = Json::parse(R"({"colour": 1})");
        CHECK_THAT(what([&] { JsonView(n, "net.json").expect_only({"bandwidth", "latency"}); }),
                   Contains("unknown key 'colour'; known keys: bandwidth, latency"));
    }
}

TEST_CASE("expect_only accepts known keys", "[core][json]") {
    const Json n = Json::parse(R"({"bandwidth": "1 GB/s"})");
    CHECK_NOTHROW(JsonView(n, "net.json").expect_only({"bandwidth", "latency"}));
}

TEST_CASE("malformed JSON reports line and column", "[core][json]") {
    SECTION("missing comma on line 3") {
        const std::string text = "{\n  \"a\": 1\n  \"b\": 2\n}\n";
        const Error e = caught([&] { parse_json_text(text, "bad.json"); });
        CHECK(e.kind() == ErrorKind::bad_input);
        const std::string w = e.what();
        // nlohmann stops at the end of the unexpected token "b" (columns 3-5).
        CHECK_THAT(w, Contains("bad.json: line 3, column 5: "));
        CHECK_THAT(w, Contains("syntax error"));
        CHECK_THAT(w, !Contains("json.exception"));
    }
    SECTION("trailing comma") {
        const std::string text = "{\"a\": [1, 2,]}";
        CHECK_THAT(std::string(caught([&] { parse_json_text(text, "t.json"); }).what()),
                   Contains("t.json: line 1, column 13: "));
    }
    SECTION("unterminated document") {
        CHECK_THAT(std::string(caught([] { parse_json_text("{\"a\": 1", "u.json"); }).what()),
                   Contains("u.json: line 1, column"));
    }
    SECTION("empty text") {
        CHECK_THAT(std::string(caught([] { parse_json_text("", "e.json"); }).what()), Contains("e.json: line 1"));
    }
}

TEST_CASE("load_json_file", "[core][json]") {
    namespace fs = std::filesystem;
    SECTION("missing file names it") {
        const Error e = caught([] { load_json_file("/nonexistent/dir/cluster.json"); });
        CHECK(e.kind() == ErrorKind::bad_input);
        CHECK_THAT(std::string(e.what()), Contains("/nonexistent/dir/cluster.json"));
    }
    SECTION("a directory is not a file") {
        CHECK_THAT(std::string(caught([] { load_json_file(fs::temp_directory_path().string()); }).what()),
                   Contains("found a directory"));
    }
    SECTION("reads and parses a file") {
        const fs::path p = fs::temp_directory_path() / "smol_test_json_load.json";
        {
            std::ofstream(p) << R"({"x": [1, 2]})";
        }
        CHECK(load_json_file(p.string())["x"].size() == 2);
        fs::remove(p);
    }
    SECTION("syntax error in a file names the file") {
        const fs::path p = fs::temp_directory_path() / "smol_test_json_bad.json";
        {
            std::ofstream(p) << "{\n\n  oops\n}";
        }
        CHECK_THAT(std::string(caught([&] { load_json_file(p.string()); }).what()),
                   Contains(p.string() + ": line 3, column 3: "));
        fs::remove(p);
    }
}

TEST_CASE("parse_json_text refuses what nlohmann would accept silently or throw on", "[core][json]") {
    auto message = [](const std::string& text) {
        const Error e = caught([&] { parse_json_text(text, "f.json"); });
        CHECK(e.kind() == ErrorKind::bad_input);
        return std::string(e.what());
    };
    SECTION("a duplicate key, with the path of the object that repeats it") {
        CHECK(message(R"({"a": {"b": [{"c": 1, "c": 2}]}})") ==
              "f.json: at /a/b/0/c: duplicate key 'c': a key may appear once in an object (JSON readers differ on "
              "which one they keep)");
        CHECK_NOTHROW(parse_json_text(R"({"a": {"c": 1}, "b": {"c": 2}})", "f.json"));   // one per object is fine
    }
    SECTION("a number beyond a double: line, column and the path of the value") {
        CHECK(message("{\"a\": [1,\n 1e309]}") ==
              "f.json: at /a/1: line 2, column 6: the number 1e309 is beyond the range of a double (about ±1.8e308)");
        CHECK_THAT(message("-1e400"), Contains("line 1, column 6: the number -1e400"));
    }
    SECTION("nesting: 64 levels are fine, 65 are not") {
        CHECK_NOTHROW(parse_json_text(std::string(64, '[') + std::string(64, ']'), "f.json"));
        CHECK_THAT(message(std::string(65, '[') + std::string(65, ']')), Contains("nested at most 64 levels deep"));
    }
    SECTION("a key with '/' and '~' is escaped in the path (RFC 6901)") {
        CHECK_THAT(message(R"({"a/b~": {"x": 1, "x": 2}})"), Contains("at /a~1b~0/x:"));
    }
}

TEST_CASE("read_input_file reads regular files of bounded size only", "[core][json]") {
    namespace fs = std::filesystem;
    SECTION("a character device") {
        CHECK_THAT(std::string(caught([] { read_input_file("/dev/zero"); }).what()),
                   Contains("/dev/zero: expected a regular JSON file, found a character device"));
    }
    SECTION("a file over the limit, measured or grown") {
        const fs::path p = fs::temp_directory_path() / "smol_test_json_big.json";
        {
            std::ofstream(p) << std::string(2000, ' ');
        }
        CHECK_THAT(std::string(caught([&] { read_input_file(p.string(), 1000); }).what()),
                   Contains("expected a JSON file of at most 1.00 KB, found 2.00 KB"));
        CHECK(read_input_file(p.string(), 2000).size() == 2000);
        fs::remove(p);
    }
}

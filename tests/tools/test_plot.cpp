// `smolcluster plot`: every kind draws a non-empty picture of the promised size from a real trace,
// a real sweep and a validate file; bad input exits 2.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "tools/cli_fixtures.hpp"

using namespace smol;
namespace fs = std::filesystem;
using namespace smol::test;

namespace {

bool have_matplotlib() { return std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") == 0; }

/// Width and height from a PNG's IHDR chunk (bytes 16–23, big-endian).
std::pair<std::uint32_t, std::uint32_t> png_size(const std::string& png) {
    REQUIRE(png.size() > 24);
    REQUIRE(png.compare(1, 3, "PNG") == 0);
    auto be32 = [&](std::size_t at) {
        std::uint32_t v = 0;
        for (int k = 0; k < 4; ++k) v = v << 8 | static_cast<unsigned char>(png[at + static_cast<std::size_t>(k)]);
        return v;
    };
    return {be32(16), be32(20)};
}

/// A real trace and a real sweep, made once per test process.
struct Inputs {
    fs::path dir = fs::temp_directory_path() / ("smol-plot-test-" + std::to_string(::getpid()));
    std::string trace = (dir / "trace.json.gz").string(), sweep = (dir / "sweep.json").string();
    std::string kernels = (dir / "kernels.csv").string();
    std::string validate = std::string(SMOL_TEST_DATA) + "/validate-example.json";
    Inputs() {
        fs::remove_all(dir);
        fs::create_directories(dir);
        REQUIRE(cli({"simulate", "--model", "gpt2-small", "--cluster", "dgx-a100", "--tp", "2", "--pp", "2",
                     "--global-batch", "8", "--trace", trace, "--kernels", kernels})
                    .code == 0);
        REQUIRE(cli({"sweep", "--model", "gpt2-small", "--cluster", "dgx-a100", "--nodes", "1,2", "--global-batch", "16",
                     "--tp", "1,2", "--micro-batch", "1,2", "--jobs", "2", "--json", sweep})
                    .code == 0);
    }
    ~Inputs() { fs::remove_all(dir); }
};

const Inputs& inputs() {
    static const Inputs in;
    return in;
}

void check_png(const std::string& kind, const std::string& input) {
    INFO(kind);
    const fs::path png = inputs().dir / (kind + ".png");
    const Result r = cli({"plot", kind, input, "-o", png.string()});
    REQUIRE(r.code == 0);
    const std::string bytes = read(png);
    CHECK(bytes.size() > 10'000);   // a drawn picture, not an empty canvas
    CHECK(png_size(bytes) == std::pair<std::uint32_t, std::uint32_t>{1200, 675});
}

#define SKIP_WITHOUT_MATPLOTLIB()                                                                 \
    if (!have_matplotlib()) {                                                                     \
        WARN("skipped: /usr/bin/python3 has no matplotlib (apt-get install python3-matplotlib)"); \
        return;                                                                                   \
    }

}  // namespace

TEST_CASE("plot timeline and memory draw a real trace at 1200 x 675", "[tools][plot]") {
    SKIP_WITHOUT_MATPLOTLIB();
    check_png("timeline", inputs().trace);
    check_png("memory", inputs().trace);
}

TEST_CASE("plot sweep and scaling draw a real sweep at 1200 x 675", "[tools][plot]") {
    SKIP_WITHOUT_MATPLOTLIB();
    check_png("sweep", inputs().sweep);
    check_png("scaling", inputs().sweep);
    // A trace is not a sweep: exit 2, no picture.
    const fs::path bad = inputs().dir / "bad.png";
    CHECK(cli({"plot", "sweep", inputs().trace, "-o", bad.string()}).code == 2);
    CHECK_FALSE(fs::exists(bad));
}

TEST_CASE("plot validate draws a validate file, and a timeline window as SVG", "[tools][plot]") {
    SKIP_WITHOUT_MATPLOTLIB();
    check_png("validate", inputs().validate);
    const fs::path svg = inputs().dir / "window.svg";
    REQUIRE(cli({"plot", "timeline", inputs().trace, "-o", svg.string(), "--svg", "--window", "1,5"}).code == 0);
    CHECK(read(svg).find("<svg") != std::string::npos);
    // An existing picture is kept without --force.
    const Result r = cli({"plot", "validate", inputs().validate, "-o", (inputs().dir / "validate.png").string()});
    CHECK(r.code == 2);
    CHECK(r.err.find("--force") != std::string::npos);
}

TEST_CASE("plot kernels draws a kernel list, and a file of another kind exits 2", "[tools][plot]") {
    SKIP_WITHOUT_MATPLOTLIB();
    check_png("kernels", inputs().kernels);
    const fs::path bad = inputs().dir / "bad-kernels.png";
    for (const std::string& input : {inputs().trace, inputs().sweep}) {
        const Result r = cli({"plot", "kernels", input, "-o", bad.string()});
        INFO(input);
        CHECK(r.code == 2);   // plot.py says why on its own stderr
        CHECK_FALSE(fs::exists(bad));
    }
}

TEST_CASE("plot refuses an unknown kind and a missing input with exit 2", "[tools][plot]") {
    Result r = cli({"plot", "gantt", "x.json", "-o", "x.png"});
    CHECK(r.code == 2);
    CHECK(r.err.find("timeline") != std::string::npos);
    r = cli({"plot", "timeline", "/nonexistent/trace.json", "-o", "x.png"});
    CHECK(r.code == 2);
    CHECK(r.err.find("/nonexistent/trace.json") != std::string::npos);
    for (const std::string window : {"5,1", "a,b", "3"}) {
        r = cli({"plot", "timeline", std::string(SMOL_TEST_DATA) + "/validate-example.json", "-o", "x.png", "--window", window});
        INFO(window);
        CHECK(r.code == 2);
        CHECK(r.err.find("--window") != std::string::npos);
    }
}

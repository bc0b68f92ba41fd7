// Output files: only a finished file replaces the target, the temporary file never outlives an
// error, and targets that are not regular files are refused.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "core/error.hpp"
#include "tools/cli_fixtures.hpp"
#include "tools/output_file.hpp"

using namespace smol;
using namespace smol::test;
using namespace smol::tools;
namespace fs = std::filesystem;

namespace {

std::size_t files_in(const fs::path& dir) {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
    return n;
}

}  // namespace

TEST_CASE("an OutputFile renames a finished file into place and removes it otherwise", "[tools][output_file]") {
    const fs::path dir = fs::temp_directory_path() / "smol-output-file";
    fs::remove_all(dir);
    fs::create_directories(dir);
    const fs::path target = dir / "out.json";
    SECTION("commit: the target holds the text, no temporary file is left") {
        write_text_file(target.string(), "hello", false, "--csv");
        CHECK(read(target) == "hello");
        CHECK(files_in(dir) == 1);
        write_text_file(target.string(), "again", true, "--csv");
        CHECK(read(target) == "again");
        CHECK(files_in(dir) == 1);
    }
    SECTION("an exception while writing: the target is untouched, the temporary file gone") {
        std::ofstream(target) << "before";
        try {
            OutputFile out(target.string(), true, "--trace");
            std::ofstream(out.temp_path()) << "half";
            CHECK(files_in(dir) == 2);
            throw std::runtime_error("the writer failed");
        } catch (const std::runtime_error&) {
        }
        CHECK(read(target) == "before");
        CHECK(files_in(dir) == 1);
    }
    SECTION("the temporary file has a name of its own, beside the target") {
        std::ofstream(dir / "out.json.tmp") << "a user's file";
        OutputFile out(target.string(), false, "--trace");
        CHECK(fs::path(out.temp_path()).parent_path() == dir);
        CHECK(fs::path(out.temp_path()).filename().string().starts_with(".out.json."));
        CHECK(fs::path(out.temp_path()) != dir / "out.json.tmp");
        out.commit();
        CHECK(read(dir / "out.json.tmp") == "a user's file");
    }
    SECTION("targets that are not regular files are refused, even with --force") {
        auto refusal = [](const std::string& path, bool force) {
            try {
                check_output_target(path, force, "--trace");
            } catch (const Error& e) {
                CHECK(e.kind() == ErrorKind::bad_input);
                CHECK(e.context().flag == "--trace");
                return std::string(e.what());
            }
            return std::string("accepted");
        };
        CHECK_THAT(refusal("/dev/null", true), Catch::Contains("a character device"));
        CHECK_THAT(refusal(dir.string(), true), Catch::Contains("a directory"));
        fs::create_symlink(dir / "elsewhere.json", dir / "link.json");
        CHECK_THAT(refusal((dir / "link.json").string(), true), Catch::Contains("a symbolic link"));
        std::ofstream(target) << "x";
        CHECK_THAT(refusal(target.string(), false), Catch::Contains("exists; pass --force"));
        CHECK(refusal(target.string(), true) == "accepted");
        CHECK(refusal((dir / "new.json").string(), false) == "accepted");
    }
    fs::remove_all(dir);
}

// What the command-line tests share: smolcluster run in-process on argument lists, scratch files,
// and the test data.
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "tools/cli.hpp"

namespace smol::test {

struct Result {
    int code;
    std::string out, err;
};

/// `smolcluster ARGS…` in this process, with its output captured.
inline Result cli(std::vector<std::string> args) {
    args.insert(args.begin(), "smolcluster");
    std::vector<const char*> argv;
    for (const auto& a : args) argv.push_back(a.c_str());
    std::ostringstream out, err;
    const int code = tools::run_cli(static_cast<int>(argv.size()), argv.data(), out, err);
    return {code, out.str(), err.str()};
}

/// `base` followed by `extra`: one plan's command line with a variant's flags.
inline std::vector<std::string> plus(std::vector<std::string> base, const std::vector<std::string>& extra) {
    base.insert(base.end(), extra.begin(), extra.end());
    return base;
}

inline std::string data(const std::string& name) { return std::string(SMOL_TEST_DATA) + "/" + name; }

inline std::string read(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

/// A scratch file with the given text, removed at the end of the test.
struct TempFile {
    std::filesystem::path path;
    TempFile(const std::string& name, const std::string& text) : path(std::filesystem::temp_directory_path() / name) {
        std::ofstream(path) << text;
    }
    ~TempFile() { std::filesystem::remove(path); }
    TempFile(const TempFile&) = delete;
    TempFile& operator=(const TempFile&) = delete;
};

}  // namespace smol::test

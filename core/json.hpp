// JSON reading with the path always known. A JsonView is a node of a parsed document plus the
// file name and the JSON pointer to it, so every error names the place:
//   JsonView root = load_json_file("cluster.json");
//   Bandwidth bw = root.at("network").bandwidth("bandwidth");   // error: "at /network/bandwidth: …"
// Unknown keys are an error too (with the nearest known key suggested): a typo must not silently
// fall back to a default.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/units.hpp"

namespace smol {

using Json = nlohmann::json;

class JsonView {
public:
    JsonView(const Json& node, std::string file, std::string path = "");

    const Json& raw() const { return *node_; }
    const std::string& file() const { return file_; }
    const std::string& path() const { return path_.empty() ? root_path_ : path_; }
    ErrorContext context() const { return {file_, path(), ""}; }

    bool has(const std::string& key) const;
    JsonView at(const std::string& key) const;           // required object member
    std::optional<JsonView> find(const std::string& key) const;
    JsonView at(std::size_t index) const;                // array element
    std::size_t size() const;                            // array length (error if not an array)
    std::vector<std::string> keys() const;               // object keys in document order

    // Required members, typed. Each throws with the member's path on a missing key or wrong type.
    std::string string(const std::string& key) const;
    std::int64_t integer(const std::string& key) const;
    std::int64_t positive_integer(const std::string& key) const;  // ≥ 1
    double number(const std::string& key) const;
    double fraction(const std::string& key) const;               // in (0, 1]
    bool boolean(const std::string& key) const;
    Bytes bytes(const std::string& key) const;                   // number of bytes or "80 GiB"
    Bandwidth bandwidth(const std::string& key) const;           // bytes/s or "25 GB/s", > 0
    FlopRate flop_rate(const std::string& key) const;            // FLOP/s or "312 TFLOP/s", > 0
    Time time(const std::string& key) const;                     // seconds or "2 us", ≥ 0

    // Optional members: the default applies only when the key is absent, never on a bad value.
    std::string string_or(const std::string& key, const std::string& fallback) const;
    std::int64_t integer_or(const std::string& key, std::int64_t fallback) const;
    double number_or(const std::string& key, double fallback) const;
    double fraction_or(const std::string& key, double fallback) const;
    bool boolean_or(const std::string& key, bool fallback) const;
    Bytes bytes_or(const std::string& key, Bytes fallback) const;
    Bandwidth bandwidth_or(const std::string& key, Bandwidth fallback) const;
    Time time_or(const std::string& key, Time fallback) const;

    /// Errors on any key not in `known`, suggesting the nearest known one.
    void expect_only(std::initializer_list<const char*> known) const;
    void expect_object() const;
    void expect_array() const;

    [[noreturn]] void fail(const std::string& expected, const std::string& found) const;
    [[noreturn]] void fail_member(const std::string& key, const std::string& expected, const std::string& found) const;

private:
    JsonView(const Json* node, std::string file, std::string path, int);
    std::string child_path(const std::string& key) const;
    const Json& member(const std::string& key) const;

    const Json* node_;
    std::string file_;
    std::string path_;
    std::string root_path_ = "/";
};

/// Short description of a JSON value for messages: `"-3 GB/s"`, `42`, `an object`, `null`.
std::string describe_json(const Json& value);

/// Parses text; a syntax error names `file`, the line, the column and the JSON path; so do a
/// duplicate key, a number beyond a double's range and nesting deeper than 64 levels.
Json parse_json_text(const std::string& text, const std::string& file);
/// Reads and parses a file (read_input_file, then parse_json_text).
Json load_json_file(const std::string& path);

/// The most an input file (model, cluster, HuggingFace config) may hold: our files are a few KB.
inline constexpr std::int64_t kMaxInputFileBytes = 16 << 20;
/// The text of a regular file of at most `max_bytes`; a missing file, a directory, a FIFO, a
/// device or a larger file is a bad_input error naming the path (never a read that blocks or
/// does not end).
std::string read_input_file(const std::string& path, std::int64_t max_bytes = kMaxInputFileBytes);

}  // namespace smol

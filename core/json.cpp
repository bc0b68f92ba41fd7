// JSON views that know where they are. Every error carries the file and the JSON pointer
// (RFC 6901: "/node_groups/0/nics") of the offending value and reads "expected X, found Y".
//
// Unit-bearing members accept either a JSON number in the base unit (bytes, bytes/s, FLOP/s,
// seconds) or a string with a unit ("25 GB/s"), parsed by core/units.
#include "core/json.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

namespace smol {
namespace {

/// Escapes a key for a JSON pointer: '~' → "~0", '/' → "~1" (RFC 6901 §3).
std::string escape_pointer(const std::string& key) {
    std::string out;
    for (char c : key) {
        if (c == '~') out += "~0";
        else if (c == '/') out += "~1";
        else out += c;
    }
    return out;
}

/// Runs a unit parser and adds the member's place to its error.
template <typename F>
auto with_place(const ErrorContext& where, F&& parse) {
    try {
        return parse();
    } catch (const Error& e) {
        throw e.with_context(where);
    }
}

}  // namespace

std::string describe_json(const Json& value) {
    switch (value.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return value.get<bool>() ? "true" : "false";
    case Json::value_t::object: return value.empty() ? "an empty object" : "an object";
    case Json::value_t::array:
        return value.empty() ? "an empty array" : "an array of " + std::to_string(value.size());
    case Json::value_t::string: {
        std::string s = value.dump();  // quoted and escaped
        // Keep messages to one line: long strings are cut in the middle of nothing important.
        if (s.size() > 60) s = s.substr(0, 56) + "…\"";
        return s;
    }
    default: return value.dump();  // numbers
    }
}

JsonView::JsonView(const Json& node, std::string file, std::string path)
    : node_(&node), file_(std::move(file)), path_(std::move(path)) {}

JsonView::JsonView(const Json* node, std::string file, std::string path, int)
    : node_(node), file_(std::move(file)), path_(std::move(path)) {}

std::string JsonView::child_path(const std::string& key) const { return path_ + "/" + escape_pointer(key); }

void JsonView::fail(const std::string& expected, const std::string& found) const {
    fail_input(expected, found, context());
}

void JsonView::fail_member(const std::string& key, const std::string& expected, const std::string& found) const {
    fail_input(expected, found, {file_, child_path(key), ""});
}

void JsonView::expect_object() const {
    if (!node_->is_object()) fail("an object", describe_json(*node_));
}

void JsonView::expect_array() const {
    if (!node_->is_array()) fail("an array", describe_json(*node_));
}

bool JsonView::has(const std::string& key) const { return node_->is_object() && node_->contains(key); }

const Json& JsonView::member(const std::string& key) const {
    expect_object();
    const auto it = node_->find(key);
    if (it == node_->end()) {
        fail_input("missing required key '" + key + "'", {file_, child_path(key), ""});
    }
    return *it;
}

JsonView JsonView::at(const std::string& key) const {
    return JsonView(&member(key), file_, child_path(key), 0);
}

std::optional<JsonView> JsonView::find(const std::string& key) const {
    expect_object();
    const auto it = node_->find(key);
    if (it == node_->end()) return std::nullopt;
    return JsonView(&*it, file_, child_path(key), 0);
}

JsonView JsonView::at(std::size_t index) const {
    expect_array();
    if (index >= node_->size()) {
        fail("an array with at least " + std::to_string(index + 1) + " elements", describe_json(*node_));
    }
    return JsonView(&(*node_)[index], file_, path_ + "/" + std::to_string(index), 0);
}

std::size_t JsonView::size() const {
    expect_array();
    return node_->size();
}

std::vector<std::string> JsonView::keys() const {
    expect_object();
    // nlohmann::json keeps members in a std::map, so this is sorted order, not document order.
    std::vector<std::string> out;
    for (auto it = node_->begin(); it != node_->end(); ++it) out.push_back(it.key());
    return out;
}

std::string JsonView::string(const std::string& key) const {
    const Json& v = member(key);
    if (!v.is_string()) fail_member(key, "a string", describe_json(v));
    return v.get<std::string>();
}

std::int64_t JsonView::integer(const std::string& key) const {
    const Json& v = member(key);
    if (v.is_number_integer()) return v.get<std::int64_t>();
    if (v.is_number_unsigned()) {
        const auto u = v.get<std::uint64_t>();
        if (u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
            return static_cast<std::int64_t>(u);
        }
    }
    // Tools often write 1e9 or 4.0 for integers; accept a float only when it is integral.
    if (v.is_number_float()) {
        const double d = v.get<double>();
        if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.2e18) return static_cast<std::int64_t>(d);
    }
    fail_member(key, "an integer", describe_json(v));
}

std::int64_t JsonView::positive_integer(const std::string& key) const {
    const std::int64_t n = integer(key);
    if (n < 1) fail_member(key, "a positive integer", describe_json(member(key)));
    return n;
}

double JsonView::number(const std::string& key) const {
    const Json& v = member(key);
    if (!v.is_number()) fail_member(key, "a number", describe_json(v));
    const double d = v.get<double>();
    if (!std::isfinite(d)) fail_member(key, "a finite number", describe_json(v));
    return d;
}

double JsonView::fraction(const std::string& key) const {
    const Json& v = member(key);
    if (!v.is_number()) fail_member(key, "a fraction in (0, 1]", describe_json(v));
    const double d = v.get<double>();
    if (!(d > 0 && d <= 1)) fail_member(key, "a fraction in (0, 1]", describe_json(v));
    return d;
}

bool JsonView::boolean(const std::string& key) const {
    const Json& v = member(key);
    if (!v.is_boolean()) fail_member(key, "true or false", describe_json(v));
    return v.get<bool>();
}

Bytes JsonView::bytes(const std::string& key) const {
    const Json& v = member(key);
    const std::string expected = "a size such as \"80 GiB\" or a number of bytes";
    if (v.is_string()) {
        return with_place({file_, child_path(key), ""}, [&] { return parse_bytes(v.get<std::string>()); });
    }
    if (!v.is_number()) fail_member(key, expected, describe_json(v));
    const double d = v.get<double>();
    if (!std::isfinite(d) || d < 0 || d >= 9.2e18) fail_member(key, "a non-negative size in bytes", describe_json(v));
    return Bytes::from_double(d);
}

Bandwidth JsonView::bandwidth(const std::string& key) const {
    const Json& v = member(key);
    if (v.is_string()) {
        return with_place({file_, child_path(key), ""}, [&] { return parse_bandwidth(v.get<std::string>()); });
    }
    if (!v.is_number()) fail_member(key, "a bandwidth such as \"25 GB/s\" or a number of bytes/s", describe_json(v));
    const double d = v.get<double>();
    if (!std::isfinite(d) || d <= 0) fail_member(key, "a bandwidth above zero such as \"25 GB/s\"", describe_json(v));
    return Bandwidth::bytes_per_s(d);
}

FlopRate JsonView::flop_rate(const std::string& key) const {
    const Json& v = member(key);
    if (v.is_string()) {
        return with_place({file_, child_path(key), ""}, [&] { return parse_flop_rate(v.get<std::string>()); });
    }
    if (!v.is_number()) fail_member(key, "a FLOP rate such as \"312 TFLOP/s\" or a number of FLOP/s", describe_json(v));
    const double d = v.get<double>();
    if (!std::isfinite(d) || d <= 0) fail_member(key, "a FLOP rate above zero such as \"312 TFLOP/s\"", describe_json(v));
    return FlopRate::flops_per_s(d);
}

Time JsonView::time(const std::string& key) const {
    const Json& v = member(key);
    if (v.is_string()) {
        const Time t = with_place({file_, child_path(key), ""}, [&] { return parse_time(v.get<std::string>()); });
        if (t < Time::zero()) fail_member(key, "a non-negative duration", describe_json(v));
        return t;
    }
    if (!v.is_number()) fail_member(key, "a duration such as \"2 us\" or a number of seconds", describe_json(v));
    const double d = v.get<double>();
    // 9.2e6 s is the 2^63 ps limit of Time (about 106 days).
    if (!std::isfinite(d) || d < 0 || d >= 9.2e6) fail_member(key, "a non-negative duration in seconds", describe_json(v));
    return Time::seconds(d);
}

std::string JsonView::string_or(const std::string& key, const std::string& fallback) const {
    return find(key) ? string(key) : fallback;
}
std::int64_t JsonView::integer_or(const std::string& key, std::int64_t fallback) const {
    return find(key) ? integer(key) : fallback;
}
double JsonView::number_or(const std::string& key, double fallback) const {
    return find(key) ? number(key) : fallback;
}
double JsonView::fraction_or(const std::string& key, double fallback) const {
    return find(key) ? fraction(key) : fallback;
}
bool JsonView::boolean_or(const std::string& key, bool fallback) const {
    return find(key) ? boolean(key) : fallback;
}
Bytes JsonView::bytes_or(const std::string& key, Bytes fallback) const {
    return find(key) ? bytes(key) : fallback;
}
Bandwidth JsonView::bandwidth_or(const std::string& key, Bandwidth fallback) const {
    return find(key) ? bandwidth(key) : fallback;
}
Time JsonView::time_or(const std::string& key, Time fallback) const {
    return find(key) ? time(key) : fallback;
}

void JsonView::expect_only(std::initializer_list<const char*> known) const {
    expect_object();
    std::vector<std::string> names(known.begin(), known.end());
    for (auto it = node_->begin(); it != node_->end(); ++it) {
        const std::string& key = it.key();
        if (std::find(names.begin(), names.end(), key) != names.end()) continue;
        std::string message = "unknown key '" + key + "'";
        const std::string near = nearest_name(key, names);
        if (!near.empty()) {
            message += " (did you mean '" + near + "'?)";
        } else {
            message += "; known keys:";
            for (std::size_t i = 0; i < names.size(); ++i) message += (i ? ", " : " ") + names[i];
        }
        fail_input(message, {file_, child_path(key), ""});
    }
}

Json parse_json_text(const std::string& text, const std::string& file) {
    try {
        return Json::parse(text);
    } catch (const Json::parse_error& e) {
        // e.byte is the 1-based offset of the character where parsing stopped; count lines and
        // columns ourselves so the position is the same whatever nlohmann's message says.
        std::size_t offset = e.byte == 0 ? 0 : e.byte - 1;
        if (offset > text.size()) offset = text.size();
        std::size_t line = 1, line_start = 0;
        for (std::size_t i = 0; i < offset; ++i) {
            if (text[i] == '\n') {
                ++line;
                line_start = i + 1;
            }
        }
        const std::size_t column = offset - line_start + 1;
        // nlohmann's message: "[json.exception.parse_error.101] parse error at line 1, column 5:
        // syntax error while parsing value - …". Keep only what follows the position.
        std::string what = e.what();
        const auto pe = what.find("parse error");
        if (pe != std::string::npos) {
            const auto colon = what.find(": ", pe);
            if (colon != std::string::npos) what = what.substr(colon + 2);
        }
        throw Error(ErrorKind::bad_input,
                    "line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + what,
                    {file, "", ""});
    }
}

Json load_json_file(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::exists(path, ec)) fail_input("no such file '" + path + "'", {path, "", ""});
    if (fs::is_directory(path, ec)) fail_input("expected a JSON file, found a directory", {path, "", ""});
    std::ifstream in(path, std::ios::binary);
    if (!in) fail_input("cannot open file '" + path + "' for reading", {path, "", ""});
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) fail_input("cannot read file '" + path + "'", {path, "", ""});
    return parse_json_text(text.str(), path);
}

}  // namespace smol

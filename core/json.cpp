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
#include <set>
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
        std::string s = value.dump(-1, ' ', false, Json::error_handler_t::replace);  // quoted and escaped
        // Keep messages to one line: long strings are cut, at a character boundary (never inside
        // a UTF-8 sequence, so the message stays valid UTF-8 wherever it is printed or stored).
        if (s.size() > 60) {
            std::size_t cut = 56;
            while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
            s = s.substr(0, cut) + "…\"";
        }
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

// The ranges of unit-bearing members (tools/README.md, "Input ranges and errors"): wide enough for
// a 1 GbE Pi and an HBM3e GPU alike, narrow enough that no product of them leaves int64 or Time.
namespace {
constexpr double kMinBandwidth = 1e3, kMaxBandwidth = 1e15;   // 1 KB/s … 1 PB/s
constexpr double kMinFlopRate = 1e6, kMaxFlopRate = 1e19;     // 1 MFLOP/s … 10 EFLOP/s
const Time kMaxDuration = Time::seconds(1);                   // latencies and overheads: at most 1 s
}  // namespace

Bandwidth JsonView::bandwidth(const std::string& key) const {
    const Json& v = member(key);
    Bandwidth bw;
    if (v.is_string()) {
        bw = with_place({file_, child_path(key), ""}, [&] { return parse_bandwidth(v.get<std::string>()); });
    } else {
        if (!v.is_number()) fail_member(key, "a bandwidth such as \"25 GB/s\" or a number of bytes/s", describe_json(v));
        bw = Bandwidth::bytes_per_s(v.get<double>());
    }
    if (!(bw.bytes_per_second() >= kMinBandwidth && bw.bytes_per_second() <= kMaxBandwidth))
        fail_member(key, "a bandwidth from 1 KB/s to 1 PB/s such as \"25 GB/s\"", describe_json(v));
    return bw;
}

FlopRate JsonView::flop_rate(const std::string& key) const {
    const Json& v = member(key);
    FlopRate r;
    if (v.is_string()) {
        r = with_place({file_, child_path(key), ""}, [&] { return parse_flop_rate(v.get<std::string>()); });
    } else {
        if (!v.is_number()) fail_member(key, "a FLOP rate such as \"312 TFLOP/s\" or a number of FLOP/s", describe_json(v));
        r = FlopRate::flops_per_s(v.get<double>());
    }
    if (!(r.per_second() >= kMinFlopRate && r.per_second() <= kMaxFlopRate))
        fail_member(key, "a FLOP rate from 1 MFLOP/s to 10 EFLOP/s such as \"312 TFLOP/s\"", describe_json(v));
    return r;
}

Time JsonView::time(const std::string& key) const {
    const Json& v = member(key);
    const std::string expected = "a duration from 0 to 1 s such as \"2 us\" or a number of seconds";
    Time t;
    if (v.is_string()) {
        t = with_place({file_, child_path(key), ""}, [&] { return parse_time(v.get<std::string>()); });
    } else {
        if (!v.is_number()) fail_member(key, expected, describe_json(v));
        const double d = v.get<double>();
        if (!(d >= 0 && d <= 1)) fail_member(key, expected, describe_json(v));
        t = Time::seconds(d);
    }
    if (t < Time::zero() || t > kMaxDuration) fail_member(key, expected, describe_json(v));
    return t;
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

namespace {

/// Line and column (1-based) of the byte at `offset` in `text`.
std::string position_of(const std::string& text, std::size_t offset) {
    if (offset > text.size()) offset = text.size();
    std::size_t line = 1, line_start = 0;
    for (std::size_t i = 0; i < offset; ++i) {
        if (text[i] == '\n') {
            ++line;
            line_start = i + 1;
        }
    }
    return "line " + std::to_string(line) + ", column " + std::to_string(offset - line_start + 1);
}

/// nlohmann's DOM builder with three checks on top, and the JSON pointer of the value being read
/// always known: a key repeated in one object is an error naming it (nlohmann keeps the last one
/// silently); nesting deeper than kMaxJsonDepth is an error (no file of ours nests beyond 6, and
/// the readers recurse); every parse error — syntax, or a number such as 1e309 that no double
/// holds (nlohmann's out_of_range 406) — becomes a bad_input naming the line, column and path.
class CheckedDomSax {
public:
    static constexpr std::size_t kMaxJsonDepth = 64;
    using Dom = nlohmann::detail::json_sax_dom_parser<Json>;

    CheckedDomSax(Json& root, const std::string& text, const std::string& file) : dom_(root), text_(text), file_(file) {}

    bool null() { return value(dom_.null()); }
    bool boolean(bool v) { return value(dom_.boolean(v)); }
    bool number_integer(Json::number_integer_t v) { return value(dom_.number_integer(v)); }
    bool number_unsigned(Json::number_unsigned_t v) { return value(dom_.number_unsigned(v)); }
    bool number_float(Json::number_float_t v, const Json::string_t& s) { return value(dom_.number_float(v, s)); }
    bool string(Json::string_t& v) { return value(dom_.string(v)); }
    bool binary(Json::binary_t& v) { return value(dom_.binary(v)); }

    bool start_object(std::size_t n) {
        enter();
        frames_.push_back({true, {}, 0, {}});
        return dom_.start_object(n);
    }
    bool key(Json::string_t& k) {
        Frame& f = frames_.back();
        if (!f.keys.insert(k).second)
            fail_input("duplicate key '" + k + "': a key may appear once in an object (JSON readers differ on which "
                       "one they keep)",
                       {file_, path(false) + "/" + escape_pointer(k), ""});
        f.key = k;
        return dom_.key(k);
    }
    bool end_object() { return leave(dom_.end_object()); }
    bool start_array(std::size_t n) {
        enter();
        frames_.push_back({false, {}, 0, {}});
        return dom_.start_array(n);
    }
    bool end_array() { return leave(dom_.end_array()); }

    template <class Exception>
    bool parse_error(std::size_t position, const std::string& token, const Exception& e) {
        // e.what(): "[json.exception.parse_error.101] parse error at line 1, column 5: syntax error
        // while parsing value - …". Keep only what follows the position, which we count ourselves
        // so it is the same whatever nlohmann's message says.
        std::string what = e.what();
        if (e.id == 406) {
            what = "the number " + token + " is beyond the range of a double (about ±1.8e308)";
        } else {
            const auto pe = what.find("parse error");
            if (pe != std::string::npos) {
                const auto colon = what.find(": ", pe);
                if (colon != std::string::npos) what = what.substr(colon + 2);
            }
        }
        const std::size_t offset = position == 0 ? 0 : position - 1;
        // A number out of range has a place in the document; a syntax error only a position.
        throw Error(ErrorKind::bad_input, position_of(text_, offset) + ": " + what,
                    {file_, e.id == 406 && !frames_.empty() ? path() : "", ""});
    }

private:
    struct Frame {
        bool object;
        std::string key;          // objects: the key whose value is being read
        std::size_t index;        // arrays: the element being read
        std::set<std::string> keys;
    };

    /// The JSON pointer of the value being read; without `innermost`, of the innermost object
    /// or array itself.
    std::string path(bool innermost = true) const {
        std::string out;
        const std::size_t n = innermost || frames_.empty() ? frames_.size() : frames_.size() - 1;
        for (std::size_t i = 0; i < n; ++i) {
            const Frame& f = frames_[i];
            out += "/" + (f.object ? escape_pointer(f.key) : std::to_string(f.index));
        }
        return out;
    }
    void enter() {
        if (frames_.size() >= kMaxJsonDepth)
            fail_input("JSON nested at most " + std::to_string(kMaxJsonDepth) + " levels deep",
                       "a deeper value", {file_, path(), ""});
    }
    bool leave(bool ok) {
        frames_.pop_back();
        return value(ok);
    }
    /// A value is complete: the enclosing array moves to its next element.
    bool value(bool ok) {
        if (!frames_.empty() && !frames_.back().object) ++frames_.back().index;
        return ok;
    }

    Dom dom_;
    const std::string& text_;
    const std::string& file_;
    std::vector<Frame> frames_;
};

}  // namespace

Json parse_json_text(const std::string& text, const std::string& file) {
    Json root;
    CheckedDomSax sax(root, text, file);
    Json::sax_parse(text, &sax);
    return root;
}

Json load_json_file(const std::string& path) {
    const std::string text = read_input_file(path);
    return parse_json_text(text, path);
}

std::string read_input_file(const std::string& path, std::int64_t max_bytes) {
    namespace fs = std::filesystem;
    // A FIFO, a device such as /dev/zero or a directory would block or never end: only regular
    // files (or links to them) of bounded size are read.
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (ec || !fs::exists(st)) fail_input("no such file '" + path + "'", {path, "", ""});
    if (fs::is_directory(st)) fail_input("expected a JSON file, found a directory", {path, "", ""});
    if (!fs::is_regular_file(st))
        fail_input("expected a regular JSON file, found " +
                       std::string(fs::is_fifo(st)              ? "a FIFO (named pipe)"
                                   : fs::is_character_file(st) ? "a character device"
                                   : fs::is_block_file(st)     ? "a block device"
                                   : fs::is_socket(st)         ? "a socket"
                                                               : "something else"),
                   {path, "", ""});
    const auto size = fs::file_size(path, ec);
    const auto too_big = [&](const std::string& found) {
        fail_input("a JSON file of at most " + to_string(Bytes(max_bytes)), found, {path, "", ""});
    };
    if (!ec && size > static_cast<std::uintmax_t>(max_bytes)) too_big(to_string(Bytes(static_cast<std::int64_t>(size))));
    std::ifstream in(path, std::ios::binary);
    if (!in) fail_input("cannot open file '" + path + "' for reading", {path, "", ""});
    // Read at most one byte past the limit, in case the file grew since it was measured.
    std::string text(static_cast<std::size_t>(max_bytes) + 1, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    if (in.bad()) fail_input("cannot read file '" + path + "'", {path, "", ""});
    text.resize(static_cast<std::size_t>(in.gcount()));
    if (static_cast<std::int64_t>(text.size()) > max_bytes) too_big("a larger file");
    return text;
}

}  // namespace smol

// The one error type and its message format:
//   "<file>: at <json_path>: <detail>"   for input files
//   "<flag>: <detail>"                   for command-line flags
// Empty context parts are left out, so a bare detail reads as itself.
#include "core/error.hpp"

#include <algorithm>
#include <utility>

namespace smol {
namespace {

std::string compose(const std::string& detail, const ErrorContext& c) {
    std::string out;
    // Appends piece by piece (GCC 12 warns, wrongly, about `a + b` temporaries here).
    if (!c.file.empty()) out.append(c.file).append(": ");
    if (!c.json_path.empty()) out.append("at ").append(c.json_path).append(": ");
    if (!c.flag.empty()) out.append(c.flag).append(": ");
    out.append(detail);
    return out;
}

/// Levenshtein distance (insert, delete, substitute each cost 1), two-row dynamic programme.
std::size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        cur[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t substitute = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
            cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, substitute});
        }
        std::swap(prev, cur);
    }
    return prev[b.size()];
}

}  // namespace

Error::Error(ErrorKind kind, std::string message, ErrorContext context)
    : std::runtime_error(compose(message, context)),
      kind_(kind),
      detail_(std::move(message)),
      context_(std::move(context)) {}

Error Error::with_context(const ErrorContext& outer) const {
    ErrorContext merged = context_;
    if (merged.file.empty()) merged.file = outer.file;
    if (merged.json_path.empty()) merged.json_path = outer.json_path;
    if (merged.flag.empty()) merged.flag = outer.flag;
    return Error(kind_, detail_, merged);
}

void fail_input(const std::string& expected, const std::string& found, ErrorContext context) {
    throw Error(ErrorKind::bad_input, "expected " + expected + ", found " + found, std::move(context));
}

void fail_input(const std::string& message, ErrorContext context) {
    throw Error(ErrorKind::bad_input, message, std::move(context));
}

std::string nearest_name(const std::string& name, const std::vector<std::string>& candidates) {
    // A typo of a few characters in a short name, or about a third of a long one, is still
    // recognisable; beyond that a suggestion is more confusing than none.
    const std::size_t limit = std::max<std::size_t>(2, name.size() / 3);
    std::string best;
    std::size_t best_distance = limit + 1;
    for (const auto& c : candidates) {
        const std::size_t d = edit_distance(name, c);
        if (d < best_distance) {  // strict: the first of equally close candidates wins
            best_distance = d;
            best = c;
        }
    }
    return best;
}

}  // namespace smol

namespace smol {
std::string join(const std::vector<std::string>& items, const char* separator) {
    std::string out;
    for (std::size_t i = 0; i < items.size(); ++i) {
        if (i) out += separator;
        out += items[i];
    }
    return out;
}

std::string did_you_mean(const std::string& name, const std::vector<std::string>& candidates) {
    const std::string near = nearest_name(name, candidates);
    return near.empty() ? std::string() : " (did you mean '" + near + "'?)";
}
}  // namespace smol

// One error type with context. Library code throws smol::Error and never exits; the command line
// maps the kind to an exit status (exit_status: bad_input and out_of_range → 2, the rest → 1).
//
// The message reads like: `cluster.json: at /node_groups/0/nics/bandwidth: expected a bandwidth
// such as "25 GB/s", found "-3 GB/s"`.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace smol {

enum class ErrorKind {
    bad_input,     // the user's file, flag or plan is wrong: exit 2
    out_of_range,  // a quantity the input made left its type's range (core/units.hpp): exit 2
    deadlock,      // the simulated graph cannot make progress
    internal,      // a bug in smolcluster
};

/// True for the kinds the user's input caused (bad_input, out_of_range): exit status 2.
inline bool is_input_error(ErrorKind k) { return k == ErrorKind::bad_input || k == ErrorKind::out_of_range; }
/// The command line's exit status for an error of kind `k`: 2 for input errors, else 1.
inline int exit_status(ErrorKind k) { return is_input_error(k) ? 2 : 1; }

struct ErrorContext {
    std::string file;       // "cluster.json", or a preset name such as "preset dgx-a100"
    std::string json_path;  // "/node_groups/0/count"
    std::string flag;       // "--micro-batch"
};

class Error : public std::runtime_error {
public:
    Error(ErrorKind kind, std::string message, ErrorContext context = {});

    ErrorKind kind() const { return kind_; }
    const ErrorContext& context() const { return context_; }
    /// The message without context, as given to the constructor.
    const std::string& detail() const { return detail_; }

    /// Returns a copy with context fields filled where they were empty (inner context wins).
    Error with_context(const ErrorContext& outer) const;

private:
    ErrorKind kind_;
    std::string detail_;
    ErrorContext context_;
};

/// Throws a bad_input error. `expected` and `found` are joined as "expected X, found Y".
[[noreturn]] void fail_input(const std::string& expected, const std::string& found, ErrorContext context = {});
/// Throws a bad_input error with a free-form message.
[[noreturn]] void fail_input(const std::string& message, ErrorContext context = {});

/// The candidate closest to `name` by edit distance, or "" when none is close enough.
std::string nearest_name(const std::string& name, const std::vector<std::string>& candidates);
/// " (did you mean 'x'?)" with the nearest candidate, or "" when none is close: the one way every
/// message suggests a name.
std::string did_you_mean(const std::string& name, const std::vector<std::string>& candidates);
/// The items with `separator` between them: "a, b, c" (for messages and headings).
std::string join(const std::vector<std::string>& items, const char* separator = ", ");

}  // namespace smol

// Error arithmetic of the published-measurement harness. An error is simulated / measured − 1 of
// the step time: negative when the simulator predicts a faster step than was measured.
#pragma once

#include <cstddef>
#include <vector>

namespace smol::bench {

/// simulated / measured − 1.
double relative_error(double simulated, double measured);

struct ErrorStats {
    std::size_t count = 0;
    double mape = 0;        // mean |error|, as a fraction (0.084 = 8.4 %)
    double median_abs = 0;  // median |error| (mean of the two middle values for an even count)
    double max_abs = 0;     // largest |error|
    double bias = 0;        // mean signed error
};

/// Statistics of a set of errors; all zero for an empty set.
ErrorStats error_stats(const std::vector<double>& errors);

}  // namespace smol::bench

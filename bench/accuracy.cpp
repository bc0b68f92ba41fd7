#include "bench/accuracy.hpp"

#include <algorithm>
#include <cmath>

namespace smol::bench {

double relative_error(double simulated, double measured) { return simulated / measured - 1.0; }

ErrorStats error_stats(const std::vector<double>& errors) {
    ErrorStats s;
    s.count = errors.size();
    if (errors.empty()) return s;
    std::vector<double> abs;
    abs.reserve(errors.size());
    double sum_abs = 0, sum = 0;
    for (double e : errors) {
        abs.push_back(std::fabs(e));
        sum_abs += std::fabs(e);
        sum += e;
    }
    std::sort(abs.begin(), abs.end());
    const std::size_t n = abs.size();
    s.mape = sum_abs / static_cast<double>(n);
    s.median_abs = n % 2 == 1 ? abs[n / 2] : (abs[n / 2 - 1] + abs[n / 2]) / 2;
    s.max_abs = abs.back();
    s.bias = sum / static_cast<double>(n);
    return s;
}

}  // namespace smol::bench

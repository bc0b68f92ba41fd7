// Shared by the CUDA tests: device buffers, 16-bit conversions on the host, the relative error
// ‖out − ref‖ / ‖ref‖, and the MPI session of a test started by mpirun (tests tagged [mpi]).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "exec/cuda/check.hpp"
#include "exec/cuda/types.hpp"
#include "exec/executor.hpp"

namespace smol::test {

/// The process's MPI session; only for tests tagged [mpi] (fails the test when not under mpirun).
exec::Session& session();

/// Device memory holding `bytes`, poisoned (every byte 0xFF: NaN in fp32, bf16 and fp16), so an
/// element a kernel forgets to write shows.
class DeviceMemory {
public:
    explicit DeviceMemory(std::size_t bytes) : bytes_(bytes) {
        exec::cuda::check(cudaMalloc(&p_, bytes ? bytes : 1), "cudaMalloc in a test");
        exec::cuda::check(cudaMemset(p_, 0xFF, bytes ? bytes : 1), "cudaMemset in a test");
    }
    ~DeviceMemory() { cudaFree(p_); }
    DeviceMemory(const DeviceMemory&) = delete;
    DeviceMemory& operator=(const DeviceMemory&) = delete;
    template <class T = void>
    T* get() const { return static_cast<T*>(p_); }
    std::size_t bytes() const { return bytes_; }

private:
    void* p_ = nullptr;
    std::size_t bytes_ = 0;
};

inline std::vector<float> uniform(std::size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = d(gen);
    return v;
}

/// Floats as elements of `e` (bytes), rounded to nearest even; and back.
inline std::vector<std::uint8_t> encode(const std::vector<float>& v, exec::cuda::Element e) {
    using exec::cuda::Element;
    const std::size_t eb = e == Element::fp32 ? 4 : 2;
    std::vector<std::uint8_t> out(v.size() * eb);
    for (std::size_t i = 0; i < v.size(); ++i) {
        if (e == Element::fp32) std::memcpy(&out[i * 4], &v[i], 4);
        else if (e == Element::bf16) {
            const __nv_bfloat16 h = __float2bfloat16(v[i]);
            std::memcpy(&out[i * 2], &h, 2);
        } else {
            const __half h = __float2half(v[i]);
            std::memcpy(&out[i * 2], &h, 2);
        }
    }
    return out;
}

inline std::vector<float> decode(const void* data, std::size_t n, exec::cuda::Element e) {
    using exec::cuda::Element;
    std::vector<float> out(n);
    const auto* b = static_cast<const std::uint8_t*>(data);
    for (std::size_t i = 0; i < n; ++i) {
        if (e == Element::fp32) std::memcpy(&out[i], b + 4 * i, 4);
        else if (e == Element::bf16) {
            __nv_bfloat16 h;
            std::memcpy(&h, b + 2 * i, 2);
            out[i] = __bfloat162float(h);
        } else {
            __half h;
            std::memcpy(&h, b + 2 * i, 2);
            out[i] = __half2float(h);
        }
    }
    return out;
}

/// The floats `v` rounded through `e` (what the device reads after an upload).
inline std::vector<float> rounded(const std::vector<float>& v, exec::cuda::Element e) {
    const auto bytes = encode(v, e);
    return decode(bytes.data(), v.size(), e);
}

inline void upload(void* dst, const std::vector<std::uint8_t>& bytes) {
    exec::cuda::check(cudaMemcpy(dst, bytes.data(), bytes.size(), cudaMemcpyHostToDevice), "cudaMemcpy to the device");
}

inline std::vector<float> download(const void* src, std::size_t n, exec::cuda::Element e) {
    const std::size_t eb = e == exec::cuda::Element::fp32 ? 4 : 2;
    std::vector<std::uint8_t> bytes(n * eb);
    exec::cuda::check(cudaMemcpy(bytes.data(), src, bytes.size(), cudaMemcpyDeviceToHost), "cudaMemcpy to the host");
    return decode(bytes.data(), n, e);
}

/// ‖out − ref‖ / ‖ref‖; infinity when any element of `out` is not finite (never passes).
inline double relative_error(const std::vector<float>& out, const std::vector<double>& ref) {
    double num = 0, den = 0;
    for (std::size_t i = 0; i < out.size(); ++i) {
        if (!std::isfinite(out[i])) return INFINITY;
        num += (out[i] - ref[i]) * (out[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return std::sqrt(num / (den > 0 ? den : 1));
}

}  // namespace smol::test

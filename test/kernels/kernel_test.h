// Helpers for the kernel tests (test/kernels/test_*.cu): device buffers filled from host vectors,
// poisoned outputs, random inputs, floatX <-> float conversions, and the tolerance of this build.
// Each test file builds twice through the emulator (bf16 and -DENABLE_FP32) and once with nvcc for
// a GPU (kernels/build.mk), and compares a kernel with the fp32 CPU reference in cpu/.
#pragma once
#include <cstring>
#include <random>
#include <vector>

#include "kernels/common.h"
#include "test/test.h"

// ‖out−ref‖/‖ref‖ allowed in this build (docs/TESTS.md): fp32 storage 1e-5, bf16 storage 1e-2.
#ifdef ENABLE_FP32
constexpr double KERNEL_TOLERANCE = 1e-5;
#else
constexpr double KERNEL_TOLERANCE = 1e-2;
#endif

inline std::vector<float> random_floats(size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}
inline std::vector<int> random_tokens(size_t n, int vocab, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> dist(0, vocab - 1);
    std::vector<int> v(n);
    for (int& x : v) x = dist(rng);
    return v;
}

// Host-side conversions (the same rounding as the device's: round to nearest even for bf16).
inline floatX host_to_floatX(float x) {
#ifdef ENABLE_FP32
    return x;
#else
    return __float2bfloat16(x);
#endif
}
inline float host_from_floatX(floatX x) {
#ifdef ENABLE_FP32
    return x;
#else
    return __bfloat162float(x);
#endif
}
// Rounds each value to floatX and back: the exact inputs the kernel sees, for the reference.
inline std::vector<float> round_to_floatX(std::vector<float> v) {
    for (float& x : v) x = host_from_floatX(host_to_floatX(x));
    return v;
}

template <typename T>
T* device_copy_of(const std::vector<T>& host) {
    T* device = nullptr;
    CUDA_CHECK(cudaMalloc(&device, host.size() * sizeof(T) + 16));
    CUDA_CHECK(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    return device;
}
// floatX buffer holding the given floats (rounded).
inline floatX* device_floatX(const std::vector<float>& host) {
    std::vector<floatX> x(host.size());
    for (size_t i = 0; i < host.size(); i++) x[i] = host_to_floatX(host[i]);
    return device_copy_of(x);
}
// All bits set: NaN for floats and bf16, -1 for integers. Outputs start like this so that an
// element a kernel forgets to write fails the comparison.
template <typename T>
T* device_poisoned(size_t n) {
    T* device = nullptr;
    CUDA_CHECK(cudaMalloc(&device, n * sizeof(T) + 16));
    CUDA_CHECK(cudaMemset(device, 0xff, n * sizeof(T)));
    return device;
}
template <typename T>
std::vector<T> host_copy_of(const T* device, size_t n) {
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> host(n);
    CUDA_CHECK(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
}
inline std::vector<float> host_floats_of(const floatX* device, size_t n) {
    std::vector<floatX> x = host_copy_of(device, n);
    std::vector<float> out(n);
    for (size_t i = 0; i < n; i++) out[i] = host_from_floatX(x[i]);
    return out;
}
inline bool bitwise_equal(const void* a, const void* b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

// Checks ‖out−ref‖/‖ref‖ ≤ tolerance, naming what was compared.
#define CHECK_CLOSE(out, ref, tolerance, what)                                                   \
    do {                                                                                         \
        const double err_ = ::tst::rel_l2_error((out).data(), (ref).data(), (ref).size());       \
        CHECK_MSG(err_ <= (tolerance), "%s: relative error %.3g > %.3g (" PRECISION_NAME ")",    \
                  (what), err_, (double)(tolerance));                                            \
    } while (0)


// Shared by the kernel benchmarks in dev/cuda/: timing with CUDA events (warm-up, then the median of
// repeated runs), the device's copy-bandwidth ceiling measured in the same run (a 1 GiB copy, and a
// copy of each kernel's own byte count beside it), the one-line report formats, the tally of
// correctness checks, and the host <-> device helpers every benchmark needs. Each dev/cuda/<op>.cu
// checks every version of its kernel against the CPU reference first, then times it. Built by nvcc
// it runs at chip-filling sizes on the GPU; built through the emulator (g++) it runs small sizes as
// a correctness check only and prints no timings (BENCH_ON_GPU is false there), printing
// "PASS name" / "FAIL name: why" lines for the test runner.
//
// The kernel tests' helpers (test/kernels/kernel_test.h) come with it: random_floats,
// random_tokens, host_to_floatX / host_from_floatX / round_to_floatX, device_copy_of, device_floatX,
// device_poisoned, host_copy_of, host_floats_of, and KERNEL_TOLERANCE (the ‖out−ref‖/‖ref‖ allowed in
// this build). Only its inline helpers are usable here: benchmarks do not link the test harness.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kernels/common.h"
#include "test/kernels/kernel_test.h"

#ifdef __CUDACC__
constexpr bool BENCH_ON_GPU = true;
#else
constexpr bool BENCH_ON_GPU = false;
#endif

// ---- timing and the memory ceiling

// Median milliseconds of `run` over `repeats` timed calls, after `warmup` untimed ones.
inline double time_median_ms(const std::function<void()>& run, int warmup = 3, int repeats = 20) {
    for (int i = 0; i < warmup; i++) run();
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    std::vector<float> ms(repeats);
    for (int i = 0; i < repeats; i++) {
        CUDA_CHECK(cudaEventRecord(start, 0));
        run();
        CUDA_CHECK(cudaEventRecord(stop, 0));
        CUDA_CHECK(cudaEventSynchronize(stop));
        CUDA_CHECK(cudaEventElapsedTime(&ms[i], start, stop));
    }
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    std::sort(ms.begin(), ms.end());
    return ms[repeats / 2];
}

// The memory ceiling: device-to-device cudaMemcpy of 1 GiB, counting bytes read plus bytes written
// (the same way the kernels' reports count them), in GB/s (1e9 bytes per second).
inline double measure_copy_bandwidth_gbs() {
    const size_t bytes = (size_t)1 << 30;
    void *src = nullptr, *dst = nullptr;
    CUDA_CHECK(cudaMalloc(&src, bytes));
    CUDA_CHECK(cudaMalloc(&dst, bytes));
    CUDA_CHECK(cudaMemset(src, 1, bytes));
    const double ms =
        time_median_ms([&] { CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0)); });
    CUDA_CHECK(cudaFree(src));
    CUDA_CHECK(cudaFree(dst));
    return 2.0 * bytes / (ms * 1e-3) / 1e9;
}
// The same, with its line printed at the top of a benchmark's timings.
inline double measure_and_print_copy_bandwidth() {
    const double gbs = measure_copy_bandwidth_gbs();
    printf("copy bandwidth (read + write): %.1f GB/s\n", gbs);
    return gbs;
}

// The time of a device-to-device cudaMemcpy moving as many bytes as a kernel does (half read, half
// written), timed as the kernels are: the most a kernel of that size can expect, since a copy of
// tens of MB pays the same launch, ramp-up and last-wave costs that the 1 GiB ceiling hides. Once per
// size; 0 for sizes under 32 KiB.
inline double same_size_copy_ms(double bytes) {
    static std::map<size_t, double> measured;
    const size_t half = (size_t)(bytes / 2) / 256 * 256;
    if (half < 16 * 1024) return 0.0;
    const auto found = measured.find(half);
    if (found != measured.end()) return found->second;
    void *src = nullptr, *dst = nullptr;
    CUDA_CHECK(cudaMalloc(&src, half));
    CUDA_CHECK(cudaMalloc(&dst, half));
    CUDA_CHECK(cudaMemset(src, 1, half));
    const double ms = time_median_ms([&] { CUDA_CHECK(cudaMemcpyAsync(dst, src, half, cudaMemcpyDeviceToDevice, 0)); });
    CUDA_CHECK(cudaFree(src));
    CUDA_CHECK(cudaFree(dst));
    return measured[half] = ms;
}

// ---- report lines

// One benchmark line: name, time, achieved rate, its share of the ceiling, and its time against a
// copy of as many bytes (same_size_copy_ms).
inline void report_bandwidth(const char* name, double ms, double bytes, double ceiling_gbs) {
    const double gbs = bytes / (ms * 1e-3) / 1e9, copy_ms = same_size_copy_ms(bytes);
    printf("%-40s %9.3f ms %9.1f GB/s  %5.1f%% of copy bandwidth", name, ms, gbs, 100.0 * gbs / ceiling_gbs);
    if (copy_ms > 0) printf(", %5.1f%% of a same-size copy's rate", 100.0 * copy_ms / ms);
    printf("\n");
}
inline void report_flops(const char* name, double ms, double flops, double ceiling_tflops) {
    const double tflops = flops / (ms * 1e-3) / 1e12;
    printf("%-40s %9.3f ms %9.1f TFLOP/s %5.1f%% of the bf16 GEMM rate\n", name, ms, tflops,
           100.0 * tflops / ceiling_tflops);
}
// Times `run` and prints its bandwidth line, on a GPU only (under the emulator: nothing).
inline void time_bandwidth(const std::string& name, const std::function<void()>& run, double bytes,
                           double ceiling_gbs) {
    if (BENCH_ON_GPU) report_bandwidth(name.c_str(), time_median_ms(run), bytes, ceiling_gbs);
}

// ---- correctness checks: every report below counts towards bench_exit_status()

inline bool bench_all_passed = true;

// A correctness line the test runner counts (test/run_tests.sh): PASS or FAIL with the error.
inline bool report_check(const char* name, double rel_error, double tolerance = KERNEL_TOLERANCE) {
    const bool passed = rel_error <= tolerance;
    if (passed)
        printf("PASS %s (relative error %.2e)\n", name, rel_error);
    else
        printf("FAIL %s: relative error %.3g > %.3g\n", name, rel_error, tolerance);
    bench_all_passed &= passed;
    return passed;
}
inline bool report_check(const std::string& name, double rel_error, double tolerance = KERNEL_TOLERANCE) {
    return report_check(name.c_str(), rel_error, tolerance);
}
// A PASS / FAIL line for a bitwise comparison (determinism, versions that must agree to the bit).
inline bool report_same_bits(const std::string& name, bool same) {
    printf("%s %s\n", same ? "PASS" : "FAIL", name.c_str());
    bench_all_passed &= same;
    return same;
}
// The summary line and main()'s exit status: 0 when every check passed.
inline int bench_exit_status() {
    printf(bench_all_passed ? "all checks passed\n" : "SOME CHECKS FAILED\n");
    return bench_all_passed ? 0 : 1;
}

// ‖out − ref‖ / ‖ref‖ in double precision (‖out‖ when ref is all zero); infinity when out holds a
// NaN or an infinity. ref may be float or double.
template <typename Ref>
double relative_error(const std::vector<float>& out, const std::vector<Ref>& ref) {
    double diff = 0, norm = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        diff += ((double)out[i] - ref[i]) * ((double)out[i] - ref[i]);
        norm += (double)ref[i] * ref[i];
    }
    return std::isfinite(diff) ? std::sqrt(diff / (norm > 0 ? norm : 1.0)) : INFINITY;
}

// ---- inputs and device buffers (besides kernel_test.h's random_floats, device_copy_of,
// device_floatX, device_poisoned)

// n floats uniform in [lo, hi), rounded to floatX: the values the device and the reference both see.
inline std::vector<float> rounded_random_floats(size_t n, unsigned seed, float lo, float hi) {
    return round_to_floatX(random_floats(n, seed, lo, hi));
}

// n uninitialised elements of device memory.
template <typename T>
T* device_buffer(size_t n) {
    T* device = nullptr;
    CUDA_CHECK(cudaMalloc(&device, n * sizeof(T)));
    return device;
}
// Every bit set (NaN for floats, -1 for integers): outputs start like this before each version runs,
// so that an element it forgets to write fails the check.
template <typename T>
void poison(T* device, size_t n) {
    CUDA_CHECK(cudaMemset(device, 0xff, n * sizeof(T)));
}
// Overwrites an existing device buffer with host values (as floatX, rounded, for the float overload).
template <typename T>
void copy_to_device(T* device, const std::vector<T>& host) {
    CUDA_CHECK(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
}
inline void copy_floats_to_device(floatX* device, const std::vector<float>& host) {
    std::vector<floatX> x(host.size());
    for (size_t i = 0; i < host.size(); i++) x[i] = host_to_floatX(host[i]);
    copy_to_device(device, x);
}
// cudaFree of each pointer (nullptr is fine).
template <typename... Pointers>
void device_free(Pointers... pointers) {
    (CUDA_CHECK(cudaFree((void*)pointers)), ...);
}

// Uniform values in [-scale, scale) written on the device from a hash of (index, seed): reproducible,
// never all zeros, and no host generation or copy for the benchmarks' large buffers.
template <typename T>
__global__ void fill_random_device_kernel(T* x, size_t n, uint32_t seed, float scale) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    uint32_t h = (uint32_t)i * 0x9E3779B1u ^ (uint32_t)(i >> 32) * 0x85EBCA77u ^ seed * 0xC2B2AE3Du;
    h ^= h >> 16;
    h *= 0x7FEB352Du;
    h ^= h >> 15;
    h *= 0x846CA68Bu;
    h ^= h >> 16;
    const float unit = (float)(h >> 8) * (1.0f / 16777216.0f);  // [0, 1)
    x[i] = from_float<T>(scale * (2.0f * unit - 1.0f));
}
template <typename T>
void fill_random_device(T* x, size_t n, uint32_t seed, float scale = 1.0f) {
    const int block_size = 256;
    LAUNCH(fill_random_device_kernel<T>, ceil_div(n, block_size), block_size, 0, 0, x, n, seed, scale);
    CUDA_CHECK(cudaGetLastError());
}

// Prints the device and the build's precision once, at the top of a benchmark's output.
inline void print_device_header() {
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s (sm_%d%d, %d SMs), " PRECISION_NAME " build\n", prop.name, prop.major, prop.minor,
           prop.multiProcessorCount);
}

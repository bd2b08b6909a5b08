// Shared by the kernel benchmarks in dev/cuda/: timing with CUDA events (warm-up, then the median of
// repeated runs), the device's copy-bandwidth ceiling measured in the same run, and the one-line
// report format. Each dev/cuda/<op>.cu checks every version of its kernel against the CPU reference
// first, then times it. Built by nvcc it runs at chip-filling sizes on the GPU; built through the
// emulator (g++) it runs small sizes as a correctness check only and prints no timings
// (BENCH_ON_GPU is false there), printing "PASS name" / "FAIL name: why" lines for the test runner.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include "kernels/common.h"

#ifdef __CUDACC__
constexpr bool BENCH_ON_GPU = true;
#else
constexpr bool BENCH_ON_GPU = false;
#endif

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
    const double ms = time_median_ms([&] { CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0)); });
    CUDA_CHECK(cudaFree(src));
    CUDA_CHECK(cudaFree(dst));
    return 2.0 * bytes / (ms * 1e-3) / 1e9;
}

// One benchmark line: name, time, achieved rate and its share of the ceiling.
inline void report_bandwidth(const char* name, double ms, double bytes, double ceiling_gbs) {
    const double gbs = bytes / (ms * 1e-3) / 1e9;
    printf("%-40s %9.3f ms %9.1f GB/s  %5.1f%% of copy bandwidth\n", name, ms, gbs, 100.0 * gbs / ceiling_gbs);
}
inline void report_flops(const char* name, double ms, double flops, double ceiling_tflops) {
    const double tflops = flops / (ms * 1e-3) / 1e12;
    printf("%-40s %9.3f ms %9.1f TFLOP/s %5.1f%% of the bf16 GEMM rate\n", name, ms, tflops,
           100.0 * tflops / ceiling_tflops);
}

// A correctness line the test runner counts (test/run_tests.sh): PASS or FAIL with the error.
inline bool report_check(const char* name, double rel_error, double tolerance) {
    if (rel_error <= tolerance) printf("PASS %s (relative error %.2e)\n", name, rel_error);
    else printf("FAIL %s: relative error %.3g > %.3g\n", name, rel_error, tolerance);
    return rel_error <= tolerance;
}

// Prints the device and the ceilings once, at the top of a benchmark's output.
inline void print_device_header() {
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s (sm_%d%d, %d SMs), " PRECISION_NAME " build\n", prop.name, prop.major, prop.minor,
           prop.multiProcessorCount);
}

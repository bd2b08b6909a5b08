// The compute ceiling of this card: the dense bf16 GEMM rate, measured through cuBLASLt on an
// 8192 × 8192 × 8192 product (bf16 A, B and D, fp32 accumulation, random inputs), as the median of
// timed runs after warm-up. Benchmarks report their TFLOP/s as a share of it (attention, the whole
// training step, the matmuls), and MFU is quoted against it (dev/RESULTS.md says how figures are measured).
// Under the emulator (BENCH_ON_GPU false) the same code runs a 128 × 128 × 128 product through the
// cuBLASLt stand-in, so the calls are exercised, and returns that rate: a CPU figure of no meaning
// as a ceiling (emulated benchmarks print no timings anyway). Its random inputs come from
// fill_random_device() (dev/cuda/bench.h).
#pragma once
#include <cublasLt.h>

#include <cstdint>

#include "dev/cuda/bench.h"

#define GEMM_CEILING_CHECK(call)                                                                          \
    do {                                                                                                  \
        const cublasStatus_t status_ = (call);                                                            \
        if (status_ != CUBLAS_STATUS_SUCCESS) {                                                           \
            fprintf(stderr, "cuBLASLt error %d at %s:%d: %s\n", (int)status_, __FILE__, __LINE__, #call); \
            exit(1);                                                                                      \
        }                                                                                                 \
    } while (0)

// TFLOP/s (1e12 FLOP/s, 2·n³ per product) of a square bf16 GEMM, D = Aᵀ·B (the "TN" layout our
// forward matmuls use), n = 8192 on a GPU, 128 under the emulator.
inline double measure_bf16_gemm_tflops() {
    const int n = BENCH_ON_GPU ? 8192 : 128;
    const size_t elements = (size_t)n * n, workspace_bytes = (size_t)32 << 20;
    __nv_bfloat16 *a = device_buffer<__nv_bfloat16>(elements), *b = device_buffer<__nv_bfloat16>(elements),
                  *d = device_buffer<__nv_bfloat16>(elements);
    void* workspace = device_buffer<char>(workspace_bytes);
    fill_random_device(a, elements, 1);
    fill_random_device(b, elements, 2);

    cublasLtHandle_t handle;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t layout;  // every matrix is n × n, leading dimension n
    cublasLtMatmulPreference_t preference;
    GEMM_CEILING_CHECK(cublasLtCreate(&handle));
    GEMM_CEILING_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t transpose = CUBLAS_OP_T;
    GEMM_CEILING_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
    GEMM_CEILING_CHECK(cublasLtMatrixLayoutCreate(&layout, CUDA_R_16BF, n, n, n));
    GEMM_CEILING_CHECK(cublasLtMatmulPreferenceCreate(&preference));
    const uint64_t max_workspace = workspace_bytes;
    GEMM_CEILING_CHECK(cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace, sizeof(max_workspace)));
    cublasLtMatmulHeuristicResult_t heuristic;
    int found = 0;
    GEMM_CEILING_CHECK(cublasLtMatmulAlgoGetHeuristic(handle, desc, layout, layout, layout, layout,
                                                      preference, 1, &heuristic, &found));
    if (found == 0) {
        fprintf(stderr, "measure_bf16_gemm_tflops: cuBLASLt has no bf16 algorithm\n");
        exit(1);
    }

    const float alpha = 1.0f, beta = 0.0f;
    const double ms = time_median_ms([&] {
        GEMM_CEILING_CHECK(cublasLtMatmul(handle, desc, &alpha, a, layout, b, layout, &beta, d, layout, d,
                                          layout, &heuristic.algo, workspace, workspace_bytes, 0));
    });

    GEMM_CEILING_CHECK(cublasLtMatmulPreferenceDestroy(preference));
    GEMM_CEILING_CHECK(cublasLtMatrixLayoutDestroy(layout));
    GEMM_CEILING_CHECK(cublasLtMatmulDescDestroy(desc));
    GEMM_CEILING_CHECK(cublasLtDestroy(handle));
    device_free(a, b, d, workspace);
    return ms > 0 ? 2.0 * n * (double)n * n / (ms * 1e-3) / 1e12 : NAN;  // NAN: too fast for the clock
}

// Row-major matrix multiply, the one place the CPU model touches a BLAS:
//   C (M×N) = alpha · op(A) · op(B) + beta · C,   op(X) = X or Xᵀ.
// With OpenBLAS (HAVE_CBLAS) float goes to cblas_sgemm and double to cblas_dgemm; without it both
// use gemm_loops below, a plain OpenMP loop nest. Called inside an OpenMP parallel region, both run
// on the calling thread (OpenBLAS's OpenMP build checks omp_in_parallel; nested regions are off).
// gemm_stats() counts the FLOPs and seconds of calls made outside parallel regions, so the step
// benchmark can report how fast the GEMMs ran inside a training step.
#pragma once
#include <cstddef>

#include "cpu/parallel.h"

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc);
void gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A, int lda,
          const double* B, int ldb, double beta, double* C, int ldc);

// "OpenBLAS (SkylakeX kernels, chosen from the CPU's AVX-512; <library>)" or "plain loops": the
// kernels in use and why (the choice is cpu/gemm.cpp's; GPT_TRAINER_OPENBLAS_CORETYPE overrides it).
const char* gemm_backend();

struct GemmStats {
    double flops = 0;    // 2·M·N·K summed over calls
    double seconds = 0;  // wall time inside gemm()
    long calls = 0;
};
GemmStats& gemm_stats();

// The fallback, also compiled when a BLAS exists so the tests can check it against the BLAS.
// Loop order keeps the innermost loop contiguous in memory for every transpose combination.
template <typename Real>
void gemm_loops(bool trans_a, bool trans_b, int M, int N, int K, Real alpha, const Real* A, int lda,
                const Real* B, int ldb, Real beta, Real* C, int ldc) {
#pragma omp parallel for schedule(static) if (worth_parallel((size_t)M * N * K))
    for (int i = 0; i < M; i++) {
        Real* c = C + (size_t)i * ldc;
        for (int j = 0; j < N; j++) c[j] = beta == Real(0) ? Real(0) : beta * c[j];
        if (!trans_b) {
            // c[i, :] += alpha · a(i, k) · B[k, :]
            for (int k = 0; k < K; k++) {
                Real a = alpha * (trans_a ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]);
                const Real* b = B + (size_t)k * ldb;
                for (int j = 0; j < N; j++) c[j] += a * b[j];
            }
        } else {
            // c[i, j] += alpha · dot(a(i, :), B[j, :])
            for (int j = 0; j < N; j++) {
                const Real* b = B + (size_t)j * ldb;
                Real sum = 0;
                if (!trans_a) {
                    const Real* a = A + (size_t)i * lda;
#pragma omp simd reduction(+ : sum)
                    for (int k = 0; k < K; k++) sum += a[k] * b[k];
                } else {
                    for (int k = 0; k < K; k++) sum += A[(size_t)k * lda + i] * b[k];
                }
                c[j] += alpha * sum;
            }
        }
    }
}

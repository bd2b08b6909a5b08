// gemm() through OpenBLAS when its cblas.h was found at build time (cpu/build.mk defines HAVE_CBLAS),
// otherwise through gemm_loops. Every call is timed for gemm_stats().
#include "cpu/gemm.h"

#include <omp.h>

#ifdef HAVE_CBLAS
#include <cblas.h>
#endif

GemmStats& gemm_stats() {
    static GemmStats stats;
    return stats;
}

static void count(int M, int N, int K, double start) {
    GemmStats& s = gemm_stats();
    s.flops += 2.0 * M * N * K;
    s.seconds += omp_get_wtime() - start;
    s.calls++;
}

#ifdef HAVE_CBLAS
const char* gemm_backend() { return "OpenBLAS"; }

static CBLAS_TRANSPOSE op(bool trans) { return trans ? CblasTrans : CblasNoTrans; }

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
    double start = omp_get_wtime();
    cblas_sgemm(CblasRowMajor, op(trans_a), op(trans_b), M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    count(M, N, K, start);
}
void gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A, int lda,
          const double* B, int ldb, double beta, double* C, int ldc) {
    double start = omp_get_wtime();
    cblas_dgemm(CblasRowMajor, op(trans_a), op(trans_b), M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    count(M, N, K, start);
}
#else
const char* gemm_backend() { return "plain loops"; }

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
    double start = omp_get_wtime();
    gemm_loops(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    count(M, N, K, start);
}
void gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A, int lda,
          const double* B, int ldb, double beta, double* C, int ldc) {
    double start = omp_get_wtime();
    gemm_loops(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    count(M, N, K, start);
}
#endif

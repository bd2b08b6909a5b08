// gemm() through OpenBLAS when cpu/build.mk found it (HAVE_CBLAS, with OPENBLAS_LIBRARY naming the
// shared library), otherwise through gemm_loops. Every call is timed for gemm_stats().
//
// OpenBLAS is loaded here with dlopen rather than linked, because it picks its kernels once, when
// it is loaded, from the CPU's model number: on virtual machines that report a generic model (this
// project's 2-core Sapphire Rapids machines do) it falls back to SSE3 "Prescott" kernels, about 4x
// slower than its AVX-512 ones. Loading it ourselves lets us first set OPENBLAS_CORETYPE, which
// OpenBLAS reads at load time, from the CPU's feature flags. An OPENBLAS_CORETYPE inherited from
// the environment is not trusted: images set it for other machines (one sets Haswell, which on an
// AVX-512 Zen 4 runs sgemm at 190 instead of 348 GFLOP/s). Only our own setting,
// GPT_TRAINER_OPENBLAS_CORETYPE, overrides the choice; gemm_backend() says what was chosen, and
// why.
#include "cpu/gemm.h"

#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#ifdef HAVE_CBLAS
#include <cblas.h>
#include <dlfcn.h>
#endif

GemmStats& gemm_stats() {
    static GemmStats stats;
    return stats;
}

// Calls from inside a parallel region (attention's per-head products) are not counted: the stats
// are one set of counters for the calling thread, and the step benchmark counts attention itself.
static void count(int M, int N, int K, double start) {
    if (omp_in_parallel()) return;
    GemmStats& s = gemm_stats();
    s.flops += 2.0 * M * N * K;
    s.seconds += omp_get_wtime() - start;
    s.calls++;
}

#ifdef HAVE_CBLAS
struct OpenBlas {
    decltype(&cblas_sgemm) sgemm;
    decltype(&cblas_dgemm) dgemm;
    const char* (*corename)();
};

// The kernels OpenBLAS is told to use, and why, for the start-up report.
struct KernelChoice {
    std::string core;  // "" lets OpenBLAS decide from the CPU's model
    std::string reason;
};
static KernelChoice g_kernel_choice;

static KernelChoice choose_kernels() {
    const char* ours = getenv("GPT_TRAINER_OPENBLAS_CORETYPE");
    if (ours && *ours) return {ours, "set by GPT_TRAINER_OPENBLAS_CORETYPE"};
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return {"SkylakeX", "chosen from the CPU's AVX-512"};
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return {"Haswell", "chosen from the CPU's AVX2 and FMA"};
    return {"", "OpenBLAS's choice: the CPU has neither AVX-512 nor AVX2"};
}

static OpenBlas load_openblas() {
    g_kernel_choice = choose_kernels();
    const char* inherited = getenv("OPENBLAS_CORETYPE");
    if (inherited && *inherited && g_kernel_choice.core != inherited)
        g_kernel_choice.reason += std::string("; OPENBLAS_CORETYPE=") + inherited +
                                  " from the environment ignored";
    if (g_kernel_choice.core.empty())
        unsetenv("OPENBLAS_CORETYPE");
    else
        setenv("OPENBLAS_CORETYPE", g_kernel_choice.core.c_str(), /*overwrite=*/1);
    void* lib = dlopen(OPENBLAS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "error: cannot load OpenBLAS (%s): %s\n", OPENBLAS_LIBRARY, dlerror());
        exit(1);
    }
    OpenBlas blas;
    blas.sgemm = (decltype(&cblas_sgemm))dlsym(lib, "cblas_sgemm");
    blas.dgemm = (decltype(&cblas_dgemm))dlsym(lib, "cblas_dgemm");
    blas.corename = (const char* (*)())dlsym(lib, "openblas_get_corename");
    if (!blas.sgemm || !blas.dgemm) {
        fprintf(stderr, "error: %s has no cblas_sgemm / cblas_dgemm\n", OPENBLAS_LIBRARY);
        exit(1);
    }
    return blas;
}

static const OpenBlas& openblas() {
    static const OpenBlas blas = load_openblas();
    return blas;
}

const char* gemm_backend() {
    static char name[512];
    const char* core = openblas().corename ? openblas().corename() : "?";
    snprintf(name, sizeof name, "OpenBLAS (%s kernels, %s; %s)", core,
             g_kernel_choice.reason.c_str(), OPENBLAS_LIBRARY);
    return name;
}

static CBLAS_TRANSPOSE op(bool trans) { return trans ? CblasTrans : CblasNoTrans; }

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
    const OpenBlas& blas = openblas();
    double start = omp_get_wtime();
    blas.sgemm(CblasRowMajor, op(trans_a), op(trans_b), M, N, K, alpha, A, lda, B, ldb, beta, C,
               ldc);
    count(M, N, K, start);
}
void gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A, int lda,
          const double* B, int ldb, double beta, double* C, int ldc) {
    const OpenBlas& blas = openblas();
    double start = omp_get_wtime();
    blas.dgemm(CblasRowMajor, op(trans_a), op(trans_b), M, N, K, alpha, A, lda, B, ldb, beta, C,
               ldc);
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

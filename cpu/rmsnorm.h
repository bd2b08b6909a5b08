// RMSNorm over the last dimension C of N rows: out = x · rstd · weight, with
// rstd = 1/sqrt(mean(x²) + eps) (no mean subtracted, no bias; Llama uses eps = 1e-5). Forward saves
// rstd per row for backward. Backward adds into dinp and dweight: rows in parallel for dinp, then
// channels in parallel for dweight, so no two threads write the same element and the sums' order
// does not depend on the thread count.
#pragma once
#include <cmath>
#include <cstddef>

#include <omp.h>

#include "cpu/parallel.h"

template <typename Real>
void rmsnorm_forward(Real* out, Real* rstd, const Real* inp, const Real* weight, int N, int C,
                     Real eps) {
#pragma omp parallel for schedule(static) if (worth_parallel((size_t)N * C))
    for (int n = 0; n < N; n++) {
        const Real* x = inp + (size_t)n * C;
        Real sq = 0;
#pragma omp simd reduction(+ : sq)
        for (int c = 0; c < C; c++) sq += x[c] * x[c];
        const Real s = Real(1) / std::sqrt(sq / C + eps);
        Real* o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) o[c] = x[c] * s * weight[c];
        rstd[n] = s;
    }
}

template <typename Real>
void rmsnorm_backward(Real* dinp, Real* dweight, const Real* dout, const Real* inp,
                      const Real* weight, const Real* rstd, int N, int C) {
    // With xhat = x · rstd and g = dout · weight: dx = rstd · (g − xhat · mean(g · xhat)).
#pragma omp parallel for schedule(static) if (worth_parallel((size_t)N * C))
    for (int n = 0; n < N; n++) {
        const Real* x = inp + (size_t)n * C;
        const Real* d = dout + (size_t)n * C;
        const Real s = rstd[n];
        Real gx_mean = 0;
#pragma omp simd reduction(+ : gx_mean)
        for (int c = 0; c < C; c++) gx_mean += d[c] * weight[c] * x[c] * s;
        gx_mean /= C;
        Real* dx = dinp + (size_t)n * C;
        for (int c = 0; c < C; c++) dx[c] += s * (d[c] * weight[c] - x[c] * s * gx_mean);
    }
    // dweight: each thread owns a block of channels and walks the rows.
#pragma omp parallel if (worth_parallel((size_t)N * C))
    {
        const int threads = omp_get_num_threads(), id = omp_get_thread_num();
        const int begin = (int)((long)C * id / threads), end = (int)((long)C * (id + 1) / threads);
        for (int n = 0; n < N; n++) {
            const Real* x = inp + (size_t)n * C;
            const Real* d = dout + (size_t)n * C;
            for (int c = begin; c < end; c++) dweight[c] += d[c] * x[c] * rstd[n];
        }
    }
}

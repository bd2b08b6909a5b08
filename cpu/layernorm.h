// LayerNorm over the last dimension C of N rows: out = (x − mean) · rstd · weight + bias, with
// rstd = 1/sqrt(var + 1e-5) (biased variance). Forward saves mean and rstd per row for backward.
// Backward adds into dinp, dweight and dbias: rows in parallel for dinp, then channels in parallel
// for the parameter gradients, so no two threads write the same element and the sums' order does
// not depend on the thread count.
#pragma once
#include <cmath>
#include <cstddef>

#include <omp.h>

#include "cpu/parallel.h"

template <typename Real>
void layernorm_forward(Real* out, Real* mean, Real* rstd, const Real* inp, const Real* weight,
                       const Real* bias, int N, int C) {
    const Real eps = Real(1e-5);
#pragma omp parallel for schedule(static) if (worth_parallel((size_t)N * C))
    for (int n = 0; n < N; n++) {
        const Real* x = inp + (size_t)n * C;
        Real sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int c = 0; c < C; c++) sum += x[c];
        const Real m = sum / C;
        Real sq = 0;
#pragma omp simd reduction(+ : sq)
        for (int c = 0; c < C; c++) sq += (x[c] - m) * (x[c] - m);
        const Real s = Real(1) / std::sqrt(sq / C + eps);
        Real* o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * weight[c] + bias[c];
        mean[n] = m;
        rstd[n] = s;
    }
}

template <typename Real>
void layernorm_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                        const Real* weight, const Real* mean, const Real* rstd, int N, int C) {
    // dx = rstd · (g − mean(g) − xhat · mean(g · xhat)), where g = dout · weight.
#pragma omp parallel for schedule(static) if (worth_parallel((size_t)N * C))
    for (int n = 0; n < N; n++) {
        const Real* x = inp + (size_t)n * C;
        const Real* d = dout + (size_t)n * C;
        const Real m = mean[n], s = rstd[n];
        Real g_mean = 0, gx_mean = 0;
#pragma omp simd reduction(+ : g_mean, gx_mean)
        for (int c = 0; c < C; c++) {
            const Real g = d[c] * weight[c];
            g_mean += g;
            gx_mean += g * (x[c] - m) * s;
        }
        g_mean /= C;
        gx_mean /= C;
        Real* dx = dinp + (size_t)n * C;
        for (int c = 0; c < C; c++) {
            const Real xhat = (x[c] - m) * s;
            dx[c] += s * (d[c] * weight[c] - g_mean - xhat * gx_mean);
        }
    }
    // Parameter gradients: each thread owns a block of channels and walks the rows.
#pragma omp parallel if (worth_parallel((size_t)N * C))
    {
        const int threads = omp_get_num_threads(), id = omp_get_thread_num();
        const int begin = (int)((long)C * id / threads), end = (int)((long)C * (id + 1) / threads);
        for (int n = 0; n < N; n++) {
            const Real* x = inp + (size_t)n * C;
            const Real* d = dout + (size_t)n * C;
            const Real m = mean[n], s = rstd[n];
            for (int c = begin; c < end; c++) {
                dweight[c] += d[c] * (x[c] - m) * s;
                dbias[c] += d[c];
            }
        }
    }
}

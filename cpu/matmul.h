// Linear layer: out (N×OC) = inp (N×IC) · weightᵀ + bias, weight stored (OC × IC) row-major as in
// llm.c's files; bias may be null. The three products go through gemm() (OpenBLAS or loops).
// Backward adds into dinp, dweight and dbias (dbias may be null when bias is).
#pragma once
#include <cstddef>

#include <omp.h>

#include "cpu/parallel.h"

#include "cpu/gemm.h"

template <typename Real>
void matmul_forward(Real* out, const Real* inp, const Real* weight, const Real* bias, int N, int IC,
                    int OC) {
    Real beta = 0;
    if (bias) {
#pragma omp parallel for schedule(static) if (worth_parallel((size_t)N * OC))
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) out[(size_t)n * OC + o] = bias[o];
        beta = 1;
    }
    gemm(false, true, N, OC, IC, Real(1), inp, IC, weight, IC, beta, out, OC);
}

template <typename Real>
void matmul_backward(Real* dinp, Real* dweight, Real* dbias, const Real* dout, const Real* inp,
                     const Real* weight, int N, int IC, int OC) {
    gemm(false, false, N, IC, OC, Real(1), dout, OC, weight, IC, Real(1), dinp, IC);  // dout · W
    gemm(true, false, OC, IC, N, Real(1), dout, OC, inp, IC, Real(1), dweight, IC);  // doutᵀ · inp
    if (dbias) {
        // Column sums of dout: each thread owns a block of columns and walks the rows.
#pragma omp parallel if (worth_parallel((size_t)N * OC))
        {
            const int threads = omp_get_num_threads(), id = omp_get_thread_num();
            const int begin = (int)((long)OC * id / threads),
                      end = (int)((long)OC * (id + 1) / threads);
            for (int n = 0; n < N; n++) {
                const Real* d = dout + (size_t)n * OC;
                for (int o = begin; o < end; o++) dbias[o] += d[o];
            }
        }
    }
}

// Causal multi-head self-attention. qkv (B, T, 3C) holds q, k, v side by side, each split into NH
// heads of hs = C/NH channels; out (B, T, C) puts head h at channels [h·hs, (h+1)·hs).
// For query t of head h: att[t, t2] = softmax over t2 ≤ t of q_t·k_t2 / sqrt(hs) (zero for t2 > t),
// out_t = Σ att[t, t2] · v_t2. Forward saves att (B, NH, T, T) for backward.
// Work is split over (b, h); every inner loop runs over hs contiguous channels, so the compiler
// vectorises it, and a thread touches only its own head's slices of dqkv.
#pragma once
#include <cmath>
#include <cstddef>
#include <vector>

#include "cpu/fast_math.h"
#include "cpu/parallel.h"

template <typename Real>
void attention_forward(Real* out, Real* att, const Real* qkv, int B, int T, int C, int NH) {
    const int hs = C / NH, C3 = 3 * C;
    const Real scale = Real(1) / std::sqrt(Real(hs));
#pragma omp parallel for collapse(2) schedule(static) if (worth_parallel((size_t)B * T * T * C))
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const Real* base = qkv + (size_t)b * T * C3 + h * hs;  // q of (b, t=0, h)
            for (int t = 0; t < T; t++) {
                const Real* q = base + (size_t)t * C3;
                Real* a = att + (((size_t)b * NH + h) * T + t) * T;
                Real max_score = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const Real* k = base + (size_t)t2 * C3 + C;
                    Real dot = 0;
#pragma omp simd reduction(+ : dot)
                    for (int i = 0; i < hs; i++) dot += q[i] * k[i];
                    a[t2] = dot * scale;
                    if (a[t2] > max_score) max_score = a[t2];
                }
                Real sum = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    a[t2] = exp_of(a[t2] - max_score);
                    sum += a[t2];
                }
                const Real inv_sum = Real(1) / sum;
                for (int t2 = 0; t2 <= t; t2++) a[t2] *= inv_sum;
                for (int t2 = t + 1; t2 < T; t2++) a[t2] = 0;

                Real* o = out + ((size_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++) o[i] = 0;
                for (int t2 = 0; t2 <= t; t2++) {
                    const Real* v = base + (size_t)t2 * C3 + 2 * C;
                    for (int i = 0; i < hs; i++) o[i] += a[t2] * v[i];
                }
            }
        }
    }
}

// Adds into dqkv. Per query t: datt = dout_t · v, dv += att · dout_t, then the softmax backward
// dscore = att · (datt − Σ att·datt), and dq, dk from the scaled dot products.
template <typename Real>
void attention_backward(Real* dqkv, const Real* dout, const Real* qkv, const Real* att, int B, int T,
                        int C, int NH) {
    const int hs = C / NH, C3 = 3 * C;
    const Real scale = Real(1) / std::sqrt(Real(hs));
#pragma omp parallel if (worth_parallel((size_t)B * T * T * C))
    {
        std::vector<Real> datt(T);  // one row of d(att), per thread
#pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                const Real* base = qkv + (size_t)b * T * C3 + h * hs;
                Real* dbase = dqkv + (size_t)b * T * C3 + h * hs;
                for (int t = 0; t < T; t++) {
                    const Real* a = att + (((size_t)b * NH + h) * T + t) * T;
                    const Real* d = dout + ((size_t)b * T + t) * C + h * hs;
                    Real att_dot_datt = 0;
                    for (int t2 = 0; t2 <= t; t2++) {
                        const Real* v = base + (size_t)t2 * C3 + 2 * C;
                        Real* dv = dbase + (size_t)t2 * C3 + 2 * C;
                        Real dot = 0;
#pragma omp simd reduction(+ : dot)
                        for (int i = 0; i < hs; i++) {
                            dot += d[i] * v[i];
                            dv[i] += a[t2] * d[i];
                        }
                        datt[t2] = dot;
                        att_dot_datt += a[t2] * dot;
                    }
                    const Real* q = base + (size_t)t * C3;
                    Real* dq = dbase + (size_t)t * C3;
                    for (int t2 = 0; t2 <= t; t2++) {
                        const Real dscore = a[t2] * (datt[t2] - att_dot_datt) * scale;
                        const Real* k = base + (size_t)t2 * C3 + C;
                        Real* dk = dbase + (size_t)t2 * C3 + C;
                        for (int i = 0; i < hs; i++) {
                            dq[i] += dscore * k[i];
                            dk[i] += dscore * q[i];
                        }
                    }
                }
            }
        }
    }
}

// Grouped-query causal self-attention: NH query heads share KV key/value heads (NH % KV == 0), query
// head h reading key/value head h / (NH/KV), so each group of NH/KV consecutive query heads shares
// one. KV = NH is ordinary multi-head attention (cpu/attention.h), KV = 1 multi-query attention.
// q (B, T, NH·hs), k and v (B, T, KV·hs), out (B, T, NH·hs), head h at channels [h·hs, (h+1)·hs).
// Per (b, h), with Q the query head's (T × hs) slice and K, V its key/value head's:
//   att = causal_softmax(Q·Kᵀ / sqrt(hs))   (row t is zero beyond t2 = t)
//   out = att · V
// Forward saves att (B, NH, T, T) for backward. Backward adds into dq, dk and dv; a key/value head's
// gradients are the sums over its query heads. Forward splits the (b, h) pairs over OpenMP threads,
// backward the (b, key/value head) pairs, so each thread owns what it writes and the sums' order
// does not depend on the thread count. The products are GEMMs on strided slices, as in
// cpu/attention.h, whose softmax row this shares.
#pragma once
#include <cmath>
#include <cstddef>
#include <vector>

#include "cpu/attention.h"
#include "cpu/gemm.h"
#include "cpu/parallel.h"

// The key/value head that query head h reads.
inline int kv_head_of(int h, int NH, int KV) { return h / (NH / KV); }

template <typename Real>
void gqa_attention_forward(Real* out, Real* att, const Real* q, const Real* k, const Real* v, int B,
                           int T, int NH, int KV, int hs) {
    const int q_stride = NH * hs, kv_stride = KV * hs;
    const Real scale = Real(1) / std::sqrt(Real(hs));
#pragma omp parallel for collapse(2) schedule(static) if (worth_parallel((size_t)B * T * T * q_stride))
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const size_t kv_at = (size_t)b * T * kv_stride + kv_head_of(h, NH, KV) * hs;
            const Real* qh = q + (size_t)b * T * q_stride + h * hs;
            Real* a = att + ((size_t)b * NH + h) * T * T;
            gemm(false, true, T, T, hs, scale, qh, q_stride, k + kv_at, kv_stride, Real(0), a, T);
            for (int t = 0; t < T; t++) {
                Real* row = a + (size_t)t * T;
                causal_softmax_row(row, t);
                for (int t2 = t + 1; t2 < T; t2++) row[t2] = 0;
            }
            gemm(false, false, T, hs, T, Real(1), a, T, v + kv_at, kv_stride, Real(0),
                 out + (size_t)b * T * q_stride + h * hs, q_stride);
        }
    }
}

// Per query head: datt = dout·Vᵀ, dV += attᵀ·dout, dscore from the softmax backward, then
// dQ += dscore·K and dK += dscoreᵀ·Q, the key/value head's sums taken over its query heads in order.
template <typename Real>
void gqa_attention_backward(Real* dq, Real* dk, Real* dv, const Real* dout, const Real* q,
                            const Real* k, const Real* v, const Real* att, int B, int T, int NH,
                            int KV, int hs) {
    const int q_stride = NH * hs, kv_stride = KV * hs, group = NH / KV;
    const Real scale = Real(1) / std::sqrt(Real(hs));
#pragma omp parallel if (worth_parallel((size_t)B * T * T * q_stride))
    {
        std::vector<Real> dscore((size_t)T * T);  // per thread: datt, then dscore in place
#pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++) {
            for (int kvh = 0; kvh < KV; kvh++) {
                const size_t kv_at = (size_t)b * T * kv_stride + kvh * hs;
                for (int h = kvh * group; h < (kvh + 1) * group; h++) {
                    const size_t q_at = (size_t)b * T * q_stride + h * hs;
                    const Real* a = att + ((size_t)b * NH + h) * T * T;
                    const Real* d = dout + q_at;
                    gemm(false, true, T, T, hs, Real(1), d, q_stride, v + kv_at, kv_stride, Real(0),
                         dscore.data(), T);
                    gemm(true, false, T, hs, T, Real(1), a, T, d, q_stride, Real(1), dv + kv_at,
                         kv_stride);
                    causal_softmax_backward(dscore.data(), a, T, scale);
                    gemm(false, false, T, hs, T, Real(1), dscore.data(), T, k + kv_at, kv_stride,
                         Real(1), dq + q_at, q_stride);
                    gemm(true, false, T, hs, T, Real(1), dscore.data(), T, q + q_at, q_stride,
                         Real(1), dk + kv_at, kv_stride);
                }
            }
        }
    }
}

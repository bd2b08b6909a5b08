// Causal multi-head self-attention. qkv (B, T, 3C) holds q, k, v side by side, each split into NH
// heads of hs = C/NH channels; out (B, T, C) puts head h at channels [h·hs, (h+1)·hs).
// Per (b, h), with Q, K, V the head's (T × hs) slices (rows 3C apart in qkv):
//   att = causal_softmax(Q·Kᵀ / sqrt(hs))   (row t is zero beyond t2 = t)
//   out = att · V
// Forward saves att (B, NH, T, T) for backward. The three products of each head are GEMMs on the
// strided slices, and the heads are split over OpenMP threads, so each GEMM runs on its thread
// (see cpu/gemm.h). The GEMMs compute the full T×T square, twice the causal work, but at GEMM speed
// that is still several times faster than dot-product loops (10 vs 100+ GFLOP/s per core at
// T=1024).
#pragma once
#include <cmath>
#include <cstddef>
#include <vector>

#include "cpu/fast_math.h"
#include "cpu/gemm.h"
#include "cpu/parallel.h"

// Softmax of row[0..t] in place: the attention probabilities of query t over keys 0..t. Shared with
// the key/value-cache decoder (cpu/gpt_decode.h), so that both compute them in the same order.
template <typename Real>
inline void causal_softmax_row(Real* row, int t) {
    Real max_score = -INFINITY;
    for (int t2 = 0; t2 <= t; t2++) max_score = row[t2] > max_score ? row[t2] : max_score;
    Real sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int t2 = 0; t2 <= t; t2++) {
        row[t2] = exp_of(row[t2] - max_score);
        sum += row[t2];
    }
    const Real inv_sum = Real(1) / sum;
    for (int t2 = 0; t2 <= t; t2++) row[t2] *= inv_sum;
}

// Softmax backward in place over the causal rows of a (T × T) block: datt becomes
// dscore = att ⊙ (datt − rowsum(att ⊙ datt)) · scale, zero beyond the diagonal. Shared with the
// grouped-query attention (cpu/gqa_attention.h).
template <typename Real>
void causal_softmax_backward(Real* datt, const Real* att, int T, Real scale) {
    for (int t = 0; t < T; t++) {
        const Real* a_row = att + (size_t)t * T;
        Real* row = datt + (size_t)t * T;
        Real att_dot_datt = 0;
#pragma omp simd reduction(+ : att_dot_datt)
        for (int t2 = 0; t2 <= t; t2++) att_dot_datt += a_row[t2] * row[t2];
        for (int t2 = 0; t2 <= t; t2++) row[t2] = a_row[t2] * (row[t2] - att_dot_datt) * scale;
        for (int t2 = t + 1; t2 < T; t2++) row[t2] = 0;
    }
}

template <typename Real>
void attention_forward(Real* out, Real* att, const Real* qkv, int B, int T, int C, int NH) {
    const int hs = C / NH, C3 = 3 * C;
    const Real scale = Real(1) / std::sqrt(Real(hs));
#pragma omp parallel for collapse(2) schedule(static) if (worth_parallel((size_t)B * T * T * C))
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const Real* q = qkv + (size_t)b * T * C3 + h * hs;
            const Real* k = q + C;
            const Real* v = q + 2 * C;
            Real* a = att + ((size_t)b * NH + h) * T * T;
            gemm(false, true, T, T, hs, scale, q, C3, k, C3, Real(0), a, T);  // scores
            for (int t = 0; t < T; t++) {
                Real* row = a + (size_t)t * T;
                causal_softmax_row(row, t);
                for (int t2 = t + 1; t2 < T; t2++) row[t2] = 0;
            }
            gemm(false, false, T, hs, T, Real(1), a, T, v, C3, Real(0),
                 out + (size_t)b * T * C + h * hs, C);
        }
    }
}

// Adds into dqkv. Per head: datt = dout·Vᵀ, dV += attᵀ·dout, the softmax backward
// dscore = att ⊙ (datt − rowsum(att ⊙ datt)) / sqrt(hs), then dQ += dscore·K and dK += dscoreᵀ·Q.
template <typename Real>
void attention_backward(Real* dqkv, const Real* dout, const Real* qkv, const Real* att, int B,
                        int T, int C, int NH) {
    const int hs = C / NH, C3 = 3 * C;
    const Real scale = Real(1) / std::sqrt(Real(hs));
#pragma omp parallel if (worth_parallel((size_t)B * T * T * C))
    {
        std::vector<Real> dscore((size_t)T * T);  // per thread: datt, then dscore in place
#pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                const size_t head = (size_t)b * T * C3 + h * hs;
                const Real *q = qkv + head, *k = q + C, *v = q + 2 * C;
                Real *dq = dqkv + head, *dk = dq + C, *dv = dq + 2 * C;
                const Real* a = att + ((size_t)b * NH + h) * T * T;
                const Real* d = dout + (size_t)b * T * C + h * hs;
                gemm(false, true, T, T, hs, Real(1), d, C, v, C3, Real(0), dscore.data(), T);
                gemm(true, false, T, hs, T, Real(1), a, T, d, C, Real(1), dv, C3);
                causal_softmax_backward(dscore.data(), a, T, scale);
                gemm(false, false, T, hs, T, Real(1), dscore.data(), T, k, C3, Real(1), dq, C3);
                gemm(true, false, T, hs, T, Real(1), dscore.data(), T, q, C3, Real(1), dk, C3);
            }
        }
    }
}

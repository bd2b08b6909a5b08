// The CPU reference of gradient compression (kernels/grad_compression.h says what each operation is
// for and how the ranks use it), templated on the element type (Real = float or double):
//
// int8 block quantisation with error feedback, per block of 256 consecutive elements:
//   x = g + e;  scale = max|x| / 127 (0 for an all-zero block);  q = round(x / scale) (half away from
//   zero, in [−127, 127]; 0 where scale is 0);  e = x − scale·q;  dequantised y = scale·q.
// sign (1-bit) compression with error feedback, per block of 256:
//   x = g + e;  scale = ‖x‖₁ / count;  bit = x ≥ 0 (bit j of word w: element 32w + j);
//   e = x − scale·sign(x) (sign(0) = +1);  decompressed y = ±scale.
// PowerSGD of an n×m row-major matrix with rank r:
//   M = g + e;  P = M·Q;  P's columns orthonormalised (Gram-Schmidt, two classical passes: each pass
//   measures all of a column's projections on the earlier columns, then removes them; a column left
//   with at most 1e-4 of its length set to 0);  Q = Mᵀ·P;  M̂ = P·Qᵀ;  e = M − M̂.
// A block holding an inf or NaN gets a NaN scale (int8: q = 0 and e = x), as on the GPU.
//
// With Real = float the int8 operations, the sign operations other than the scale (the GPU adds ‖x‖₁
// lane by lane, then across a warp; this reference in index order), and powersgd_reconstruct give the
// GPU kernels' bits: the same fp32 operations in the same order, std::fma where the kernels use fmaf.
// The sums of the products and the Gram-Schmidt dot products are plain loops in index order; in double
// they are the reference the GPU's fp32 results (and sign's scales) are checked against.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "cpu/parallel.h"

constexpr size_t COMPRESSION_BLOCK = 256;  // elements sharing one scale

inline size_t compression_block_count(size_t n) { return (n + COMPRESSION_BLOCK - 1) / COMPRESSION_BLOCK; }
inline size_t sign_word_count(size_t n) { return (n + 31) / 32; }

// Helpers of the operations below (in a namespace of their own: the kernels' header has device
// functions of the same names, and a test includes both).
namespace compression_reference {

// The end of block b of n elements.
inline size_t block_end(size_t b, size_t n) {
    const size_t end = (b + 1) * COMPRESSION_BLOCK;
    return end < n ? end : n;
}

// |x|, or +inf for a non-finite x (so that a NaN is not lost in a maximum).
template <typename Real>
Real magnitude_of(Real x) {
    const Real a = std::fabs(x);
    return a <= std::numeric_limits<Real>::max() ? a : std::numeric_limits<Real>::infinity();
}

// Element x quantised with `scale`: q, and x − scale·q in *residual.
template <typename Real>
int8_t int8_quantise_value(Real x, Real scale, Real* residual) {
    if (!(scale > Real(0))) {  // all zeros (or too small to scale), or NaN
        *residual = x;
        return 0;
    }
    Real t = std::round(x / scale);
    t = t < Real(-127) ? Real(-127) : t > Real(127) ? Real(127) : t;
    *residual = std::fma(-scale, t, x);
    return (int8_t)t;
}

// One block, x[0, count), quantised into q[0, count) and *scale; residual (may be null) gets
// x − scale·q.
template <typename Real>
void int8_quantise_block(const Real* x, size_t count, int8_t* q, Real* scale, Real* residual) {
    Real largest = 0;
    for (size_t i = 0; i < count; i++) largest = std::fmax(largest, magnitude_of(x[i]));
    *scale = largest <= std::numeric_limits<Real>::max() ? largest / Real(127) : std::numeric_limits<Real>::quiet_NaN();
    for (size_t i = 0; i < count; i++) {
        Real dropped;
        q[i] = int8_quantise_value(x[i], *scale, &dropped);
        if (residual != nullptr) residual[i] = dropped;
    }
}

// ±scale of element i.
template <typename Real>
Real signed_scale(const uint32_t* bits, const Real* scales, size_t i) {
    const Real scale = scales[i / COMPRESSION_BLOCK];
    return (bits[i / 32] >> (i % 32)) & 1u ? scale : -scale;
}

// Σ_i P[i, a]·P[i, b].
template <typename Real>
Real column_dot(const Real* P, int n, int r, int a, int b) {
    Real sum = 0;
    for (int i = 0; i < n; i++) sum += P[(size_t)i * r + a] * P[(size_t)i * r + b];
    return sum;
}

}  // namespace compression_reference

// ---- int8

// q[0, n), scales[0, compression_block_count(n)) from grads + residual; residual (null: no error
// feedback) becomes what the quantisation dropped.
template <typename Real>
void int8_quantise(int8_t* q, Real* scales, Real* residual, const Real* grads, size_t n) {
    const size_t blocks = compression_block_count(n);
#pragma omp parallel for schedule(static) if (worth_parallel(n))
    for (size_t b = 0; b < blocks; b++) {
        Real x[COMPRESSION_BLOCK];
        const size_t first = b * COMPRESSION_BLOCK, count = compression_reference::block_end(b, n) - first;
        for (size_t k = 0; k < count; k++)
            x[k] = residual != nullptr ? grads[first + k] + residual[first + k] : grads[first + k];
        compression_reference::int8_quantise_block(x, count, q + first, scales + b,
                                                   residual != nullptr ? residual + first : nullptr);
    }
}

template <typename Real>
void int8_dequantise(Real* out, const int8_t* q, const Real* scales, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = scales[i / COMPRESSION_BLOCK] * Real(q[i]);
}

// R ranks' blocks of one shard (rank r's q at q_in + r·q_stride, scales at scales_in + r·scale_stride)
// summed in rank order (a fma per rank from 0) and multiplied by factor: sum_out (may be null); that
// value + residual (may be null) requantised into q_out, scales_out, residual keeping the new error.
template <typename Real>
void int8_sum_requantise(int8_t* q_out, Real* scales_out, Real* residual, Real* sum_out, const int8_t* q_in,
                         size_t q_stride, const Real* scales_in, size_t scale_stride, int ranks, size_t n,
                         Real factor) {
    const size_t blocks = compression_block_count(n);
    for (size_t b = 0; b < blocks; b++) {
        Real x[COMPRESSION_BLOCK];
        const size_t first = b * COMPRESSION_BLOCK, count = compression_reference::block_end(b, n) - first;
        for (size_t k = 0; k < count; k++) {
            Real sum = 0;
            for (int r = 0; r < ranks; r++)
                sum = std::fma(scales_in[r * scale_stride + b], Real(q_in[r * q_stride + first + k]), sum);
            x[k] = factor * sum;
            if (sum_out != nullptr) sum_out[first + k] = x[k];
            if (residual != nullptr) x[k] += residual[first + k];
        }
        compression_reference::int8_quantise_block(x, count, q_out + first, scales_out + b,
                                                   residual != nullptr ? residual + first : nullptr);
    }
}

// ---- sign

// bits[0, sign_word_count(n)), scales[0, compression_block_count(n)) from grads + residual (may be
// null); residual becomes x − scale·sign(x). Bits past n are 0.
template <typename Real>
void sign_compress(uint32_t* bits, Real* scales, Real* residual, const Real* grads, size_t n) {
    for (size_t w = 0; w < sign_word_count(n); w++) bits[w] = 0;
    for (size_t b = 0; b < compression_block_count(n); b++) {
        const size_t first = b * COMPRESSION_BLOCK, end = compression_reference::block_end(b, n);
        Real x[COMPRESSION_BLOCK], l1 = 0;
        for (size_t i = first; i < end; i++) {
            x[i - first] = residual != nullptr ? grads[i] + residual[i] : grads[i];
            l1 += compression_reference::magnitude_of(x[i - first]);
        }
        const Real scale = l1 <= std::numeric_limits<Real>::max() ? l1 / Real(end - first)
                                                                  : std::numeric_limits<Real>::quiet_NaN();
        scales[b] = scale;
        for (size_t i = first; i < end; i++) {
            const bool positive = x[i - first] >= Real(0);
            if (positive) bits[i / 32] |= 1u << (i % 32);
            if (residual != nullptr) residual[i] = positive ? x[i - first] - scale : x[i - first] + scale;
        }
    }
}

template <typename Real>
void sign_decompress(Real* out, const uint32_t* bits, const Real* scales, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = compression_reference::signed_scale(bits, scales, i);
}

// out = factor · Σ_r ±scale_r in rank order (rank r's words at bits + r·word_stride, its scales at
// scales + r·scale_stride).
template <typename Real>
void sign_average(Real* out, const uint32_t* bits, size_t word_stride, const Real* scales, size_t scale_stride,
                  int ranks, size_t n, Real factor) {
    for (size_t i = 0; i < n; i++) {
        Real sum = 0;
        for (int r = 0; r < ranks; r++)
            sum += compression_reference::signed_scale(bits + r * word_stride, scales + r * scale_stride, i);
        out[i] = factor * sum;
    }
}

// ---- PowerSGD (M n×m, P n×r, Q m×r, all row-major)

template <typename Real>
void error_feedback_add(Real* x, const Real* grads, const Real* residual, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = grads[i] + residual[i];
}

// P = M·Q.
template <typename Real>
void powersgd_project_rows(Real* P, const Real* M, const Real* Q, int n, int m, int r) {
#pragma omp parallel for schedule(static) if (worth_parallel((size_t)n * m * r))
    for (int i = 0; i < n; i++)
        for (int k = 0; k < r; k++) {
            Real sum = 0;
            for (int j = 0; j < m; j++) sum += M[(size_t)i * m + j] * Q[(size_t)j * r + k];
            P[(size_t)i * r + k] = sum;
        }
}

// Q = Mᵀ·P.
template <typename Real>
void powersgd_project_columns(Real* Q, const Real* M, const Real* P, int n, int m, int r) {
#pragma omp parallel for schedule(static) if (worth_parallel((size_t)n * m * r))
    for (int j = 0; j < m; j++)
        for (int k = 0; k < r; k++) {
            Real sum = 0;
            for (int i = 0; i < n; i++) sum += M[(size_t)i * m + j] * P[(size_t)i * r + k];
            Q[(size_t)j * r + k] = sum;
        }
}

// P's columns orthonormalised in place, column by column: Gram-Schmidt in two classical passes (each
// measures column k's dot products with all the earlier columns, then removes the k projections,
// in order j = 0..k−1, as the kernel does); a column left with at most 1e-4 of its length (dependent
// on the earlier ones) becomes 0.
template <typename Real>
void powersgd_orthogonalise(Real* P, int n, int r) {
    const Real dependent_column = Real(1e-4);
    std::vector<Real> dots(r);  // column k's dot products with columns 0..k−1
    for (int k = 0; k < r; k++) {
        const Real length = std::sqrt(compression_reference::column_dot(P, n, r, k, k));
        for (int pass = 0; pass < 2; pass++) {
            for (int j = 0; j < k; j++) dots[j] = compression_reference::column_dot(P, n, r, k, j);
            for (int i = 0; i < n; i++)
                for (int j = 0; j < k; j++) P[(size_t)i * r + k] -= dots[j] * P[(size_t)i * r + j];
        }
        const Real remainder = std::sqrt(compression_reference::column_dot(P, n, r, k, k));
        const bool dependent = remainder <= dependent_column * length;
        for (int i = 0; i < n; i++) P[(size_t)i * r + k] = dependent ? Real(0) : P[(size_t)i * r + k] / remainder;
    }
}

// out = P·Qᵀ and residual = M − P·Qᵀ (either may be null; out may be M): the products added in
// order k = 0..r−1 by fma from 0, as the kernel does.
template <typename Real>
void powersgd_reconstruct(Real* out, Real* residual, const Real* M, const Real* P, const Real* Q, int n, int m,
                          int r) {
#pragma omp parallel for schedule(static) if (worth_parallel((size_t)n * m * r))
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++) {
            Real approximation = 0;
            for (int k = 0; k < r; k++)
                approximation = std::fma(P[(size_t)i * r + k], Q[(size_t)j * r + k], approximation);
            const size_t index = (size_t)i * m + j;
            if (residual != nullptr) residual[index] = M[index] - approximation;
            if (out != nullptr) out[index] = approximation;
        }
}

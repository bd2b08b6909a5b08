// Rotary position embeddings (RoPE) in the "rotate half" layout: within each head of hs channels,
// channel i and channel i + hs/2 form a pair (i < hs/2) that is rotated by the angle t · f_i, where
// t is the position and f_i = θ^(−2i/hs) (θ = 500000 for Llama 3):
//   out[i]        = x[i] · cos − x[i + hs/2] · sin
//   out[i + hs/2] = x[i + hs/2] · cos + x[i] · sin
// which is the complex product (x[i] + j·x[i + hs/2]) · e^(j·t·f_i), with the angles' tables of
// base/rope_tables.h (Llama 3.1's scaling included). Backward is the inverse rotation (by −t · f_i)
// of the output's gradient, added into dinp.
// Tensors are (B, T, heads, hs) rows, position t = row index mod T.
#pragma once
#include <cstddef>

#include "base/rope_tables.h"
#include "cpu/parallel.h"

// Rotates every head of every row by sign · (its angle): sign +1 writes out (which may be inp),
// sign −1 adds into out (the backward pass; out must not be inp).
template <typename Real>
void rope_rotate(Real* out, const Real* inp, const Real* cos_table, const Real* sin_table, int B,
                 int T, int heads, int head_size, Real sign, bool accumulate) {
    const int half = head_size / 2;
    const size_t rows = (size_t)B * T * heads;
#pragma omp parallel for schedule(static) if (worth_parallel(rows * head_size))
    for (size_t r = 0; r < rows; r++) {
        const int t = (int)(r / heads % T);
        const Real* c = cos_table + (size_t)t * half;
        const Real* s = sin_table + (size_t)t * half;
        const Real* x = inp + r * head_size;
        Real* o = out + r * head_size;
        for (int i = 0; i < half; i++) {
            const Real x1 = x[i], x2 = x[i + half], sn = sign * s[i];
            const Real y1 = x1 * c[i] - x2 * sn, y2 = x2 * c[i] + x1 * sn;
            o[i] = accumulate ? o[i] + y1 : y1;
            o[i + half] = accumulate ? o[i + half] + y2 : y2;
        }
    }
}

template <typename Real>
void rope_forward(Real* out, const Real* inp, const Real* cos_table, const Real* sin_table, int B,
                  int T, int heads, int head_size) {
    rope_rotate(out, inp, cos_table, sin_table, B, T, heads, head_size, Real(1), false);
}

template <typename Real>
void rope_backward(Real* dinp, const Real* dout, const Real* cos_table, const Real* sin_table,
                   int B, int T, int heads, int head_size) {
    rope_rotate(dinp, dout, cos_table, sin_table, B, T, heads, head_size, Real(-1), true);
}

// Token + position embedding: out[b,t,:] = wte[token[b,t], :] + wpe[t, :]; with wpe null (models
// whose positions enter elsewhere, as Llama's through RoPE) the token embedding alone.
// Backward adds dout into the embedding rows that were read (dwpe null when wpe was). It runs
// serially because two positions may share a token (and every batch row shares wpe); it is a small
// fraction of a step.
#pragma once
#include <cstddef>

#include "cpu/parallel.h"

template <typename Real>
void encoder_forward(Real* out, const int* tokens, const Real* wte, const Real* wpe, int B, int T,
                     int C) {
#pragma omp parallel for collapse(2) schedule(static) if (worth_parallel((size_t)B * T * C))
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            Real* o = out + ((size_t)b * T + t) * C;
            const Real* token_row = wte + (size_t)tokens[b * T + t] * C;
            if (!wpe) {
                for (int c = 0; c < C; c++) o[c] = token_row[c];
                continue;
            }
            const Real* position_row = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++) o[c] = token_row[c] + position_row[c];
        }
    }
}

template <typename Real>
void encoder_backward(Real* dwte, Real* dwpe, const Real* dout, const int* tokens, int B, int T,
                      int C) {
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const Real* d = dout + ((size_t)b * T + t) * C;
            Real* token_row = dwte + (size_t)tokens[b * T + t] * C;
            for (int c = 0; c < C; c++) token_row[c] += d[c];
            if (!dwpe) continue;
            Real* position_row = dwpe + (size_t)t * C;
            for (int c = 0; c < C; c++) position_row[c] += d[c];
        }
    }
}

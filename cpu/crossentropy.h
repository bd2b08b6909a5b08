// Softmax + cross-entropy over the real vocabulary. logits are (N, Vp) rows; only the first V
// columns are real tokens, the padding columns [V, Vp) never enter the softmax, the loss or the
// gradient. Forward writes losses[n] = logsumexp(logits[n, :V]) − logits[n, target] and saves the
// logsumexp per row, from which backward recomputes the probabilities (no (N, Vp) probability
// buffer).
#pragma once
#include <cmath>
#include <cstddef>

#include "cpu/fast_math.h"
#include "cpu/parallel.h"

template <typename Real>
void crossentropy_forward(Real* losses, Real* logsumexp, const Real* logits, const int* targets,
                          int N, int V, int Vp) {
#pragma omp parallel for schedule(static) if (worth_parallel((size_t)N * V))
    for (int n = 0; n < N; n++) {
        const Real* row = logits + (size_t)n * Vp;
        Real max_logit = -INFINITY;
#pragma omp simd reduction(max : max_logit)
        for (int v = 0; v < V; v++) max_logit = row[v] > max_logit ? row[v] : max_logit;
        Real sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int v = 0; v < V; v++) sum += exp_of(row[v] - max_logit);
        logsumexp[n] = max_logit + std::log(sum);
        losses[n] = logsumexp[n] - row[targets[n]];
    }
}

// Adds dloss · (softmax(logits[n, :V]) − onehot(target)) into dlogits[n, :V]; dloss is the
// gradient of the total loss with respect to each row's loss (1/N for a mean).
template <typename Real>
void crossentropy_backward(Real* dlogits, const Real* logits, const Real* logsumexp,
                           const int* targets, Real dloss, int N, int V, int Vp) {
#pragma omp parallel for schedule(static) if (worth_parallel((size_t)N * V))
    for (int n = 0; n < N; n++) {
        const Real* row = logits + (size_t)n * Vp;
        Real* d = dlogits + (size_t)n * Vp;
        const Real lse = logsumexp[n];
        for (int v = 0; v < V; v++) d[v] += dloss * exp_of(row[v] - lse);
        d[targets[n]] -= dloss;
    }
}

// LARS (You, Gitman and Ginsburg, "Large Batch Training of Convolutional Networks") over one tensor:
// momentum SGD whose gradient, weight decay included, is rescaled per tensor by a local learning
// rate ℓ. One buffer b (the momentum) instead of Adam's two moments. The gradient is first multiplied
// by grad_scale (the global-norm clipping factor):
//   g' = grad_scale · grad + weight_decay · p
//   ℓ = η · ‖p‖ / ‖g'‖   (cpu/trust_ratio.h: 1 where either norm is 0; 1 without adapt)
//   b = μ b + ℓ g';   p −= lr · b
// The norms are those of the tensor before the update. The model passes weight_decay = 0 for tensors
// that are not weight matrices, and adapt = false for them under --layer-adaptation matrices.
#pragma once
#include <cstddef>

#include "cpu/parallel.h"
#include "cpu/trust_ratio.h"

template <typename Real>
void lars_update(Real* params, Real* buffer, const Real* grads, size_t n, Real lr, Real momentum,
                 Real trust_coefficient, Real weight_decay, Real grad_scale, bool adapt) {
    auto direction = [&](size_t i) { return grad_scale * grads[i] + weight_decay * params[i]; };
    const auto norms = chunked_sums<2>(n, [&](size_t i, double* sums) {
        const Real d = direction(i);
        sums[0] += (double)params[i] * params[i];
        sums[1] += (double)d * d;
    });
    const Real local_lr = adapt ? (Real)trust_ratio(norms[0], norms[1], trust_coefficient) : Real(1);
#pragma omp parallel for schedule(static) if (worth_parallel(n))
    for (size_t i = 0; i < n; i++) {
        buffer[i] = momentum * buffer[i] + local_lr * direction(i);
        params[i] -= lr * buffer[i];
    }
}

// LAMB and LARS on one whole tensor in double precision, written from the formulas (see
// kernels/layer_adaptive.h's opening comment), for checking the kernels: test/kernels/test_adamw.cu
// and dev/cuda/adamw.cu. Shares no code with the kernels.
#pragma once
#include <cmath>
#include <vector>

struct LayerAdaptiveHyper {
    double lr = 0.05, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1, grad_scale = 0.7;
    double momentum = 0.9, trust_coefficient = 0.02;  // LARS's μ and η
};

inline double norm_of(const std::vector<double>& x) {
    double sum = 0;
    for (double e : x) sum += e * e;
    return std::sqrt(sum);
}
// The layer-wise factor: coefficient·‖weights‖/‖update‖, or 1 without adaptation or with a zero norm.
inline double reference_trust_ratio(const std::vector<double>& weights, const std::vector<double>& update,
                                    double coefficient, bool adapt) {
    const double w = norm_of(weights), u = norm_of(update);
    return adapt && w > 0 && u > 0 ? coefficient * w / u : 1.0;
}

// One LAMB step (step counts from 1): p, m, v updated in place from the raw gradients.
inline void lamb_reference_step(std::vector<double>& p, std::vector<double>& m, std::vector<double>& v,
                                const std::vector<double>& grads, const LayerAdaptiveHyper& h, int step, bool decay,
                                bool adapt) {
    const double lambda = decay ? h.weight_decay : 0.0;
    const double m_correction = 1 - std::pow(h.beta1, step), v_correction = 1 - std::pow(h.beta2, step);
    std::vector<double> u(p.size());
    for (size_t i = 0; i < p.size(); i++) {
        const double g = h.grad_scale * grads[i];
        m[i] = h.beta1 * m[i] + (1 - h.beta1) * g;
        v[i] = h.beta2 * v[i] + (1 - h.beta2) * g * g;
        u[i] = (m[i] / m_correction) / (std::sqrt(v[i] / v_correction) + h.eps) + lambda * p[i];
    }
    const double r = reference_trust_ratio(p, u, 1.0, adapt);
    for (size_t i = 0; i < p.size(); i++) p[i] -= h.lr * r * u[i];
}

// One LARS step: p and the momentum buffer b updated in place.
inline void lars_reference_step(std::vector<double>& p, std::vector<double>& b, const std::vector<double>& grads,
                                const LayerAdaptiveHyper& h, bool decay, bool adapt) {
    const double lambda = decay ? h.weight_decay : 0.0;
    std::vector<double> decayed(p.size());
    for (size_t i = 0; i < p.size(); i++) decayed[i] = h.grad_scale * grads[i] + lambda * p[i];
    const double local_rate = reference_trust_ratio(p, decayed, h.trust_coefficient, adapt);
    for (size_t i = 0; i < p.size(); i++) {
        b[i] = h.momentum * b[i] + local_rate * decayed[i];
        p[i] -= h.lr * b[i];
    }
}

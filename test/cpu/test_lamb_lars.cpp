// cpu/lamb.h and cpu/lars.h in fp32 against double-precision LAMB and LARS written here from their
// definitions, over several steps with weight decay and a clipping factor, on tensors of several
// sizes (one past a 2^16-element chunk of the parallel sums): weight matrices and 1-D tensors, a
// tensor of zero weights, one with zero gradients, under --layer-adaptation all and matrices.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cpu/lamb.h"
#include "cpu/lars.h"
#include "test/test.h"

namespace {

struct Case {
    size_t size;
    bool matrix;      // weight decay and, under `matrices`, a trust ratio
    bool zero_weights, zero_grads;
};
const Case kCases[] = {{1, false, false, false},   {7, true, false, false},   {1000, true, false, false},
                       {70000, true, false, false}, {300, true, true, false},  {300, false, true, false},
                       {300, false, false, true},   {300, true, false, true}};

double normal(std::mt19937& rng) { return std::normal_distribution<double>(0.0, 1.0)(rng); }

// A tensor's state in double (the reference) and in float (the code under test).
struct Tensor {
    std::vector<double> p, m, v, g;
    std::vector<float> pf, mf, vf, gf;
};

Tensor make_tensor(const Case& c, std::mt19937& rng) {
    Tensor t;
    t.p.resize(c.size), t.m.assign(c.size, 0), t.v.assign(c.size, 0), t.g.resize(c.size);
    for (double& x : t.p) x = c.zero_weights ? 0.0 : (float)(0.1 * normal(rng));  // exact in both
    t.pf.assign(t.p.begin(), t.p.end()), t.mf.assign(c.size, 0), t.vf.assign(c.size, 0);
    return t;
}

// New gradients for a step (zeros for a zero-gradient tensor), the same values in both precisions.
void draw_gradients(Tensor& t, const Case& c, std::mt19937& rng) {
    t.gf.resize(c.size);
    for (size_t i = 0; i < c.size; i++) t.gf[i] = c.zero_grads ? 0.0f : (float)(0.01 * normal(rng));
    t.g.assign(t.gf.begin(), t.gf.end());
}

double norm_of(const std::vector<double>& x) {
    double sum = 0;
    for (double value : x) sum += value * value;
    return std::sqrt(sum);
}

void check_close(const std::vector<float>& got, const std::vector<double>& want, const char* what,
                 const Case& c, int step) {
    const std::vector<double> got_d(got.begin(), got.end());
    const double error = tst::rel_l2_error(got_d.data(), want.data(), got.size());
    CHECK_MSG(error < 2e-6, "%s of a %zu-element tensor%s%s after step %d: %g off", what, c.size,
              c.zero_weights ? " of zero weights" : "", c.zero_grads ? " with zero gradients" : "", step, error);
}

const double kLr = 0.01, kDecay = 0.1, kScale = 0.7;

// LAMB in double: Adam's moments, the bias-corrected direction plus decay, the tensor's trust ratio.
void reference_lamb(Tensor& t, double decay, bool adapt, int step) {
    const double beta1 = 0.9f, beta2 = 0.999f, eps = 1e-6f;  // the float constants the code is given
    std::vector<double> u(t.p.size());
    for (size_t i = 0; i < t.p.size(); i++) {
        const double g = kScale * t.g[i];
        t.m[i] = beta1 * t.m[i] + (1 - beta1) * g;
        t.v[i] = beta2 * t.v[i] + (1 - beta2) * g * g;
        const double m_hat = t.m[i] / (1 - std::pow(beta1, step)), v_hat = t.v[i] / (1 - std::pow(beta2, step));
        u[i] = m_hat / (std::sqrt(v_hat) + eps) + decay * t.p[i];
    }
    const double pn = norm_of(t.p), un = norm_of(u);
    const double ratio = adapt && pn > 0 && un > 0 ? pn / un : 1.0;
    for (size_t i = 0; i < t.p.size(); i++) t.p[i] -= kLr * ratio * u[i];
}

// LARS in double: the decayed gradient, its local rate η‖p‖/‖g'‖, the momentum buffer (kept in m).
void reference_lars(Tensor& t, double decay, bool adapt) {
    const double momentum = 0.9f, eta = 0.001f;
    std::vector<double> d(t.p.size());
    for (size_t i = 0; i < t.p.size(); i++) d[i] = kScale * t.g[i] + decay * t.p[i];
    const double pn = norm_of(t.p), dn = norm_of(d);
    const double local = adapt && pn > 0 && dn > 0 ? eta * pn / dn : 1.0;
    for (size_t i = 0; i < t.p.size(); i++) {
        t.m[i] = momentum * t.m[i] + local * d[i];
        t.p[i] -= kLr * 10 * t.m[i];
    }
}

// Four steps of both optimizers on every case, under `all` (matrices_only false) or `matrices`.
void run_cases(bool lamb, bool matrices_only) {
    std::mt19937 rng(11);
    for (const Case& c : kCases) {
        Tensor t = make_tensor(c, rng);
        const double decay = c.matrix ? kDecay : 0.0;
        const bool adapt = c.matrix || !matrices_only;
        for (int step = 1; step <= 4; step++) {
            draw_gradients(t, c, rng);
            if (lamb) {
                reference_lamb(t, decay, adapt, step);
                lamb_update<float>(t.pf.data(), t.mf.data(), t.vf.data(), t.gf.data(), c.size, (float)kLr, 0.9f,
                                   0.999f, 1e-6f, (float)decay, (float)kScale, step, adapt);
                check_close(t.vf, t.v, "LAMB's v", c, step);
            } else {
                reference_lars(t, decay, adapt);
                lars_update<float>(t.pf.data(), t.mf.data(), t.gf.data(), c.size, (float)(kLr * 10), 0.9f, 0.001f,
                                   (float)decay, (float)kScale, adapt);
            }
            check_close(t.mf, t.m, lamb ? "LAMB's m" : "LARS's buffer", c, step);
            check_close(t.pf, t.p, lamb ? "LAMB's weights" : "LARS's weights", c, step);
        }
    }
}

}  // namespace

TEST(lamb_matches_double_reference) { run_cases(true, false); }
TEST(lamb_matches_double_reference_matrices_only) { run_cases(true, true); }
TEST(lars_matches_double_reference) { run_cases(false, false); }
TEST(lars_matches_double_reference_matrices_only) { run_cases(false, true); }

// The ratio is what makes them layer-wise: scaling a tensor's weights and gradients by 10 leaves its
// LAMB step's size relative to the weights unchanged (Adam's direction does not depend on the scale).
TEST(lamb_step_is_relative_to_the_weights) {
    for (float scale : {1.0f, 10.0f}) {
        std::vector<float> p(500), m(500, 0), v(500, 0), g(500);
        std::mt19937 rng(5);
        for (size_t i = 0; i < p.size(); i++) p[i] = scale * (float)normal(rng), g[i] = scale * (float)normal(rng);
        const std::vector<float> before = p;
        lamb_update<float>(p.data(), m.data(), v.data(), g.data(), p.size(), 0.01f, 0.9f, 0.999f, 1e-6f, 0.0f,
                           1.0f, 1, true);
        double moved = 0, weights = 0;
        for (size_t i = 0; i < p.size(); i++)
            moved += (double)(p[i] - before[i]) * (p[i] - before[i]), weights += (double)before[i] * before[i];
        CHECK_NEAR(std::sqrt(moved / weights), 0.01, 1e-5);
    }
}

// Muon in double precision, written from its definition with plain loops for every product: the
// reference of the tests of cpu/muon.h (test/cpu/test_muon.cpp) and of the CPU trainer's Muon
// (test/train/test_train_muon.cpp).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace muon_reference {

using Matrix = std::vector<double>;  // row-major

// (n, k) · (k, m), or with the second operand transposed: (n, k) · (m, k)ᵀ.
inline Matrix product(const Matrix& a, const Matrix& b, int n, int k, int m, bool b_transposed) {
    Matrix out((size_t)n * m, 0.0);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++) {
            double sum = 0;
            for (int t = 0; t < k; t++) sum += a[(size_t)i * k + t] * (b_transposed ? b[(size_t)j * k + t] : b[(size_t)t * m + j]);
            out[(size_t)i * m + j] = sum;
        }
    return out;
}

inline Matrix transposed(const Matrix& a, int rows, int cols) {
    Matrix out(a.size());
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) out[(size_t)j * rows + i] = a[(size_t)i * cols + j];
    return out;
}

// NS(u) as defined: X = u / (‖u‖_F + 1e-7), transposed when out > in; A = X Xᵀ; B = b A + c A A;
// X = a X + B X; transposed back.
inline Matrix reference_newton_schulz(const Matrix& u, int rows, int cols, int steps) {
    double norm = 0;
    for (double x : u) norm += x * x;
    norm = std::sqrt(norm);
    const bool tall = rows > cols;
    const int m = tall ? cols : rows, n = tall ? rows : cols;
    Matrix x = tall ? transposed(u, rows, cols) : u;
    for (double& value : x) value /= norm + 1e-7;
    const double a = 3.4445, b = -4.7750, c = 2.0315;
    for (int step = 0; step < steps; step++) {
        const Matrix gram = product(x, x, m, n, m, true);
        const Matrix square = product(gram, gram, m, m, m, false);
        Matrix poly(gram.size());
        for (size_t i = 0; i < poly.size(); i++) poly[i] = b * gram[i] + c * square[i];
        const Matrix bx = product(poly, x, m, m, n, false);
        for (size_t i = 0; i < x.size(); i++) x[i] = a * x[i] + bx[i];
    }
    return tall ? transposed(x, m, n) : x;
}

struct Constants {
    double lr = 0.03, momentum = 0.95, decay = 0.1, grad_scale = 0.7;
    bool nesterov = true;
    int ns_steps = 5;
};

// One Muon step of one matrix in double: buf ← μ buf + (1 − μ) g; u ← (1 − μ) g + μ buf (or buf);
// W ← W (1 − lr λ) − lr √max(1, out/in) NS(u). The constants as the float code is given them.
inline void reference_muon(double* w, double* buffer, const double* grad, int rows, int cols, const Constants& k) {
    const double mu = (float)k.momentum, lr = (float)k.lr, decay = (float)k.decay, scale = (float)k.grad_scale;
    const size_t size = (size_t)rows * cols;
    Matrix u(size);
    for (size_t i = 0; i < size; i++) {
        const double g = scale * grad[i];
        buffer[i] = mu * buffer[i] + (1 - mu) * g;
        u[i] = k.nesterov ? (1 - mu) * g + mu * buffer[i] : buffer[i];
    }
    const Matrix o = reference_newton_schulz(u, rows, cols, k.ns_steps);
    const double shape = std::sqrt(std::max(1.0, (double)rows / cols));
    for (size_t i = 0; i < size; i++) w[i] = w[i] * (1 - lr * decay) - lr * shape * o[i];
}

}  // namespace muon_reference

// Residual add: out = a + b. Backward passes dout unchanged to both inputs (adds it into da and
// db). The model does not call residual_backward: there the residual stream's gradient is one
// buffer that both branches add into, which is the same sum (see cpu/gpt_model.h).
#pragma once
#include <cstddef>

#include "cpu/parallel.h"

template <typename Real>
void residual_forward(Real* out, const Real* a, const Real* b, size_t n) {
#pragma omp parallel for schedule(static) if (worth_parallel(n))
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

template <typename Real>
void residual_backward(Real* da, Real* db, const Real* dout, size_t n) {
#pragma omp parallel for schedule(static) if (worth_parallel(n))
    for (size_t i = 0; i < n; i++) {
        da[i] += dout[i];
        db[i] += dout[i];
    }
}

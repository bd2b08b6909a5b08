// One Muon step over a whole model (--optimizer muon): Muon (cpu/muon.h) on each matrix of its
// layout, AdamW (cpu/adamw.h) with -l's rate on every other tensor (base/muon_layout.h). The first
// moment array m holds Muon's momentum at its matrices' elements and AdamW's m elsewhere; v holds
// AdamW's second moment packed (layout.adamw's v_offset: layout.adamw_elements values, or more).
// The matrices are shared out among the OpenMP threads, each taking whole matrices with scratch of
// its own (its products then run on that thread: cpu/gemm.h), so a step opens one parallel region
// rather than one per product; each matrix's result does not depend on the thread that computes it.
#pragma once
#include <omp.h>

#include <vector>

#include "base/muon_layout.h"
#include "base/optimizer_settings.h"
#include "cpu/adamw.h"
#include "cpu/muon.h"

template <typename Real>
void muon_and_adamw_step(const MuonLayout& layout, Real* params, Real* m, Real* v, const Real* grads,
                         const OptimizerSettings& s, int step, std::vector<MuonScratch<Real>>& scratch) {
    scratch.resize(omp_get_max_threads());
    const int matrices = (int)layout.matrices.size();
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < matrices; i++) {
        const MuonMatrix& w = layout.matrices[i];
        muon_update(params + w.offset, m + w.offset, grads + w.offset, w.rows, w.cols, Real(s.muon_learning_rate),
                    Real(s.muon_momentum), s.muon_nesterov, s.ns_steps, Real(s.weight_decay), Real(s.grad_scale),
                    scratch[omp_get_thread_num()]);
    }
    for (const AdamWTensor& t : layout.adamw)
        adamw_update(params + t.offset, m + t.offset, v + t.v_offset, grads + t.offset, t.size,
                     Real(s.learning_rate), Real(s.beta1), Real(s.beta2), Real(s.eps),
                     t.decayed ? Real(s.weight_decay) : Real(0), Real(s.grad_scale), step);
}

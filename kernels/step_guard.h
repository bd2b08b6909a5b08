// The device's verdict on an optimizer step, so that nothing is read back to the host between a
// step's backward pass and its update (the trainer reads the step's loss, norm and verdict once, after
// the update was issued):
//   norm        = sqrt(norm²) in double;  grad_scale = norm > clip ? clip / norm : 1
//               (global_norm_clip_scale's arithmetic, so the same float as the host loop's)
//   z(x, W)     = the z-score of x against the window W of recent values with x added: the last 128
//                 values, NaN until there are 128, 0 when they are all equal (base/outlier_detector.h's
//                 update(), the same double arithmetic in the same order)
//   verdict     = 1 when the loss is not finite, 2 the norm, 3 when z(loss) > skip_loss_z > 0,
//                 4 when z(norm) > skip_norm_z > 0, else 0 (apply): the first that holds, in this
//                 order, as the training loop decides on the host (UpdateVerdict, base/train_model.h)
// and writes grad_scale and "skip = verdict ≠ 0" into the AdamW step values the update reads
// (AdamWDeviceStep, kernels/adamw.h). Every rank computes it from the same all-reduced loss and norm
// and the same windows, so every rank takes the same decision.
//
// StepControl is the whole exchange of one step between the host and the device: what the host writes
// before the update (the AdamW values of the step and the guard's arguments, one copy in), and what the
// device writes during the step (StepTotals, one copy out, after the update).
// Per step: one thread reads 2·128 doubles of windows and writes a few words; one launch.
#pragma once
#include <cmath>
#include <cstddef>

#include "kernels/adamw.h"
#include "kernels/common.h"

constexpr int kOutlierWindow = 128;  // base/outlier_detector.h's WINDOW

// An outlier detector's state (base/outlier_detector.h: its values, how many it has seen, where the
// next one goes), before this step's value.
struct OutlierWindow {
    double values[kOutlierWindow];
    int count, next;
};

struct StepGuardArgs {
    double clip_norm;               // global-norm clipping threshold
    double skip_loss_z, skip_norm_z;  // -sl, -sg (0: off)
    OutlierWindow loss_window, norm_window;
};

// Written on the device during a step.
struct StepTotals {
    double loss_sum;     // Σ over this step's micro-steps of their mean loss / micro-steps (this rank)
    float micro_loss;    // the mean loss of the last micro-step (or forward pass) with targets
    float loss;          // the step's loss: loss_sum rounded, then (by the trainer's collectives) taken
                         // from the last pipeline stage and averaged over the data ranks
    float norm_squared;  // the squared global gradient norm, summed over the ranks
    float grad_scale;    // the clipping factor the update used
    int verdict;         // 0 applied; 1..4 skipped (see the top of this file)
};

struct StepControl {
    AdamWDeviceStep adamw;  // host → device (grad_scale and skip then rewritten by the guard)
    StepGuardArgs guard;    // host → device
    StepTotals totals;      // device → host
};
// Bytes of the part the host writes (everything before totals).
constexpr size_t kStepControlHostBytes = offsetof(StepControl, totals);

// The z-score of x against window w with x added (OutlierDetector::update without changing w).
__host__ __device__ inline double outlier_z_score(const OutlierWindow& w, double x) {
    const int count = w.count < kOutlierWindow ? w.count + 1 : kOutlierWindow;
    if (count < kOutlierWindow) return NAN;
    double mean = 0, variance = 0;
    for (int i = 0; i < kOutlierWindow; i++) mean += i == w.next ? x : w.values[i];
    mean /= kOutlierWindow;
    for (int i = 0; i < kOutlierWindow; i++) {
        const double v = i == w.next ? x : w.values[i];
        variance += (v - mean) * (v - mean);
    }
    const double std = sqrt(variance / kOutlierWindow);
    return std > 0 ? (x - mean) / std : 0.0;
}

// x is neither infinite nor NaN (x − x is NaN exactly then), the same on the host and the device.
__host__ __device__ inline bool is_finite_value(double x) { return x - x == 0.0; }

// The verdict (see the top of this file) on a step of this loss and norm.
__host__ __device__ inline int step_verdict(const StepGuardArgs& g, double loss, double norm) {
    if (!is_finite_value(loss)) return 1;
    if (!is_finite_value(norm)) return 2;
    if (g.skip_loss_z > 0 && outlier_z_score(g.loss_window, loss) > g.skip_loss_z) return 3;
    if (g.skip_norm_z > 0 && outlier_z_score(g.norm_window, norm) > g.skip_norm_z) return 4;
    return 0;
}

// One thread: the verdict and the clipping factor from c->totals.loss and c->totals.norm_squared.
static __global__ void step_guard_kernel(StepControl* c) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    const double norm = sqrt((double)c->totals.norm_squared);
    const double clip = c->guard.clip_norm;
    const float scale = norm > clip ? (float)(clip / norm) : 1.0f;
    const int verdict = step_verdict(c->guard, (double)c->totals.loss, norm);
    c->adamw.grad_scale = scale;
    c->adamw.skip = verdict != 0;
    c->totals.grad_scale = scale;
    c->totals.verdict = verdict;
}

inline void step_guard(StepControl* control, cudaStream_t stream) {
    LAUNCH(step_guard_kernel, 1, 32, 0, stream, control);
    CUDA_CHECK(cudaGetLastError());
}

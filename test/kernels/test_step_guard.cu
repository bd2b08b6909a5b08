// kernels/step_guard.h: the device's verdict on a step and its clipping factor, against a reference
// written here from the training loop's rule (the z-score of the value against the last 128 values,
// itself included; skipped when the loss or the norm is not finite, or a z-score passes its
// threshold), on values chosen far from every threshold; and the update it guards: with skip set the
// multi-tensor AdamW changes nothing, without it its device-valued form gives the bits of the
// host-valued one (kernels/adamw.h). loss_mean (kernels/classifier.h) against a double sum.
#include <cmath>
#include <vector>

#include "kernels/classifier.h"
#include "kernels/global_norm.h"
#include "kernels/step_guard.h"
#include "test/kernels/kernel_test.h"

namespace {

// The reference z-score: the window's last 127 values before x, and x.
double reference_z(const std::vector<double>& history, double x) {
    if (history.size() + 1 < (size_t)kOutlierWindow) return NAN;
    std::vector<double> w(history.end() - (kOutlierWindow - 1), history.end());
    w.push_back(x);
    double mean = 0, var = 0;
    for (double v : w) mean += v;
    mean /= w.size();
    for (double v : w) var += (v - mean) * (v - mean);
    const double sd = std::sqrt(var / w.size());
    return sd > 0 ? (x - mean) / sd : 0.0;
}

// A detector's window after `history` (oldest first), as base/outlier_detector.h keeps it: a ring.
OutlierWindow window_of(const std::vector<double>& history) {
    OutlierWindow w{};
    for (double v : history) {
        w.values[w.next] = v;
        w.next = (w.next + 1) % kOutlierWindow;
        if (w.count < kOutlierWindow) w.count++;
    }
    return w;
}

int reference_verdict(const StepGuardArgs&, const std::vector<double>& losses, const std::vector<double>& norms,
                      double loss, double norm, double sl, double sg) {
    if (!std::isfinite(loss)) return 1;
    if (!std::isfinite(norm)) return 2;
    if (sl > 0 && reference_z(losses, loss) > sl) return 3;
    if (sg > 0 && reference_z(norms, norm) > sg) return 4;
    return 0;
}

// Runs the guard on the device; returns the control block it leaves.
StepControl run_guard(const StepGuardArgs& guard, float loss, float norm_squared) {
    StepControl c{};
    c.adamw.skip = 7, c.adamw.grad_scale = -1.0f;  // poisoned: the guard writes both
    c.guard = guard;
    c.totals.loss = loss, c.totals.norm_squared = norm_squared;
    StepControl* d = device_copy_of(std::vector<StepControl>{c});
    step_guard(d, 0);
    const StepControl out = host_copy_of(d, 1)[0];
    CUDA_CHECK(cudaFree(d));
    return out;
}

}  // namespace

TEST(step_guard_verdicts_match_the_loop_rule) {
    // Histories: losses around 3 with noise, norms around 1; then probes far inside and outside
    // thresholds 3 and 4, non-finite values, an unfilled window and a constant one.
    std::vector<double> losses, norms;
    const std::vector<float> noise = random_floats(400, 5, -0.1f, 0.1f);
    for (int i = 0; i < 200; i++) losses.push_back(3.0 + noise[i]), norms.push_back(1.0 + noise[200 + i]);
    struct Probe {
        size_t history;  // how many of the values the windows have seen
        float loss, norm;
        double sl, sg;
    };
    const Probe probes[] = {{200, 3.0f, 1.0f, 3, 4},  {200, 9.0f, 1.0f, 3, 4},  {200, 9.0f, 1.0f, 0, 4},
                            {200, 3.0f, 7.0f, 3, 4},  {200, 3.0f, 7.0f, 3, 0},  {200, NAN, 1.0f, 3, 4},
                            {200, 3.0f, INFINITY, 0, 0}, {50, 90.0f, 70.0f, 3, 4}, {200, 9.0f, 7.0f, 3, 4}};
    for (const Probe& p : probes) {
        const std::vector<double> lh(losses.begin(), losses.begin() + p.history),
            nh(norms.begin(), norms.begin() + p.history);
        StepGuardArgs g{};
        g.clip_norm = 1.0, g.skip_loss_z = p.sl, g.skip_norm_z = p.sg;
        g.loss_window = window_of(lh), g.norm_window = window_of(nh);
        const StepControl c = run_guard(g, p.loss, p.norm * p.norm);
        const int expected = reference_verdict(g, lh, nh, p.loss, std::sqrt((double)(p.norm * p.norm)), p.sl, p.sg);
        CHECK_MSG(c.totals.verdict == expected, "loss %g norm %g (sl %g sg %g, %zu seen): verdict %d, expected %d",
                  p.loss, p.norm, p.sl, p.sg, p.history, c.totals.verdict, expected);
        CHECK(c.adamw.skip == (expected != 0));
        const float scale = global_norm_clip_scale_host(p.norm * p.norm, 1.0f);
        CHECK_MSG(bitwise_equal(&c.adamw.grad_scale, &scale, 4) && bitwise_equal(&c.totals.grad_scale, &scale, 4),
                  "clip factor %g, host formula %g", c.adamw.grad_scale, scale);
    }
    // A constant window: z = 0, never an outlier.
    StepGuardArgs g{};
    g.clip_norm = 1.0, g.skip_loss_z = 0.5, g.skip_norm_z = 0.5;
    g.loss_window = window_of(std::vector<double>(200, 2.0)), g.norm_window = window_of(std::vector<double>(200, 0.5));
    CHECK(run_guard(g, 2.0f, 0.25f).totals.verdict == 0);
    CHECK(outlier_z_score(g.loss_window, 2.0) == 0.0);
}

// The device-valued update against the host-valued one (bitwise), and a skipped one (nothing moves).
TEST(device_step_update_matches_host_values_and_skip_changes_nothing) {
    const size_t n = 5003;
    const std::vector<float> p0 = round_to_floatX(random_floats(n, 1)), g0 = round_to_floatX(random_floats(n, 2));
    const std::vector<float> m0 = random_floats(n, 3, -0.01f, 0.01f), v0 = random_floats(n, 4, 0.0f, 0.01f);
    auto run = [&](int mode) {  // 0: host values, 1: device values, 2: device values with skip
        floatX *p = device_floatX(p0), *g = device_floatX(g0);
        float *m = device_copy_of(m0), *v = device_copy_of(v0), *master = device_copy_of(p0);
        const AdamWRun runs[2] = {{p, master, m, v, g, 4001, 0, true}, {p + 4001, master + 4001, m + 4001, v + 4001,
                                                                         g + 4001, n - 4001, 4001, false}};
        AdamWMultiTensor plan = adamw_multi_tensor_plan(runs, 2);
        const float scale = 0.375f;
        if (mode == 0) {
            float* d_scale = device_copy_of(std::vector<float>{scale});
            adamw_update_multi_tensor(plan, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, d_scale, 3, 99, 0);
            CUDA_CHECK(cudaFree(d_scale));
        } else {
            AdamWDeviceStep s = adamw_device_step(1e-3f, 0.9f, 0.95f, 0.1f, scale, 3, 99);
            s.skip = mode == 2;
            AdamWDeviceStep* d = device_copy_of(std::vector<AdamWDeviceStep>{s});
            adamw_update_multi_tensor(plan, 0.9f, 0.95f, 1e-8f, d, 0);
            CUDA_CHECK(cudaFree(d));
        }
        adamw_multi_tensor_free(plan);
        std::vector<float> out = host_floats_of(p, n), mo = host_copy_of(m, n), mastero = host_copy_of(master, n);
        out.insert(out.end(), mo.begin(), mo.end());
        out.insert(out.end(), mastero.begin(), mastero.end());
        for (void* ptr : {(void*)p, (void*)g, (void*)m, (void*)v, (void*)master}) CUDA_CHECK(cudaFree(ptr));
        return out;
    };
    const std::vector<float> host = run(0), device = run(1), skipped = run(2);
    CHECK_MSG(bitwise_equal(host.data(), device.data(), host.size() * 4), "device-valued update differs");
    std::vector<float> before = round_to_floatX(p0);
    before.insert(before.end(), m0.begin(), m0.end());
    before.insert(before.end(), p0.begin(), p0.end());
    CHECK_MSG(bitwise_equal(skipped.data(), before.data(), before.size() * 4), "a skipped update changed something");
    CHECK_MSG(!bitwise_equal(host.data(), before.data(), before.size() * 4), "the update changed nothing");
}

// loss_mean: the mean of N losses, and the running sum over micro-steps, against double sums.
TEST(loss_mean_and_running_sum) {
    const int N = 3001;
    std::vector<float> losses = random_floats(N, 8, 2.0f, 11.0f);
    float* d_losses = device_copy_of(losses);
    StepTotals* t = device_copy_of(std::vector<StepTotals>{StepTotals{}});
    double expected_sum = 0;
    for (int step = 0; step < 3; step++) {
        double sum = 0;
        for (float x : losses) sum += x;
        const float mean = (float)(sum / N);
        expected_sum += (double)mean / 3;
        loss_mean(&t->micro_loss, &t->loss_sum, &t->loss, d_losses, N, 3, 0);
        const StepTotals h = host_copy_of(t, 1)[0];
        CHECK_MSG(std::fabs(h.micro_loss - mean) <= 1e-6 * mean, "mean %.9g vs %.9g", h.micro_loss, mean);
        CHECK_MSG(std::fabs(h.loss_sum - expected_sum) <= 1e-7 * expected_sum && h.loss == (float)h.loss_sum,
                  "running sum %.12g vs %.12g", h.loss_sum, expected_sum);
        for (float& x : losses) x *= 0.5f;
        CUDA_CHECK(cudaMemcpy(d_losses, losses.data(), N * sizeof(float), cudaMemcpyHostToDevice));
    }
    CUDA_CHECK(cudaFree(d_losses));
    CUDA_CHECK(cudaFree(t));
}

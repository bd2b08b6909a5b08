// Benchmark of one fp32 CPU training step (forward + zero_grad + backward + AdamW) of GPT-2 124M
// (d12: L=12, C=768, NH=12, Vp=50304), B=4, T=64 by default. Prints, all measured in this run:
//   the sgemm rate of this machine on the GEMM shapes of that step, run back to back in isolation,
//   the median ms/step over the timed steps, the step's GFLOP/s, the GFLOP/s of the GEMMs inside
//   the step, and both as a fraction of the isolated sgemm rate; plus the start-up memory report.
// Usage: bench_cpu_step [B] [T] [steps]   (threads: OMP_NUM_THREADS, 2 on the reference machine)
// Figures measured with it: dev/RESULTS.md.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "cpu/gemm.h"
#include "cpu/gpt_cpu.h"

// /proc/loadavg's first three fields: the machine is shared, so say how busy it was.
static std::string load_average() {
    char text[128] = "unknown\n";
    if (FILE* f = fopen("/proc/loadavg", "r")) {
        float a, b, c;
        if (fscanf(f, "%f %f %f", &a, &b, &c) == 3)
            snprintf(text, sizeof text, "%.2f %.2f %.2f\n", a, b, c);
        fclose(f);
    }
    return text;
}

struct Shape {
    bool trans_a, trans_b;
    int M, N, K, count;
};

// The GEMMs of one step: per linear layer (N rows, IC in, OC out) forward inp·Wᵀ, backward dout·W
// and doutᵀ·inp; four linear layers per transformer block plus the tied LM head.
static std::vector<Shape> step_shapes(const GPTConfig& c, int rows) {
    const int C = c.channels, L = c.num_layers;
    std::vector<Shape> shapes;
    auto linear = [&](int IC, int OC, int count) {
        shapes.push_back({false, true, rows, OC, IC, count});
        shapes.push_back({false, false, rows, IC, OC, count});
        shapes.push_back({true, false, OC, IC, rows, count});
    };
    linear(C, 3 * C, L);
    linear(C, C, L);
    linear(C, 4 * C, L);
    linear(4 * C, C, L);
    linear(C, c.padded_vocab_size, 1);
    return shapes;
}

// GFLOP/s of running one step's worth of those GEMMs back to back (best of `trials`).
static double isolated_sgemm_rate(const std::vector<Shape>& shapes, int trials) {
    size_t biggest = 0;
    for (const Shape& s : shapes)
        biggest = std::max({biggest, (size_t)s.M * s.K, (size_t)s.K * s.N, (size_t)s.M * s.N});
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> A(biggest), B(biggest), C(biggest);
    for (float& x : A) x = u(rng);
    for (float& x : B) x = u(rng);
    double best = 0;
    for (int trial = 0; trial < trials; trial++) {
        double flops = 0, start = omp_get_wtime();
        for (const Shape& s : shapes)
            for (int i = 0; i < s.count; i++) {
                const int lda = s.trans_a ? s.M : s.K, ldb = s.trans_b ? s.K : s.N;
                gemm(s.trans_a, s.trans_b, s.M, s.N, s.K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f,
                     C.data(), s.N);
                flops += 2.0 * s.M * s.N * s.K;
            }
        best = std::max(best, flops / (omp_get_wtime() - start) / 1e9);
    }
    return best;
}

int main(int argc, char** argv) {
    const int B = argc > 1 ? atoi(argv[1]) : 4, T = argc > 2 ? atoi(argv[2]) : 64;
    const int steps = argc > 3 ? atoi(argv[3]) : 10, warmup = 2;
    if (B < 1 || T < 1 || T > 1024 || steps < 1) {
        fprintf(stderr, "usage: bench_cpu_step [B >= 1] [T in 1..1024] [steps >= 1]\n");
        return 1;
    }
    const GPTConfig config;  // GPT-2 124M defaults
    printf("GPT-2 124M (d12), B=%d, T=%d, %d OpenMP threads, GEMM backend: %s\n", B, T,
           omp_get_max_threads(), gemm_backend());

    printf("load average before: %s", load_average().c_str());
    const std::vector<Shape> shapes = step_shapes(config, B * T);
    const double sgemm_before = isolated_sgemm_rate(shapes, 3);

    GPTCpu* model = gpt_cpu_create(config, B, T);
    const GPTCpuMemory mem = gpt_cpu_memory(model);
    printf(
        "memory: parameters %.1f MiB, gradients %.1f MiB, optimizer state %.1f MiB, activations "
        "%.1f MiB\n",
        mem.parameters / 1048576.0, mem.gradients / 1048576.0, mem.optimizer_state / 1048576.0,
        mem.activations / 1048576.0);
    std::mt19937 rng(2);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (float& p : gpt_cpu_params(model)) p = normal(rng);
    std::vector<int> inputs(B * T), targets(B * T);
    for (int i = 0; i < B * T; i++)
        inputs[i] = (int)(rng() % config.vocab_size), targets[i] = (int)(rng() % config.vocab_size);
    OptimizerSettings adamw;
    adamw.learning_rate = 1e-4f;
    adamw.weight_decay = 0.1f;

    std::vector<double> ms, step_gemm_seconds;
    double gemm_flops = 0, gemm_seconds = 0;
    for (int step = 1; step <= warmup + steps; step++) {
        const GemmStats before = gemm_stats();
        const double t0 = omp_get_wtime();
        const float loss = gpt_cpu_forward(model, inputs.data(), targets.data(), B, T);
        const double t1 = omp_get_wtime();
        gpt_cpu_zero_grad(model);
        gpt_cpu_backward(model, 1.0f);
        const double t2 = omp_get_wtime();
        gpt_cpu_update(model, adamw, step);
        const double t3 = omp_get_wtime();
        if (step <= warmup) continue;
        ms.push_back((t3 - t0) * 1e3);
        gemm_flops += gemm_stats().flops - before.flops;
        gemm_seconds += gemm_stats().seconds - before.seconds;
        step_gemm_seconds.push_back(gemm_stats().seconds - before.seconds);
        printf(
            "step %2d: %.1f ms (forward %.1f, zero_grad + backward %.1f, adamw %.1f), loss %.4f\n",
            step - warmup, (t3 - t0) * 1e3, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3,
            loss);
    }
    // The isolated rate is measured before and after the steps and the better one kept, so that a
    // burst of load from other processes during one measurement does not inflate the ratios.
    const double sgemm_after = isolated_sgemm_rate(shapes, 3);
    const double sgemm_rate = std::max(sgemm_before, sgemm_after);
    printf(
        "sgemm on this step's shapes, in isolation: %.1f GFLOP/s (before the steps %.1f, after "
        "%.1f)\n",
        sgemm_rate, sgemm_before, sgemm_after);
    printf("load average after: %s", load_average().c_str());
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    const double median_ms = sorted[sorted.size() / 2];
    // Step FLOPs: the GEMMs counted by gemm() plus attention's two T×T products per head, forward
    // (2 GEMM-like products) and backward (4), counting the full T×T square as llm.c's MFU does.
    const double attention_flops =
        6.0 * 2.0 * B * config.num_layers * (double)T * T * config.channels;
    const double step_flops = gemm_flops / steps + attention_flops;
    const double step_rate = step_flops / (median_ms / 1e3) / 1e9;
    const double gemm_rate = gemm_flops / gemm_seconds / 1e9;
    printf("median %.1f ms/step over %d steps (min %.1f, max %.1f)\n", median_ms, steps,
           sorted.front(), sorted.back());
    printf("step: %.1f GFLOP in %.1f ms = %.1f GFLOP/s = %.0f%% of the sgemm rate\n",
           step_flops / 1e9, median_ms, step_rate, 100 * step_rate / sgemm_rate);
    // The isolated rate is a best-of; the fastest step is the like-for-like figure on a busy
    // machine.
    const double best_rate = step_flops / (sorted.front() / 1e3) / 1e9;
    const size_t fastest = std::min_element(ms.begin(), ms.end()) - ms.begin();
    const double fastest_gemm_rate = gemm_flops / steps / step_gemm_seconds[fastest] / 1e9;
    printf(
        "fastest step: %.1f ms = %.1f GFLOP/s = %.0f%% of the sgemm rate; its GEMMs %.1f GFLOP/s = "
        "%.0f%%\n",
        sorted.front(), best_rate, 100 * best_rate / sgemm_rate, fastest_gemm_rate,
        100 * fastest_gemm_rate / sgemm_rate);
    printf(
        "GEMMs inside the step: %.1f GFLOP/s = %.0f%% of the sgemm rate; %.0f%% of step time in "
        "GEMMs\n",
        gemm_rate, 100 * gemm_rate / sgemm_rate, 100 * gemm_seconds / steps / (median_ms / 1e3));
    gpt_cpu_free(model);
    return 0;
}

// RMSNorm kernels from naive to the shipped ones (kernels/rmsnorm.h), each checked against the CPU
// reference (cpu/rmsnorm.h in double) and then, on a GPU, timed at Llama 3 shapes against the
// device's copy bandwidth: Llama 3.2 1B (C = 2048) and Llama 3.1 8B (C = 4096), 8K and 4K rows.
//
//   forward            1 naive: one thread per row, two scalar passes over the row in memory
//                      2 one warp per row, 128-bit loads, the row re-read from cache for the output
//                        (the shipped kernel for rows too long for registers)
//                      3 shipped: one warp per row, the row held in registers (one read, one write)
//   residual forward   1 residual_forward, then RMSNorm reading the residual back from memory
//                      2 shipped: fused, the residual stored and normalised from registers
//   backward           1 naive: one thread per row for dinp, one thread per channel for dweight
//                      2 one warp per row re-reading the row, per-block partial dweight sums
//                      3 shipped: as 2 with the row in registers (rows of up to 12 vectors per lane)
//
// Build and run: make dev/bin/cuda_rmsnorm && ./dev/bin/cuda_rmsnorm  (on a GPU)
//                make build/dev/cuda/rmsnorm_emu && ./build/dev/cuda/rmsnorm_emu  (emulated check)
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "cpu/rmsnorm.h"
#include "dev/cuda/bench.h"
#include "kernels/rmsnorm.h"

constexpr float EPS = 1e-5f;

// ------------------------------------------------------------------------------------------------
// Forward version 1: one thread per row, scalar, both passes over the row in memory.
__global__ void rmsnorm_forward_naive_kernel(floatX* out, float* rstd, const floatX* inp, const floatX* weight,
                                             int N, int C) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    const floatX* x = inp + (size_t)row * C;
    float squares = 0.0f;
    for (int c = 0; c < C; c++) squares += to_float(x[c]) * to_float(x[c]);
    const float s = rsqrtf(squares / C + EPS);
    for (int c = 0; c < C; c++) out[(size_t)row * C + c] = from_float<floatX>(to_float(x[c]) * s * to_float(weight[c]));
    rstd[row] = s;
}

// Backward version 1: dinp with one thread per row (two passes over the row) ...
__global__ void rmsnorm_backward_naive_rows_kernel(floatX* dinp, const floatX* dout, const floatX* inp,
                                                   const floatX* weight, const float* rstd, int N, int C) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    const size_t offset = (size_t)row * C;
    const float s = rstd[row];
    float sum_gx = 0.0f;
    for (int c = 0; c < C; c++) sum_gx += to_float(dout[offset + c]) * to_float(weight[c]) * to_float(inp[offset + c]);
    const float mean_gx = sum_gx * s / C;
    for (int c = 0; c < C; c++) {
        const float g = to_float(dout[offset + c]) * to_float(weight[c]);
        const float xhat = to_float(inp[offset + c]) * s;
        dinp[offset + c] = from_float<floatX>(to_float(dinp[offset + c]) + s * (g - xhat * mean_gx));
    }
}
// ... and dweight with one thread per channel walking every row in order.
__global__ void rmsnorm_backward_naive_weight_kernel(floatX* dweight, const floatX* dout, const floatX* inp,
                                                     const float* rstd, int N, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float dw = 0.0f;
    for (int row = 0; row < N; row++)
        dw += to_float(dout[(size_t)row * C + c]) * to_float(inp[(size_t)row * C + c]) * rstd[row];
    dweight[c] = from_float<floatX>(to_float(dweight[c]) + dw);
}

// ------------------------------------------------------------------------------------------------
// Harness

namespace {

using Versions = std::vector<std::pair<std::string, std::function<void()>>>;

// All tensors of one problem, on the host (rounded to floatX) and on the device.
struct Problem {
    int N, C;
    std::vector<float> inp, other, weight, dout, dinp0, dweight0;
    floatX *d_inp, *d_other, *d_weight, *d_out, *d_residual, *d_dout, *d_dinp, *d_dweight;
    float* d_rstd;
    void* d_scratch;
    Problem(int rows, int channels) : N(rows), C(channels) {
        const size_t n = (size_t)N * C;
        inp = rounded_random_floats(n, 1, -1.0f, 3.0f);
        other = rounded_random_floats(n, 2, -1.0f, 1.0f);
        weight = rounded_random_floats(C, 3, 0.5f, 1.5f);
        dout = random_floats(n, 4, -1.0f, 1.0f);
        for (size_t i = 0; i < n; i++) dout[i] += 0.5f * inp[i];
        dout = round_to_floatX(dout);
        dinp0 = rounded_random_floats(n, 5, -0.1f, 0.1f);
        dweight0 = rounded_random_floats(C, 6, -1.0f, 1.0f);
        d_inp = device_floatX(inp), d_other = device_floatX(other), d_weight = device_floatX(weight);
        d_dout = device_floatX(dout), d_dinp = device_floatX(dinp0), d_dweight = device_floatX(dweight0);
        d_out = device_poisoned<floatX>(n), d_residual = device_poisoned<floatX>(n);
        d_rstd = device_poisoned<float>(N);
        d_scratch = device_buffer<char>(rmsnorm_backward_scratch_bytes(N, C));
    }
    ~Problem() {
        device_free(d_inp, d_other, d_weight, d_out, d_residual, d_dout, d_dinp, d_dweight, d_rstd, d_scratch);
    }
    void reset_gradients() {
        copy_floats_to_device(d_dinp, dinp0);
        copy_floats_to_device(d_dweight, dweight0);
    }
};

struct Reference {
    std::vector<double> out, rstd, residual, fused_out, dinp, dweight;
};
Reference reference(const Problem& p) {
    const size_t n = (size_t)p.N * p.C;
    Reference r;
    const std::vector<double> x(p.inp.begin(), p.inp.end()), w(p.weight.begin(), p.weight.end());
    r.out.resize(n), r.rstd.resize(p.N);
    rmsnorm_forward(r.out.data(), r.rstd.data(), x.data(), w.data(), p.N, p.C, (double)EPS);
    r.residual.resize(n), r.fused_out.resize(n);
    for (size_t i = 0; i < n; i++) r.residual[i] = host_from_floatX(host_to_floatX(p.inp[i] + p.other[i]));
    std::vector<double> unused_rstd(p.N);
    rmsnorm_forward(r.fused_out.data(), unused_rstd.data(), r.residual.data(), w.data(), p.N, p.C, (double)EPS);
    r.dinp.assign(p.dinp0.begin(), p.dinp0.end());
    r.dweight.assign(p.dweight0.begin(), p.dweight0.end());
    const std::vector<double> d(p.dout.begin(), p.dout.end());
    rmsnorm_backward(r.dinp.data(), r.dweight.data(), d.data(), x.data(), w.data(), r.rstd.data(), p.N, p.C);
    return r;
}

Versions forward_versions(Problem& p) {
    const int N = p.N, C = p.C;
    return {
        {"forward 1 naive (thread per row)",
         [&p, N, C] {
             LAUNCH(rmsnorm_forward_naive_kernel, ceil_div(N, 128), 128, 0, 0, p.d_out, p.d_rstd, p.d_inp,
                    p.d_weight, N, C);
         }},
        {"forward 2 warp per row, re-read",
         [&p, N, C] {
             LAUNCH(rmsnorm_forward_wide_kernel, ceil_div(N, RMSNORM_FORWARD_THREADS / 32), RMSNORM_FORWARD_THREADS,
                    0, 0, p.d_out, p.d_rstd, nullptr, p.d_inp, nullptr, p.d_weight, N, C, EPS);
         }},
        {"forward 3 shipped (row in registers)",
         [&p, N, C] { rmsnorm_forward(p.d_out, p.d_rstd, p.d_inp, p.d_weight, N, C, EPS, 0); }},
    };
}
Versions fused_versions(Problem& p) {
    const int N = p.N, C = p.C;
    return {
        {"residual fwd 1 residual_forward + RMSNorm",
         [&p, N, C] {
             residual_forward(p.d_residual, p.d_inp, p.d_other, (size_t)N * C, 0);
             rmsnorm_forward(p.d_out, p.d_rstd, p.d_residual, p.d_weight, N, C, EPS, 0);
         }},
        {"residual fwd 2 shipped (fused)",
         [&p, N, C] {
             residual_rmsnorm_forward(p.d_residual, p.d_out, p.d_rstd, p.d_inp, p.d_other, p.d_weight, N, C, EPS,
                                      0);
         }},
    };
}
Versions backward_versions(Problem& p) {
    const int N = p.N, C = p.C;
    return {
        {"backward 1 naive (rows, then channels)",
         [&p, N, C] {
             LAUNCH(rmsnorm_backward_naive_rows_kernel, ceil_div(N, 128), 128, 0, 0, p.d_dinp, p.d_dout, p.d_inp,
                    p.d_weight, p.d_rstd, N, C);
             LAUNCH(rmsnorm_backward_naive_weight_kernel, ceil_div(C, 128), 128, 0, 0, p.d_dweight, p.d_dout,
                    p.d_inp, p.d_rstd, N, C);
         }},
        {"backward 2 warp per row, re-read",
         [&p, N, C] {
             // The shipped two-kernel scheme with the wide (re-reading) row kernel.
             const RmsnormBackwardPlan plan = rmsnorm_backward_plan(N, C);
             if (plan.shared_bytes > 48 * 1024)
                 CUDA_CHECK(cudaFuncSetAttribute(rmsnorm_backward_wide_kernel,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, plan.shared_bytes));
             LAUNCH(rmsnorm_backward_wide_kernel, plan.blocks, 32 * plan.warps, plan.shared_bytes, 0, p.d_dinp,
                    (float*)p.d_scratch, p.d_dout, p.d_inp, p.d_weight, p.d_rstd, N, C);
             LAUNCH(layernorm_sum_partials_kernel, ceil_div(C, 32), 32 * LAYERNORM_SUM_WARPS, 0, 0, p.d_dweight,
                    nullptr, nullptr, (const float*)p.d_scratch, plan.blocks, C, 1);
         }},
        {"backward 3 shipped (row in registers)",
         [&p, N, C] {
             rmsnorm_backward(p.d_dinp, p.d_dweight, p.d_scratch, p.d_dout, p.d_inp, p.d_weight, p.d_rstd, N, C, 0);
         }},
    };
}

void run(int N, int C, double ceiling) {
    printf("-- N=%d C=%d\n", N, C);
    Problem p(N, C);
    const Reference ref = reference(p);
    const size_t n = (size_t)N * C;
    const double S = sizeof(floatX);
    const std::string shape = " (N=" + std::to_string(N) + " C=" + std::to_string(C) + ")";

    for (auto& [name, launch] : forward_versions(p)) {
        poison(p.d_out, n);
        poison(p.d_rstd, N);
        launch();
        CUDA_CHECK(cudaGetLastError());
        report_check(name + shape, relative_error(host_floats_of(p.d_out, n), ref.out));
        // rstd is fp32 in every build; the naive kernel's one long sequential sum errs most (1.4e-6 at C=2048).
        report_check(name + " rstd" + shape, relative_error(host_copy_of(p.d_rstd, N), ref.rstd), 1e-5);
        time_bandwidth(name, launch, 2.0 * n * S + 4.0 * N, ceiling);
    }
    for (auto& [name, launch] : fused_versions(p)) {
        poison(p.d_out, n);
        poison(p.d_residual, n);
        launch();
        CUDA_CHECK(cudaGetLastError());
        report_check(name + " residual" + shape, relative_error(host_floats_of(p.d_residual, n), ref.residual));
        report_check(name + " out" + shape, relative_error(host_floats_of(p.d_out, n), ref.fused_out));
        time_bandwidth(name, launch, 4.0 * n * S + 4.0 * N, ceiling);
    }
    // Backward from the reference's rstd.
    copy_to_device(p.d_rstd, std::vector<float>(ref.rstd.begin(), ref.rstd.end()));
    const double partial_bytes = 2.0 * C * 4 * rmsnorm_backward_plan(N, C).blocks;
    for (auto& [name, launch] : backward_versions(p)) {
        p.reset_gradients();
        launch();
        CUDA_CHECK(cudaGetLastError());
        report_check(name + " dinp" + shape, relative_error(host_floats_of(p.d_dinp, n), ref.dinp));
        report_check(name + " dweight" + shape, relative_error(host_floats_of(p.d_dweight, C), ref.dweight));
        // Timed runs keep adding into the gradients: harmless for timing.
        time_bandwidth(name, launch, 4.0 * n * S + 4.0 * N + partial_bytes, ceiling);
    }
}

}  // namespace

int main() {
    double ceiling = 0;
    if (BENCH_ON_GPU) {
        print_device_header();
        ceiling = measure_and_print_copy_bandwidth();
        run(8 * 1024, 2048, ceiling);  // Llama 3.2 1B, B=8, T=1024
        run(4 * 1024, 4096, ceiling);  // Llama 3.1 8B, B=4, T=1024
    } else {
        run(37, 2048, ceiling);
        run(2 * 37, 160, ceiling);
    }
    return bench_exit_status();
}

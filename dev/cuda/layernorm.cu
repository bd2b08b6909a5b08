// LayerNorm kernels from naive to the shipped ones (kernels/layernorm.h), each checked against the
// CPU reference (cpu/layernorm.h in double) and then, on a GPU, timed at GPT-2 124M's shape
// (N = B·T = 16·1024 rows, C = 768) against the device's copy bandwidth.
//
//   forward            1 naive: one thread per row, three scalar passes over the row in memory
//                      2 one block per row: scalar loads spread over the block, block reductions
//                      3 one warp per row, 128-bit loads, the row re-read from cache in each pass
//                        (the shipped kernel for rows too long for registers)
//                      4 shipped: one warp per row, the row held in registers (one read, one write)
//   residual forward   1 residual_forward, then LayerNorm reading the residual back from memory
//                      2 shipped: fused, the residual stored and normalised from registers
//   backward           1 naive: one thread per row for dinp, one thread per channel for dweight/dbias
//                      2 one warp per row re-reading the row, per-block partial parameter sums
//                      3 shipped: as 2 with the row in registers
//
// Build and run: make dev/bin/cuda_layernorm && ./dev/bin/cuda_layernorm  (on a GPU)
//                make build/dev/cuda/layernorm_emu && ./build/dev/cuda/layernorm_emu  (emulated check)
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cpu/layernorm.h"
#include "dev/cuda/bench.h"
#include "kernels/layernorm.h"

// ------------------------------------------------------------------------------------------------
// Version 1: one thread per row, scalar, every pass over the row in memory.
__global__ void layernorm_forward_naive_kernel(floatX* out, float* mean, float* rstd, const floatX* inp,
                                               const floatX* weight, const floatX* bias, int N, int C) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    const floatX* x = inp + (size_t)row * C;
    float sum = 0.0f;
    for (int c = 0; c < C; c++) sum += to_float(x[c]);
    const float m = sum / C;
    float squares = 0.0f;
    for (int c = 0; c < C; c++) squares += (to_float(x[c]) - m) * (to_float(x[c]) - m);
    const float s = rsqrtf(squares / C + LAYERNORM_EPS);
    for (int c = 0; c < C; c++)
        out[(size_t)row * C + c] =
            from_float<floatX>((to_float(x[c]) - m) * s * to_float(weight[c]) + to_float(bias[c]));
    mean[row] = m;
    rstd[row] = s;
}

// Version 2: one block per row; threads take channels threadIdx.x, +blockDim.x, ...
__global__ void layernorm_forward_block_kernel(floatX* out, float* mean, float* rstd, const floatX* inp,
                                               const floatX* weight, const floatX* bias, int N, int C) {
    const int row = blockIdx.x;
    const floatX* x = inp + (size_t)row * C;
    float sum = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) sum += to_float(x[c]);
    const float m = block_reduce_sum(sum) / C;
    float squares = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) squares += (to_float(x[c]) - m) * (to_float(x[c]) - m);
    const float s = rsqrtf(block_reduce_sum(squares) / C + LAYERNORM_EPS);
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        out[(size_t)row * C + c] =
            from_float<floatX>((to_float(x[c]) - m) * s * to_float(weight[c]) + to_float(bias[c]));
    if (threadIdx.x == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

// Backward version 1: dinp with one thread per row (two passes over the row) ...
__global__ void layernorm_backward_naive_rows_kernel(floatX* dinp, const floatX* dout, const floatX* inp,
                                                     const floatX* weight, const float* mean,
                                                     const float* rstd, int N, int C) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    const size_t offset = (size_t)row * C;
    const float m = mean[row], s = rstd[row];
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int c = 0; c < C; c++) {
        const float g = to_float(dout[offset + c]) * to_float(weight[c]);
        sum_g += g;
        sum_gx += g * (to_float(inp[offset + c]) - m) * s;
    }
    const float mean_g = sum_g / C, mean_gx = sum_gx / C;
    for (int c = 0; c < C; c++) {
        const float g = to_float(dout[offset + c]) * to_float(weight[c]);
        const float xhat = (to_float(inp[offset + c]) - m) * s;
        dinp[offset + c] = from_float<floatX>(to_float(dinp[offset + c]) + s * (g - mean_g - xhat * mean_gx));
    }
}
// ... and dweight, dbias with one thread per channel walking every row in order.
__global__ void layernorm_backward_naive_params_kernel(floatX* dweight, floatX* dbias, const floatX* dout,
                                                       const floatX* inp, const float* mean,
                                                       const float* rstd, int N, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float dw = 0.0f, db = 0.0f;
    for (int row = 0; row < N; row++) {
        const float d = to_float(dout[(size_t)row * C + c]);
        dw += d * (to_float(inp[(size_t)row * C + c]) - mean[row]) * rstd[row];
        db += d;
    }
    dweight[c] = from_float<floatX>(to_float(dweight[c]) + dw);
    dbias[c] = from_float<floatX>(to_float(dbias[c]) + db);
}

// ------------------------------------------------------------------------------------------------
// Harness

namespace {

// All tensors of one problem, on the host (rounded to floatX) and on the device.
struct Problem {
    int N, C;
    std::vector<float> inp, other, weight, bias, dout, dinp0, dweight0, dbias0;
    floatX *d_inp, *d_other, *d_weight, *d_bias, *d_out, *d_residual, *d_dout, *d_dinp, *d_dweight, *d_dbias;
    float *d_mean, *d_rstd;
    void* d_scratch;
    Problem(int rows, int channels) : N(rows), C(channels) {
        const size_t n = (size_t)N * C;
        inp = rounded_random_floats(n, 1, -1.0f, 3.0f);
        other = rounded_random_floats(n, 2, -1.0f, 1.0f);
        weight = rounded_random_floats(C, 3, 0.5f, 1.5f);
        bias = rounded_random_floats(C, 4, -1.0f, 1.0f);
        dout = random_floats(n, 5, -1.0f, 1.0f);
        for (size_t i = 0; i < n; i++) dout[i] += 0.5f * (inp[i] - 1.0f);
        dout = round_to_floatX(dout);
        dinp0 = rounded_random_floats(n, 6, -0.1f, 0.1f);
        dweight0 = rounded_random_floats(C, 7, -1.0f, 1.0f);
        dbias0 = rounded_random_floats(C, 8, -1.0f, 1.0f);
        d_inp = device_floatX(inp), d_other = device_floatX(other);
        d_weight = device_floatX(weight), d_bias = device_floatX(bias), d_dout = device_floatX(dout);
        d_dinp = device_floatX(dinp0), d_dweight = device_floatX(dweight0), d_dbias = device_floatX(dbias0);
        d_out = device_poisoned<floatX>(n), d_residual = device_poisoned<floatX>(n);
        d_mean = device_poisoned<float>(N), d_rstd = device_poisoned<float>(N);
        d_scratch = device_buffer<char>(layernorm_backward_scratch_bytes(N, C));
    }
    ~Problem() {
        device_free(d_inp, d_other, d_weight, d_bias, d_out, d_residual, d_dout, d_dinp, d_dweight, d_dbias,
                    d_mean, d_rstd, d_scratch);
    }
    void reset_gradients() {
        copy_floats_to_device(d_dinp, dinp0);
        copy_floats_to_device(d_dweight, dweight0);
        copy_floats_to_device(d_dbias, dbias0);
    }
};

struct Reference {
    std::vector<double> out, mean, rstd, residual, fused_out, dinp, dweight, dbias;
};
Reference reference(const Problem& p) {
    const size_t n = (size_t)p.N * p.C;
    Reference r;
    const std::vector<double> x(p.inp.begin(), p.inp.end()), w(p.weight.begin(), p.weight.end()),
        b(p.bias.begin(), p.bias.end());
    r.out.resize(n), r.mean.resize(p.N), r.rstd.resize(p.N);
    layernorm_forward(r.out.data(), r.mean.data(), r.rstd.data(), x.data(), w.data(), b.data(), p.N, p.C);
    r.residual.resize(n), r.fused_out.resize(n);
    for (size_t i = 0; i < n; i++) r.residual[i] = host_from_floatX(host_to_floatX(p.inp[i] + p.other[i]));
    std::vector<double> unused_mean(p.N), unused_rstd(p.N);
    layernorm_forward(r.fused_out.data(), unused_mean.data(), unused_rstd.data(), r.residual.data(), w.data(),
                      b.data(), p.N, p.C);
    r.dinp.assign(p.dinp0.begin(), p.dinp0.end());
    r.dweight.assign(p.dweight0.begin(), p.dweight0.end());
    r.dbias.assign(p.dbias0.begin(), p.dbias0.end());
    const std::vector<double> d(p.dout.begin(), p.dout.end());
    layernorm_backward(r.dinp.data(), r.dweight.data(), r.dbias.data(), d.data(), x.data(), w.data(),
                       r.mean.data(), r.rstd.data(), p.N, p.C);
    return r;
}

// The forward versions on one problem: (name, launch) pairs.
std::vector<std::pair<std::string, std::function<void()>>> forward_versions(Problem& p) {
    const int N = p.N, C = p.C;
    return {
        {"forward 1 naive (thread per row)",
         [&p, N, C] {
             LAUNCH(layernorm_forward_naive_kernel, ceil_div(N, 128), 128, 0, 0, p.d_out, p.d_mean, p.d_rstd,
                    p.d_inp, p.d_weight, p.d_bias, N, C);
         }},
        {"forward 2 block per row",
         [&p, N, C] {
             LAUNCH(layernorm_forward_block_kernel, N, 256, 0, 0, p.d_out, p.d_mean, p.d_rstd, p.d_inp,
                    p.d_weight, p.d_bias, N, C);
         }},
        {"forward 3 warp per row, re-read",
         [&p, N, C] {
             LAUNCH(layernorm_forward_wide_kernel, ceil_div(N, LAYERNORM_FORWARD_THREADS / 32),
                    LAYERNORM_FORWARD_THREADS, 0, 0, p.d_out, p.d_mean, p.d_rstd, nullptr, p.d_inp, nullptr,
                    p.d_weight, p.d_bias, N, C);
         }},
        {"forward 4 shipped (row in registers)",
         [&p, N, C] {
             layernorm_forward(p.d_out, p.d_mean, p.d_rstd, p.d_inp, p.d_weight, p.d_bias, N, C, 0);
         }},
    };
}
std::vector<std::pair<std::string, std::function<void()>>> fused_versions(Problem& p) {
    const int N = p.N, C = p.C;
    return {
        {"residual fwd 1 residual_forward + LN",
         [&p, N, C] {
             residual_forward(p.d_residual, p.d_inp, p.d_other, (size_t)N * C, 0);
             layernorm_forward(p.d_out, p.d_mean, p.d_rstd, p.d_residual, p.d_weight, p.d_bias, N, C, 0);
         }},
        {"residual fwd 2 shipped (fused)",
         [&p, N, C] {
             residual_layernorm_forward(p.d_residual, p.d_out, p.d_mean, p.d_rstd, p.d_inp, p.d_other,
                                        p.d_weight, p.d_bias, N, C, 0);
         }},
    };
}
std::vector<std::pair<std::string, std::function<void()>>> backward_versions(Problem& p) {
    const int N = p.N, C = p.C;
    return {
        {"backward 1 naive (rows, then channels)",
         [&p, N, C] {
             LAUNCH(layernorm_backward_naive_rows_kernel, ceil_div(N, 128), 128, 0, 0, p.d_dinp, p.d_dout,
                    p.d_inp, p.d_weight, p.d_mean, p.d_rstd, N, C);
             LAUNCH(layernorm_backward_naive_params_kernel, ceil_div(C, 128), 128, 0, 0, p.d_dweight,
                    p.d_dbias, p.d_dout, p.d_inp, p.d_mean, p.d_rstd, N, C);
         }},
        {"backward 2 warp per row, re-read",
         [&p, N, C] {
             // The shipped two-kernel scheme with the wide (re-reading) row kernel.
             const LayernormBackwardPlan plan = layernorm_backward_plan(N, C);
             if (plan.shared_bytes > 48 * 1024)
                 CUDA_CHECK(cudaFuncSetAttribute(layernorm_backward_wide_kernel,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 plan.shared_bytes));
             LAUNCH(layernorm_backward_wide_kernel, plan.blocks, 32 * plan.warps, plan.shared_bytes, 0,
                    p.d_dinp, (float*)p.d_scratch, p.d_dout, p.d_inp, p.d_weight, p.d_mean, p.d_rstd, N, C, 2);
             LAUNCH(layernorm_sum_partials_kernel, ceil_div(2 * C, 32), 32 * LAYERNORM_SUM_WARPS, 0, 0,
                    p.d_dweight, p.d_dbias, nullptr, (const float*)p.d_scratch, plan.blocks, C, 2);
         }},
        {"backward 3 shipped (row in registers)",
         [&p, N, C] {
             layernorm_backward(p.d_dinp, p.d_dweight, p.d_dbias, p.d_scratch, p.d_dout, p.d_inp, p.d_weight,
                                p.d_mean, p.d_rstd, N, C, 0);
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
        launch();
        CUDA_CHECK(cudaGetLastError());
        report_check(name + shape, relative_error(host_floats_of(p.d_out, n), ref.out));
        time_bandwidth(name, launch, 2.0 * n * S + 8.0 * N, ceiling);
    }
    for (auto& [name, launch] : fused_versions(p)) {
        poison(p.d_out, n);
        poison(p.d_residual, n);
        launch();
        CUDA_CHECK(cudaGetLastError());
        report_check(name + " residual" + shape,
                     relative_error(host_floats_of(p.d_residual, n), ref.residual));
        report_check(name + " out" + shape, relative_error(host_floats_of(p.d_out, n), ref.fused_out));
        time_bandwidth(name, launch, 4.0 * n * S + 8.0 * N, ceiling);
    }
    // Backward from the reference statistics of inp.
    copy_to_device(p.d_mean, std::vector<float>(ref.mean.begin(), ref.mean.end()));
    copy_to_device(p.d_rstd, std::vector<float>(ref.rstd.begin(), ref.rstd.end()));
    const double partial_bytes = 2.0 * 2 * C * 4 * layernorm_backward_plan(N, C).blocks;
    for (auto& [name, launch] : backward_versions(p)) {
        p.reset_gradients();
        launch();
        CUDA_CHECK(cudaGetLastError());
        report_check(name + " dinp" + shape, relative_error(host_floats_of(p.d_dinp, n), ref.dinp));
        report_check(name + " dweight" + shape, relative_error(host_floats_of(p.d_dweight, C), ref.dweight));
        report_check(name + " dbias" + shape, relative_error(host_floats_of(p.d_dbias, C), ref.dbias));
        // Timed runs keep adding into the gradients: harmless for timing.
        time_bandwidth(name, launch, 4.0 * n * S + 8.0 * N + partial_bytes, ceiling);
    }
    // The shipped backward also summing the updated dinp's columns (the trainer's gradient of the
    // projection bias added into the LayerNorm's input): against the line above, what that costs
    // instead of the separate pass over dinp (N·C·S bytes) a bias-gradient kernel would make.
    const std::string name = "backward 3 shipped + input's bias gradient";
    floatX* d_dinput_bias = device_floatX(std::vector<float>(C, 0.0f));
    auto launch = [&p, d_dinput_bias, N, C] {
        layernorm_backward(p.d_dinp, p.d_dweight, p.d_dbias, p.d_scratch, p.d_dout, p.d_inp, p.d_weight, p.d_mean,
                           p.d_rstd, N, C, 0, d_dinput_bias);
    };
    p.reset_gradients();
    launch();
    CUDA_CHECK(cudaGetLastError());
    std::vector<double> column_sums(C, 0.0);
    for (size_t i = 0; i < n; i++) column_sums[i % C] += ref.dinp[i];
    report_check(name + " dinp" + shape, relative_error(host_floats_of(p.d_dinp, n), ref.dinp));
    report_check(name + " dinput_bias" + shape, relative_error(host_floats_of(d_dinput_bias, C), column_sums));
    time_bandwidth(name, launch, 4.0 * n * S + 8.0 * N + partial_bytes * 3 / 2, ceiling);
    device_free(d_dinput_bias);
}

}  // namespace

int main() {
    double ceiling = 0;
    if (BENCH_ON_GPU) {
        print_device_header();
        ceiling = measure_and_print_copy_bandwidth();
        run(16 * 1024, 768, ceiling);  // GPT-2 124M, B=16, T=1024
        run(8 * 1024, 1600, ceiling);  // GPT-2 1.5B, B=8
    } else {
        run(2 * 37, 768, ceiling);
        run(37, 160, ceiling);
    }
    return bench_exit_status();
}

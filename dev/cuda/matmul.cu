// The linear layer (kernels/matmul.h), from naive to shipped. Every version is checked against the CPU
// reference (cpu/matmul.h, cpu/gelu.h), then, on a GPU, timed at GPT-2 124M's shapes (C = 768,
// N = B·T = 8192 and 16384) and reported in TFLOP/s and as a share of the card's bf16 GEMM rate
// (dev/cuda/gemm_ceiling.h):
//   v1  naive: one thread per output element, an fp32 dot product over IC (forward only)
//   v2  cuBLASLt for the product; bias, GELU and GELU gradient each in a pass of their own
//   v3  cuBLASLt with those passes fused into its epilogue: BIAS, GELU_AUX_BIAS, DGELU (shipped)
// Also timed: the bare product (no bias: the GEMM rate at this shape), the shipped backward (dinp,
// dweight, dbias), and the bias-gradient kernel alone (memory-bound, in GB/s of copy bandwidth).
// One line counts the values where gelu_forward on GELU_AUX_BIAS's stored pre-activation differs from
// the epilogue's output (the trainer's GELU recomputation needs 0 to take that epilogue in its fc).
// Under the emulator only the checks run, at small sizes. Exit status 1 if a check failed.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/gelu.h"
#include "cpu/matmul.h"
#include "dev/cuda/bench.h"
#include "dev/cuda/gemm_ceiling.h"
#include "kernels/matmul.h"

// ---- version 1: one thread per output, no reuse of inputs between threads.
template <typename T>
__global__ void matmul_forward_naive_kernel(T* out, const T* inp, const T* weight, const T* bias, int N,
                                            int IC, int OC) {
    const int o = blockIdx.x * blockDim.x + threadIdx.x, n = blockIdx.y;
    if (o >= OC || n >= N) return;
    const T* x = inp + (size_t)n * IC;
    const T* w = weight + (size_t)o * IC;
    float sum = bias ? to_float(bias[o]) : 0.0f;
    for (int i = 0; i < IC; i++) sum += to_float(x[i]) * to_float(w[i]);
    out[(size_t)n * OC + o] = from_float<T>(sum);
}
void matmul_forward_naive(floatX* out, const floatX* inp, const floatX* weight, const floatX* bias, int N,
                          int IC, int OC) {
    const int block_size = 256;
    LAUNCH(matmul_forward_naive_kernel<floatX>, dim3(ceil_div(OC, block_size), N), block_size, 0, 0, out, inp,
           weight, bias, N, IC, OC);
    CUDA_CHECK(cudaGetLastError());
}

// ---- versions 2 and 3 of the fused products, one call each.

// fc forward: pre = inp·Wᵀ + b, out = gelu(pre).
void fc_gelu_separate(floatX* out, floatX* pre, const floatX* inp, const floatX* weight, const floatX* bias,
                      int N, int IC, int OC) {
    matmul_set_epilogue_fusion(false);  // product, then bias pass, then GELU pass
    matmul_forward(out, inp, weight, bias, N, IC, OC, 0, pre);
    matmul_set_epilogue_fusion(true);
}
void fc_gelu_fused(floatX* out, floatX* pre, const floatX* inp, const floatX* weight, const floatX* bias,
                   int N, int IC, int OC) {
    matmul_forward(out, inp, weight, bias, N, IC, OC, 0, pre);
}
// fcproj backward, input gradient only: dinp = (dout·W) ⊙ gelu'(pre).
void dinp_dgelu_separate(floatX* dinp, const floatX* dout, const floatX* weight, const floatX* pre, int N,
                         int IC, int OC) {
    matmul_cublaslt(dinp, weight, dout, IC, N, OC, false, false, false, CUBLASLT_EPILOGUE_DEFAULT, nullptr,
                    nullptr, 0);
    gelu_backward(dinp, pre, dinp, (size_t)N * IC, 0);
}
void dinp_dgelu_fused(floatX* dinp, const floatX* dout, const floatX* weight, const floatX* pre, int N,
                      int IC, int OC) {
    if (!matmul_cublaslt(dinp, weight, dout, IC, N, OC, false, false, false, CUBLASLT_EPILOGUE_DGELU, nullptr,
                         pre, 0)) {
        printf("note: cuBLASLt has no DGELU algorithm for %d x %d x %d; separate passes instead\n", IC, N,
               OC);
        dinp_dgelu_separate(dinp, dout, weight, pre, N, IC, OC);
    }
}

// ---- host helpers
// n values in [-scale, scale) from a linear congruential generator, rounded to floatX.
std::vector<float> random_vector(size_t n, unsigned seed, float scale = 1.0f) {
    std::vector<float> v(n);
    uint32_t state = seed * 2654435761u + 12345u;
    for (float& x : v) {
        state = state * 1664525u + 1013904223u;
        x = scale * ((float)(state >> 8) / 8388608.0f - 1.0f);
    }
    return round_to_floatX(v);
}
std::vector<float> gelu_of(const std::vector<float>& x) {
    std::vector<float> y(x.size());
    gelu_forward(y.data(), x.data(), x.size());
    return y;
}

// ---- checks against the CPU reference

void check_forward_versions(int N, int IC, int OC) {
    const std::vector<float> inp = random_vector((size_t)N * IC, 1),
                             weight = random_vector((size_t)OC * IC, 2, 0.1f), bias = random_vector(OC, 3);
    floatX *d_inp = device_floatX(inp), *d_weight = device_floatX(weight), *d_bias = device_floatX(bias);
    floatX* d_out = device_poisoned<floatX>((size_t)N * OC);
    std::vector<float> ref((size_t)N * OC), ref_plain((size_t)N * OC);
    matmul_forward(ref.data(), inp.data(), weight.data(), bias.data(), N, IC, OC);
    matmul_forward(ref_plain.data(), inp.data(), weight.data(), (const float*)nullptr, N, IC, OC);
    auto check = [&](const char* name, const std::vector<float>& expected) {
        report_check(name, relative_error(host_floats_of(d_out, expected.size()), expected));
        poison(d_out, (size_t)N * OC);
    };
    matmul_forward_naive(d_out, d_inp, d_weight, d_bias, N, IC, OC);
    check("forward v1 naive", ref);
    matmul_forward(d_out, d_inp, d_weight, nullptr, N, IC, OC, 0);
    check("forward, bare cuBLASLt product (no bias)", ref_plain);
    matmul_set_epilogue_fusion(false);
    matmul_forward(d_out, d_inp, d_weight, d_bias, N, IC, OC, 0);
    matmul_set_epilogue_fusion(true);
    check("forward v2 separate bias pass", ref);
    matmul_forward(d_out, d_inp, d_weight, d_bias, N, IC, OC, 0);
    check("forward v3 BIAS epilogue", ref);
    device_free(d_inp, d_weight, d_bias, d_out);
}

void check_gelu_forward_versions(int N, int IC, int OC) {
    const std::vector<float> inp = random_vector((size_t)N * IC, 11),
                             weight = random_vector((size_t)OC * IC, 12, 0.1f), bias = random_vector(OC, 13);
    floatX *d_inp = device_floatX(inp), *d_weight = device_floatX(weight), *d_bias = device_floatX(bias);
    floatX *d_out = device_poisoned<floatX>((size_t)N * OC), *d_pre = device_poisoned<floatX>((size_t)N * OC);
    std::vector<float> pre((size_t)N * OC);
    matmul_forward(pre.data(), inp.data(), weight.data(), bias.data(), N, IC, OC);
    const std::vector<float> out = gelu_of(pre);
    for (int version = 2; version <= 3; version++) {
        (version == 2 ? fc_gelu_separate : fc_gelu_fused)(d_out, d_pre, d_inp, d_weight, d_bias, N, IC, OC);
        const std::string name =
            version == 2 ? "forward+gelu v2 separate passes" : "forward+gelu v3 GELU_AUX_BIAS";
        report_check(name + ": out", relative_error(host_floats_of(d_out, out.size()), out));
        report_check(name + ": pre_gelu", relative_error(host_floats_of(d_pre, pre.size()), pre));
        poison(d_out, out.size());
        poison(d_pre, pre.size());
    }
    device_free(d_inp, d_weight, d_bias, d_out, d_pre);
}

// Whether gelu_forward, run on the pre-activation that the GELU_AUX_BIAS epilogue stored, gives the
// epilogue's output bit for bit. The trainer recomputes GELU in backward (-r 1) with gelu_forward,
// and its recomputation must give the forward's bits, so it can take the GELU into the fc product's
// epilogue only where this line says 0 values differ; the timing below says what that would save.
void report_gelu_recompute_bits(int N, int IC, int OC) {
    const size_t n = (size_t)N * OC;
    floatX* d_inp = device_floatX(random_vector((size_t)N * IC, 31));
    floatX* d_weight = device_floatX(random_vector((size_t)OC * IC, 32, 0.1f));
    floatX* d_bias = device_floatX(random_vector(OC, 33));
    floatX *d_out = device_poisoned<floatX>(n), *d_pre = device_poisoned<floatX>(n), *d_again = device_poisoned<floatX>(n);
    matmul_clear_refusals();
    fc_gelu_fused(d_out, d_pre, d_inp, d_weight, d_bias, N, IC, OC);
    const bool fused = matmul_refusal_count() == 0;
    gelu_forward(d_again, d_pre, n, 0);
    std::vector<floatX> out(n), again(n);
    CUDA_CHECK(cudaMemcpy(out.data(), d_out, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(again.data(), d_again, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) differ += memcmp(&out[i], &again[i], sizeof(floatX)) != 0;
    printf("GELU recomputation (N=%d, %d->%d): gelu_forward on the epilogue's pre-activation differs from the "
           "GELU_AUX_BIAS output in %zu of %zu values%s\n",
           N, IC, OC, differ, n, fused ? "" : " (the epilogue was refused: separate passes ran)");
    matmul_clear_refusals();
    device_free(d_inp, d_weight, d_bias, d_out, d_pre, d_again);
}

// The whole backward with the GELU gradient, fused (v3) and in separate passes (v2), accumulating
// into non-zero dweight and dbias.
void check_backward_versions(int N, int IC, int OC) {
    const std::vector<float> inp = random_vector((size_t)N * IC, 21);
    const std::vector<float> weight = random_vector((size_t)OC * IC, 22, 0.1f);
    const std::vector<float> dout = random_vector((size_t)N * OC, 23);
    const std::vector<float> pre = random_vector((size_t)N * IC, 24, 3.0f);
    const std::vector<float> dweight0 = random_vector((size_t)OC * IC, 25), dbias0 = random_vector(OC, 26);
    std::vector<float> dweight = dweight0, dbias = dbias0;
    std::vector<float> plain((size_t)N * IC, 0.0f), dinp((size_t)N * IC, 0.0f);
    matmul_backward(plain.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(), N, IC,
                    OC);
    gelu_backward(dinp.data(), pre.data(), plain.data(), plain.size());

    floatX *d_inp = device_floatX(inp), *d_weight = device_floatX(weight), *d_dout = device_floatX(dout),
           *d_pre = device_floatX(pre);
    void* scratch = device_buffer<char>(matmul_backward_scratch_bytes(N, OC));
    for (int version = 2; version <= 3; version++) {
        floatX *d_dinp = device_poisoned<floatX>(dinp.size()), *d_dweight = device_floatX(dweight0),
               *d_dbias = device_floatX(dbias0);
        matmul_set_epilogue_fusion(version == 3);
        matmul_backward(d_dinp, d_dweight, d_dbias, scratch, d_dout, d_inp, d_weight, N, IC, OC, 0, d_pre);
        matmul_set_epilogue_fusion(true);
        const std::string name =
            version == 2 ? "backward+dgelu v2 separate passes" : "backward+dgelu v3 DGELU";
        report_check(name + ": dinp", relative_error(host_floats_of(d_dinp, dinp.size()), dinp));
        report_check(name + ": dweight", relative_error(host_floats_of(d_dweight, dweight.size()), dweight));
        report_check(name + ": dbias", relative_error(host_floats_of(d_dbias, dbias.size()), dbias));
        device_free(d_dinp, d_dweight, d_dbias);
    }
    device_free(d_inp, d_weight, d_dout, d_pre, scratch);
}

// ---- timings (GPU only)

struct Shape {
    const char* name;
    int IC, OC;
    bool has_bias;
};

void time_layer(const Shape& s, int N, double ceiling_tflops, double copy_gbs) {
    const int IC = s.IC, OC = s.OC;
    const size_t in_size = (size_t)N * IC, out_size = (size_t)N * OC, w_size = (size_t)OC * IC;
    floatX *inp, *weight, *bias, *out, *dout, *dinp, *dweight, *dbias;
    floatX** buffers[] = {&inp, &weight, &bias, &out, &dout, &dinp, &dweight, &dbias};
    const size_t sizes[] = {in_size, w_size, (size_t)OC, out_size, out_size, in_size, w_size, (size_t)OC};
    for (int i = 0; i < 8; i++) {
        *buffers[i] = device_buffer<floatX>(sizes[i]);
        fill_random_device(*buffers[i], sizes[i], 10 + i, i == 1 ? 0.02f : 1.0f);  // weights ~ GPT-2's scale
    }
    void* scratch = device_buffer<char>(matmul_backward_scratch_bytes(N, OC));
    const floatX* b = s.has_bias ? bias : nullptr;
    const double flops = 2.0 * N * (double)IC * OC;
    char label[96];
    auto name = [&](const char* what) {
        snprintf(label, sizeof label, "N=%d %s %s", N, s.name, what);
        return label;
    };

    const double naive = time_median_ms([&] { matmul_forward_naive(out, inp, weight, b, N, IC, OC); }, 1, 3);
    report_flops(name("fwd v1 naive"), naive, flops, ceiling_tflops);
    const double bare = time_median_ms([&] { matmul_forward(out, inp, weight, nullptr, N, IC, OC, 0); });
    report_flops(name("fwd bare product"), bare, flops, ceiling_tflops);
    if (s.has_bias) {
        matmul_set_epilogue_fusion(false);
        const double separate = time_median_ms([&] { matmul_forward(out, inp, weight, bias, N, IC, OC, 0); });
        matmul_set_epilogue_fusion(true);
        const double fused = time_median_ms([&] { matmul_forward(out, inp, weight, bias, N, IC, OC, 0); });
        report_flops(name("fwd v2 +bias pass"), separate, flops, ceiling_tflops);
        report_flops(name("fwd v3 BIAS epilogue"), fused, flops, ceiling_tflops);
    }
    floatX* db = s.has_bias ? dbias : nullptr;
    const double backward =
        time_median_ms([&] { matmul_backward(dinp, dweight, db, scratch, dout, inp, weight, N, IC, OC, 0); });
    report_flops(name("bwd (shipped)"), backward, 2 * flops, ceiling_tflops);
    if (s.has_bias) {
        const double bgrad = time_median_ms([&] { matmul_bias_gradient(dbias, scratch, dout, N, OC, 0); });
        const double bytes = out_size * sizeof(floatX) + 2.0 * bias_grad_bands(N, OC) * OC * sizeof(float) +
                             2.0 * OC * sizeof(floatX);
        report_bandwidth(name("bias gradient kernel"), bgrad, bytes, copy_gbs);
        // The same backward with the bias gradient from cuBLASLt's BGRADB epilogue (opt-in).
        matmul_set_bias_gradient_epilogue(true);
        const double bgradb = time_median_ms(
            [&] { matmul_backward(dinp, dweight, db, scratch, dout, inp, weight, N, IC, OC, 0); });
        matmul_set_bias_gradient_epilogue(false);
        report_flops(name("bwd with BGRADB epilogue"), bgradb, 2 * flops, ceiling_tflops);
    }
    for (floatX** p : buffers) CUDA_CHECK(cudaFree(*p));
    device_free(scratch);
}

// fc forward with GELU and fcproj's input gradient with the GELU gradient: separate passes vs fused.
void time_gelu_fusion(int N, int C, double ceiling_tflops) {
    const int H = 4 * C;
    floatX *inp, *weight, *bias, *out, *pre, *dout, *dinp, *fcproj_weight;
    const size_t sizes[] = {(size_t)N * C, (size_t)H * C, (size_t)H,     (size_t)N * H,
                            (size_t)N * H, (size_t)N * C, (size_t)N * H, (size_t)C * H};
    floatX** buffers[] = {&inp, &weight, &bias, &out, &pre, &dout, &dinp, &fcproj_weight};
    for (int i = 0; i < 8; i++) {
        *buffers[i] = device_buffer<floatX>(sizes[i]);
        fill_random_device(*buffers[i], sizes[i], 100 + i, i == 1 || i == 7 ? 0.02f : 1.0f);
    }
    const double flops = 2.0 * N * (double)C * H;
    char label[96];
    auto report = [&](const char* what, double ms) {
        snprintf(label, sizeof label, "N=%d fc %s", N, what);
        report_flops(label, ms, flops, ceiling_tflops);
    };
    const double fwd_separate =
        time_median_ms([&] { fc_gelu_separate(out, pre, inp, weight, bias, N, C, H); });
    const double fwd_bias_fused = time_median_ms([&] {
        matmul_forward(pre, inp, weight, bias, N, C, H, 0);
        gelu_forward(out, pre, (size_t)N * H, 0);
    });
    const double fwd_fused = time_median_ms([&] { fc_gelu_fused(out, pre, inp, weight, bias, N, C, H); });
    report("fwd+gelu v2 3 passes", fwd_separate);
    report("fwd+gelu BIAS epi + gelu pass", fwd_bias_fused);
    report("fwd+gelu v3 GELU_AUX_BIAS", fwd_fused);
    printf("  fusing bias and GELU into the epilogue saves %.3f ms of %.3f (%.0f%%)\n",
           fwd_separate - fwd_fused, fwd_separate, 100.0 * (fwd_separate - fwd_fused) / fwd_separate);

    const double bwd_separate =
        time_median_ms([&] { dinp_dgelu_separate(dinp, dout, fcproj_weight, pre, N, H, C); });
    const double bwd_fused =
        time_median_ms([&] { dinp_dgelu_fused(dinp, dout, fcproj_weight, pre, N, H, C); });
    snprintf(label, sizeof label, "N=%d fcproj dinp+dgelu v2 2 passes", N);
    report_flops(label, bwd_separate, flops, ceiling_tflops);
    snprintf(label, sizeof label, "N=%d fcproj dinp+dgelu v3 DGELU", N);
    report_flops(label, bwd_fused, flops, ceiling_tflops);
    printf("  fusing the GELU gradient into the epilogue saves %.3f ms of %.3f (%.0f%%)\n",
           bwd_separate - bwd_fused, bwd_separate, 100.0 * (bwd_separate - bwd_fused) / bwd_separate);
    for (floatX** p : buffers) CUDA_CHECK(cudaFree(*p));
}

int main() {
    print_device_header();
    matmul_setup();
    // Checks: small shapes with N not a power of two and IC, OC not multiples of 64.
    check_forward_versions(74, 160, 480);
    check_gelu_forward_versions(74, 160, 640);
    check_backward_versions(74, 640, 160);
    report_gelu_recompute_bits(74, 160, 640);
    const double ceiling = measure_bf16_gemm_tflops();

    if (BENCH_ON_GPU) {
        const double copy_gbs = measure_copy_bandwidth_gbs();
        printf("bf16 GEMM ceiling (cuBLASLt, 8192^3): %.1f TFLOP/s; copy bandwidth %.1f GB/s\n", ceiling,
               copy_gbs);
        const int C = 768, Vp = 50304;
        const Shape shapes[] = {{"qkv 768->2304", C, 3 * C, true},
                                {"attproj 768->768", C, C, true},
                                {"fc 768->3072", C, 4 * C, true},
                                {"fcproj 3072->768", 4 * C, C, true},
                                {"logits 768->50304", C, Vp, false}};
        for (int N : {8192, 16384}) {
            for (const Shape& s : shapes) time_layer(s, N, ceiling, copy_gbs);
            time_gelu_fusion(N, C, ceiling);
        }
        report_gelu_recompute_bits(16384, C, 4 * C);
    } else {
        printf("emulator: checks only (the GEMM-ceiling code ran on a %s product)\n", "128^3");
    }
    matmul_teardown();
    return bench_exit_status();
}

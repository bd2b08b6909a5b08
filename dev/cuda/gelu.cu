// GELU (kernels/gelu.h), forward and backward, from naive to shipped. Each version is checked against
// the CPU reference (cpu/gelu.h) on a length with a ragged end, then, on a GPU, timed on the MLP's
// hidden activation of GPT-2 124M (B·T·4C elements, B = 8 and 16, T = 1024, C = 768) and reported in
// GB/s and as a share of the measured copy bandwidth (memory-bound: 4 bytes per element forward,
// 6 backward in bf16).
//   v1  one thread per element: 2-byte loads and stores
//   v2  one thread per 128-bit vector (8 bf16 / 4 fp32), streaming loads (shipped)
// Under the emulator only the checks run. Exit status 1 if a check failed.
#include <cstdio>
#include <vector>

#include "cpu/gelu.h"
#include "dev/cuda/bench.h"
#include "kernels/gelu.h"

// ---- the two versions of each direction
void gelu_forward_v1(floatX* out, const floatX* inp, size_t n) {
    LAUNCH(gelu_forward_scalar_kernel<floatX>, ceil_div(n, GELU_BLOCK_SIZE), GELU_BLOCK_SIZE, 0, 0, out, inp,
           n);
    CUDA_CHECK(cudaGetLastError());
}
void gelu_forward_v2(floatX* out, const floatX* inp, size_t n) { gelu_forward(out, inp, n, 0); }
void gelu_backward_v1(floatX* dinp, const floatX* inp, const floatX* dout, size_t n) {
    LAUNCH(gelu_backward_scalar_kernel<floatX>, ceil_div(n, GELU_BLOCK_SIZE), GELU_BLOCK_SIZE, 0, 0, dinp,
           inp, dout, n);
    CUDA_CHECK(cudaGetLastError());
}
void gelu_backward_v2(floatX* dinp, const floatX* inp, const floatX* dout, size_t n) {
    gelu_backward(dinp, inp, dout, n, 0);
}

// Checks both versions of both directions on n elements of random data in [-5, 5].
void check_versions(size_t n) {
    floatX *inp = device_buffer<floatX>(n), *dout = device_buffer<floatX>(n), *out = device_buffer<floatX>(n);
    fill_random_device(inp, n, 1, 5.0f);
    fill_random_device(dout, n, 2);
    const std::vector<float> x = host_floats_of(inp, n), dy = host_floats_of(dout, n);  // the rounded inputs
    std::vector<float> y(n), dx(n, 0.0f);
    gelu_forward(y.data(), x.data(), n);
    gelu_backward(dx.data(), x.data(), dy.data(), n);  // the reference adds into dx

    for (int version = 1; version <= 2; version++) {
        poison(out, n);
        (version == 1 ? gelu_forward_v1 : gelu_forward_v2)(out, inp, n);
        report_check(version == 1 ? "gelu forward v1 scalar" : "gelu forward v2 128-bit",
                     relative_error(host_floats_of(out, n), y));
        poison(out, n);
        (version == 1 ? gelu_backward_v1 : gelu_backward_v2)(out, inp, dout, n);
        report_check(version == 1 ? "gelu backward v1 scalar" : "gelu backward v2 128-bit",
                     relative_error(host_floats_of(out, n), dx));
    }
    device_free(inp, dout, out);
}

void time_versions(size_t n, double copy_gbs) {
    floatX *inp = device_buffer<floatX>(n), *dout = device_buffer<floatX>(n), *out = device_buffer<floatX>(n);
    fill_random_device(inp, n, 3, 5.0f);
    fill_random_device(dout, n, 4);
    const double forward_bytes = 2.0 * n * sizeof(floatX), backward_bytes = 3.0 * n * sizeof(floatX);
    char label[96];
    snprintf(label, sizeof label, "n=%zu fwd v1 scalar", n);
    report_bandwidth(label, time_median_ms([&] { gelu_forward_v1(out, inp, n); }), forward_bytes, copy_gbs);
    snprintf(label, sizeof label, "n=%zu fwd v2 128-bit", n);
    report_bandwidth(label, time_median_ms([&] { gelu_forward_v2(out, inp, n); }), forward_bytes, copy_gbs);
    snprintf(label, sizeof label, "n=%zu bwd v1 scalar", n);
    report_bandwidth(label, time_median_ms([&] { gelu_backward_v1(out, inp, dout, n); }), backward_bytes,
                     copy_gbs);
    snprintf(label, sizeof label, "n=%zu bwd v2 128-bit", n);
    report_bandwidth(label, time_median_ms([&] { gelu_backward_v2(out, inp, dout, n); }), backward_bytes,
                     copy_gbs);
    snprintf(label, sizeof label, "n=%zu bwd v2 128-bit in place", n);
    report_bandwidth(label, time_median_ms([&] { gelu_backward_v2(dout, inp, dout, n); }), backward_bytes,
                     copy_gbs);
    device_free(inp, dout, out);
}

int main() {
    print_device_header();
    check_versions(74 * 480 + 5);  // ragged end: not a multiple of the vector width
    if (BENCH_ON_GPU) {
        check_versions((size_t)8 * 1024 * 3072 + 3);
        const double copy_gbs = measure_and_print_copy_bandwidth();
        for (int B : {8, 16}) time_versions((size_t)B * 1024 * 4 * 768, copy_gbs);
    } else {
        printf("emulator: checks only\n");
    }
    return bench_exit_status();
}

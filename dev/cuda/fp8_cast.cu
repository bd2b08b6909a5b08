// FP8 casts (kernels/fp8_cast.h), from naive to shipped. Each version is checked bit for bit against
// base/fp8.h (fp8_encode of x · scale) on ragged shapes, then, on a GPU, timed on GPT-2 124M's tensors
// (an activation B·T × C and the MLP's B·T × 4C at B = 16, T = 1024, C = 768; the fc weight 3072 × 768)
// and reported in GB/s against the copy bandwidth and a copy of the same byte count (memory-bound:
// e + 1 bytes per element for a cast, e + 2 for a cast with its transpose, e = sizeof(floatX)).
//   cast            v1  one thread per element (2-byte load, 1-byte store)
//                   v2  16 elements per thread: 128-bit loads, one 16-byte store (shipped)
//                   v3  v2 taking the amax in the same pass (the delayed recipe's cast, shipped)
//   cast+transpose  v1  one thread per element, q and qᵀ written from global memory (qᵀ uncoalesced)
//                   v2  64×64 tiles through shared memory, 128-bit loads, 16-byte qᵀ stores (shipped)
//   amax            the current recipe's first pass (shipped), against a read of the same bytes
// Under the emulator only the checks run. Exit status 1 if a check failed.
#include <cstdio>
#include <vector>

#include "base/fp8.h"
#include "dev/cuda/bench.h"
#include "kernels/fp8_cast.h"

// ---- the naive versions
template <Fp8Format F>
__global__ void fp8_cast_scalar_kernel(__nv_fp8_storage_t* q, const floatX* x, size_t n, const Fp8ScaleState* state) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        q[i] = __nv_cvt_float_to_fp8(to_float(x[i]) * state->scale, __NV_SATFINITE, fp8_interpretation(F));
}
template <Fp8Format F>
__global__ void fp8_cast_transpose_scalar_kernel(__nv_fp8_storage_t* q, __nv_fp8_storage_t* qt, const floatX* x, int R,
                                                 int C, const Fp8ScaleState* state) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)R * C) return;
    const int r = (int)(i / C), c = (int)(i % C);
    const __nv_fp8_storage_t code =
        __nv_cvt_float_to_fp8(to_float(x[i]) * state->scale, __NV_SATFINITE, fp8_interpretation(F));
    q[i] = code;
    qt[(size_t)c * R + r] = code;
}

constexpr Fp8Format kFormat = Fp8Format::e4m3;
void cast_v1(__nv_fp8_storage_t* q, const floatX* x, size_t n, Fp8ScaleState* s) {
    LAUNCH(fp8_cast_scalar_kernel<kFormat>, ceil_div(n, 256), 256, 0, 0, q, x, n, s);
    CUDA_CHECK(cudaGetLastError());
}
void cast_v2(__nv_fp8_storage_t* q, const floatX* x, size_t n, Fp8ScaleState* s) { fp8_cast(q, x, n, kFormat, s, false, 0); }
void cast_v3(__nv_fp8_storage_t* q, const floatX* x, size_t n, Fp8ScaleState* s) { fp8_cast(q, x, n, kFormat, s, true, 0); }
void transpose_v1(__nv_fp8_storage_t* q, __nv_fp8_storage_t* qt, const floatX* x, int R, int C, Fp8ScaleState* s) {
    LAUNCH(fp8_cast_transpose_scalar_kernel<kFormat>, ceil_div((size_t)R * C, 256), 256, 0, 0, q, qt, x, R, C, s);
    CUDA_CHECK(cudaGetLastError());
}
void transpose_v2(__nv_fp8_storage_t* q, __nv_fp8_storage_t* qt, const floatX* x, int R, int C, Fp8ScaleState* s) {
    fp8_cast_transpose(q, qt, x, R, C, kFormat, s, false, 0);
}

Fp8ScaleState* state_with_scale(float scale) {
    return device_copy_of(std::vector<Fp8ScaleState>{{scale, 1.0f / scale, 0.0f, 0}});
}

// Every version on an R×C tensor of random values in [-4, 4) at scale 64 (some saturate at 448).
void check_versions(int R, int C) {
    const size_t n = (size_t)R * C;
    floatX* x = device_buffer<floatX>(n);
    fill_random_device(x, n, 7, 4.0f);
    const std::vector<float> xs = host_floats_of(x, n);
    std::vector<__nv_fp8_storage_t> want(n), want_t(n);
    for (size_t i = 0; i < n; i++) want[i] = fp8_encode(xs[i] * 64.0f, kFormat);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) want_t[(size_t)c * R + r] = want[(size_t)r * C + c];
    Fp8ScaleState* s = state_with_scale(64.0f);
    __nv_fp8_storage_t *q = device_buffer<__nv_fp8_storage_t>(n), *qt = device_buffer<__nv_fp8_storage_t>(n);
    char label[96];
    void (*casts[])(__nv_fp8_storage_t*, const floatX*, size_t, Fp8ScaleState*) = {cast_v1, cast_v2, cast_v3};
    for (int v = 0; v < 3; v++) {
        poison(q, n);
        casts[v](q, x, n, s);
        snprintf(label, sizeof label, "cast v%d %dx%d", v + 1, R, C);
        report_same_bits(label, host_copy_of(q, n) == want);
    }
    float amax = 0.0f;
    for (float e : xs) amax = fp8_amax_merge(amax, e);
    report_same_bits("cast v3 amax", host_copy_of(s, 1)[0].amax == amax);
    void (*transposes[])(__nv_fp8_storage_t*, __nv_fp8_storage_t*, const floatX*, int, int, Fp8ScaleState*) = {
        transpose_v1, transpose_v2};
    for (int v = 0; v < 2; v++) {
        poison(q, n);
        poison(qt, n);
        transposes[v](q, qt, x, R, C, s);
        snprintf(label, sizeof label, "cast+transpose v%d %dx%d", v + 1, R, C);
        report_same_bits(label, host_copy_of(q, n) == want && host_copy_of(qt, n) == want_t);
    }
    fp8_amax(s, x, n, 0);
    report_same_bits("amax", host_copy_of(s, 1)[0].amax == amax);
    device_free(x, s, q, qt);
}

void time_versions(int R, int C, double copy_gbs) {
    const size_t n = (size_t)R * C;
    floatX* x = device_buffer<floatX>(n);
    fill_random_device(x, n, 9, 4.0f);
    Fp8ScaleState* s = state_with_scale(64.0f);
    __nv_fp8_storage_t *q = device_buffer<__nv_fp8_storage_t>(n), *qt = device_buffer<__nv_fp8_storage_t>(n);
    const double e = sizeof(floatX), cast_bytes = n * (e + 1), transpose_bytes = n * (e + 2);
    char label[96];
    const char* cast_names[] = {"v1 scalar", "v2 128-bit", "v3 128-bit + amax"};
    void (*casts[])(__nv_fp8_storage_t*, const floatX*, size_t, Fp8ScaleState*) = {cast_v1, cast_v2, cast_v3};
    for (int v = 0; v < 3; v++) {
        snprintf(label, sizeof label, "%dx%d cast %s", R, C, cast_names[v]);
        report_bandwidth(label, time_median_ms([&] { casts[v](q, x, n, s); }), cast_bytes, copy_gbs);
    }
    snprintf(label, sizeof label, "%dx%d cast+T v1 scalar", R, C);
    report_bandwidth(label, time_median_ms([&] { transpose_v1(q, qt, x, R, C, s); }), transpose_bytes, copy_gbs);
    snprintf(label, sizeof label, "%dx%d cast+T v2 tiles", R, C);
    report_bandwidth(label, time_median_ms([&] { transpose_v2(q, qt, x, R, C, s); }), transpose_bytes, copy_gbs);
    snprintf(label, sizeof label, "%dx%d amax", R, C);
    report_bandwidth(label, time_median_ms([&] { fp8_amax(s, x, n, 0); }), n * e, copy_gbs);
    device_free(x, s, q, qt);
}

int main() {
    print_device_header();
    check_versions(80, 200);  // partial tiles at two edges, 128-bit paths inside
    check_versions(37, 61);   // no 128-bit path at all
    if (BENCH_ON_GPU) {
        check_versions(16 * 1024, 768);
        const double copy_gbs = measure_and_print_copy_bandwidth();
        time_versions(16 * 1024, 768, copy_gbs);
        time_versions(16 * 1024, 3072, copy_gbs);
        time_versions(3072, 768, copy_gbs);
    } else {
        printf("emulator: checks only\n");
    }
    return bench_exit_status();
}

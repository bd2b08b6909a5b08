// The squared global gradient norm Σ g², from naive to the shipped kernel in kernels/global_norm.h.
// Each version is checked against a double-precision sum (cpu/adamw.h), then (on a GPU) timed on
// GPT-2 124M's 124,475,904 bf16 gradients.
//   1. naive: one element per thread, a block reduction, one float atomicAdd per block into the
//      total. Fast to write, but the order of the atomics, hence the bits, changes run to run.
//   2. deterministic: a fixed grid sweeps the array (grid-stride loop), each block writes its partial
//      sum, one block adds the partials in a fixed order. Scalar loads.
//   3. 128-bit loads (8 elements per step) in the same fixed grid: the shipped global_norm_squared.
// Bandwidth counts n·sizeof(floatX) bytes read.
#include <cmath>
#include <random>
#include <vector>

#include "cpu/adamw.h"
#include "dev/cuda/bench.h"
#include "kernels/global_norm.h"

// ---- version 1: atomics
__global__ void global_norm_atomic_kernel(float* out, const floatX* grads, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const float x = i < n ? to_float(grads[i]) : 0.0f;
    const float block_sum = block_reduce_sum(x * x);
    if (threadIdx.x == 0) atomicAdd(out, block_sum);
}

void run_version(int version, float* out, const floatX* grads, size_t n, void* scratch) {
    const ElementGroups split = split_into_groups(grads, sizeof(floatX), n);
    switch (version) {
        case 1:
            LAUNCH(global_norm_atomic_kernel, (unsigned)((n + 255) / 256), 256, 0, 0, out, grads, n);
            break;
        case 2:
            LAUNCH(global_norm_partial_kernel<false>, kGlobalNormBlocks, kGlobalNormBlockSize, 0, 0,
                   static_cast<float*>(scratch), grads, split);
            LAUNCH(global_norm_final_kernel, 1, kGlobalNormFinalBlockSize, 0, 0, out,
                   static_cast<float*>(scratch), kGlobalNormBlocks);
            break;
        case 3:
            global_norm_squared(out, grads, n, scratch, 0);
            break;
    }
    CUDA_CHECK(cudaGetLastError());
}
const char* version_name(int version) {
    static const char* names[] = {"", "1 naive, float atomics", "2 fixed grid + partials, scalar",
                                  "3 fixed grid + partials, 128-bit (shipped)"};
    return names[version];
}

struct Data {
    size_t n;
    std::vector<float> values;  // rounded to floatX
    floatX* grads = nullptr;
    float* out = nullptr;
    void* scratch = nullptr;
    Data(size_t n_, unsigned seed) : n(n_), values(n_) {
        std::mt19937 rng(seed);
        std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
        std::vector<floatX> raw(n);
        for (size_t i = 0; i < n; i++) {
            raw[i] = (floatX)dist(rng);
            values[i] = (float)raw[i];
        }
        CUDA_CHECK(cudaMalloc(&grads, n * sizeof(floatX)));
        CUDA_CHECK(cudaMemcpy(grads, raw.data(), n * sizeof(floatX), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMalloc(&out, sizeof(float)));
        CUDA_CHECK(cudaMalloc(&scratch, global_norm_scratch_bytes()));
    }
    ~Data() {
        cudaFree(grads);
        cudaFree(out);
        cudaFree(scratch);
    }
};

// Every version against the double sum; for the deterministic ones, a second run gives the same bits.
bool check_versions(size_t n) {
    Data d(n, 3);
    const double expected = global_sum_of_squares(d.values.data(), n);
    bool ok = true;
    for (int version = 1; version <= 3; version++) {
        float results[2];
        for (float& result : results) {
            CUDA_CHECK(cudaMemset(d.out, 0, sizeof(float)));
            run_version(version, d.out, d.grads, n, d.scratch);
            CUDA_CHECK(cudaMemcpy(&result, d.out, sizeof(float), cudaMemcpyDeviceToHost));
        }
        char name[160];
        snprintf(name, sizeof name, "global norm %s (n=%zu)", version_name(version), n);
        ok &= report_check(name, std::fabs(results[0] - expected) / expected, 1e-5);
        if (version > 1) {
            const bool same = memcmp(&results[0], &results[1], sizeof(float)) == 0;
            printf("%s global norm %s is bitwise reproducible\n", same ? "PASS" : "FAIL",
                   version_name(version));
            ok &= same;
        }
    }
    return ok;
}

void time_versions(size_t n) {
    const double ceiling = measure_copy_bandwidth_gbs();
    printf("copy bandwidth (read + write): %.1f GB/s\n", ceiling);
    printf("n=%zu gradients\n", n);
    Data d(n, 4);
    for (int version = 1; version <= 3; version++)
        report_bandwidth(version_name(version),
                         time_median_ms([&] { run_version(version, d.out, d.grads, n, d.scratch); }),
                         (double)n * sizeof(floatX), ceiling);
}

int main() {
    print_device_header();
    bool ok = true;
    if (BENCH_ON_GPU) {
        ok &= check_versions(10000019);
        time_versions(124475904);  // GPT-2 124M with the vocabulary padded to 50304
    } else {
        ok &= check_versions(100003);
    }
    return ok ? 0 : 1;
}

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
#include <cstring>
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
            LAUNCH((global_norm_partial_kernel<false, floatX>), kGlobalNormBlocks, kGlobalNormBlockSize, 0, 0,
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
    floatX* grads = device_floatX(values);
    float* out = device_buffer<float>(1);
    void* scratch = device_buffer<char>(global_norm_scratch_bytes());
    Data(size_t n_, unsigned seed) : n(n_), values(rounded_random_floats(n_, seed, -1.0f, 1.0f)) {}
    ~Data() { device_free(grads, out, scratch); }
};

// Every version against the double sum; for the deterministic ones, a second run gives the same bits.
void check_versions(size_t n) {
    Data d(n, 3);
    const double expected = global_sum_of_squares(d.values.data(), n);
    for (int version = 1; version <= 3; version++) {
        float results[2];
        for (float& result : results) {
            CUDA_CHECK(cudaMemset(d.out, 0, sizeof(float)));
            run_version(version, d.out, d.grads, n, d.scratch);
            CUDA_CHECK(cudaMemcpy(&result, d.out, sizeof(float), cudaMemcpyDeviceToHost));
        }
        const std::string name = std::string("global norm ") + version_name(version);
        report_check(name + " (n=" + std::to_string(n) + ")", std::fabs(results[0] - expected) / expected,
                     1e-5);
        if (version > 1)
            report_same_bits(name + " is bitwise reproducible",
                             memcmp(&results[0], &results[1], sizeof(float)) == 0);
    }
}

void time_versions(size_t n) {
    const double ceiling = measure_and_print_copy_bandwidth();
    printf("n=%zu gradients\n", n);
    Data d(n, 4);
    for (int version = 1; version <= 3; version++)
        report_bandwidth(version_name(version),
                         time_median_ms([&] { run_version(version, d.out, d.grads, n, d.scratch); }),
                         (double)n * sizeof(floatX), ceiling);
}

int main() {
    print_device_header();
    if (BENCH_ON_GPU) {
        check_versions(10000019);
        time_versions(124475904);  // GPT-2 124M with the vocabulary padded to 50304
    } else {
        check_versions(100003);
    }
    return bench_exit_status();
}

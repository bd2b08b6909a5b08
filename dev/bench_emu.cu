// Benchmark of the CUDA emulator (emu/): the cost of one fiber switch, of one block-wide barrier
// per thread, and the throughput of emulated kernels. Prints figures; run it by hand:
//   OMP_NUM_THREADS=2 ./dev/bin/bench_emu
// Figures are medians of 5 trials, on a machine that may be shared (say so when you quote them).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include <omp.h>

#include "emu/fiber.h"
#include "kernels/common.h"

namespace {

double seconds_now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
template <typename F>
double median_seconds(F run) {
    std::vector<double> t;
    for (int trial = 0; trial < 5; trial++) {
        double start = seconds_now();
        run();
        t.push_back(seconds_now() - start);
    }
    std::sort(t.begin(), t.end());
    return t[2];
}

// Raw context switch: a fiber that yields back `rounds` times (two switches per round).
emu::Fiber* g_fiber;
long g_rounds;
void ping(void*) {
    for (long i = 0; i < g_rounds; i++) g_fiber->yield();
}

__global__ void many_barriers(float* out, int barriers) {
    float v = threadIdx.x;
    for (int i = 0; i < barriers; i++) {
        v = v * 0.5f + 1.0f;
        __syncthreads();
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}
__global__ void many_shuffles(float* out, int rounds) {
    float v = threadIdx.x;
    for (int i = 0; i < rounds; i++) v = warp_reduce_sum(v) * 1e-3f;  // 5 shuffles per round
    out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}
__global__ void axpy(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
__global__ void row_sums(const float* x, float* out, int cols) {  // one block per row
    float v = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) v += x[blockIdx.x * cols + c];
    v = block_reduce_sum(v);
    if (threadIdx.x == 0) out[blockIdx.x] = v;
}

}  // namespace

int main() {
    printf("CUDA emulator benchmark (%d OpenMP threads)\n", omp_get_max_threads());

    emu::Fiber fiber(64 << 10);
    g_fiber = &fiber;
    g_rounds = 2000000;
    double t = median_seconds([] {
        g_fiber->reset(ping, nullptr);
        while (!g_fiber->finished()) g_fiber->resume();
    });
    printf("fiber switch:              %6.1f ns per switch (%ld switches)\n", t / (2.0 * g_rounds + 2) * 1e9,
           2 * g_rounds + 2);

    const int blocks = 64, threads = 256, barriers = 200, shuffle_rounds = 40;
    float* out;
    CUDA_CHECK(cudaMalloc(&out, blocks * threads * sizeof(float)));
    t = median_seconds([&] { LAUNCH(many_barriers, blocks, threads, 0, 0, out, barriers); });
    CUDA_CHECK(cudaGetLastError());
    printf("__syncthreads():           %6.1f ns per thread per barrier (%d blocks x %d threads x %d)\n",
           t / ((double)blocks * threads * barriers) * 1e9, blocks, threads, barriers);
    t = median_seconds([&] { LAUNCH(many_shuffles, blocks, threads, 0, 0, out, shuffle_rounds); });
    CUDA_CHECK(cudaGetLastError());
    printf("__shfl_xor_sync():         %6.1f ns per thread per shuffle\n",
           t / ((double)blocks * threads * shuffle_rounds * 5) * 1e9);

    const int n = 1 << 22;
    float *x, *y;
    CUDA_CHECK(cudaMalloc(&x, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&y, n * sizeof(float)));
    CUDA_CHECK(cudaMemset(x, 0, n * sizeof(float)));
    CUDA_CHECK(cudaMemset(y, 0, n * sizeof(float)));
    t = median_seconds([&] { LAUNCH(axpy, ceil_div(n, 256), 256, 0, 0, x, y, 2.0f, n); });
    CUDA_CHECK(cudaGetLastError());
    printf("axpy (no barriers):        %6.1f M threads/s (%d threads)\n", n / t * 1e-6, n);
    const int rows = 4096, cols = 1024;
    t = median_seconds([&] { LAUNCH(row_sums, rows, 256, 0, 0, x, out, cols); });
    CUDA_CHECK(cudaGetLastError());
    printf("row sums (block_reduce):   %6.1f M elements/s, %6.1f M threads/s (%d rows x %d, 256 threads)\n",
           (double)rows * cols / t * 1e-6, (double)rows * 256 / t * 1e-6, rows, cols);
    cudaFree(x), cudaFree(y), cudaFree(out);
    return 0;
}

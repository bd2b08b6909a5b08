// The emulator's error detection: a missing barrier caught by the shuffled mode, a divergent
// barrier and other impossible synchronisations reported with the kernel's name instead of a hang,
// bad launch configurations refused as a GPU would, and (in the AddressSanitizer build) an
// out-of-bounds write caught by ASan.
#include <string>
#include <unistd.h>
#include <vector>

#include "kernels/common.h"
#include "test/test.h"

namespace {

std::vector<float> run_shift(void (*kernel)(const float*, float*), const char* name, int blocks,
                             const std::vector<float>& x) {
    float *d_x, *d_y;
    CUDA_CHECK(cudaMalloc(&d_x, x.size() * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_y, x.size() * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(d_x, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
    emu::launch(name, kernel, blocks, 128, 0, 0, d_x, d_y);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> y(x.size());
    CUDA_CHECK(cudaMemcpy(y.data(), d_y, y.size() * sizeof(float), cudaMemcpyDeviceToHost));
    cudaFree(d_x), cudaFree(d_y);
    return y;
}

// Each thread reads its left neighbour's value from shared memory. Without the barrier, that is a
// race which in-order execution hides: the neighbour always ran first.
__global__ void shift_missing_barrier(const float* x, float* y) {
    __shared__ float buffer[128];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    buffer[threadIdx.x] = x[i];
    y[i] = threadIdx.x > 0 ? buffer[threadIdx.x - 1] : 0.0f;
}
__global__ void shift_with_barrier(const float* x, float* y) {
    __shared__ float buffer[128];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    buffer[threadIdx.x] = x[i];
    __syncthreads();
    y[i] = threadIdx.x > 0 ? buffer[threadIdx.x - 1] : 0.0f;
}

TEST(shuffled_mode_exposes_missing_barrier) {
    const int blocks = 4;
    std::vector<float> x(blocks * 128), expected(x.size());
    for (size_t i = 0; i < x.size(); i++) x[i] = 1.0f + i;
    for (size_t i = 0; i < x.size(); i++) expected[i] = i % 128 ? x[i - 1] : 0.0f;

    emu::set_shuffle_seed(0);
    CHECK_MSG(run_shift(shift_missing_barrier, "shift_missing_barrier", blocks, x) == expected,
              "in thread order the race should stay hidden (this is what makes it dangerous)");
    for (unsigned long long seed : {1ull, 2ull, 3ull}) {
        emu::set_shuffle_seed(seed);
        CHECK_MSG(run_shift(shift_missing_barrier, "shift_missing_barrier", blocks, x) != expected,
                  "seed %llu: the shuffled order did not expose the missing barrier", seed);
        CHECK_MSG(run_shift(shift_with_barrier, "shift_with_barrier", blocks, x) == expected,
                  "seed %llu: the correct kernel failed in shuffled order", seed);
    }
    emu::set_shuffle_seed(0);
}

// Runs a kernel expected to fail; returns the emulator's report.
template <typename... Params, typename... Args>
std::string failing_launch(const char* name, void (*kernel)(Params...), dim3 block, Args... args) {
    emu::launch(name, kernel, dim3(2), block, 0, 0, args...);
    std::string report = emu::last_kernel_report();
    CHECK(cudaDeviceSynchronize() == cudaErrorLaunchFailure);
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    CHECK(cudaGetLastError() == cudaSuccess);  // reading the error cleared it
    return report;
}
bool contains(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }

__global__ void divergent_barrier(int* out) {
    if (threadIdx.x < 16) __syncthreads();  // threads 16..63 never arrive
    out[threadIdx.x] = 1;
}
__global__ void lane_exits_before_shuffle(float* out) {
    if (threadIdx.x == 3) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}
__global__ void warp_and_block_barriers_mixed(int* out) {
    if (threadIdx.x == 0) __syncwarp();  // waits for lanes 1..31, which wait at __syncthreads
    else __syncthreads();
    out[threadIdx.x] = 1;
}
__global__ void fill(int* out) { out[blockIdx.x * blockDim.x + threadIdx.x] = 7; }

TEST(divergent_barrier_is_reported) {
    int* out;
    CUDA_CHECK(cudaMalloc(&out, 128 * sizeof(int)));
    std::string report = failing_launch("divergent_barrier", divergent_barrier, dim3(64), out);
    CHECK_MSG(contains(report, "kernel 'divergent_barrier'") && contains(report, "reached by 16 of 64"),
              "report: %s", report.c_str());

    report = failing_launch("lane_exits_before_shuffle", lane_exits_before_shuffle, dim3(32), (float*)out);
    CHECK_MSG(contains(report, "'lane_exits_before_shuffle'") && contains(report, "thread (3,0,0) exited"),
              "report: %s", report.c_str());

    report = failing_launch("warp_and_block_barriers_mixed", warp_and_block_barriers_mixed, dim3(32), out);
    CHECK_MSG(contains(report, "'warp_and_block_barriers_mixed'") && contains(report, "deadlock"),
              "report: %s", report.c_str());

    // The runner recovers: abandoned fibers' stacks are reused by the next launch.
    LAUNCH(fill, 2, 64, 0, 0, out);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<int> host(128);
    CUDA_CHECK(cudaMemcpy(host.data(), out, 128 * sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(host == std::vector<int>(128, 7));
    cudaFree(out);
}

TEST(bad_launch_configurations_are_refused) {
    int* out;
    CUDA_CHECK(cudaMalloc(&out, 4096 * sizeof(int)));
    LAUNCH(fill, 1, 2048, 0, 0, out);  // more than 1024 threads per block
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    LAUNCH(fill, dim3(1, 70000), 32, 0, 0, out);  // grid.y above 65535
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    LAUNCH(fill, 1, 32, 100 << 10, 0, out);  // 100 KiB of shared memory without the attribute
    CHECK(cudaGetLastError() == cudaErrorInvalidValue);
    CHECK(cudaFuncSetAttribute(fill, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 << 10) ==
          cudaErrorInvalidValue);  // beyond what an H100 offers
    cudaGetLastError();
    cudaFree(out);
}

std::string sibling_program(const char* name) {
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) tst::fail(__FILE__, __LINE__, "cannot find this test program's path");
    self[n] = '\0';
    std::string path = self;
    return path.substr(0, path.rfind('/') + 1) + name;
}

TEST(out_of_bounds_writes_are_caught_by_asan) {
#if !defined(__SANITIZE_ADDRESS__)
    SKIP("needs AddressSanitizer: run `make SAN=1 test`");
#endif
    const std::string program = sibling_program("emu_oob_kernel");
    for (const char* where : {"global", "shared"}) {
        std::string output;
        int status = tst::run_command(program + " " + where, &output);
        CHECK_MSG(status != 0 && contains(output, "ERROR: AddressSanitizer: heap-buffer-overflow") &&
                      contains(output, "WRITE of size 4"),
                  "%s memory: exit status %d, output:\n%s", where, status, output.c_str());
        CHECK(!contains(output, "no error detected"));
    }
}

}  // namespace

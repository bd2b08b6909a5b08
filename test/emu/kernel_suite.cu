// The emulator's kernel suite: each CUDA feature the emulator provides, used by a small kernel and
// checked against a plain host loop. The same file builds with nvcc (kernels/build.mk), so on a GPU
// the device is held to the same references with the same inputs (test/emu/gpu_vs_emu.sh).
#include <cmath>
#include <random>
#include <vector>

#include "kernels/common.h"
#include "kernels/mma.h"
#include "test/test.h"

namespace {

template <typename T>
T* to_device(const std::vector<T>& host) {
    T* device = nullptr;
    CUDA_CHECK(cudaMalloc(&device, host.size() * sizeof(T)));
    CUDA_CHECK(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    return device;
}
template <typename T>
T* poisoned_device(size_t n) {  // all bits set: NaN for floats, -1 for integers
    T* device = nullptr;
    CUDA_CHECK(cudaMalloc(&device, n * sizeof(T)));
    CUDA_CHECK(cudaMemset(device, 0xff, n * sizeof(T)));
    return device;
}
template <typename T>
std::vector<T> to_host(const T* device, size_t n) {
    std::vector<T> host(n);
    CUDA_CHECK(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
}
std::vector<float> random_floats(size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}
void check_launch() { CUDA_CHECK(cudaGetLastError()); CUDA_CHECK(cudaDeviceSynchronize()); }

// ---- block reduction through static shared memory: a tree of halving steps, one barrier each.
__global__ void block_sum_tree(const float* x, float* block_sums, int n) {
    __shared__ float partial[256];
    const int tid = threadIdx.x;
    float v = 0.0f;
    for (int i = blockIdx.x * blockDim.x + tid; i < n; i += gridDim.x * blockDim.x) v += x[i];
    partial[tid] = v;
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        __syncthreads();
        if (tid < stride) partial[tid] += partial[tid + stride];
    }
    if (tid == 0) block_sums[blockIdx.x] = partial[0];
}

TEST(block_reduction_through_shared_memory) {
    const int n = 50000, blocks = 24, threads = 256;
    std::vector<float> x = random_floats(n, 1);
    float* d_x = to_device(x);
    float* d_sums = poisoned_device<float>(blocks);
    LAUNCH(block_sum_tree, blocks, threads, 0, 0, d_x, d_sums, n);
    check_launch();
    std::vector<float> sums = to_host(d_sums, blocks);
    for (int b = 0; b < blocks; b++) {
        double ref = 0;
        for (int i = b * threads; i < n; i += blocks * threads)
            for (int t = 0; t < threads && i + t < n; t++) ref += x[i + t];
        CHECK_NEAR(sums[b], ref, 1e-5 * (1 + std::fabs(ref)) + 1e-4);
    }
    cudaFree(d_x);
    cudaFree(d_sums);
}

// ---- the helpers of kernels/common.h: two block reductions in a row (the second must not race
// with the first on the shared scratch array).
__global__ void block_sum_and_max(const float* x, float* out, int per_block) {
    const float v = x[blockIdx.x * per_block + threadIdx.x];
    const float sum = block_reduce_sum(v);
    const float max = block_reduce_max(v);
    if (threadIdx.x == 0) {
        out[2 * blockIdx.x] = sum;
        out[2 * blockIdx.x + 1] = max;
    }
}

TEST(block_reduce_helpers) {
    const int blocks = 6, threads = 192;
    std::vector<float> x = random_floats(blocks * threads, 2);
    float* d_x = to_device(x);
    float* d_out = poisoned_device<float>(2 * blocks);
    LAUNCH(block_sum_and_max, blocks, threads, 0, 0, d_x, d_out, threads);
    check_launch();
    std::vector<float> out = to_host(d_out, 2 * blocks);
    for (int b = 0; b < blocks; b++) {
        double sum = 0;
        float max = -INFINITY;
        for (int t = 0; t < threads; t++) sum += x[b * threads + t], max = std::fmax(max, x[b * threads + t]);
        CHECK_NEAR(out[2 * b], sum, 1e-5 * threads);
        CHECK(out[2 * b + 1] == max);
    }
    cudaFree(d_x);
    cudaFree(d_out);
}

// ---- warp shuffles (xor, down, up, idx, with sub-warp widths) and votes.
enum WarpOut { XOR_SUM, DOWN_SUM, UP_SCAN, IDX7, XOR_W8, DOWN_W8, BALLOT, ANY, ALL, WARP_OUTS };
__global__ void warp_ops(const float* x, float* out) {
    const int lane = threadIdx.x % 32;
    const float v = x[threadIdx.x];
    float* o = out + threadIdx.x * WARP_OUTS;
    o[XOR_SUM] = warp_reduce_sum(v);
    float down = v;
    for (int offset = 16; offset > 0; offset /= 2) down += __shfl_down_sync(0xffffffffu, down, offset);
    o[DOWN_SUM] = down;  // the full sum in lane 0 only
    float scan = v;
    for (int offset = 1; offset < 32; offset *= 2) {
        float up = __shfl_up_sync(0xffffffffu, scan, offset);
        if (lane >= offset) scan += up;
    }
    o[UP_SCAN] = scan;
    o[IDX7] = __shfl_sync(0xffffffffu, v, 7);
    o[XOR_W8] = __shfl_xor_sync(0xffffffffu, v, 9, 8);  // 9 leaves the 8-lane segment: own value when later
    o[DOWN_W8] = __shfl_down_sync(0xffffffffu, v, 3, 8);
    o[BALLOT] = (float)__ballot_sync(0xffffffffu, v > 0.0f);
    o[ANY] = (float)__any_sync(0xffffffffu, v > 0.9f);
    o[ALL] = (float)__all_sync(0xffffffffu, v > -0.99f);
}

TEST(warp_shuffles_and_votes) {
    const int threads = 64;
    std::vector<float> x = random_floats(threads, 3);
    x[40] = -0.995f;  // the second warp: not all above -0.99
    float* d_x = to_device(x);
    float* d_out = poisoned_device<float>(threads * WARP_OUTS);
    LAUNCH(warp_ops, 1, threads, 0, 0, d_x, d_out);
    check_launch();
    std::vector<float> out = to_host(d_out, threads * WARP_OUTS);
    for (int w = 0; w < 2; w++) {
        const float* xw = &x[32 * w];
        double sum = 0;
        unsigned ballot = 0;
        bool any = false, all = true;
        for (int l = 0; l < 32; l++) {
            sum += xw[l];
            ballot |= (xw[l] > 0.0f ? 1u : 0u) << l;
            any |= xw[l] > 0.9f;
            all &= xw[l] > -0.99f;
        }
        double scan = 0;
        for (int l = 0; l < 32; l++) {
            const float* o = &out[(32 * w + l) * WARP_OUTS];
            scan += xw[l];
            CHECK_NEAR(o[XOR_SUM], sum, 1e-5);
            if (l == 0) CHECK_NEAR(o[DOWN_SUM], sum, 1e-5);
            CHECK_NEAR(o[UP_SCAN], scan, 1e-5);
            CHECK(o[IDX7] == xw[7]);
            const int x9 = l ^ 9, seg = l & ~7;
            CHECK(o[XOR_W8] == (x9 < seg + 8 ? xw[x9] : xw[l]));
            CHECK(o[DOWN_W8] == ((l % 8) + 3 < 8 ? xw[l + 3] : xw[l]));
            CHECK(o[BALLOT] == (float)ballot);
            CHECK(o[ANY] == (float)any);
            CHECK(o[ALL] == (float)all);
        }
    }
    cudaFree(d_x);
    cudaFree(d_out);
}

// ---- __syncthreads_count / _and / _or
__global__ void barrier_predicates(const float* x, int* out) {
    const float v = x[threadIdx.x];
    const int count = __syncthreads_count(v > 0.0f);
    const int all = __syncthreads_and(v > -2.0f);
    const int any = __syncthreads_or(v > 5.0f);
    if (threadIdx.x == 0) out[0] = count, out[1] = all, out[2] = any;
}

TEST(barrier_predicate_reductions) {
    const int threads = 96;
    std::vector<float> x = random_floats(threads, 4);
    float* d_x = to_device(x);
    int* d_out = poisoned_device<int>(3);
    LAUNCH(barrier_predicates, 1, threads, 0, 0, d_x, d_out);
    check_launch();
    std::vector<int> out = to_host(d_out, 3);
    int positive = 0;
    for (float v : x) positive += v > 0.0f;
    CHECK(out[0] == positive);
    CHECK(out[1] == 1);
    CHECK(out[2] == 0);
    cudaFree(d_x);
    cudaFree(d_out);
}

// ---- dynamic shared memory: each block reverses its segment through the launch's shared buffer.
__global__ void reverse_through_shared(const float* x, float* y, int per_block) {
    DYNAMIC_SHARED(float, buffer);
    const float* in = x + blockIdx.x * per_block;
    for (int i = threadIdx.x; i < per_block; i += blockDim.x) buffer[i] = in[i];
    __syncthreads();
    for (int i = threadIdx.x; i < per_block; i += blockDim.x) y[blockIdx.x * per_block + i] = buffer[per_block - 1 - i];
}

TEST(dynamic_shared_memory) {
    for (int per_block : {1000, 16384}) {  // 4 KB, then 64 KB: above the default 48 KB limit
        const int blocks = 3;
        const size_t bytes = per_block * sizeof(float);
        std::vector<float> x = random_floats(blocks * per_block, 5);
        float* d_x = to_device(x);
        float* d_y = poisoned_device<float>(x.size());
        if (bytes > 48 * 1024) {
            // Without the attribute such a launch fails, on a GPU and in the emulator.
            LAUNCH(reverse_through_shared, blocks, 128, bytes, 0, d_x, d_y, per_block);
            CHECK(cudaGetLastError() != cudaSuccess);
            CUDA_CHECK(cudaFuncSetAttribute(reverse_through_shared,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
        }
        LAUNCH(reverse_through_shared, blocks, 128, bytes, 0, d_x, d_y, per_block);
        check_launch();
        std::vector<float> y = to_host(d_y, x.size());
        for (int b = 0; b < blocks; b++)
            for (int i = 0; i < per_block; i++)
                CHECK(y[b * per_block + i] == x[b * per_block + per_block - 1 - i]);
        cudaFree(d_x);
        cudaFree(d_y);
    }
}

// ---- atomics: a histogram through shared-memory atomics, then global ones; float sum and max.
constexpr int kBins = 64;
__global__ void histogram_and_extremes(const int* values, int n, int* histogram, float* sum,
                                       float* max, int* int_max) {
    __shared__ int local[kBins];
    for (int b = threadIdx.x; b < kBins; b += blockDim.x) local[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const int v = values[i];
        atomicAdd(&local[v % kBins], 1);
        atomicAdd(sum, (float)v * 0.25f);
        atomicMax(int_max, v);
        // float max through compare-and-swap on the bits (valid for non-negative floats)
        float f = (float)v * 0.5f;
        int old = __float_as_int(*max);
        while (__int_as_float(old) < f) {
            const int seen = atomicCAS(reinterpret_cast<int*>(max), old, __float_as_int(f));
            if (seen == old) break;
            old = seen;
        }
    }
    __syncthreads();
    for (int b = threadIdx.x; b < kBins; b += blockDim.x) atomicAdd(&histogram[b], local[b]);
}

TEST(atomics_histogram) {
    const int n = 40000;
    std::mt19937 rng(6);
    std::vector<int> values(n);
    for (int& v : values) v = (int)(rng() % 1000);
    int* d_values = to_device(values);
    int* d_hist = to_device(std::vector<int>(kBins, 0));
    float* d_sum = to_device(std::vector<float>{0.0f});
    float* d_max = to_device(std::vector<float>{0.0f});
    int* d_int_max = to_device(std::vector<int>{-1});
    LAUNCH(histogram_and_extremes, 16, 128, 0, 0, d_values, n, d_hist, d_sum, d_max, d_int_max);
    check_launch();
    std::vector<int> hist(kBins, 0);
    double sum = 0;
    int max = -1;
    for (int v : values) hist[v % kBins]++, sum += v * 0.25, max = std::max(max, v);
    CHECK(to_host(d_hist, kBins) == hist);
    CHECK_NEAR(to_host(d_sum, 1)[0], sum, 1e-5 * sum);  // float accumulation in any order
    CHECK(to_host(d_int_max, 1)[0] == max);
    CHECK(to_host(d_max, 1)[0] == max * 0.5f);
    cudaFree(d_values), cudaFree(d_hist), cudaFree(d_sum), cudaFree(d_max), cudaFree(d_int_max);
}

// ---- a 3-D grid of 3-D blocks: every thread records who it is.
__global__ void record_indices(int* out) {
    const int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const int thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int* o = out + 4 * (block * blockDim.x * blockDim.y * blockDim.z + thread);
    o[0] = blockIdx.x * 100 + blockIdx.y * 10 + blockIdx.z;
    o[1] = threadIdx.x * 100 + threadIdx.y * 10 + threadIdx.z;
    o[2] = gridDim.x * 100 + gridDim.y * 10 + gridDim.z;
    o[3] = blockDim.x * 100 + blockDim.y * 10 + blockDim.z;
}

TEST(grid_3d) {
    const dim3 grid(3, 4, 5), block(4, 2, 3);
    const int total = 3 * 4 * 5 * 4 * 2 * 3;
    int* d_out = poisoned_device<int>(4 * total);
    LAUNCH(record_indices, grid, block, 0, 0, d_out);
    check_launch();
    std::vector<int> out = to_host(d_out, 4 * total);
    int i = 0;
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++)
                for (unsigned tz = 0; tz < block.z; tz++)
                    for (unsigned ty = 0; ty < block.y; ty++)
                        for (unsigned tx = 0; tx < block.x; tx++, i++) {
                            CHECK(out[4 * i] == (int)(bx * 100 + by * 10 + bz));
                            CHECK(out[4 * i + 1] == (int)(tx * 100 + ty * 10 + tz));
                            CHECK(out[4 * i + 2] == 345);
                            CHECK(out[4 * i + 3] == 423);
                        }
    cudaFree(d_out);
}

// ---- 128-bit vectorised copy with float -> bf16 conversion (8 values per thread).
__global__ void float_to_bf16(const float* x, __nv_bfloat16* y, int n) {
    const int i = (blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i >= n) return;
    Packed128<float> lo = load128cs(x + i), hi = load128cs(x + i + 4);
    Packed128<__nv_bfloat16> out;
    for (int k = 0; k < 4; k++) {
        out[k] = from_float<__nv_bfloat16>(lo[k]);
        out[k + 4] = from_float<__nv_bfloat16>(hi[k]);
    }
    store128(y + i, out);
}

TEST(vectorised_copy_with_bf16_conversion) {
    const int n = 8 * 1000;
    std::vector<float> x = random_floats(n, 7);
    float* d_x = to_device(x);
    __nv_bfloat16* d_y = poisoned_device<__nv_bfloat16>(n);
    LAUNCH(float_to_bf16, ceil_div(n / 8, 128), 128, 0, 0, d_x, d_y, n);
    check_launch();
    std::vector<__nv_bfloat16> y = to_host(d_y, n);
    for (int i = 0; i < n; i++) {
        // reference: round to nearest even on the bits, independently of CUDA's conversion
        uint32_t bits;
        memcpy(&bits, &x[i], 4);
        bits += 0x7fff + ((bits >> 16) & 1);
        uint16_t expected = (uint16_t)(bits >> 16), got;
        memcpy(&got, &y[i], 2);
        CHECK_MSG(got == expected, "element %d: 0x%04x, expected 0x%04x", i, got, expected);
    }
    cudaFree(d_x);
    cudaFree(d_y);
}

// ---- tensor cores: one m16n8k16 bf16 MMA, fragments loaded with the layout of kernels/mma.h.
__global__ void mma_tile(const __nv_bfloat16* A, const __nv_bfloat16* B, const float* C, float* D) {
    const int lane = threadIdx.x;
    uint32_t a[4], b[2];
    float c[4], d[4];
    __nv_bfloat16 a_half[8], b_half[4];
    for (int i = 0; i < 8; i++) {
        MmaIndex e = mma_a_element(lane, i);
        a_half[i] = A[e.row * 16 + e.col];  // A is 16x16 row-major
    }
    for (int i = 0; i < 4; i++) {
        MmaIndex e = mma_b_element(lane, i);
        b_half[i] = B[e.row * 8 + e.col];  // B is 16x8 row-major (K x N)
        MmaIndex f = mma_c_element(lane, i);
        c[i] = C[f.row * 8 + f.col];
    }
    memcpy(a, a_half, sizeof a);
    memcpy(b, b_half, sizeof b);
    mma_m16n8k16_bf16(d, a, b, c);
    for (int i = 0; i < 4; i++) {
        MmaIndex f = mma_c_element(lane, i);
        D[f.row * 8 + f.col] = d[i];
    }
}

TEST(mma_m16n8k16_bf16_matches_loop) {
    std::vector<float> a = random_floats(16 * 16, 8), b = random_floats(16 * 8, 9), c = random_floats(16 * 8, 10);
    std::vector<__nv_bfloat16> a16(a.size()), b16(b.size());
    for (size_t i = 0; i < a.size(); i++) a16[i] = __float2bfloat16(a[i]);
    for (size_t i = 0; i < b.size(); i++) b16[i] = __float2bfloat16(b[i]);
    __nv_bfloat16 *d_a = to_device(a16), *d_b = to_device(b16);
    float* d_c = to_device(c);
    float* d_d = poisoned_device<float>(16 * 8);
    LAUNCH(mma_tile, 1, 32, 0, 0, d_a, d_b, d_c, d_d);
    check_launch();
    std::vector<float> d = to_host(d_d, 16 * 8);
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 8; j++) {
            double ref = c[i * 8 + j];
            for (int k = 0; k < 16; k++)
                ref += (double)__bfloat162float(a16[i * 16 + k]) * __bfloat162float(b16[k * 8 + j]);
            CHECK_NEAR(d[i * 8 + j], ref, 1e-5);
        }
    cudaFree(d_a), cudaFree(d_b), cudaFree(d_c), cudaFree(d_d);
}

// The fragment layout against entries read off the PTX ISA's figures, and each matrix covered once.
TEST(mma_fragment_layout_matches_ptx_isa) {
    MmaIndex e;
    e = mma_a_element(0, 0); CHECK(e.row == 0 && e.col == 0);
    e = mma_a_element(0, 3); CHECK(e.row == 8 && e.col == 1);
    e = mma_a_element(0, 4); CHECK(e.row == 0 && e.col == 8);
    e = mma_a_element(5, 6); CHECK(e.row == 9 && e.col == 10);   // group 1, thread 1
    e = mma_a_element(31, 7); CHECK(e.row == 15 && e.col == 15);
    e = mma_b_element(0, 1); CHECK(e.row == 1 && e.col == 0);
    e = mma_b_element(6, 2); CHECK(e.row == 12 && e.col == 1);   // group 1, thread 2
    e = mma_c_element(6, 1); CHECK(e.row == 1 && e.col == 5);
    e = mma_c_element(31, 3); CHECK(e.row == 15 && e.col == 7);
    std::vector<int> a(256, 0), b(128, 0), c(128, 0);
    for (int lane = 0; lane < 32; lane++) {
        for (int i = 0; i < 8; i++) e = mma_a_element(lane, i), a[e.row * 16 + e.col]++;
        for (int i = 0; i < 4; i++) e = mma_b_element(lane, i), b[e.row * 8 + e.col]++;
        for (int i = 0; i < 4; i++) e = mma_c_element(lane, i), c[e.row * 8 + e.col]++;
    }
    CHECK(a == std::vector<int>(256, 1));
    CHECK(b == std::vector<int>(128, 1));
    CHECK(c == std::vector<int>(128, 1));
}

}  // namespace

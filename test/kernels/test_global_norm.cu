// kernels/global_norm.h against a double-precision sum of squares (cpu/adamw.h's
// global_sum_of_squares) of the same floatX values: sizes not a multiple of 8 and n = 1, slices that
// start anywhere, adding into a non-zero total, slices summed into one total, and bitwise determinism.
#include <cmath>
#include <vector>

#include "cpu/adamw.h"
#include "kernels/global_norm.h"
#include "test/kernels/kernel_test.h"

namespace {

// Runs the kernel on grads[offset, offset + n) of a device copy of `values` (so that the slice may
// start off a 16-byte boundary), with *out starting at `initial`; returns *out.
float run_norm(const std::vector<float>& values, size_t offset, size_t n, float initial) {
    floatX* d_values = device_floatX(values);
    float* d_out = device_copy_of(std::vector<float>{initial});
    void* scratch = nullptr;
    CUDA_CHECK(cudaMalloc(&scratch, global_norm_scratch_bytes()));
    CUDA_CHECK(cudaMemset(scratch, 0xff, global_norm_scratch_bytes()));  // poisoned
    global_norm_squared(d_out, d_values + offset, n, scratch, 0);
    CUDA_CHECK(cudaGetLastError());
    const float out = host_copy_of(d_out, 1)[0];
    CUDA_CHECK(cudaFree(d_values));
    CUDA_CHECK(cudaFree(d_out));
    CUDA_CHECK(cudaFree(scratch));
    return out;
}

void check_against_double(size_t n, size_t offset, float initial, unsigned seed) {
    const std::vector<float> values = round_to_floatX(random_floats(n + offset, seed, -3.0f, 3.0f));
    const double expected = initial + global_sum_of_squares(values.data() + offset, n);
    const float out = run_norm(values, offset, n, initial);
    CHECK_MSG(std::fabs(out - expected) <= 1e-5 * expected, "n=%zu offset=%zu: %.9g vs %.9g", n, offset, out,
              expected);
}

}  // namespace

TEST(global_norm_many_elements) { check_against_double(1000003, 0, 0.0f, 1); }
TEST(global_norm_adds_into_the_total) { check_against_double(4099, 0, 3.5f, 2); }
TEST(global_norm_one_element) {
    check_against_double(1, 0, 0.0f, 3);
    check_against_double(1, 5, 0.25f, 4);  // alone and off a 16-byte boundary
}
// A large slice runs the full grid of 262144 threads, slow in the emulator: a few telling cases only.
TEST(global_norm_sizes_around_a_vector) {
    check_against_double(7, 0, 0.0f, 5);   // all tail
    check_against_double(9, 6, 0.0f, 6);   // head of 1 (bf16) or 2 (fp32), one group, tail
    check_against_double(17, 1, 0.0f, 7);  // head, groups, tail
}
TEST(global_norm_slice_off_a_boundary) { check_against_double(100001, 3, 1.0f, 6); }

// Two slices of one array summed into one total: the whole array's sum of squares.
TEST(global_norm_slices_add_up) {
    const size_t n = 30011, split = 12345;
    const std::vector<float> values = round_to_floatX(random_floats(n, 7, -1.0f, 1.0f));
    floatX* d_values = device_floatX(values);
    float* d_out = device_copy_of(std::vector<float>{0.0f});
    void* scratch = nullptr;
    CUDA_CHECK(cudaMalloc(&scratch, global_norm_scratch_bytes()));
    global_norm_squared(d_out, d_values, split, scratch, 0);
    global_norm_squared(d_out, d_values + split, n - split, scratch, 0);
    const float out = host_copy_of(d_out, 1)[0];
    const double expected = global_sum_of_squares(values.data(), n);
    CHECK_MSG(std::fabs(out - expected) <= 1e-5 * expected, "%.9g vs %.9g", out, expected);
    CUDA_CHECK(cudaFree(d_values));
    CUDA_CHECK(cudaFree(d_out));
    CUDA_CHECK(cudaFree(scratch));
}

TEST(global_norm_is_deterministic) {
    const std::vector<float> values = round_to_floatX(random_floats(500009, 8, -1.0f, 1.0f));
    const float a = run_norm(values, 0, values.size(), 0.0f), b = run_norm(values, 0, values.size(), 0.0f);
    CHECK(bitwise_equal(&a, &b, sizeof a));
}

// Index arithmetic past 2^32 elements, on the host: the grid-stride loop's group indices are size_t.
TEST(global_norm_index_arithmetic_is_64_bit) {
    const size_t n = (size_t)5e9;
    alignas(16) static floatX anchor[8];
    const ElementGroups split = split_into_groups(anchor, sizeof(floatX), n);
    CHECK(split.head == 0 && split.groups == n / 8 && split.tail_start() == n / 8 * 8);
    const size_t grid_threads = (size_t)kGlobalNormBlocks * kGlobalNormBlockSize;
    const size_t last_group_of_thread_0 = (split.groups - 1) / grid_threads * grid_threads;
    CHECK(split.group_start(last_group_of_thread_0) > ((size_t)1 << 32));
    CHECK(global_norm_scratch_bytes() == kGlobalNormBlocks * sizeof(float));
}

// A slice smaller than the full grid launches only the blocks whose threads get a group of elements,
// and gives the bits the full grid of 1024 blocks gives (the blocks left out add exact zeros): the
// kernels run both ways here, on slices whose last block is partly filled, on the vector and on the
// element path (off a 16-byte boundary), and on one that fills the grid.
TEST(global_norm_small_slices_take_few_blocks_with_the_full_grids_bits) {
    CHECK(global_norm_blocks(0) == 1 && global_norm_blocks(1) == 1 && global_norm_blocks(256) == 1);
    CHECK(global_norm_blocks(257) == 2 && global_norm_blocks(262144) == 1024 && global_norm_blocks(1 << 30) == 1024);
    for (size_t n : {(size_t)13, (size_t)2053, (size_t)100003}) {
        for (size_t offset : {(size_t)0, (size_t)3}) {
            const std::vector<float> values = round_to_floatX(random_floats(n + offset, 9, -2.0f, 2.0f));
            floatX* d_values = device_floatX(values);
            float* d_out = device_copy_of(std::vector<float>{0.5f, 0.5f});
            void* scratch = nullptr;
            CUDA_CHECK(cudaMalloc(&scratch, global_norm_scratch_bytes()));
            const ElementGroups split = split_into_groups(d_values + offset, sizeof(floatX), n);
            CHECK(global_norm_blocks(split.groups) < kGlobalNormBlocks);
            global_norm_squared(d_out, d_values + offset, n, scratch, 0);  // the few blocks
            LAUNCH((global_norm_partial_kernel<true, floatX>), kGlobalNormBlocks, kGlobalNormBlockSize, 0, 0,
                   (float*)scratch, d_values + offset, split);  // the full grid, by hand
            LAUNCH(global_norm_final_kernel, 1, kGlobalNormFinalBlockSize, 0, 0, d_out + 1, (const float*)scratch,
                   kGlobalNormBlocks);
            CUDA_CHECK(cudaGetLastError());
            const std::vector<float> out = host_copy_of(d_out, 2);
            CHECK_MSG(bitwise_equal(&out[0], &out[1], sizeof(float)), "n=%zu offset=%zu: %.9g vs %.9g", n, offset,
                      out[0], out[1]);
            CUDA_CHECK(cudaFree(d_values));
            CUDA_CHECK(cudaFree(d_out));
            CUDA_CHECK(cudaFree(scratch));
        }
    }
}

// Tests of kernels/gelu.h against the CPU reference (cpu/gelu.h): forward and backward on lengths
// that are not multiples of the 128-bit vector width, on 16-byte aligned pointers (vectorised
// kernels) and misaligned ones (scalar fallback), backward in place (dinp == dout), overwrite
// semantics, determinism, and the 64-bit index arithmetic at sizes too large to allocate.
#include <vector>

#include "cpu/gelu.h"
#include "kernels/gelu.h"
#include "test/kernels/kernel_test.h"

namespace {

// A length with a ragged end: 74 rows of 480 plus 5 (not a multiple of 8 or 4).
constexpr size_t kLength = 74 * 480 + 5;

// Random inputs over [-5, 5]: GELU's linear, curved and flat parts all occur.
std::vector<float> gelu_inputs(size_t n, unsigned seed) {
    return round_to_floatX(random_floats(n, seed, -5.0f, 5.0f));
}

std::vector<float> reference_forward(const std::vector<float>& x) {
    std::vector<float> y(x.size());
    gelu_forward(y.data(), x.data(), x.size());
    return y;
}
std::vector<float> reference_backward(const std::vector<float>& x, const std::vector<float>& dy) {
    std::vector<float> dx(x.size(), 0.0f);  // the reference adds into dinp
    gelu_backward(dx.data(), x.data(), dy.data(), x.size());
    return dx;
}

// Runs the forward on n elements starting `offset` elements into each buffer (offset 1 makes the
// pointers misaligned, which selects the scalar kernel) and compares with the reference.
void check_forward(size_t n, size_t offset, unsigned seed, const char* what) {
    const std::vector<float> x = gelu_inputs(n + offset, seed);
    floatX* d_x = device_floatX(x);
    floatX* d_y = device_poisoned<floatX>(n + offset);
    gelu_forward(d_y + offset, d_x + offset, n, 0);
    CUDA_CHECK(cudaGetLastError());
    const std::vector<float> y = host_floats_of(d_y, n + offset);
    const std::vector<float> x_part(x.begin() + offset, x.end());
    const std::vector<float> y_part(y.begin() + offset, y.end());
    CHECK_CLOSE(y_part, reference_forward(x_part), KERNEL_TOLERANCE, what);
    CUDA_CHECK(cudaFree(d_x));
    CUDA_CHECK(cudaFree(d_y));
}

void check_backward(size_t n, size_t offset, bool in_place, unsigned seed, const char* what) {
    const std::vector<float> x = gelu_inputs(n + offset, seed);
    const std::vector<float> dy = round_to_floatX(random_floats(n + offset, seed + 1));
    floatX* d_x = device_floatX(x);
    floatX* d_dy = device_floatX(dy);
    floatX* d_dx = in_place ? d_dy : device_poisoned<floatX>(n + offset);
    gelu_backward(d_dx + offset, d_x + offset, d_dy + offset, n, 0);
    CUDA_CHECK(cudaGetLastError());
    const std::vector<float> dx = host_floats_of(d_dx, n + offset);
    const std::vector<float> x_part(x.begin() + offset, x.end()), dy_part(dy.begin() + offset, dy.end());
    const std::vector<float> dx_part(dx.begin() + offset, dx.end());
    CHECK_CLOSE(dx_part, reference_backward(x_part, dy_part), KERNEL_TOLERANCE, what);
    CUDA_CHECK(cudaFree(d_x));
    CUDA_CHECK(cudaFree(d_dy));
    if (!in_place) CUDA_CHECK(cudaFree(d_dx));
}

}  // namespace

TEST(gelu_forward_matches_reference) {
    check_forward(kLength, 0, 11, "gelu forward, vectorised");
    check_forward(kLength, 1, 12, "gelu forward, misaligned (scalar)");
    check_forward(3, 0, 13, "gelu forward, shorter than one vector");
    check_forward(4096, 0, 14, "gelu forward, whole vectors only");
}

TEST(gelu_forward_in_place) {
    const std::vector<float> x = gelu_inputs(kLength, 21);
    floatX* d = device_floatX(x);
    gelu_forward(d, d, kLength, 0);
    CHECK_CLOSE(host_floats_of(d, kLength), reference_forward(x), KERNEL_TOLERANCE, "gelu forward in place");
    CUDA_CHECK(cudaFree(d));
}

TEST(gelu_backward_matches_reference) {
    check_backward(kLength, 0, false, 31, "gelu backward, vectorised");
    check_backward(kLength, 1, false, 32, "gelu backward, misaligned (scalar)");
    check_backward(7, 0, false, 33, "gelu backward, shorter than one vector");
}

// dinp == dout, the way the trainer calls it on the MLP's hidden gradient.
TEST(gelu_backward_in_place) {
    check_backward(kLength, 0, true, 41, "gelu backward in place, vectorised");
    check_backward(kLength, 1, true, 42, "gelu backward in place, misaligned (scalar)");
}

// Backward overwrites dinp: a non-zero (and a NaN-poisoned) previous content must not leak in.
TEST(gelu_backward_overwrites) {
    const std::vector<float> x = gelu_inputs(kLength, 51), dy = round_to_floatX(random_floats(kLength, 52));
    floatX* d_x = device_floatX(x);
    floatX* d_dy = device_floatX(dy);
    floatX* d_dx = device_floatX(random_floats(kLength, 53, 10.0f, 20.0f));
    gelu_backward(d_dx, d_x, d_dy, kLength, 0);
    CHECK_CLOSE(host_floats_of(d_dx, kLength), reference_backward(x, dy), KERNEL_TOLERANCE,
                "gelu backward over old contents");
    CUDA_CHECK(cudaFree(d_x));
    CUDA_CHECK(cudaFree(d_dy));
    CUDA_CHECK(cudaFree(d_dx));
}

TEST(gelu_is_deterministic) {
    const std::vector<float> x = gelu_inputs(kLength, 61), dy = round_to_floatX(random_floats(kLength, 62));
    floatX* d_x = device_floatX(x);
    floatX* d_dy = device_floatX(dy);
    floatX* d_out = device_poisoned<floatX>(kLength);
    std::vector<floatX> runs[2][2];
    for (int run = 0; run < 2; run++) {
        gelu_forward(d_out, d_x, kLength, 0);
        runs[run][0] = host_copy_of(d_out, kLength);
        gelu_backward(d_out, d_x, d_dy, kLength, 0);
        runs[run][1] = host_copy_of(d_out, kLength);
    }
    CHECK(bitwise_equal(runs[0][0].data(), runs[1][0].data(), kLength * sizeof(floatX)));
    CHECK(bitwise_equal(runs[0][1].data(), runs[1][1].data(), kLength * sizeof(floatX)));
    CUDA_CHECK(cudaFree(d_x));
    CUDA_CHECK(cudaFree(d_dy));
    CUDA_CHECK(cudaFree(d_out));
}

// The index of a thread's first element, at the sizes of a large model (no allocation): the GELU
// input of GPT-2 1.5B at B=64, T=1024 holds 64·1024·6400 = 4.2e8 elements, and past 2^31 elements
// the product block · block_size · vector width overflows 32 bits.
TEST(gelu_index_arithmetic_is_64_bit) {
    const size_t n = (size_t)64 * 1024 * 4 * 1600 * 4;  // 1.7e9 elements: 2^31 passed in bytes and more
    const unsigned block = (unsigned)((n / 8 - 1) / GELU_BLOCK_SIZE), thread = GELU_BLOCK_SIZE - 1;
    CHECK(gelu_first_element(block, GELU_BLOCK_SIZE, thread, 8) ==
          ((size_t)block * GELU_BLOCK_SIZE + thread) * 8);
    CHECK(gelu_first_element(block, GELU_BLOCK_SIZE, thread, 8) + 8 >= n);
    CHECK(gelu_first_element(4000000000u, 1024, 1023, 8) == (4000000000ull * 1024 + 1023) * 8);
}

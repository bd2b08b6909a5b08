// kernels/elementwise.h: cast between float, bf16 and half (against the host conversions), fill and
// scale, for sizes that are not a multiple of 8, n = 1, and arrays that start off a 16-byte boundary
// (including in and out misaligned differently, the element-by-element path). Outputs are poisoned
// first and the elements around a slice must stay untouched.
#include <cmath>
#include <vector>

#include "kernels/elementwise.h"
#include "test/kernels/kernel_test.h"

namespace {

// Host conversions of one value, the reference for the casts (round to nearest even).
template <typename T>
T host_cast(float x);
template <>
float host_cast<float>(float x) {
    return x;
}
template <>
__nv_bfloat16 host_cast<__nv_bfloat16>(float x) {
    return __float2bfloat16(x);
}
template <>
__half host_cast<__half>(float x) {
    return __float2half(x);
}
float host_value(float x) { return x; }
float host_value(__nv_bfloat16 x) { return __bfloat162float(x); }
float host_value(__half x) { return __half2float(x); }

// Casts in[in_offset, +n) into out[out_offset, +n) of poisoned buffers; checks every element of out
// bitwise against the host conversion and that the poison around the slice is untouched.
template <typename To, typename From>
void check_cast(size_t n, size_t in_offset, size_t out_offset, unsigned seed) {
    const std::vector<float> source = random_floats(n + in_offset, seed, -70000.0f, 70000.0f);
    std::vector<From> in(source.size());
    for (size_t i = 0; i < in.size(); i++) in[i] = host_cast<From>(source[i]);
    From* d_in = device_copy_of(in);
    const size_t out_size = n + out_offset + 3;
    To* d_out = device_poisoned<To>(out_size);
    cast_array(d_out + out_offset, d_in + in_offset, n, 0);
    CUDA_CHECK(cudaGetLastError());
    const std::vector<To> out = host_copy_of(d_out, out_size);
    std::vector<To> expected(out_size);
    memset((void*)expected.data(), 0xff, out_size * sizeof(To));
    for (size_t i = 0; i < n; i++) expected[out_offset + i] = host_cast<To>(host_value(in[in_offset + i]));
    CHECK_MSG(bitwise_equal(out.data(), expected.data(), out_size * sizeof(To)),
              "cast of %zu elements (offsets %zu, %zu) differs", n, in_offset, out_offset);
    CUDA_CHECK(cudaFree(d_in));
    CUDA_CHECK(cudaFree(d_out));
}

template <typename To, typename From>
void check_cast_shapes(unsigned seed) {
    for (size_t n : {(size_t)1, (size_t)7, (size_t)8, (size_t)37, (size_t)10007})
        for (size_t in_offset : {(size_t)0, (size_t)1, (size_t)3})
            for (size_t out_offset : {(size_t)0, (size_t)3})
                check_cast<To, From>(n, in_offset, out_offset, seed++);
}

}  // namespace

TEST(cast_float_to_bf16) { check_cast_shapes<__nv_bfloat16, float>(1); }
TEST(cast_bf16_to_float) { check_cast_shapes<float, __nv_bfloat16>(2); }
TEST(cast_float_to_half_and_back) {
    check_cast_shapes<__half, float>(3);
    check_cast_shapes<float, __half>(4);
}
TEST(cast_same_type_copies) {
    check_cast_shapes<float, float>(5);
    check_cast_shapes<__nv_bfloat16, __nv_bfloat16>(6);
}
TEST(cast_floatX_to_float) { check_cast_shapes<float, floatX>(7); }

TEST(fill_array_sets_every_element) {
    for (size_t n : {(size_t)1, (size_t)13, (size_t)4099})
        for (size_t offset : {(size_t)0, (size_t)5}) {
            floatX* d = device_poisoned<floatX>(n + offset + 2);
            fill_array(d + offset, 0.3f, n, 0);
            CUDA_CHECK(cudaGetLastError());
            const std::vector<floatX> out = host_copy_of(d, n + offset + 2);
            const floatX value = host_to_floatX(0.3f);
            for (size_t i = 0; i < out.size(); i++) {
                const bool inside = i >= offset && i < offset + n;
                const bool is_value = bitwise_equal(&out[i], &value, sizeof value);
                CHECK_MSG(inside == is_value, "element %zu of a fill of %zu at %zu", i, n, offset);
            }
            CUDA_CHECK(cudaFree(d));
        }
}

TEST(scale_array_in_place) {
    for (size_t n : {(size_t)1, (size_t)29, (size_t)5003})
        for (size_t offset : {(size_t)0, (size_t)3}) {
            const std::vector<float> x = round_to_floatX(random_floats(n + offset, 9, -5.0f, 5.0f));
            floatX* d = device_floatX(x);
            scale_array(d + offset, -0.37f, n, 0);
            CUDA_CHECK(cudaGetLastError());
            const std::vector<float> out = host_floats_of(d, n + offset);
            for (size_t i = 0; i < out.size(); i++) {
                const float expected = i < offset ? x[i] : host_from_floatX(host_to_floatX(-0.37f * x[i]));
                CHECK_MSG(out[i] == expected, "element %zu: %.9g vs %.9g", i, out[i], expected);
            }
            CUDA_CHECK(cudaFree(d));
        }
    // fp32 arrays too (e.g. fp32 gradients or master weights).
    const std::vector<float> x = random_floats(1001, 10);
    float* d = device_copy_of(x);
    scale_array(d, 2.5f, x.size(), 0);
    const std::vector<float> out = host_copy_of(d, x.size());
    for (size_t i = 0; i < x.size(); i++) CHECK(out[i] == 2.5f * x[i]);
    CUDA_CHECK(cudaFree(d));
}

// Index arithmetic of the groups past 2^32 elements, on the host.
TEST(elementwise_index_arithmetic_is_64_bit) {
    const size_t n = ((size_t)1 << 33) + 13;
    const ElementGroups split = split_into_groups((const void*)(uintptr_t)0x1006, 2, n);  // 6 bytes off
    CHECK(split.head == 5);
    CHECK(split.groups == (n - 5) / 8);
    CHECK(split.tail_start() == 5 + (n - 5) / 8 * 8 && n - split.tail_start() < 8);
    CHECK(split.group_start(split.groups - 1) + 8 == split.tail_start());
    CHECK(blocks_for(split.threads(), kElementwiseBlockSize) == (split.groups + 1 + 255) / 256);
}

// The gradient compression kernels (kernels/grad_compression.h) against the CPU reference
// (cpu/grad_compression.h): in double, on sizes with and without a partial last block, with zero
// blocks, zeros, −0 and negative values; and in fp32 where the kernels promise the reference's bits
// (int8 everywhere, sign given the scales, PowerSGD's reconstruction). Error feedback keeps what it
// drops: what is sent plus the new residual is the gradient plus the old residual, to fp32 rounding,
// for int8 (both stages), sign and PowerSGD. PowerSGD is exact (to rounding) when r ≥ min(n, m) or
// the matrix has rank below r, and its P has orthonormal columns after the orthogonalisation (n up to
// GPT-2's 50304 rows). The kernels are fp32 whatever floatX is: the bf16 and fp32 builds check the same.
#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu/grad_compression.h"
#include "kernels/grad_compression.h"
#include "test/kernels/kernel_test.h"

namespace {

// Sizes: one element, just under, at and just over a block, eight blocks and one element (a whole CUDA
// block of the one-warp-per-block kernels, and a warp of the next), and several blocks with a partial last.
const std::vector<size_t> kSizes = {1, 255, 256, 257, 1000, 2049, 70001};

std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// Gradient-like values: uniform in [−1, 1] times a magnitude that changes from block to block (scales
// from 1e-3 to 1e3), block 1 all zeros, every 17th element 0 and every 29th −0.
std::vector<float> gradient_values(size_t n, unsigned seed) {
    std::vector<float> g = random_floats(n, seed);
    for (size_t i = 0; i < n; i++) {
        const size_t block = i / 256;
        g[i] *= std::pow(10.0f, (float)((int)(block % 7) - 3));
        if (block == 1 || i % 17 == 5) g[i] = 0.0f;
        if (i % 29 == 7) g[i] = -0.0f;
    }
    return g;
}

// A residual as error feedback leaves it: small next to the gradient.
std::vector<float> residual_values(size_t n, unsigned seed) { return random_floats(n, seed, -1e-3f, 1e-3f); }

// |a − b| ≤ tolerance · (|b| + floor) elementwise, with a message naming the first that is not.
template <typename A, typename B>
void check_each_close(const std::vector<A>& a, const std::vector<B>& b, double tolerance, double floor,
                      const char* what) {
    CHECK_MSG(a.size() == b.size(), "%s: %zu values, expected %zu", what, a.size(), b.size());
    for (size_t i = 0; i < a.size(); i++)
        CHECK_MSG(std::fabs((double)a[i] - (double)b[i]) <= tolerance * (std::fabs((double)b[i]) + floor),
                  "%s[%zu]: %.9g, expected %.9g", what, i, (double)a[i], (double)b[i]);
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && bitwise_equal(a.data(), b.data(), a.size() * sizeof(T));
}

// ---- int8: one quantisation on the device, with or without a residual.
struct Int8Result {
    std::vector<int8_t> q;
    std::vector<float> scales, residual;  // residual: empty without error feedback
};
Int8Result device_int8_quantise(const std::vector<float>& g, const std::vector<float>* residual) {
    const size_t n = g.size(), blocks = compression_blocks(n);
    float* d_g = device_copy_of(g);
    float* d_e = residual != nullptr ? device_copy_of(*residual) : nullptr;
    int8_t* d_q = device_poisoned<int8_t>(n);
    float* d_scales = device_poisoned<float>(blocks);
    int8_quantise(d_q, d_scales, d_e, d_g, n, 0);
    Int8Result r{host_copy_of(d_q, n), host_copy_of(d_scales, blocks), {}};
    if (d_e != nullptr) r.residual = host_copy_of(d_e, n), CUDA_CHECK(cudaFree(d_e));
    CUDA_CHECK(cudaFree(d_g));
    CUDA_CHECK(cudaFree(d_q));
    CUDA_CHECK(cudaFree(d_scales));
    return r;
}

// The device's result against the double reference: the scales to fp32 rounding; q equal except
// where x/scale lies within rounding of a half (then off by one: a handful at most); the residual, where
// q agrees, to the fp32 rounding of scale (times |q| ≤ 127) and of x = g + e: 2·127·2⁻²⁴ of the scale.
void check_int8_against_double(const Int8Result& out, const std::vector<float>& g, const std::vector<float>* e) {
    const size_t n = g.size();
    std::vector<double> e_ref = e != nullptr ? to_double(*e) : std::vector<double>();
    std::vector<int8_t> q_ref(n);
    std::vector<double> scales_ref(compression_blocks(n));
    int8_quantise(q_ref.data(), scales_ref.data(), e != nullptr ? e_ref.data() : (double*)nullptr,
                  to_double(g).data(), n);
    check_each_close(out.scales, scales_ref, 1e-6, 0.0, "int8 scales");
    size_t off_by_one = 0;
    for (size_t i = 0; i < n; i++) {
        const int difference = std::abs((int)out.q[i] - (int)q_ref[i]);
        CHECK_MSG(difference <= 1, "q[%zu] = %d, expected %d", i, out.q[i], q_ref[i]);
        off_by_one += difference;
        const double scale = scales_ref[i / 256];
        if (e != nullptr && difference == 0)
            CHECK_MSG(std::fabs(out.residual[i] - e_ref[i]) <= 2e-5 * scale + 1e-37,
                      "residual[%zu]: %.9g, expected %.9g", i, out.residual[i], e_ref[i]);
    }
    CHECK_MSG(off_by_one <= 1 + n / 10000, "%zu of %zu q values off by one", off_by_one, n);
}

// sent + new residual = gradient + old residual, to fp32 rounding, and |new residual| ≤ scale/2.
void check_int8_error_feedback(const Int8Result& out, const std::vector<float>& g, const std::vector<float>& e_old) {
    for (size_t i = 0; i < g.size(); i++) {
        const double scale = out.scales[i / 256], sent = scale * out.q[i];
        const double x = (double)g[i] + e_old[i], kept = out.residual[i];
        CHECK_MSG(std::fabs(sent + kept - x) <= 0x1p-23 * (std::fabs(x) + std::fabs(kept)) + 1e-37,
                  "element %zu: sent %.9g + residual %.9g != %.9g", i, sent, kept, x);
        CHECK_MSG(std::fabs(kept) <= 0.5 * scale * (1 + 1e-6) + 1e-37, "residual[%zu] = %.9g beyond scale/2 = %.9g", i,
                  kept, 0.5 * scale);
    }
}

}  // namespace

TEST(int8_quantise_matches_reference) {
    for (size_t n : kSizes) {
        const std::vector<float> g = gradient_values(n, 1 + (unsigned)n), e = residual_values(n, 2 + (unsigned)n);
        for (const std::vector<float>* residual : {(const std::vector<float>*)nullptr, &e}) {
            const Int8Result out = device_int8_quantise(g, residual);
            check_int8_against_double(out, g, residual);
            // The fp32 reference: the same bits.
            std::vector<float> e_ref = residual != nullptr ? *residual : std::vector<float>();
            std::vector<int8_t> q_ref(n);
            std::vector<float> scales_ref(compression_blocks(n));
            int8_quantise(q_ref.data(), scales_ref.data(), residual != nullptr ? e_ref.data() : (float*)nullptr,
                          g.data(), n);
            CHECK_MSG(same_bits(out.q, q_ref) && same_bits(out.scales, scales_ref),
                      "n=%zu: not the fp32 reference's bits", n);
            if (residual != nullptr) CHECK(same_bits(out.residual, e_ref));
            // Block 1 is all zeros (without a residual): scale 0, q 0.
            if (n > 256 && residual == nullptr) {
                CHECK(out.scales[1] == 0.0f);
                for (size_t i = 256; i < std::min(n, (size_t)512); i++) CHECK(out.q[i] == 0);
            }
            // The largest element of each block maps to ±127.
            for (size_t b = 0; b < compression_blocks(n); b++) {
                int largest = 0;
                for (size_t i = b * 256; i < std::min(n, b * 256 + 256); i++)
                    largest = std::max(largest, std::abs((int)out.q[i]));
                CHECK(largest == (out.scales[b] > 0 ? 127 : 0));
            }
        }
    }
}

TEST(int8_error_feedback_keeps_what_quantisation_drops) {
    for (size_t n : kSizes) {
        const std::vector<float> g = gradient_values(n, 3 + (unsigned)n), e = residual_values(n, 4 + (unsigned)n);
        check_int8_error_feedback(device_int8_quantise(g, &e), g, e);
    }
}

TEST(int8_dequantise_matches_reference) {
    for (size_t n : kSizes) {
        const std::vector<float> g = gradient_values(n, 5 + (unsigned)n);
        const Int8Result packed = device_int8_quantise(g, nullptr);
        int8_t* d_q = device_copy_of(packed.q);
        float* d_scales = device_copy_of(packed.scales);
        float* d_out = device_poisoned<float>(n);
        int8_dequantise(d_out, d_q, d_scales, n, 0);
        const std::vector<float> out = host_copy_of(d_out, n);
        std::vector<float> ref(n);
        int8_dequantise(ref.data(), packed.q.data(), packed.scales.data(), n);
        CHECK(same_bits(out, ref));
        std::vector<double> ref_double(n);
        int8_dequantise(ref_double.data(), packed.q.data(), to_double(packed.scales).data(), n);
        check_each_close(out, ref_double, 0x1p-24, 0.0, "dequantised");  // one fp32 product
        // Quantisation error at most half a step of the block's scale.
        for (size_t i = 0; i < n; i++) CHECK(std::fabs(out[i] - g[i]) <= 0.5 * packed.scales[i / 256] * (1 + 1e-6));
        CUDA_CHECK(cudaFree(d_q));
        CUDA_CHECK(cudaFree(d_scales));
        CUDA_CHECK(cudaFree(d_out));
    }
}

namespace {

// R ranks' quantised shards laid out with the given strides (≥ n, ≥ blocks), as received.
struct RankShards {
    std::vector<int8_t> q;
    std::vector<float> scales;
    size_t q_stride, scale_stride;
};
RankShards quantised_ranks(size_t n, int ranks, size_t q_pad, size_t scale_pad, unsigned seed) {
    const size_t blocks = compression_blocks(n);
    RankShards s{std::vector<int8_t>((n + q_pad) * ranks, 99), std::vector<float>((blocks + scale_pad) * ranks, NAN),
                 n + q_pad, blocks + scale_pad};
    for (int r = 0; r < ranks; r++) {
        const Int8Result one = device_int8_quantise(gradient_values(n, seed + r), nullptr);
        std::copy(one.q.begin(), one.q.end(), s.q.begin() + r * s.q_stride);
        std::copy(one.scales.begin(), one.scales.end(), s.scales.begin() + r * s.scale_stride);
    }
    return s;
}

struct SumResult {
    Int8Result requantised;  // residual: the second stage's, when one was given
    std::vector<float> sum;
};
SumResult device_sum_requantise(const RankShards& in, int ranks, size_t n, float factor,
                                const std::vector<float>* residual) {
    const size_t blocks = compression_blocks(n);
    int8_t* d_q_in = device_copy_of(in.q);
    float* d_scales_in = device_copy_of(in.scales);
    int8_t* d_q = device_poisoned<int8_t>(n);
    float *d_scales = device_poisoned<float>(blocks), *d_sum = device_poisoned<float>(n);
    float* d_e = residual != nullptr ? device_copy_of(*residual) : nullptr;
    int8_sum_requantise(d_q, d_scales, d_e, d_sum, d_q_in, in.q_stride, d_scales_in, in.scale_stride, ranks, n, factor,
                        0);
    SumResult r{{host_copy_of(d_q, n), host_copy_of(d_scales, blocks), {}}, host_copy_of(d_sum, n)};
    if (d_e != nullptr) r.requantised.residual = host_copy_of(d_e, n), CUDA_CHECK(cudaFree(d_e));
    for (void* p : {(void*)d_q_in, (void*)d_scales_in, (void*)d_q, (void*)d_scales, (void*)d_sum})
        CUDA_CHECK(cudaFree(p));
    return r;
}

}  // namespace

// The reduce-scatter's receiving side: 3 ranks' blocks summed (as the mean), requantised, with and
// without the second stage's residual, arrays end to end and padded (a message layout).
TEST(int8_sum_requantise_matches_reference) {
    const int R = 3;
    const float factor = 1.0f / R;
    for (size_t n : kSizes) {
        for (size_t pad : {(size_t)0, (size_t)13}) {
            const RankShards in = quantised_ranks(n, R, pad, pad / 4, 10 + (unsigned)n);
            const std::vector<float> e = residual_values(n, 20 + (unsigned)n);
            for (const std::vector<float>* residual : {(const std::vector<float>*)nullptr, &e}) {
                const SumResult out = device_sum_requantise(in, R, n, factor, residual);
                // The fp32 reference: the same bits.
                std::vector<int8_t> q_ref(n);
                std::vector<float> scales_ref(compression_blocks(n)), sum_ref(n);
                std::vector<float> e_ref = residual != nullptr ? *residual : std::vector<float>();
                int8_sum_requantise(q_ref.data(), scales_ref.data(), residual ? e_ref.data() : (float*)nullptr,
                                    sum_ref.data(), in.q.data(), in.q_stride, in.scales.data(), in.scale_stride, R, n,
                                    factor);
                CHECK_MSG(same_bits(out.requantised.q, q_ref) && same_bits(out.requantised.scales, scales_ref) &&
                              same_bits(out.sum, sum_ref),
                          "n=%zu pad=%zu: not the fp32 reference's bits", n, pad);
                if (residual != nullptr) CHECK(same_bits(out.requantised.residual, e_ref));
                // The double reference of the sum: the mean of the ranks' dequantised values.
                // (Terms of opposite signs cancel: the error is measured against the terms' size.)
                for (size_t i = 0; i < n; i++) {
                    double total = 0, size = 0;
                    for (int r = 0; r < R; r++) {
                        const double term =
                            (double)in.scales[r * in.scale_stride + i / 256] * in.q[r * in.q_stride + i];
                        total += term, size += std::fabs(term);
                    }
                    CHECK_MSG(std::fabs(out.sum[i] - total / R) <= 4e-7 * size / R + 1e-37,
                              "sum[%zu]: %.9g, expected %.9g", i, out.sum[i], total / R);
                }
                // The second stage's error feedback: requantised + new residual = sum + old residual.
                if (residual != nullptr) {
                    std::vector<float> x(n);
                    for (size_t i = 0; i < n; i++) x[i] = out.sum[i];
                    check_int8_error_feedback(out.requantised, x, *residual);
                } else {
                    check_int8_against_double(out.requantised, out.sum, nullptr);
                }
            }
        }
    }
}

// ---- sign
namespace {

struct SignResult {
    std::vector<uint32_t> bits;
    std::vector<float> scales, residual;
};
SignResult device_sign_compress(const std::vector<float>& g, const std::vector<float>* residual) {
    const size_t n = g.size(), blocks = compression_blocks(n), words = sign_words(n);
    float* d_g = device_copy_of(g);
    float* d_e = residual != nullptr ? device_copy_of(*residual) : nullptr;
    uint32_t* d_bits = device_poisoned<uint32_t>(words);
    float* d_scales = device_poisoned<float>(blocks);
    sign_compress(d_bits, d_scales, d_e, d_g, n, 0);
    SignResult r{host_copy_of(d_bits, words), host_copy_of(d_scales, blocks), {}};
    if (d_e != nullptr) r.residual = host_copy_of(d_e, n), CUDA_CHECK(cudaFree(d_e));
    CUDA_CHECK(cudaFree(d_g));
    CUDA_CHECK(cudaFree(d_bits));
    CUDA_CHECK(cudaFree(d_scales));
    return r;
}

}  // namespace

TEST(sign_compress_matches_reference) {
    for (size_t n : kSizes) {
        const std::vector<float> g = gradient_values(n, 30 + (unsigned)n), e = residual_values(n, 31 + (unsigned)n);
        for (const std::vector<float>* residual : {(const std::vector<float>*)nullptr, &e}) {
            const SignResult out = device_sign_compress(g, residual);
            // In double: x = g + e is exact there, but its sign is that of the fp32 sum; the bits agree.
            std::vector<double> e_ref = residual != nullptr ? to_double(*residual) : std::vector<double>();
            std::vector<uint32_t> bits_ref(sign_words(n));
            std::vector<double> scales_ref(compression_blocks(n));
            sign_compress(bits_ref.data(), scales_ref.data(), residual ? e_ref.data() : (double*)nullptr,
                          to_double(g).data(), n);
            CHECK_MSG(same_bits(out.bits, bits_ref), "n=%zu: sign bits differ", n);
            check_each_close(out.scales, scales_ref, 1e-5, 0.0, "sign scales");
            if (residual != nullptr)
                for (size_t i = 0; i < n; i++)
                    CHECK_MSG(std::fabs(out.residual[i] - e_ref[i]) <= 1e-5 * scales_ref[i / 256] + 1e-30,
                              "residual[%zu]: %.9g, expected %.9g", i, out.residual[i], e_ref[i]);
            // sign(0) = sign(−0) = +1 (without a residual the zeros stay zeros); bits past n are 0.
            if (residual == nullptr)
                for (size_t i = 0; i < n; i++)
                    if (g[i] == 0.0f) CHECK_MSG((out.bits[i / 32] >> (i % 32)) & 1u, "the zero at %zu is not +1", i);
            if (n % 32 != 0) CHECK((out.bits.back() >> (n % 32)) == 0);
            if (n > 256 && residual == nullptr) CHECK(out.scales[1] == 0.0f);  // the zero block
        }
    }
}

TEST(sign_error_feedback_keeps_what_compression_drops) {
    for (size_t n : kSizes) {
        const std::vector<float> g = gradient_values(n, 40 + (unsigned)n), e = residual_values(n, 41 + (unsigned)n);
        const SignResult out = device_sign_compress(g, &e);
        for (size_t i = 0; i < n; i++) {
            const bool positive = (out.bits[i / 32] >> (i % 32)) & 1u;
            const double sent = positive ? out.scales[i / 256] : -out.scales[i / 256];
            const double x = (double)g[i] + e[i], kept = out.residual[i];
            CHECK_MSG(std::fabs(sent + kept - x) <= 0x1p-23 * (std::fabs(x) + std::fabs(kept)) + 1e-37,
                      "element %zu: sent %.9g + residual %.9g != %.9g", i, sent, kept, x);
            const float x_fp32 = g[i] + e[i];  // the sign is that of the fp32 sum (the same, or 0)
            CHECK_MSG(positive == (x_fp32 >= 0.0f), "element %zu: bit %d for %.9g", i, positive, x);
        }
    }
}

TEST(sign_decompress_and_average_match_reference) {
    const int R = 3;
    for (size_t n : kSizes) {
        const size_t words = sign_words(n), blocks = compression_blocks(n);
        for (size_t pad : {(size_t)0, (size_t)5}) {
            // R ranks' compressed values, rank r's words at r·word_stride, its scales at r·scale_stride.
            const size_t word_stride = words + pad, scale_stride = blocks + pad;
            std::vector<uint32_t> bits(word_stride * R, 0xdeadbeef);
            std::vector<float> scales(scale_stride * R, NAN);
            for (int r = 0; r < R; r++) {
                const SignResult one = device_sign_compress(gradient_values(n, 50 + r + (unsigned)n), nullptr);
                std::copy(one.bits.begin(), one.bits.end(), bits.begin() + r * word_stride);
                std::copy(one.scales.begin(), one.scales.end(), scales.begin() + r * scale_stride);
            }
            uint32_t* d_bits = device_copy_of(bits);
            float* d_scales = device_copy_of(scales);
            float* d_out = device_poisoned<float>(n);
            // Rank 1's values alone.
            sign_decompress(d_out, d_bits + word_stride, d_scales + scale_stride, n, 0);
            std::vector<float> ref(n);
            sign_decompress(ref.data(), bits.data() + word_stride, scales.data() + scale_stride, n);
            CHECK(same_bits(host_copy_of(d_out, n), ref));
            // The mean of the three.
            sign_average(d_out, d_bits, word_stride, d_scales, scale_stride, R, n, 1.0f / R, 0);
            const std::vector<float> mean = host_copy_of(d_out, n);
            sign_average(ref.data(), bits.data(), word_stride, scales.data(), scale_stride, R, n, 1.0f / R);
            CHECK_MSG(same_bits(mean, ref), "n=%zu pad=%zu: the mean is not the fp32 reference's", n, pad);
            std::vector<double> ref_double(n);
            sign_average(ref_double.data(), bits.data(), word_stride, to_double(scales).data(), scale_stride, R, n,
                         1.0 / R);
            // Terms of opposite signs cancel: measure against the largest scale of the element's block.
            for (size_t i = 0; i < n; i++) {
                double largest = 0;
                for (int r = 0; r < R; r++) largest = std::max(largest, (double)scales[r * scale_stride + i / 256]);
                CHECK_MSG(std::fabs(mean[i] - ref_double[i]) <= 1e-6 * largest, "mean[%zu]: %.9g, expected %.9g", i,
                          mean[i], ref_double[i]);
            }
            CUDA_CHECK(cudaFree(d_bits));
            CUDA_CHECK(cudaFree(d_scales));
            CUDA_CHECK(cudaFree(d_out));
        }
    }
}

// A non-finite gradient is not hidden: its block's scale is NaN (and, for int8, its element kept in the
// residual), the other blocks are untouched.
TEST(compression_keeps_non_finite_blocks_visible) {
    std::vector<float> g = gradient_values(600, 60);
    g[300] = NAN;
    g[10] = INFINITY;
    const std::vector<float> e(600, 0.0f);
    const Int8Result q = device_int8_quantise(g, &e);
    CHECK(std::isnan(q.scales[0]) && std::isnan(q.scales[1]) && std::isfinite(q.scales[2]));
    CHECK(q.q[10] == 0 && std::isinf(q.residual[10]) && std::isnan(q.residual[300]));
    const SignResult s = device_sign_compress(g, nullptr);
    CHECK(std::isnan(s.scales[0]) && std::isnan(s.scales[1]) && std::isfinite(s.scales[2]));
}

// ---- PowerSGD
namespace {

struct Shape {
    int n, m, r;
};

// The device's P = M·Q, Q = Mᵀ·P, and orthogonalised P, as host vectors.
std::vector<float> device_project_rows(const std::vector<float>& M, const std::vector<float>& Q, const Shape& s) {
    float *d_M = device_copy_of(M), *d_Q = device_copy_of(Q), *d_P = device_poisoned<float>((size_t)s.n * s.r);
    powersgd_project_rows(d_P, d_M, d_Q, s.n, s.m, s.r, 0);
    const std::vector<float> P = host_copy_of(d_P, (size_t)s.n * s.r);
    for (float* p : {d_M, d_Q, d_P}) CUDA_CHECK(cudaFree(p));
    return P;
}
std::vector<float> device_project_columns(const std::vector<float>& M, const std::vector<float>& P, const Shape& s) {
    float *d_M = device_copy_of(M), *d_P = device_copy_of(P), *d_Q = device_poisoned<float>((size_t)s.m * s.r);
    powersgd_project_columns(d_Q, d_M, d_P, s.n, s.m, s.r, 0);
    const std::vector<float> Q = host_copy_of(d_Q, (size_t)s.m * s.r);
    for (float* p : {d_M, d_Q, d_P}) CUDA_CHECK(cudaFree(p));
    return Q;
}
std::vector<float> device_orthogonalise(const std::vector<float>& P, int n, int r) {
    float* d_P = device_copy_of(P);
    powersgd_orthogonalise(d_P, n, r, 0);
    const std::vector<float> out = host_copy_of(d_P, (size_t)n * r);
    CUDA_CHECK(cudaFree(d_P));
    return out;
}

// The largest |PᵀP − I| over P's first `columns` columns (in double), and the largest |value| of the
// others (which should be 0).
double orthonormality_error(const std::vector<float>& P, int n, int r, int columns) {
    double worst = 0;
    for (int a = 0; a < r; a++)
        for (int b = 0; b < r; b++) {
            double dot = 0;
            for (int i = 0; i < n; i++) dot += (double)P[(size_t)i * r + a] * P[(size_t)i * r + b];
            const double expected = a == b && a < columns ? 1.0 : 0.0;
            worst = std::max(worst, std::fabs(dot - expected));
        }
    return worst;
}

// One round of PowerSGD on one rank (no other ranks: the all-reduces are the identity):
// M = g + e, P = M·Q, orthogonalise, Q = Mᵀ·P, approximation = P·Qᵀ, e = M − approximation.
struct PowerSgdRound {
    std::vector<float> approximation, residual, P, Q;
};
PowerSgdRound device_powersgd_round(const std::vector<float>& g, const std::vector<float>& e,
                                    const std::vector<float>& Q0, const Shape& s) {
    const size_t nm = (size_t)s.n * s.m;
    float *d_g = device_copy_of(g), *d_e = device_copy_of(e), *d_Q = device_copy_of(Q0);
    float *d_M = device_poisoned<float>(nm), *d_P = device_poisoned<float>((size_t)s.n * s.r);
    error_feedback_add(d_M, d_g, d_e, nm, 0);
    powersgd_project_rows(d_P, d_M, d_Q, s.n, s.m, s.r, 0);
    powersgd_orthogonalise(d_P, s.n, s.r, 0);
    powersgd_project_columns(d_Q, d_M, d_P, s.n, s.m, s.r, 0);
    powersgd_reconstruct(d_M, d_e, d_M, d_P, d_Q, s.n, s.m, s.r, 0);  // the approximation replaces M
    PowerSgdRound round{host_copy_of(d_M, nm), host_copy_of(d_e, nm), host_copy_of(d_P, (size_t)s.n * s.r),
                        host_copy_of(d_Q, (size_t)s.m * s.r)};
    for (float* p : {d_g, d_e, d_Q, d_M, d_P}) CUDA_CHECK(cudaFree(p));
    return round;
}
// The same round in double on the CPU.
struct PowerSgdRoundDouble {
    std::vector<double> approximation, residual;
};
PowerSgdRoundDouble reference_powersgd_round(const std::vector<float>& g, const std::vector<float>& e,
                                             const std::vector<float>& Q0, const Shape& s) {
    const size_t nm = (size_t)s.n * s.m;
    std::vector<double> M(nm), P((size_t)s.n * s.r), Q = to_double(Q0), residual(nm), approximation(nm);
    error_feedback_add(M.data(), to_double(g).data(), to_double(e).data(), nm);
    powersgd_project_rows(P.data(), M.data(), Q.data(), s.n, s.m, s.r);
    powersgd_orthogonalise(P.data(), s.n, s.r);
    powersgd_project_columns(Q.data(), M.data(), P.data(), s.n, s.m, s.r);
    powersgd_reconstruct(approximation.data(), residual.data(), M.data(), P.data(), Q.data(), s.n, s.m, s.r);
    return {approximation, residual};
}

double rel_error(const std::vector<float>& out, const std::vector<double>& ref) {
    return tst::rel_l2_error(to_double(out).data(), ref.data(), ref.size());
}

const std::vector<Shape> kShapes = {{1, 1, 1}, {37, 50, 3}, {300, 129, 32}, {1000, 64, 4}, {5, 700, 7}, {64, 48, 17}};

}  // namespace

TEST(powersgd_products_match_reference) {
    for (const Shape& s : kShapes) {
        const std::vector<float> M = random_floats((size_t)s.n * s.m, 70 + s.n);
        const std::vector<float> Q = random_floats((size_t)s.m * s.r, 71 + s.m);
        const std::vector<float> P = random_floats((size_t)s.n * s.r, 72 + s.r);
        std::vector<double> P_ref((size_t)s.n * s.r), Q_ref((size_t)s.m * s.r);
        powersgd_project_rows(P_ref.data(), to_double(M).data(), to_double(Q).data(), s.n, s.m, s.r);
        powersgd_project_columns(Q_ref.data(), to_double(M).data(), to_double(P).data(), s.n, s.m, s.r);
        const double rows = rel_error(device_project_rows(M, Q, s), P_ref);
        const double columns = rel_error(device_project_columns(M, P, s), Q_ref);
        CHECK_MSG(rows <= 1e-5 && columns <= 1e-5, "%dx%d r=%d: M·Q off by %.3g, Mᵀ·P by %.3g", s.n, s.m, s.r, rows,
                  columns);
    }
}

TEST(powersgd_orthogonalise_gives_orthonormal_columns) {
    // Random P, up to GPT-2's vocabulary rows; and P = random columns nearly parallel to the first
    // (remainders 1e-3 of their length), which a single Gram-Schmidt pass in fp32 leaves off by ~1e-4.
    const std::vector<std::pair<int, int>> shapes = {{1, 1}, {40, 8}, {300, 32}, {2000, 32}, {50304, 4}};
    for (const auto& [n, r] : shapes)
        for (bool nearly_parallel : {false, true}) {
            std::vector<float> P = random_floats((size_t)n * r, 80 + n + r);
            if (nearly_parallel && n > 1)
                for (int i = 0; i < n; i++)
                    for (int k = 1; k < r; k++) P[(size_t)i * r + k] = P[(size_t)i * r] + 1e-3f * P[(size_t)i * r + k];
            const std::vector<float> out = device_orthogonalise(P, n, r);
            const double error = orthonormality_error(out, n, r, r);
            CHECK_MSG(error <= 1e-5, "%dx%d%s: |PᵀP − I| up to %.3g", n, r, nearly_parallel ? " nearly parallel" : "",
                      error);
            if (!nearly_parallel) {  // (nearly parallel: a remainder's direction is sensitive to rounding)
                std::vector<double> ref = to_double(P);
                powersgd_orthogonalise(ref.data(), n, r);
                CHECK_MSG(rel_error(out, ref) <= 1e-5, "%dx%d: off the reference by %.3g", n, r, rel_error(out, ref));
            }
        }
}

// Columns in the span of the earlier ones become 0: a column 3 times the first, and r > n (only n
// independent columns fit in n dimensions).
TEST(powersgd_orthogonalise_zeroes_dependent_columns) {
    {
        const int n = 50, r = 4;
        std::vector<float> P = random_floats((size_t)n * r, 90);
        for (int i = 0; i < n; i++) P[(size_t)i * r + 2] = 3.0f * P[(size_t)i * r];
        const std::vector<float> out = device_orthogonalise(P, n, r);
        for (int i = 0; i < n; i++) CHECK(out[(size_t)i * r + 2] == 0.0f);
        // Columns 0, 1, 3 orthonormal.
        std::vector<float> kept;
        for (int i = 0; i < n; i++)
            for (int k : {0, 1, 3}) kept.push_back(out[(size_t)i * r + k]);
        CHECK(orthonormality_error(kept, n, 3, 3) <= 1e-5);
    }
    {
        const int n = 6, r = 10;
        const std::vector<float> out = device_orthogonalise(random_floats((size_t)n * r, 91), n, r);
        CHECK_MSG(orthonormality_error(out, n, r, n) <= 1e-5, "r > n: %.3g", orthonormality_error(out, n, r, n));
    }
    {  // A zero P stays zero (no division by a zero length).
        const std::vector<float> out = device_orthogonalise(std::vector<float>(12, 0.0f), 4, 3);
        for (float x : out) CHECK(x == 0.0f);
    }
}

TEST(powersgd_reconstruct_and_error_feedback_add_match_reference_bitwise) {
    for (const Shape& s : kShapes) {
        const size_t nm = (size_t)s.n * s.m;
        const std::vector<float> M = random_floats(nm, 100 + s.n), e = random_floats(nm, 101 + s.n);
        const std::vector<float> P = random_floats((size_t)s.n * s.r, 102), Q = random_floats((size_t)s.m * s.r, 103);
        float *d_M = device_copy_of(M), *d_e = device_copy_of(e), *d_P = device_copy_of(P), *d_Q = device_copy_of(Q);
        float *d_out = device_poisoned<float>(nm), *d_residual = device_poisoned<float>(nm);
        powersgd_reconstruct(d_out, d_residual, d_M, d_P, d_Q, s.n, s.m, s.r, 0);
        std::vector<float> out(nm), residual(nm);
        powersgd_reconstruct(out.data(), residual.data(), M.data(), P.data(), Q.data(), s.n, s.m, s.r);
        CHECK(same_bits(host_copy_of(d_out, nm), out) && same_bits(host_copy_of(d_residual, nm), residual));
        // In place (the approximation over M), and the residual alone.
        powersgd_reconstruct(nullptr, d_residual, d_M, d_P, d_Q, s.n, s.m, s.r, 0);
        CHECK(same_bits(host_copy_of(d_residual, nm), residual));
        powersgd_reconstruct(d_M, d_residual, d_M, d_P, d_Q, s.n, s.m, s.r, 0);
        CHECK(same_bits(host_copy_of(d_M, nm), out) && same_bits(host_copy_of(d_residual, nm), residual));
        // x = g + e, in place.
        error_feedback_add(d_e, d_out, d_e, nm, 0);
        std::vector<float> sum(nm);
        error_feedback_add(sum.data(), out.data(), e.data(), nm);
        CHECK(same_bits(host_copy_of(d_e, nm), sum));
        for (float* p : {d_M, d_e, d_P, d_Q, d_out, d_residual}) CUDA_CHECK(cudaFree(p));
    }
}

// r ≥ min(n, m): P·Pᵀ projects onto M's whole column space, so the approximation is M (the residual
// ~1e-6 of it); and a matrix of rank 2 is exact at r = 4 (two of P's columns are dependent and become 0).
TEST(powersgd_is_exact_when_the_rank_covers_the_matrix) {
    const std::vector<Shape> shapes = {{20, 12, 12}, {12, 20, 12}, {24, 24, 24}, {8, 50, 16}, {33, 7, 9}, {64, 48, 4}};
    for (const Shape& s : shapes) {
        const size_t nm = (size_t)s.n * s.m;
        std::vector<float> g = random_floats(nm, 110 + s.n), e = random_floats(nm, 111 + s.n, -0.1f, 0.1f);
        if (s.r < std::min(s.n, s.m)) {  // rank 2: g = u·vᵀ + w·zᵀ, e = 0
            const std::vector<float> u = random_floats(s.n, 112), v = random_floats(s.m, 113);
            const std::vector<float> w = random_floats(s.n, 114), z = random_floats(s.m, 115);
            for (int i = 0; i < s.n; i++)
                for (int j = 0; j < s.m; j++) g[(size_t)i * s.m + j] = u[i] * v[j] + w[i] * z[j];
            std::fill(e.begin(), e.end(), 0.0f);
        }
        const PowerSgdRound round = device_powersgd_round(g, e, random_floats((size_t)s.m * s.r, 116), s);
        std::vector<float> M(nm);
        for (size_t i = 0; i < nm; i++) M[i] = g[i] + e[i];
        const double left = tst::rel_l2_error(round.residual.data(), std::vector<float>(nm, 0.0f).data(), nm) /
                            tst::rel_l2_error(M.data(), std::vector<float>(nm, 0.0f).data(), nm);
        CHECK_MSG(left <= 1e-5, "%dx%d r=%d: residual %.3g of M", s.n, s.m, s.r, left);
    }
}

// The round against the double reference at r below the matrix's rank, the error feedback identity
// (approximation + new residual = g + old residual, to fp32 rounding), and the same bits run to run.
TEST(powersgd_round_matches_reference_and_keeps_what_it_drops) {
    for (const Shape& s : {Shape{96, 64, 4}, Shape{300, 129, 32}, Shape{37, 50, 3}}) {
        const size_t nm = (size_t)s.n * s.m;
        const std::vector<float> g = random_floats(nm, 120 + s.n), e = random_floats(nm, 121 + s.n, -0.1f, 0.1f);
        // A dominant rank-1 part, so that the leading directions (what the round finds) are well separated.
        std::vector<float> g_low = g;
        const std::vector<float> u = random_floats(s.n, 122), v = random_floats(s.m, 123);
        for (int i = 0; i < s.n; i++)
            for (int j = 0; j < s.m; j++) g_low[(size_t)i * s.m + j] += 5.0f * u[i] * v[j];
        const std::vector<float> Q0 = random_floats((size_t)s.m * s.r, 124);
        const PowerSgdRound round = device_powersgd_round(g_low, e, Q0, s);
        const PowerSgdRoundDouble ref = reference_powersgd_round(g_low, e, Q0, s);
        const double off = rel_error(round.approximation, ref.approximation);
        CHECK_MSG(off <= 1e-4, "%dx%d r=%d: approximation off the reference by %.3g", s.n, s.m, s.r, off);
        CHECK(orthonormality_error(round.P, s.n, s.r, s.r) <= 1e-5);
        for (size_t i = 0; i < nm; i++) {
            const double x = (double)g_low[i] + e[i], sent = round.approximation[i], kept = round.residual[i];
            CHECK_MSG(std::fabs(sent + kept - x) <= 0x1p-23 * (std::fabs(x) + std::fabs(kept)) + 1e-37,
                      "element %zu: sent %.9g + residual %.9g != %.9g", i, sent, kept, x);
        }
        const PowerSgdRound again = device_powersgd_round(g_low, e, Q0, s);
        CHECK(same_bits(again.approximation, round.approximation) && same_bits(again.residual, round.residual) &&
              same_bits(again.P, round.P) && same_bits(again.Q, round.Q));
    }
}

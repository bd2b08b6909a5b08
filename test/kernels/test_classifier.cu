// kernels/classifier.h against cpu/crossentropy.h: losses, dlogits written in place (zero in the
// padding columns), write_dlogits = false leaving the logits alone, bitwise determinism, and the
// 64-bit row offsets at sizes past 2^31 (checked on the host, nothing that large is allocated).
// Then the vocabulary-parallel cross-entropy (slice stats, their combination, the slice gradient)
// over R = 1, 2, 4, 8 slices against the reference and fused_classifier, whole padding slices included.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cpu/crossentropy.h"
#include "kernels/classifier.h"
#include "test/kernels/kernel_test.h"

namespace {

// Random logits with a wide spread (softmax far from uniform), NaN in the padding columns (they must
// never be read into the softmax), one row shifted by +100 (the max subtraction must hold), row 0's
// maximum in its last real column, and targets that include the first and the last real column.
struct ClassifierCase {
    int N, V, Vp;
    std::vector<float> logits;  // N × Vp, already rounded to floatX
    std::vector<int> targets;
};
ClassifierCase make_case(int N, int V, int Vp, unsigned seed) {
    ClassifierCase c{N, V, Vp, round_to_floatX(random_floats((size_t)N * Vp, seed, -8.0f, 8.0f)),
                     random_tokens(N, V, seed + 1)};
    for (int n = 0; n < N; n++)
        for (int j = V; j < Vp; j++) c.logits[(size_t)n * Vp + j] = NAN;
    if (N > 1)
        for (int j = 0; j < V; j++)
            c.logits[Vp + j] = host_from_floatX(host_to_floatX(c.logits[Vp + j] + 100.0f));
    // Row 0's largest logit is the last real column (the partial vector at the end of the row).
    c.logits[V - 1] = 12.0f;
    c.targets[0] = V - 1;
    if (N > 2) c.targets[2] = 0;
    return c;
}

// The reference: losses and dlogits (N × Vp, zero in the padding) from cpu/crossentropy.h.
void reference(const ClassifierCase& c, float dloss, std::vector<float>& losses,
               std::vector<float>& dlogits) {
    std::vector<float> logsumexp(c.N);
    losses.assign(c.N, 0.0f);
    dlogits.assign((size_t)c.N * c.Vp, 0.0f);
    crossentropy_forward(losses.data(), logsumexp.data(), c.logits.data(), c.targets.data(), c.N, c.V, c.Vp);
    crossentropy_backward(dlogits.data(), c.logits.data(), logsumexp.data(), c.targets.data(), dloss, c.N,
                          c.V, c.Vp);
}

struct Result {
    std::vector<float> losses;
    std::vector<floatX> logits;  // raw bits after the call
};
Result run_kernel(const ClassifierCase& c, float dloss, bool write_dlogits) {
    floatX* d_logits = device_floatX(c.logits);
    int* d_targets = device_copy_of(c.targets);
    float* d_losses = device_poisoned<float>(c.N);
    fused_classifier(d_logits, d_losses, dloss, d_targets, c.N, c.V, c.Vp, write_dlogits, 0);
    CUDA_CHECK(cudaGetLastError());
    Result r{host_copy_of(d_losses, c.N), host_copy_of(d_logits, (size_t)c.N * c.Vp)};
    CUDA_CHECK(cudaFree(d_logits));
    CUDA_CHECK(cudaFree(d_targets));
    CUDA_CHECK(cudaFree(d_losses));
    return r;
}

void check_against_reference(int N, int V, int Vp, unsigned seed) {
    const ClassifierCase c = make_case(N, V, Vp, seed);
    const float dloss = 1.7f / N;
    std::vector<float> ref_losses, ref_dlogits;
    reference(c, dloss, ref_losses, ref_dlogits);

    const Result r = run_kernel(c, dloss, true);
    // Losses are computed in fp32 from the same floatX inputs in both builds: tight in both.
    CHECK_CLOSE(r.losses, ref_losses, 1e-5, "losses");
    std::vector<float> dlogits(r.logits.size());
    for (size_t i = 0; i < dlogits.size(); i++) dlogits[i] = host_from_floatX(r.logits[i]);
    CHECK_CLOSE(dlogits, ref_dlogits, KERNEL_TOLERANCE, "dlogits");
    for (int n = 0; n < N; n++)
        for (int j = V; j < Vp; j++)
            CHECK_MSG(dlogits[(size_t)n * Vp + j] == 0.0f, "padding column %d of row %d is %g, not 0", j, n,
                      dlogits[(size_t)n * Vp + j]);
    // The target column's gradient is negative (p − 1 < 0), every other real one non-negative.
    for (int n = 0; n < N; n++) CHECK(dlogits[(size_t)n * Vp + c.targets[n]] < 0.0f);

    // Bitwise determinism: a second run gives the same bits.
    const Result again = run_kernel(c, dloss, true);
    CHECK(bitwise_equal(again.losses.data(), r.losses.data(), N * sizeof(float)));
    CHECK(bitwise_equal(again.logits.data(), r.logits.data(), r.logits.size() * sizeof(floatX)));
}

}  // namespace

TEST(classifier_gpt2_vocabulary) { check_against_reference(5, 50257, 50304, 11); }
TEST(classifier_small_vocabulary_37_rows) { check_against_reference(37, 1000, 1024, 12); }
TEST(classifier_vocabulary_not_a_multiple_of_8) { check_against_reference(9, 997, 1008, 13); }
TEST(classifier_tiny_vocabulary) { check_against_reference(4, 3, 8, 14); }

// Forward only: losses right, logits (padding NaNs included) untouched to the bit.
TEST(classifier_without_dlogits_leaves_logits_alone) {
    const ClassifierCase c = make_case(6, 50257, 50304, 21);
    std::vector<float> ref_losses, ref_dlogits;
    reference(c, 1.0f, ref_losses, ref_dlogits);
    const Result r = run_kernel(c, 1.0f, false);
    CHECK_CLOSE(r.losses, ref_losses, 1e-5, "losses");
    std::vector<floatX> input(c.logits.size());
    for (size_t i = 0; i < input.size(); i++) input[i] = host_to_floatX(c.logits[i]);
    CHECK(bitwise_equal(input.data(), r.logits.data(), input.size() * sizeof(floatX)));
}

// Null losses: only the gradient is written.
TEST(classifier_null_losses) {
    const ClassifierCase c = make_case(3, 1000, 1024, 31);
    std::vector<float> ref_losses, ref_dlogits;
    reference(c, 0.5f, ref_losses, ref_dlogits);
    floatX* d_logits = device_floatX(c.logits);
    int* d_targets = device_copy_of(c.targets);
    fused_classifier(d_logits, nullptr, 0.5f, d_targets, c.N, c.V, c.Vp, true, 0);
    CUDA_CHECK(cudaGetLastError());
    const std::vector<float> dlogits = host_floats_of(d_logits, c.logits.size());
    CHECK_CLOSE(dlogits, ref_dlogits, KERNEL_TOLERANCE, "dlogits");
    CUDA_CHECK(cudaFree(d_logits));
    CUDA_CHECK(cudaFree(d_targets));
}

// Row offsets of a GPT-2 batch of 64 × 1024 tokens: N·Vp = 3.3e9 > 2^31.
TEST(classifier_row_offsets_are_64_bit) {
    const int N = 64 * 1024, Vp = 50304;
    CHECK(classifier_row_offset(N - 1, Vp) == (size_t)65535 * 50304);
    CHECK(classifier_row_offset(N - 1, Vp) > ((size_t)1 << 31));
    const int first_row_past = (int)(((size_t)1 << 31) / Vp) + 1;  // 42691
    CHECK(classifier_row_offset(first_row_past, Vp) == (size_t)first_row_past * 50304);
    CHECK(classifier_row_offset(first_row_past, Vp) > ((size_t)1 << 31));
    CHECK(classifier_bytes(N, Vp, true) > 1.3e10);
}

// ------------------------------------------------------------------------------------------------
// Vocabulary-parallel cross-entropy: the Vp columns cut into R slices of Vs, slice r at vocab_begin r·Vs.

namespace {

struct SlicedResult {
    std::vector<float> stats;  // (R, N, 3), as gathered
    std::vector<float> lse, losses;
    std::vector<floatX> dlogits;  // N × Vp, the slices' gradients side by side (raw bits)
};

int valid_columns(int V, int vocab_begin, int Vs) { return std::min(std::max(V - vocab_begin, 0), Vs); }

// The three calls over the R slices of c's logits, each slice in its own (N × Vs) buffer.
SlicedResult run_slices(const ClassifierCase& c, int R, float dloss, bool with_losses) {
    const int N = c.N, Vs = c.Vp / R;
    int* d_targets = device_copy_of(c.targets);
    float* d_gathered = device_poisoned<float>((size_t)R * N * kClassifierStats);
    std::vector<floatX*> d_slices(R);
    for (int r = 0; r < R; r++) {
        std::vector<float> slice((size_t)N * Vs);
        for (int n = 0; n < N; n++)
            for (int j = 0; j < Vs; j++) slice[(size_t)n * Vs + j] = c.logits[(size_t)n * c.Vp + r * Vs + j];
        d_slices[r] = device_floatX(slice);
        classifier_slice_stats(d_gathered + (size_t)r * N * kClassifierStats, d_slices[r], d_targets, N,
                               r * Vs, valid_columns(c.V, r * Vs, Vs), Vs, 0);
    }
    float* d_lse = device_poisoned<float>(N);
    float* d_losses = with_losses ? device_poisoned<float>(N) : nullptr;
    classifier_combine_stats(d_lse, d_losses, d_gathered, R, N, 0);
    SlicedResult result{host_copy_of(d_gathered, (size_t)R * N * kClassifierStats), host_copy_of(d_lse, N),
                        with_losses ? host_copy_of(d_losses, N) : std::vector<float>(),
                        std::vector<floatX>((size_t)N * c.Vp)};
    for (int r = 0; r < R; r++) {
        classifier_slice_gradient(d_slices[r], d_lse, d_targets, dloss, N, r * Vs,
                                  valid_columns(c.V, r * Vs, Vs), Vs, 0);
        const std::vector<floatX> gradient = host_copy_of(d_slices[r], (size_t)N * Vs);
        for (int n = 0; n < N; n++)
            std::copy(gradient.begin() + (size_t)n * Vs, gradient.begin() + (size_t)(n + 1) * Vs,
                      result.dlogits.begin() + (size_t)n * c.Vp + r * Vs);
        CUDA_CHECK(cudaFree(d_slices[r]));
    }
    for (void* ptr : {(void*)d_targets, (void*)d_gathered, (void*)d_lse, (void*)d_losses})
        if (ptr) CUDA_CHECK(cudaFree(ptr));
    return result;
}

// make_case's logits with each slice that holds real columns the target of some rows (row n ≥ 3 in
// slice (n − 3) mod that count; rows 0 and 2 keep the last and the first real column).
ClassifierCase make_sliced_case(int N, int V, int Vp, int R, unsigned seed) {
    ClassifierCase c = make_case(N, V, Vp, seed);
    const int Vs = Vp / R, real_slices = ceil_div(V, Vs);
    std::mt19937 rng(seed + 2);
    for (int n = 3; n < N; n++) {
        const int r = (n - 3) % real_slices;
        c.targets[n] = r * Vs + (int)(rng() % (unsigned)valid_columns(V, r * Vs, Vs));
    }
    return c;
}

void check_slices(int N, int V, int Vp, int R, unsigned seed) {
    const ClassifierCase c = make_sliced_case(N, V, Vp, R, seed);
    const int Vs = Vp / R;
    const std::string what = tst::format("N=%d V=%d Vp=%d R=%d", N, V, Vp, R);
    const float dloss = 1.3f / N;
    std::vector<float> ref_losses, ref_dlogits;
    reference(c, dloss, ref_losses, ref_dlogits);
    const SlicedResult got = run_slices(c, R, dloss, true);

    // Every slice holds the target of some row.
    for (int r = 0; r < R && r * Vs < V; r++) {
        bool held = false;
        for (int n = 0; n < N; n++) held |= c.targets[n] / Vs == r;
        CHECK_MSG(held, "%s: no row's target in slice %d", what.c_str(), r);
    }
    // Stats against the host: max and target logit exact, the sum of exponentials within 1e-5 (fp32 in
    // both builds); (−inf, 0, 0) for slices of padding only.
    std::vector<float> sums, ref_sums;
    for (int r = 0; r < R; r++) {
        const int begin = r * Vs, valid = valid_columns(V, begin, Vs);
        for (int n = 0; n < N; n++) {
            const float* row = c.logits.data() + (size_t)n * Vp + begin;
            const float* s = got.stats.data() + ((size_t)r * N + n) * kClassifierStats;
            const float max = valid ? *std::max_element(row, row + valid) : -INFINITY;
            double sum = 0;
            for (int j = 0; j < valid; j++) sum += std::exp((double)row[j] - max);
            const bool holds = c.targets[n] >= begin && c.targets[n] < begin + valid;
            CHECK_MSG(s[0] == max && s[2] == (holds ? row[c.targets[n] - begin] : 0.0f),
                      "%s: slice %d row %d: stats (%g, %g, %g)", what.c_str(), r, n, s[0], s[1], s[2]);
            if (valid == 0) CHECK_MSG(s[1] == 0.0f, "%s: padding slice %d: sum %g", what.c_str(), r, s[1]);
            sums.push_back(s[1]);
            ref_sums.push_back((float)sum);
        }
    }
    CHECK_CLOSE(sums, ref_sums, 1e-5, ("sums of exponentials " + what).c_str());

    // Losses within 1e-5 in both builds (fp32 from the same floatX inputs), the gradient within this
    // build's tolerance, the padding exactly +0, the target's column negative.
    CHECK_CLOSE(got.losses, ref_losses, 1e-5, ("losses " + what).c_str());
    std::vector<float> dlogits(got.dlogits.size());
    for (size_t i = 0; i < dlogits.size(); i++) dlogits[i] = host_from_floatX(got.dlogits[i]);
    CHECK_CLOSE(dlogits, ref_dlogits, KERNEL_TOLERANCE, ("dlogits " + what).c_str());
    const floatX zero = host_to_floatX(0.0f);
    for (int n = 0; n < N; n++) {
        for (int j = V; j < Vp; j++)
            CHECK_MSG(bitwise_equal(&got.dlogits[(size_t)n * Vp + j], &zero, sizeof zero),
                      "%s: padding column %d of row %d is %g, not +0", what.c_str(), j, n,
                      dlogits[(size_t)n * Vp + j]);
        CHECK(dlogits[(size_t)n * Vp + c.targets[n]] < 0.0f);
    }

    // Against fused_classifier on the whole rows: one slice gives its bits, more slices its values.
    const Result fused = run_kernel(c, dloss, true);
    std::vector<float> fused_dlogits(fused.logits.size());
    for (size_t i = 0; i < fused_dlogits.size(); i++) fused_dlogits[i] = host_from_floatX(fused.logits[i]);
    if (R == 1) {
        CHECK_MSG(
            bitwise_equal(got.losses.data(), fused.losses.data(), N * sizeof(float)) &&
                bitwise_equal(got.dlogits.data(), fused.logits.data(), fused.logits.size() * sizeof(floatX)),
            "%s: one slice differs from fused_classifier", what.c_str());
    } else {
        CHECK_CLOSE(got.losses, fused.losses, 1e-5, ("losses vs fused_classifier " + what).c_str());
        CHECK_CLOSE(dlogits, fused_dlogits, KERNEL_TOLERANCE,
                    ("dlogits vs fused_classifier " + what).c_str());
    }

    // Deterministic, and the losses optional (the same lse and gradient without them).
    const SlicedResult again = run_slices(c, R, dloss, false);
    CHECK_MSG(
        bitwise_equal(again.stats.data(), got.stats.data(), got.stats.size() * sizeof(float)) &&
            bitwise_equal(again.lse.data(), got.lse.data(), N * sizeof(float)) &&
            bitwise_equal(again.dlogits.data(), got.dlogits.data(), got.dlogits.size() * sizeof(floatX)),
        "%s: two runs differ", what.c_str());
}

}  // namespace

TEST(classifier_slices_one_slice_is_fused_classifier) { check_slices(7, 1000, 1024, 1, 70); }
// GPT-2's vocabulary: the last slice ends in the 47 padding columns.
TEST(classifier_slices_gpt2_vocabulary_2) { check_slices(7, 50257, 50304, 2, 71); }
TEST(classifier_slices_gpt2_vocabulary_4) { check_slices(9, 50257, 50304, 4, 72); }
TEST(classifier_slices_8) { check_slices(13, 1000, 1024, 8, 73); }
// V 100, Vp 128, R 8 (Vs 16): slice 6 holds 4 real columns, slice 7 padding only.
TEST(classifier_slices_whole_slice_of_padding) { check_slices(12, 100, 128, 8, 74); }

// combine_stats alone on hand-made stats: empty slices skipped, the maximum's slice first or last,
// a row whose stats all come from one slice.
TEST(classifier_combine_stats_by_hand) {
    const int R = 3, N = 3;
    // (R, N, 3): row 0 max in slice 2, row 1 only slice 0 non-empty, row 2 max in slice 0.
    const std::vector<float> gathered = {
        1.0f,      2.0f, 0.0f, 4.0f,      3.0f, 0.5f, 7.0f,  1.5f, 0.0f,   // slice 0
        -INFINITY, 0.0f, 0.0f, -INFINITY, 0.0f, 0.0f, 2.0f,  5.0f, 1.25f,  // slice 1
        3.0f,      1.0f, 2.5f, -INFINITY, 0.0f, 0.0f, -1.0f, 4.0f, 0.0f,   // slice 2
    };
    const double lse0 = 3.0 + std::log(2.0 * std::exp(-2.0) + 1.0), lse1 = 4.0 + std::log(3.0),
                 lse2 = 7.0 + std::log(1.5 + 5.0 * std::exp(-5.0) + 4.0 * std::exp(-8.0));
    float* d_gathered = device_copy_of(gathered);
    float* d_lse = device_poisoned<float>(N);
    float* d_losses = device_poisoned<float>(N);
    classifier_combine_stats(d_lse, d_losses, d_gathered, R, N, 0);
    const std::vector<float> lse = host_copy_of(d_lse, N), losses = host_copy_of(d_losses, N);
    CHECK_CLOSE(lse, (std::vector<float>{(float)lse0, (float)lse1, (float)lse2}), 1e-6, "lse");
    CHECK_CLOSE(losses, (std::vector<float>{(float)(lse0 - 2.5), (float)(lse1 - 0.5), (float)(lse2 - 1.25)}),
                1e-6, "losses");
    CUDA_CHECK(cudaFree(d_gathered));
    CUDA_CHECK(cudaFree(d_lse));
    CUDA_CHECK(cudaFree(d_losses));
}

// kernels/classifier.h against cpu/crossentropy.h: losses, dlogits written in place (zero in the
// padding columns), write_dlogits = false leaving the logits alone, bitwise determinism, and the
// 64-bit row offsets at sizes past 2^31 (checked on the host, nothing that large is allocated).
#include <cmath>
#include <cstdint>
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

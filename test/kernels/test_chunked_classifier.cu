// kernels/chunked_classifier.h against the unchunked path (one N × Vp logits buffer: matmul_forward,
// fused_classifier, matmul_backward, each tested against the CPU reference in its own test): losses,
// d_lnf (poisoned first) and d_wte (accumulated into random values), for a chunk size that divides N,
// one that does not, one chunk of all rows (then bitwise equal: the same calls) and one larger than N;
// the forward-only (validation) mode; and, in the emulator, 4 launches per chunk and no host
// synchronisation.
#include <vector>

#include "kernels/chunked_classifier.h"
#include "test/kernels/kernel_test.h"

namespace {

constexpr int N = 37, C = 64, V = 1000, Vp = 1024;
constexpr float kDloss = 1.0f / N;

struct Inputs {
    std::vector<float> lnf, wte, d_wte_start;
    std::vector<int> targets;
    floatX *d_lnf_in, *d_wte;
    int* d_targets;
    Inputs() {
        lnf = round_to_floatX(random_floats((size_t)N * C, 1, -2.0f, 2.0f));
        wte = round_to_floatX(random_floats((size_t)Vp * C, 2, -0.5f, 0.5f));
        for (int v = V; v < Vp; v++)
            for (int c = 0; c < C; c++) wte[(size_t)v * C + c] = 0.0f;  // padded rows are zero
        d_wte_start = round_to_floatX(random_floats((size_t)Vp * C, 3, -0.01f, 0.01f));
        targets = random_tokens(N, V, 4);
        d_lnf_in = device_floatX(lnf);
        d_wte = device_floatX(wte);
        d_targets = device_copy_of(targets);
    }
    ~Inputs() {
        cudaFree(d_lnf_in);
        cudaFree(d_wte);
        cudaFree(d_targets);
    }
};

struct Outputs {
    std::vector<float> losses, d_lnf, d_wte;
};

// The unchunked path, as the trainer runs it without chunks.
Outputs unchunked(const Inputs& in) {
    floatX* logits = device_poisoned<floatX>((size_t)N * Vp);
    float* losses = device_poisoned<float>(N);
    floatX* d_lnf = device_poisoned<floatX>((size_t)N * C);
    floatX* d_wte = device_floatX(in.d_wte_start);
    matmul_forward(logits, in.d_lnf_in, in.d_wte, nullptr, N, C, Vp, 0);
    fused_classifier(logits, losses, kDloss, in.d_targets, N, V, Vp, true, 0);
    matmul_backward(d_lnf, d_wte, nullptr, nullptr, logits, in.d_lnf_in, in.d_wte, N, C, Vp, 0);
    Outputs out{host_copy_of(losses, N), host_floats_of(d_lnf, (size_t)N * C), host_floats_of(d_wte, (size_t)Vp * C)};
    for (void* p : {(void*)logits, (void*)losses, (void*)d_lnf, (void*)d_wte}) CUDA_CHECK(cudaFree(p));
    return out;
}

Outputs chunked(const Inputs& in, int rows_per_chunk, bool backward) {
    floatX* chunk = device_poisoned<floatX>(chunked_classifier_buffer_bytes(rows_per_chunk, Vp) / sizeof(floatX));
    float* losses = device_poisoned<float>(N);
    floatX* d_lnf = device_poisoned<floatX>((size_t)N * C);
    floatX* d_wte = device_floatX(in.d_wte_start);
#ifdef EMU_CUDA
    emu::reset_counters();
#endif
    chunked_classifier(losses, d_lnf, d_wte, chunk, in.d_lnf_in, in.d_wte, in.d_targets, N, C, V, Vp, rows_per_chunk,
                       kDloss, backward, 0);
#ifdef EMU_CUDA
    const unsigned long long chunks = (N + rows_per_chunk - 1) / rows_per_chunk;
    CHECK_MSG(emu::launch_count() == chunks * (backward ? 4 : 2), "%llu launches for %llu chunks",
              emu::launch_count(), chunks);
    CHECK(emu::host_sync_count() == 0);
#endif
    Outputs out{host_copy_of(losses, N), host_floats_of(d_lnf, (size_t)N * C), host_floats_of(d_wte, (size_t)Vp * C)};
    for (void* p : {(void*)chunk, (void*)losses, (void*)d_lnf, (void*)d_wte}) CUDA_CHECK(cudaFree(p));
    return out;
}

void check_chunks(int rows_per_chunk) {
    const Inputs in;
    const Outputs ref = unchunked(in), out = chunked(in, rows_per_chunk, true);
    CHECK_CLOSE(out.losses, ref.losses, KERNEL_TOLERANCE, "losses");
    CHECK_CLOSE(out.d_lnf, ref.d_lnf, KERNEL_TOLERANCE, "d_lnf");
    // d_wte's change (what the chunks added), so the random starting values do not hide an error.
    std::vector<float> added_out(out.d_wte.size()), added_ref(ref.d_wte.size());
    for (size_t i = 0; i < added_out.size(); i++) {
        added_out[i] = out.d_wte[i] - in.d_wte_start[i];
        added_ref[i] = ref.d_wte[i] - in.d_wte_start[i];
    }
    CHECK_CLOSE(added_out, added_ref, 5 * KERNEL_TOLERANCE, "d_wte increment");
    CHECK_CLOSE(out.d_wte, ref.d_wte, KERNEL_TOLERANCE, "d_wte");
    if (rows_per_chunk >= N) {  // one chunk: the very same calls as the unchunked path
        CHECK(bitwise_equal(out.losses.data(), ref.losses.data(), N * sizeof(float)));
        CHECK(bitwise_equal(out.d_lnf.data(), ref.d_lnf.data(), out.d_lnf.size() * sizeof(float)));
        CHECK(bitwise_equal(out.d_wte.data(), ref.d_wte.data(), out.d_wte.size() * sizeof(float)));
    }
}

}  // namespace

TEST(chunked_classifier_chunks_not_dividing_n) { check_chunks(16); }  // 16 + 16 + 5 rows
TEST(chunked_classifier_one_row_per_chunk) { check_chunks(1); }
TEST(chunked_classifier_one_chunk_is_the_unchunked_path) {
    check_chunks(N);
    check_chunks(100);
}

TEST(chunked_classifier_forward_only) {
    const Inputs in;
    const Outputs ref = unchunked(in), out = chunked(in, 10, false);
    CHECK_CLOSE(out.losses, ref.losses, KERNEL_TOLERANCE, "losses");
    // d_lnf untouched (still poisoned: NaN), d_wte unchanged.
    for (float x : out.d_lnf) CHECK(x != x);
    CHECK(bitwise_equal(out.d_wte.data(), in.d_wte_start.data(), out.d_wte.size() * sizeof(float)));
}

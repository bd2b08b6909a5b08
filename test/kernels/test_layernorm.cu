// kernels/layernorm.h against the CPU reference (cpu/layernorm.h, cpu/residual.h, computed in double
// on the same floatX-rounded inputs): forward, fused residual + forward, residual add and backward,
// for row lengths that hit every register-array length the kernels are instantiated for, rows too
// long for registers (the wide kernels), and row counts that are not multiples of anything.
#include <vector>

#include "cpu/layernorm.h"
#include "cpu/residual.h"
#include "kernels/layernorm.h"
#include "test/kernels/kernel_test.h"

namespace {

std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }
std::vector<float> to_float_vector(const std::vector<double>& v) {
    return std::vector<float>(v.begin(), v.end());
}
bool bitwise_equal_floatX(const floatX* a, const floatX* b, size_t n) {
    const std::vector<floatX> x = host_copy_of(a, n), y = host_copy_of(b, n);
    return bitwise_equal(x.data(), y.data(), n * sizeof(floatX));
}

// The row lengths tested: the main GPT-2 shapes, small ones, one just below each register-array
// length (the last vectors of the row are padding), and one too long for registers.
const int kWideC = 32 * LAYERNORM_MAX_VECS * LAYERNORM_X128 + 8;
std::vector<int> row_lengths() {
    std::vector<int> lengths = {768, 160, 32, 64};
    for (int vecs : {1, 2, 3, 4, 6, 8, 12, 16}) lengths.push_back(32 * vecs * LAYERNORM_X128 - 8);
    lengths.push_back(kWideC);
    return lengths;
}
// Fewer rows for long rows, so that every case stays quick in the emulator.
int rows_for(int C) { return C <= 768 ? 4 * 257 : C <= 2048 ? 37 : 5; }

// Inputs of one LayerNorm problem, rounded to floatX, with a non-zero mean per row.
struct Problem {
    int N, C;
    std::vector<float> inp, weight, bias;
    Problem(int rows, int channels, unsigned seed) : N(rows), C(channels) {
        inp = round_to_floatX(random_floats((size_t)N * C, seed, -1.0f, 3.0f));
        weight = round_to_floatX(random_floats(C, seed + 1, 0.5f, 1.5f));
        bias = round_to_floatX(random_floats(C, seed + 2));
    }
};

struct ForwardReference {
    std::vector<float> out, mean, rstd;
};
ForwardReference reference_forward(const std::vector<float>& inp, const Problem& p) {
    std::vector<double> out((size_t)p.N * p.C), mean(p.N), rstd(p.N);
    const std::vector<double> x = to_double(inp), w = to_double(p.weight), b = to_double(p.bias);
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), p.N, p.C);
    return {to_float_vector(out), to_float_vector(mean), to_float_vector(rstd)};
}

}  // namespace

TEST(layernorm_forward_matches_reference) {
    for (int C : row_lengths()) {
        const Problem p(rows_for(C), C, 100 + C);
        const size_t n = (size_t)p.N * C;
        floatX* d_inp = device_floatX(p.inp);
        floatX* d_weight = device_floatX(p.weight);
        floatX* d_bias = device_floatX(p.bias);
        floatX* d_out = device_poisoned<floatX>(n);
        float* d_mean = device_poisoned<float>(p.N);
        float* d_rstd = device_poisoned<float>(p.N);
        layernorm_forward(d_out, d_mean, d_rstd, d_inp, d_weight, d_bias, p.N, C, 0);
        const ForwardReference ref = reference_forward(p.inp, p);
        const std::string what = tst::format("N=%d C=%d", p.N, C);
        CHECK_CLOSE(host_floats_of(d_out, n), ref.out, KERNEL_TOLERANCE, ("out " + what).c_str());
        CHECK_CLOSE(host_copy_of(d_mean, p.N), ref.mean, 1e-5, ("mean " + what).c_str());
        CHECK_CLOSE(host_copy_of(d_rstd, p.N), ref.rstd, 1e-5, ("rstd " + what).c_str());
        for (void* ptr :
             {(void*)d_inp, (void*)d_weight, (void*)d_bias, (void*)d_out, (void*)d_mean, (void*)d_rstd})
            CUDA_CHECK(cudaFree(ptr));
    }
}

TEST(layernorm_forward_without_statistics) {
    // mean and rstd may be nullptr (inference): the output is unchanged.
    const Problem p(37, 768, 7);
    const size_t n = (size_t)p.N * p.C;
    floatX* d_inp = device_floatX(p.inp);
    floatX* d_weight = device_floatX(p.weight);
    floatX* d_bias = device_floatX(p.bias);
    floatX* d_out = device_poisoned<floatX>(n);
    layernorm_forward(d_out, nullptr, nullptr, d_inp, d_weight, d_bias, p.N, p.C, 0);
    CHECK_CLOSE(host_floats_of(d_out, n), reference_forward(p.inp, p).out, KERNEL_TOLERANCE, "out");
    for (void* ptr : {(void*)d_inp, (void*)d_weight, (void*)d_bias, (void*)d_out}) CUDA_CHECK(cudaFree(ptr));
}

TEST(residual_layernorm_forward_matches_reference) {
    for (int C : {768, 160, 64, kWideC}) {
        const Problem p(rows_for(C), C, 200 + C);
        const size_t n = (size_t)p.N * C;
        const std::vector<float> other = round_to_floatX(random_floats(n, 300 + C));
        // The residual the kernel must store: inp + other rounded once to floatX.
        std::vector<float> residual(n);
        for (size_t i = 0; i < n; i++) residual[i] = host_from_floatX(host_to_floatX(p.inp[i] + other[i]));

        floatX* d_inp1 = device_floatX(p.inp);
        floatX* d_inp2 = device_floatX(other);
        floatX* d_weight = device_floatX(p.weight);
        floatX* d_bias = device_floatX(p.bias);
        floatX* d_residual = device_poisoned<floatX>(n);
        floatX* d_out = device_poisoned<floatX>(n);
        float* d_mean = device_poisoned<float>(p.N);
        float* d_rstd = device_poisoned<float>(p.N);
        residual_layernorm_forward(d_residual, d_out, d_mean, d_rstd, d_inp1, d_inp2, d_weight, d_bias, p.N,
                                   C, 0);

        const std::vector<float> got_residual = host_floats_of(d_residual, n);
        CHECK_MSG(bitwise_equal(got_residual.data(), residual.data(), n * sizeof(float)),
                  "C=%d: residual_out is not inp1 + inp2 rounded once", C);
        const ForwardReference ref = reference_forward(residual, p);  // normalises the rounded residual
        const std::string what = tst::format("N=%d C=%d", p.N, C);
        CHECK_CLOSE(host_floats_of(d_out, n), ref.out, KERNEL_TOLERANCE, ("out " + what).c_str());
        CHECK_CLOSE(host_copy_of(d_mean, p.N), ref.mean, 1e-5, ("mean " + what).c_str());
        CHECK_CLOSE(host_copy_of(d_rstd, p.N), ref.rstd, 1e-5, ("rstd " + what).c_str());
        for (void* ptr : {(void*)d_inp1, (void*)d_inp2, (void*)d_weight, (void*)d_bias, (void*)d_residual,
                          (void*)d_out, (void*)d_mean, (void*)d_rstd})
            CUDA_CHECK(cudaFree(ptr));
    }
}

TEST(residual_forward_matches_reference) {
    // n not a multiple of a 128-bit vector: the last elements take the scalar tail.
    for (size_t n : {(size_t)37 * 160, (size_t)37 * 160 + 5, (size_t)3}) {
        const std::vector<float> a = round_to_floatX(random_floats(n, 11)),
                                 b = round_to_floatX(random_floats(n, 12));
        std::vector<float> ref(n);
        residual_forward(ref.data(), a.data(), b.data(), n);
        ref = round_to_floatX(ref);
        floatX* d_a = device_floatX(a);
        floatX* d_b = device_floatX(b);
        floatX* d_out = device_poisoned<floatX>(n);
        residual_forward(d_out, d_a, d_b, n, 0);
        const std::vector<float> out = host_floats_of(d_out, n);
        CHECK_MSG(bitwise_equal(out.data(), ref.data(), n * sizeof(float)), "n=%zu: a + b differs", n);
        for (void* ptr : {(void*)d_a, (void*)d_b, (void*)d_out}) CUDA_CHECK(cudaFree(ptr));
    }
}

namespace {

// One backward problem: inputs plus non-zero initial gradients (the kernel adds into them).
struct BackwardProblem : Problem {
    std::vector<float> dout, dinp0, dweight0, dbias0, dinput_bias0, mean, rstd;
    BackwardProblem(int rows, int channels, unsigned seed) : Problem(rows, channels, seed) {
        const size_t n = (size_t)N * C;
        // dout partly follows the input, so that both terms of the row's mean gradient matter.
        dout = random_floats(n, seed + 3);
        for (size_t i = 0; i < n; i++) dout[i] += 0.5f * (inp[i] - 1.0f);
        dout = round_to_floatX(dout);
        dinp0 = round_to_floatX(random_floats(n, seed + 4, -0.1f, 0.1f));
        dweight0 = round_to_floatX(random_floats(C, seed + 5));
        dbias0 = round_to_floatX(random_floats(C, seed + 6));
        dinput_bias0 = round_to_floatX(random_floats(C, seed + 7));
        const ForwardReference fwd = reference_forward(inp, *this);
        mean = fwd.mean;
        rstd = fwd.rstd;
    }
};
struct BackwardResult {
    std::vector<float> dinp, dweight, dbias, dinput_bias;
};

// Runs layernorm_backward on the device from the problem's initial gradients; with_input_bias also
// asks for the column sums of the updated dinp (added into the problem's dinput_bias0).
BackwardResult device_backward(const BackwardProblem& p, bool with_input_bias = false) {
    const size_t n = (size_t)p.N * p.C;
    floatX* d_dinp = device_floatX(p.dinp0);
    floatX* d_dweight = device_floatX(p.dweight0);
    floatX* d_dbias = device_floatX(p.dbias0);
    floatX* d_dinput_bias = with_input_bias ? device_floatX(p.dinput_bias0) : nullptr;
    floatX* d_dout = device_floatX(p.dout);
    floatX* d_inp = device_floatX(p.inp);
    floatX* d_weight = device_floatX(p.weight);
    float* d_mean = device_copy_of(p.mean);
    float* d_rstd = device_copy_of(p.rstd);
    const size_t scratch_bytes = layernorm_backward_scratch_bytes(p.N, p.C);
    void* d_scratch = device_poisoned<unsigned char>(scratch_bytes);
    layernorm_backward(d_dinp, d_dweight, d_dbias, d_scratch, d_dout, d_inp, d_weight, d_mean, d_rstd, p.N,
                       p.C, 0, d_dinput_bias);
    BackwardResult result{host_floats_of(d_dinp, n), host_floats_of(d_dweight, p.C),
                          host_floats_of(d_dbias, p.C), {}};
    if (with_input_bias) result.dinput_bias = host_floats_of(d_dinput_bias, p.C);
    for (void* ptr : {(void*)d_dinp, (void*)d_dweight, (void*)d_dbias, (void*)d_dout, (void*)d_inp,
                      (void*)d_weight, (void*)d_mean, (void*)d_rstd, d_scratch, (void*)d_dinput_bias})
        CUDA_CHECK(cudaFree(ptr));
    return result;
}

BackwardResult reference_backward(const BackwardProblem& p) {
    std::vector<double> dinp = to_double(p.dinp0), dweight = to_double(p.dweight0),
                        dbias = to_double(p.dbias0);
    const std::vector<double> dout = to_double(p.dout), inp = to_double(p.inp), weight = to_double(p.weight);
    const std::vector<double> mean = to_double(p.mean), rstd = to_double(p.rstd);
    layernorm_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(),
                       mean.data(), rstd.data(), p.N, p.C);
    return {to_float_vector(dinp), to_float_vector(dweight), to_float_vector(dbias), {}};
}

}  // namespace

TEST(layernorm_backward_matches_reference) {
    for (int C : row_lengths()) {
        const BackwardProblem p(rows_for(C), C, 400 + C);
        const BackwardResult got = device_backward(p), ref = reference_backward(p);
        const std::string what = tst::format("N=%d C=%d", p.N, C);
        CHECK_CLOSE(got.dinp, ref.dinp, KERNEL_TOLERANCE, ("dinp " + what).c_str());
        CHECK_CLOSE(got.dweight, ref.dweight, KERNEL_TOLERANCE, ("dweight " + what).c_str());
        CHECK_CLOSE(got.dbias, ref.dbias, KERNEL_TOLERANCE, ("dbias " + what).c_str());
    }
}

// The optional third sum: dinput_bias += Σ_n dinp[n, :] of dinp as the kernel stored it (checked
// against the independent reference above), summed here in double; dinp, dweight and dbias are the
// same bits as without it.
TEST(layernorm_backward_sums_the_updated_input_gradient) {
    for (int C : row_lengths()) {
        const BackwardProblem p(rows_for(C), C, 450 + C);
        const BackwardResult got = device_backward(p, true), plain = device_backward(p);
        std::vector<double> sums = to_double(p.dinput_bias0);
        for (int n = 0; n < p.N; n++)
            for (int c = 0; c < C; c++) sums[c] += got.dinp[(size_t)n * C + c];
        const std::string what = tst::format("N=%d C=%d", p.N, C);
        CHECK_CLOSE(got.dinput_bias, to_float_vector(sums), KERNEL_TOLERANCE, ("dinput_bias " + what).c_str());
        CHECK_MSG(got.dinp == plain.dinp && got.dweight == plain.dweight && got.dbias == plain.dbias,
                  "%s: the third sum changes the other outputs", what.c_str());
    }
}

TEST(layernorm_backward_is_deterministic) {
    for (int C : {768, kWideC}) {
        const BackwardProblem p(rows_for(C), C, 500 + C);
        const BackwardResult first = device_backward(p), second = device_backward(p);
        CHECK(bitwise_equal(first.dinp.data(), second.dinp.data(), first.dinp.size() * sizeof(float)));
        CHECK(bitwise_equal(first.dweight.data(), second.dweight.data(), C * sizeof(float)));
        CHECK(bitwise_equal(first.dbias.data(), second.dbias.data(), C * sizeof(float)));
    }
}

TEST(layernorm_backward_with_fewer_rows_than_warps) {
    // One row: most warps of the single block get no row and contribute zero partial sums.
    const BackwardProblem p(1, 160, 600);
    const BackwardResult got = device_backward(p), ref = reference_backward(p);
    CHECK_CLOSE(got.dinp, ref.dinp, KERNEL_TOLERANCE, "dinp");
    CHECK_CLOSE(got.dweight, ref.dweight, KERNEL_TOLERANCE, "dweight");
    CHECK_CLOSE(got.dbias, ref.dbias, KERNEL_TOLERANCE, "dbias");
}

TEST(layernorm_register_lengths_and_shape_checks) {
    // Register-array length per row length; 0 sends the row to the wide kernels.
    CHECK(layernorm_vecs_per_lane(32 * LAYERNORM_X128) == 1);
    CHECK(layernorm_vecs_per_lane(32 * LAYERNORM_X128 + 8) == 2);
    CHECK(layernorm_vecs_per_lane(5 * 32 * LAYERNORM_X128) == 6);
    CHECK(layernorm_vecs_per_lane(16 * 32 * LAYERNORM_X128) == 16);
    CHECK(layernorm_vecs_per_lane(kWideC) == 0);
    // The backward keeps rows of up to 12 vectors per lane in registers (16 spill on sm_90); longer
    // rows take its wide kernel.
    CHECK(layernorm_backward_plan(5, 12 * 32 * LAYERNORM_X128 - 8).kernel == layernorm_backward_kernel<12>);
    CHECK(layernorm_backward_plan(5, 16 * 32 * LAYERNORM_X128 - 8).kernel == layernorm_backward_wide_kernel);
    CHECK(layernorm_backward_plan(5, kWideC).kernel == layernorm_backward_wide_kernel);
    // C must be a multiple of 8 and tensors 16-byte aligned.
    alignas(16) static floatX buffer[16];
    CHECK(layernorm_shape_error(37, 768, {buffer}) == nullptr);
    CHECK(layernorm_shape_error(37, 100, {buffer}) != nullptr);
    CHECK(layernorm_shape_error(37, 0, {buffer}) != nullptr);
    CHECK(layernorm_shape_error(-1, 768, {buffer}) != nullptr);
    CHECK(layernorm_shape_error(37, 768, {buffer + 1}) != nullptr);
}

TEST(layernorm_offsets_are_64_bit) {
    // B=64, T=1024 rows of GPT-2 XL's C=1600 would be 1.07e8 elements; a larger row index checks
    // that offsets past 2^31 (and 2^32) are exact, without allocating them.
    CHECK(layernorm_row_offset(64 * 1024 - 1, 1600) == (size_t)(64 * 1024 - 1) * 1600);
    CHECK(layernorm_row_offset(3000000, 1600) == (size_t)4800000000ull);
    CHECK(layernorm_row_offset(2147483647, 8) == (size_t)2147483647 * 8);
}

TEST(layernorm_backward_scratch_size) {
    // Room for every block's partial row (2C floats, 3C with dinput_bias), with at least one block and
    // never more blocks than rows.
    for (int N : {1, 37, 16 * 1024}) {
        const size_t bytes = layernorm_backward_scratch_bytes(N, 768);
        for (int sums : {2, 3}) {
            const int blocks = layernorm_backward_plan(N, 768, sums).blocks;
            CHECK(blocks >= 1 && blocks <= N && bytes >= (size_t)blocks * sums * 768 * sizeof(float));
        }
    }
}

TEST(layernorm_recompute_reproduces_forward_bitwise) {
    // layernorm_recompute (train_gpt -r 2) rebuilds the forward's output from the saved statistics:
    // it must give the same bits, for plain and fused forwards.
    for (int C : {768, 160}) {
        const Problem p(37, C, 700 + C);
        const size_t n = (size_t)p.N * C;
        const std::vector<float> other = round_to_floatX(random_floats(n, 800 + C));
        floatX* d_inp = device_floatX(p.inp);
        floatX* d_other = device_floatX(other);
        floatX* d_weight = device_floatX(p.weight);
        floatX* d_bias = device_floatX(p.bias);
        floatX* d_residual = device_poisoned<floatX>(n);
        floatX* d_out = device_poisoned<floatX>(n);
        floatX* d_again = device_poisoned<floatX>(n);
        float* d_mean = device_poisoned<float>(p.N);
        float* d_rstd = device_poisoned<float>(p.N);

        layernorm_forward(d_out, d_mean, d_rstd, d_inp, d_weight, d_bias, p.N, C, 0);
        layernorm_recompute(d_again, d_inp, d_mean, d_rstd, d_weight, d_bias, p.N, C, 0);
        CHECK_MSG(bitwise_equal_floatX(d_out, d_again, n),
                  "C=%d: recomputed LayerNorm differs from the forward", C);

        residual_layernorm_forward(d_residual, d_out, d_mean, d_rstd, d_inp, d_other, d_weight, d_bias, p.N,
                                   C, 0);
        CUDA_CHECK(cudaMemset(d_again, 0xff, n * sizeof(floatX)));
        layernorm_recompute(d_again, d_residual, d_mean, d_rstd, d_weight, d_bias, p.N, C, 0);
        CHECK_MSG(bitwise_equal_floatX(d_out, d_again, n), "C=%d: recomputed fused LayerNorm differs", C);
        for (void* ptr : {(void*)d_inp, (void*)d_other, (void*)d_weight, (void*)d_bias, (void*)d_residual,
                          (void*)d_out, (void*)d_again, (void*)d_mean, (void*)d_rstd})
            CUDA_CHECK(cudaFree(ptr));
    }
}

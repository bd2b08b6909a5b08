// The Llama 3 kernels against the CPU reference ops, computed in double on the same floatX-rounded
// inputs: kernels/rmsnorm.h (plain and fused with the residual add, forward and backward) against
// cpu/rmsnorm.h, kernels/rope.h (q and k heads of the fused qkv rotated in place, and back) against
// cpu/rope.h, and kernels/swiglu.h (on the fused gate|up activation) against cpu/swiglu.h. Shapes
// are tiny (the emulator runs a fiber per CUDA thread) but reach every path: each register-array
// length class of RMSNorm and the rows too long for registers, RoPE's largest head size (128) and
// its scalar kernel, odd row counts throughout.
// Set LLAMA_OPS_PRINT_ERRORS=1 to print every measured error.
#include <cstdlib>
#include <string>
#include <vector>

#include "cpu/rmsnorm.h"
#include "cpu/rope.h"
#include "cpu/swiglu.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "test/kernels/kernel_test.h"

namespace {

// ‖out−ref‖/‖ref‖ allowed. The kernels see the very inputs the reference sees (rounded to floatX) and
// compute in fp32, so in bf16 the error is essentially each output's final rounding to bf16: at most
// 2^-9 ≈ 1.95e-3 relative per element, so at most that norm-wise too (measured: 0.7e-3 to 1.9e-3).
// 4e-3 allows that and little else, tighter than the suite's 1e-2 (KERNEL_TOLERANCE), which also
// covers kernels whose fp32 sums run long. In fp32 only the order of fp32 sums and fp32 versus double
// arithmetic remain (measured: at most 1.2e-7).
#ifdef ENABLE_FP32
constexpr double LLAMA_TOLERANCE = 1e-6;
#else
constexpr double LLAMA_TOLERANCE = 4e-3;
#endif
// rstd is fp32 in both builds, from the same inputs: only the sum's order differs.
constexpr double RSTD_TOLERANCE = 1e-6;
constexpr float EPS = 1e-5f;

std::vector<double> widened(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }
std::vector<float> narrowed(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

void check_close(const std::vector<float>& out, const std::vector<float>& ref, double tolerance,
                 const std::string& what) {
    const double error = tst::rel_l2_error(out.data(), ref.data(), ref.size());
    if (getenv("LLAMA_OPS_PRINT_ERRORS")) printf("  %-40s %.2e\n", what.c_str(), error);
    CHECK_MSG(error <= tolerance, "%s: relative error %.3g > %.3g (" PRECISION_NAME ")", what.c_str(), error,
              tolerance);
}
template <typename... Pointers>
void free_all(Pointers... pointers) {
    (CUDA_CHECK(cudaFree((void*)pointers)), ...);
}

// ---- RMSNorm

// Row lengths: small ones, a Llama-like 2048, the longest rows each register-array path keeps (the
// backward's 12 vectors per lane, the forward's 16, where the backward goes wide) and a row too long
// for the forward's registers.
const int kWideC = 32 * LAYERNORM_MAX_VECS * LAYERNORM_X128 + 8;
std::vector<int> rmsnorm_lengths() {
    return {64, 160, 2048, 32 * LAYERNORM_BACKWARD_MAX_VECS * LAYERNORM_X128 - 8,
            32 * LAYERNORM_MAX_VECS * LAYERNORM_X128 - 8, kWideC};
}
int rmsnorm_rows(int C) { return C <= 160 ? 37 : 5; }  // odd counts; fewer for long rows

struct RmsnormProblem {
    int N, C;
    std::vector<float> inp, other, weight, dout, dinp0, dweight0;
    RmsnormProblem(int rows, int channels, unsigned seed) : N(rows), C(channels) {
        const size_t n = (size_t)N * C;
        inp = round_to_floatX(random_floats(n, seed, -1.0f, 3.0f));
        other = round_to_floatX(random_floats(n, seed + 1));
        weight = round_to_floatX(random_floats(C, seed + 2, 0.5f, 1.5f));
        dout = random_floats(n, seed + 3);
        for (size_t i = 0; i < n; i++) dout[i] += 0.5f * inp[i];  // so that the row's Σ g·xhat matters
        dout = round_to_floatX(dout);
        dinp0 = round_to_floatX(random_floats(n, seed + 4, -0.1f, 0.1f));
        dweight0 = round_to_floatX(random_floats(C, seed + 5));
    }
};

struct RmsnormForward {
    std::vector<float> out, rstd;
};
RmsnormForward reference_rmsnorm(const std::vector<float>& x, const RmsnormProblem& p) {
    std::vector<double> out(x.size()), rstd(p.N);
    const std::vector<double> xd = widened(x), w = widened(p.weight);
    rmsnorm_forward(out.data(), rstd.data(), xd.data(), w.data(), p.N, p.C, (double)EPS);
    return {narrowed(out), narrowed(rstd)};
}

// Runs the plain (fused = false) or fused forward; returns out, rstd and the stored residual.
RmsnormForward device_rmsnorm(const RmsnormProblem& p, bool fused, std::vector<float>* residual) {
    const size_t n = (size_t)p.N * p.C;
    floatX* d_inp = device_floatX(p.inp);
    floatX* d_other = device_floatX(p.other);
    floatX* d_weight = device_floatX(p.weight);
    floatX* d_residual = device_poisoned<floatX>(n);
    floatX* d_out = device_poisoned<floatX>(n);
    float* d_rstd = device_poisoned<float>(p.N);
    if (fused)
        residual_rmsnorm_forward(d_residual, d_out, d_rstd, d_inp, d_other, d_weight, p.N, p.C, EPS, 0);
    else
        rmsnorm_forward(d_out, d_rstd, d_inp, d_weight, p.N, p.C, EPS, 0);
    RmsnormForward result{host_floats_of(d_out, n), host_copy_of(d_rstd, p.N)};
    if (residual) *residual = host_floats_of(d_residual, n);
    free_all(d_inp, d_other, d_weight, d_residual, d_out, d_rstd);
    return result;
}

}  // namespace

TEST(rmsnorm_forward_matches_reference) {
    for (int C : rmsnorm_lengths()) {
        const RmsnormProblem p(rmsnorm_rows(C), C, 100 + C);
        const RmsnormForward got = device_rmsnorm(p, false, nullptr), ref = reference_rmsnorm(p.inp, p);
        const std::string what = tst::format("N=%d C=%d", p.N, C);
        check_close(got.out, ref.out, LLAMA_TOLERANCE, "rmsnorm out " + what);
        check_close(got.rstd, ref.rstd, RSTD_TOLERANCE, "rmsnorm rstd " + what);
    }
}

TEST(residual_rmsnorm_forward_matches_reference) {
    for (int C : rmsnorm_lengths()) {
        const RmsnormProblem p(rmsnorm_rows(C), C, 200 + C);
        const size_t n = (size_t)p.N * C;
        std::vector<float> residual(n), got_residual;
        for (size_t i = 0; i < n; i++) residual[i] = host_from_floatX(host_to_floatX(p.inp[i] + p.other[i]));
        const RmsnormForward got = device_rmsnorm(p, true, &got_residual);
        const RmsnormForward ref = reference_rmsnorm(residual, p);  // normalises the rounded residual
        const std::string what = tst::format("N=%d C=%d", p.N, C);
        CHECK_MSG(bitwise_equal(got_residual.data(), residual.data(), n * sizeof(float)),
                  "%s: residual_out is not inp1 + inp2 rounded once", what.c_str());
        check_close(got.out, ref.out, LLAMA_TOLERANCE, "fused rmsnorm out " + what);
        check_close(got.rstd, ref.rstd, RSTD_TOLERANCE, "fused rmsnorm rstd " + what);
    }
}

namespace {

struct RmsnormGradients {
    std::vector<float> dinp, dweight;
};
// The device backward from the problem's initial gradients and the reference forward's rstd.
RmsnormGradients device_rmsnorm_backward(const RmsnormProblem& p, const std::vector<float>& rstd) {
    const size_t n = (size_t)p.N * p.C;
    floatX* d_dinp = device_floatX(p.dinp0);
    floatX* d_dweight = device_floatX(p.dweight0);
    floatX* d_dout = device_floatX(p.dout);
    floatX* d_inp = device_floatX(p.inp);
    floatX* d_weight = device_floatX(p.weight);
    float* d_rstd = device_copy_of(rstd);
    unsigned char* d_scratch = device_poisoned<unsigned char>(rmsnorm_backward_scratch_bytes(p.N, p.C));
    rmsnorm_backward(d_dinp, d_dweight, d_scratch, d_dout, d_inp, d_weight, d_rstd, p.N, p.C, 0);
    RmsnormGradients result{host_floats_of(d_dinp, n), host_floats_of(d_dweight, p.C)};
    free_all(d_dinp, d_dweight, d_dout, d_inp, d_weight, d_rstd, d_scratch);
    return result;
}
RmsnormGradients reference_rmsnorm_backward(const RmsnormProblem& p, const std::vector<float>& rstd) {
    std::vector<double> dinp = widened(p.dinp0), dweight = widened(p.dweight0);
    const std::vector<double> dout = widened(p.dout), inp = widened(p.inp), w = widened(p.weight),
                              r = widened(rstd);
    rmsnorm_backward(dinp.data(), dweight.data(), dout.data(), inp.data(), w.data(), r.data(), p.N, p.C);
    return {narrowed(dinp), narrowed(dweight)};
}

}  // namespace

TEST(rmsnorm_backward_matches_reference) {
    for (int C : rmsnorm_lengths()) {
        const RmsnormProblem p(rmsnorm_rows(C), C, 300 + C);
        const std::vector<float> rstd = reference_rmsnorm(p.inp, p).rstd;
        const RmsnormGradients got = device_rmsnorm_backward(p, rstd), ref = reference_rmsnorm_backward(p, rstd);
        const std::string what = tst::format("N=%d C=%d", p.N, C);
        check_close(got.dinp, ref.dinp, LLAMA_TOLERANCE, "rmsnorm dinp " + what);
        check_close(got.dweight, ref.dweight, LLAMA_TOLERANCE, "rmsnorm dweight " + what);
    }
}

TEST(rmsnorm_backward_is_deterministic_and_handles_one_row) {
    for (int C : {160, kWideC}) {
        const RmsnormProblem p(rmsnorm_rows(C), C, 400 + C);
        const std::vector<float> rstd = reference_rmsnorm(p.inp, p).rstd;
        const RmsnormGradients first = device_rmsnorm_backward(p, rstd), second = device_rmsnorm_backward(p, rstd);
        CHECK(first.dinp == second.dinp && first.dweight == second.dweight);
    }
    // One row: most warps of the single block get no row and contribute zero partial sums.
    const RmsnormProblem p(1, 160, 450);
    const std::vector<float> rstd = reference_rmsnorm(p.inp, p).rstd;
    const RmsnormGradients got = device_rmsnorm_backward(p, rstd), ref = reference_rmsnorm_backward(p, rstd);
    check_close(got.dinp, ref.dinp, LLAMA_TOLERANCE, "rmsnorm dinp N=1");
    check_close(got.dweight, ref.dweight, LLAMA_TOLERANCE, "rmsnorm dweight N=1");
}

TEST(rmsnorm_backward_plan_picks_the_register_or_wide_kernel) {
    CHECK(rmsnorm_backward_plan(5, 32 * 8 * LAYERNORM_X128).kernel == rmsnorm_backward_kernel<8>);
    CHECK(rmsnorm_backward_plan(5, 32 * LAYERNORM_BACKWARD_MAX_VECS * LAYERNORM_X128 - 8).kernel ==
          rmsnorm_backward_kernel<LAYERNORM_BACKWARD_MAX_VECS>);
    CHECK(rmsnorm_backward_plan(5, 32 * LAYERNORM_MAX_VECS * LAYERNORM_X128 - 8).kernel ==
          rmsnorm_backward_wide_kernel);
    for (int N : {1, 37, 4096}) {
        const RmsnormBackwardPlan plan = rmsnorm_backward_plan(N, 768);
        CHECK(plan.blocks >= 1 && plan.blocks <= N);
        CHECK(rmsnorm_backward_scratch_bytes(N, 768) == (size_t)plan.blocks * 768 * sizeof(float));
    }
}

// ---- RoPE

namespace {

struct RopeShape {
    int B, T, H, KV, hs;
    bool scaled;  // Llama 3.1's frequency scaling
};
int rope_row(const RopeShape& s) { return (s.H + 2 * s.KV) * s.hs; }

// The float tables the device reads (what rope_tables<float> writes), and the same values in double
// for the reference.
struct RopeTables {
    std::vector<float> cos, sin;
    explicit RopeTables(const RopeShape& s) : cos((size_t)s.T * s.hs / 2), sin(cos.size()) {
        RopeScaling scaling;
        scaling.enabled = s.scaled;
        scaling.factor = 8.0;
        scaling.original_max_position = 16;  // short, so that the tiny T meets every band of the scaling
        rope_tables(cos.data(), sin.data(), s.T, s.hs, 500000.0, scaling);
    }
};

// The heads [first, first + count) of every token of qkv, as a (B, T, count, hs) array.
std::vector<double> gather_heads(const std::vector<float>& qkv, const RopeShape& s, int first, int count) {
    std::vector<double> heads;
    for (size_t token = 0; token < (size_t)s.B * s.T; token++) {
        const float* row = qkv.data() + token * rope_row(s) + (size_t)first * s.hs;
        heads.insert(heads.end(), row, row + (size_t)count * s.hs);
    }
    return heads;
}
// The reference for qkv after the kernel: q and k rotated by cpu/rope.h (sign +1: forward, −1: the
// backward's inverse rotation, added into zeros), v as it was.
std::vector<float> reference_rope(const std::vector<float>& qkv, const RopeShape& s, const RopeTables& tables,
                                  bool forward) {
    const std::vector<double> c = widened(tables.cos), sn = widened(tables.sin);
    std::vector<float> out = qkv;
    int first = 0;
    for (int count : {s.H, s.KV}) {
        const std::vector<double> x = gather_heads(qkv, s, first, count);
        std::vector<double> y(x.size(), 0.0);
        if (forward)
            rope_forward(y.data(), x.data(), c.data(), sn.data(), s.B, s.T, count, s.hs);
        else
            rope_backward(y.data(), x.data(), c.data(), sn.data(), s.B, s.T, count, s.hs);
        for (size_t token = 0; token < (size_t)s.B * s.T; token++)
            for (int j = 0; j < count * s.hs; j++)
                out[token * rope_row(s) + (size_t)first * s.hs + j] = (float)y[token * count * s.hs + j];
        first += count;
    }
    return out;
}

// The largest head size (128) with grouped queries, a small one on the 128-bit path, and one whose
// half (6) is not a whole vector (the scalar kernel).
std::vector<RopeShape> rope_shapes() {
    return {{2, 5, 4, 2, 128, true}, {1, 7, 3, 1, 16, false}, {3, 3, 2, 2, 12, true}};
}

}  // namespace

TEST(rope_forward_and_backward_match_reference) {
    for (bool forward : {true, false}) {
        for (const RopeShape& s : rope_shapes()) {
            const size_t n = (size_t)s.B * s.T * rope_row(s);
            const std::vector<float> qkv = round_to_floatX(random_floats(n, 500 + s.hs));
            const RopeTables tables(s);
            floatX* d_qkv = device_floatX(qkv);
            float* d_cos = device_copy_of(tables.cos);
            float* d_sin = device_copy_of(tables.sin);
            if (forward)
                rope_forward(d_qkv, d_cos, d_sin, s.B, s.T, s.H, s.KV, s.hs, 0);
            else
                rope_backward(d_qkv, d_cos, d_sin, s.B, s.T, s.H, s.KV, s.hs, 0);
            const std::vector<float> got = host_floats_of(d_qkv, n);
            const std::vector<float> ref = reference_rope(qkv, s, tables, forward);
            const std::string what = tst::format("rope %s B=%d T=%d H=%d KV=%d hs=%d%s",
                                                 forward ? "forward" : "backward", s.B, s.T, s.H, s.KV, s.hs,
                                                 s.scaled ? " scaled" : "");
            check_close(got, ref, LLAMA_TOLERANCE, what);
            const std::vector<double> v_got = gather_heads(got, s, s.H + s.KV, s.KV);
            CHECK_MSG(v_got == gather_heads(qkv, s, s.H + s.KV, s.KV), "%s: value heads changed", what.c_str());
            free_all(d_qkv, d_cos, d_sin);
        }
    }
}

TEST(rope_shape_checks) {
    CHECK(rope_shape_error(2, 5, 4, 2, 128) == nullptr);
    CHECK(rope_shape_error(2, 5, 4, 2, 13) != nullptr);
    CHECK(rope_shape_error(2, 5, 0, 2, 64) != nullptr);
    CHECK(rope_shape_error(-1, 5, 4, 2, 64) != nullptr);
    alignas(16) static float table[8];
    CHECK(rope_vectorised(table, table, table, 128));
    CHECK(!rope_vectorised(table, table, table, 12));
    CHECK(!rope_vectorised(table + 1, table, table, 128));
}

// ---- SwiGLU

namespace {

struct SwigluProblem {
    int N, F;
    std::vector<float> inp, dh;  // inp (N, 2F) = [gate | up]
    SwigluProblem(int rows, int ffn, unsigned seed) : N(rows), F(ffn) {
        inp = round_to_floatX(random_floats((size_t)N * 2 * F, seed, -4.0f, 4.0f));  // σ's whole range
        dh = round_to_floatX(random_floats((size_t)N * F, seed + 1));
    }
    // Column block `part` (0: gate or dgate, 1: up or dup) of an (N, 2F) array, as (N, F) doubles.
    std::vector<double> part_of(const std::vector<float>& fused, int part) const {
        std::vector<double> out;
        for (int n = 0; n < N; n++) {
            const float* row = fused.data() + (size_t)n * 2 * F + (size_t)part * F;
            out.insert(out.end(), row, row + F);
        }
        return out;
    }
};

}  // namespace

TEST(swiglu_forward_and_backward_match_reference) {
    for (int N : {37, 1}) {
        for (int F : {8, 40, 264}) {
            const SwigluProblem p(N, F, 600 + F);
            const size_t n = (size_t)N * F;
            const std::vector<double> gate = p.part_of(p.inp, 0), up = p.part_of(p.inp, 1);
            std::vector<double> h(n), dgate(n, 0.0), dup(n, 0.0);
            const std::vector<double> dh = widened(p.dh);
            swiglu_forward(h.data(), gate.data(), up.data(), n);
            swiglu_backward(dgate.data(), dup.data(), dh.data(), gate.data(), up.data(), n);

            floatX* d_inp = device_floatX(p.inp);
            floatX* d_dh = device_floatX(p.dh);
            floatX* d_h = device_poisoned<floatX>(n);
            floatX* d_dinp = device_poisoned<floatX>(2 * n);
            swiglu_forward(d_h, d_inp, N, F, 0);
            swiglu_backward(d_dinp, d_dh, d_inp, N, F, 0);
            const std::string what = tst::format("N=%d F=%d", N, F);
            check_close(host_floats_of(d_h, n), narrowed(h), LLAMA_TOLERANCE, "swiglu h " + what);
            const std::vector<float> dinp = host_floats_of(d_dinp, 2 * n);
            check_close(narrowed(p.part_of(dinp, 0)), narrowed(dgate), LLAMA_TOLERANCE, "swiglu dgate " + what);
            check_close(narrowed(p.part_of(dinp, 1)), narrowed(dup), LLAMA_TOLERANCE, "swiglu dup " + what);
            // In place (dinp = inp): the same bits.
            swiglu_backward(d_inp, d_dh, d_inp, N, F, 0);
            CHECK_MSG(host_floats_of(d_inp, 2 * n) == dinp, "%s: in-place backward differs", what.c_str());
            free_all(d_inp, d_dh, d_h, d_dinp);
        }
    }
}

TEST(swiglu_shape_checks) {
    alignas(16) static floatX buffer[16];
    CHECK(swiglu_shape_error(37, 8192, {buffer}) == nullptr);
    CHECK(swiglu_shape_error(0, 8192, {buffer}) == nullptr);
    CHECK(swiglu_shape_error(37, 12, {buffer}) != nullptr);
    CHECK(swiglu_shape_error(37, 0, {buffer}) != nullptr);
    CHECK(swiglu_shape_error(-1, 8, {buffer}) != nullptr);
    CHECK(swiglu_shape_error(37, 8, {buffer + 1}) != nullptr);
}

// The Llama reference ops (cpu/rmsnorm.h, cpu/rope.h, cpu/swiglu.h, cpu/gqa_attention.h), each in
// double precision: forward against a formula written out here, backward against central finite
// differences of Σ out ⊙ w for random w (gradient buffers start random, so the checks also prove
// that the ops add into them). Finite differences use h = 1e-6: their truncation error (h² times a
// third derivative of order 1) is about 1e-12 and their rounding error (1e-16 · |Σ out ⊙ w| / h,
// with the sums of order 10) about 1e-9, so check_gradient's 1e-6 relative bound leaves a margin of
// a thousand for any correct backward while a wrong term moves a gradient by order 1e-1.
#include <complex>

#include "cpu/attention.h"
#include "cpu/gqa_attention.h"
#include "cpu/rmsnorm.h"
#include "cpu/rope.h"
#include "cpu/swiglu.h"
#include "test/cpu/grad_check.h"

// ---- RMSNorm -----------------------------------------------------------------------------------

TEST(rmsnorm_forward_and_backward) {
    std::mt19937 rng(31);
    const int N = 6, C = 10;
    const double eps = 1e-5;
    std::vector<double> x = random_tensor(N * C, rng), weight = random_tensor(C, rng);
    std::vector<double> out(N * C), rstd(N), w = random_tensor(N * C, rng);
    rmsnorm_forward(out.data(), rstd.data(), x.data(), weight.data(), N, C, eps);
    for (int n = 0; n < N; n++) {  // x / sqrt(mean(x²) + eps) · weight, term by term
        double mean_square = 0;
        for (int c = 0; c < C; c++) mean_square += x[n * C + c] * x[n * C + c] / C;
        for (int c = 0; c < C; c++)
            CHECK_NEAR(out[n * C + c], x[n * C + c] / std::sqrt(mean_square + eps) * weight[c],
                       1e-12);  // a few roundings of order-1 values
    }
    auto f = [&] {
        rmsnorm_forward(out.data(), rstd.data(), x.data(), weight.data(), N, C, eps);
        return weighted_sum(out, w);
    };
    f();
    std::vector<double> dx0 = random_tensor(N * C, rng), dw0 = random_tensor(C, rng);
    std::vector<double> dx = dx0, dw = dw0;
    rmsnorm_backward(dx.data(), dw.data(), w.data(), x.data(), weight.data(), rstd.data(), N, C);
    check_gradient("dinp", added(dx, dx0), numeric_gradient(x, f));
    check_gradient("dweight", added(dw, dw0), numeric_gradient(weight, f));
}

// ---- RoPE --------------------------------------------------------------------------------------

// Rows (B, T, heads, hs) rotated through std::complex, the angle t · f_i from rope_frequencies.
static std::vector<double> rope_by_complex_numbers(const std::vector<double>& x,
                                                   const std::vector<double>& f, int B, int T,
                                                   int heads, int hs) {
    std::vector<double> out(x.size());
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < heads; h++) {
                const size_t at = (((size_t)b * T + t) * heads + h) * hs;
                for (int i = 0; i < hs / 2; i++) {
                    const std::complex<double> z(x[at + i], x[at + i + hs / 2]);
                    const std::complex<double> r = z * std::polar(1.0, t * f[i]);
                    out[at + i] = r.real();
                    out[at + i + hs / 2] = r.imag();
                }
            }
    return out;
}

TEST(rope_frequencies_as_published) {
    const int hs = 128;
    const double theta = 500000;
    RopeScaling off, llama31;
    llama31.enabled = true;
    const std::vector<double> plain = rope_frequencies(hs, theta, off);
    const std::vector<double> scaled = rope_frequencies(hs, theta, llama31);
    for (int i = 0; i < hs / 2; i++) CHECK_NEAR(plain[i], std::pow(theta, -2.0 * i / hs), 1e-15);
    // Wavelengths under 8192/4 keep their frequency, those over 8192/1 are divided by 8, and the
    // band between blends the two: the ratio falls from 1 to 1/8 without a jump.
    int kept = 0, divided = 0, blended = 0;
    for (int i = 0; i < hs / 2; i++) {
        const double wavelength = 2 * M_PI / plain[i], ratio = scaled[i] / plain[i];
        if (wavelength < 2048) kept += ratio == 1.0;
        else if (wavelength > 8192) divided += std::fabs(ratio - 0.125) < 1e-15;
        else {
            const double s = (8192 / wavelength - 1) / (4 - 1);
            blended += std::fabs(ratio - ((1 - s) / 8 + s)) < 1e-15;
        }
        if (i > 0) CHECK(ratio <= scaled[i - 1] / plain[i - 1]);
    }
    // At θ = 500000 and hs = 128 the three bands hold 29, 6 and 29 of the 64 pairs.
    CHECK_MSG(kept == 29 && blended == 6 && divided == 29, "bands %d %d %d", kept, blended, divided);
}

TEST(rope_matches_complex_rotation_and_backward_inverts_it) {
    std::mt19937 rng(32);
    const int B = 2, T = 7, heads = 3, hs = 8, half = hs / 2;
    for (bool scaled : {false, true}) {
        RopeScaling scaling;
        scaling.enabled = scaled;
        // θ = 10 and a short original context so that positions up to 6 turn every pair visibly
        // and the scaled run has pairs in each band: wavelengths 6.3 (kept), 11 and 20 (blended),
        // 35 (divided by 8), against the band edges 32/4 and 32/1.
        scaling.original_max_position = 32;
        const double theta = 10;
        std::vector<double> cos_t(T * half), sin_t(T * half);
        rope_tables(cos_t.data(), sin_t.data(), T, hs, theta, scaling);
        std::vector<double> x = random_tensor(B * T * heads * hs, rng), out(x.size());
        rope_forward(out.data(), x.data(), cos_t.data(), sin_t.data(), B, T, heads, hs);
        const std::vector<double> expect =
            rope_by_complex_numbers(x, rope_frequencies(hs, theta, scaling), B, T, heads, hs);
        // The same products of order-1 values, rounded differently: 1e-14 is a few ulps.
        for (size_t i = 0; i < x.size(); i++) CHECK_NEAR(out[i], expect[i], 1e-14);
        // In place gives the same values.
        std::vector<double> in_place = x;
        rope_forward(in_place.data(), in_place.data(), cos_t.data(), sin_t.data(), B, T, heads, hs);
        CHECK(in_place == out);

        const std::vector<double> w = random_tensor(x.size(), rng);
        auto f = [&] {
            rope_forward(out.data(), x.data(), cos_t.data(), sin_t.data(), B, T, heads, hs);
            return weighted_sum(out, w);
        };
        std::vector<double> dx0 = random_tensor(x.size(), rng), dx = dx0;
        rope_backward(dx.data(), w.data(), cos_t.data(), sin_t.data(), B, T, heads, hs);
        check_gradient("rope dinp", added(dx, dx0), numeric_gradient(x, f));
        // A rotation's gradient is its inverse: backward of forward's output gives x back.
        f();
        std::vector<double> back(x.size(), 0.0);
        rope_backward(back.data(), out.data(), cos_t.data(), sin_t.data(), B, T, heads, hs);
        for (size_t i = 0; i < x.size(); i++) CHECK_NEAR(back[i], x[i], 1e-14);
    }
}

TEST(rope_scores_depend_only_on_relative_position) {
    // q·k after RoPE at positions (t, t2) equals the same vectors' product at (t + d, t2 + d).
    std::mt19937 rng(33);
    const int T = 12, hs = 16;
    RopeScaling scaling;
    scaling.enabled = true;
    std::vector<double> cos_t(T * hs / 2), sin_t(T * hs / 2);
    rope_tables(cos_t.data(), sin_t.data(), T, hs, 500000.0, scaling);
    const std::vector<double> q = random_tensor(hs, rng), k = random_tensor(hs, rng);
    auto score = [&](int t, int t2) {
        std::vector<double> qs(T * hs, 0.0), ks(T * hs, 0.0);
        std::copy(q.begin(), q.end(), qs.begin() + t * hs);
        std::copy(k.begin(), k.end(), ks.begin() + t2 * hs);
        rope_forward(qs.data(), qs.data(), cos_t.data(), sin_t.data(), 1, T, 1, hs);
        rope_forward(ks.data(), ks.data(), cos_t.data(), sin_t.data(), 1, T, 1, hs);
        double dot = 0;
        for (int i = 0; i < hs; i++) dot += qs[t * hs + i] * ks[t2 * hs + i];
        return dot;
    };
    // Sums of 16 products of order 1 whose angles differ in rounding only.
    CHECK_NEAR(score(5, 2), score(9, 6), 1e-13);
    CHECK_NEAR(score(3, 3), score(11, 11), 1e-13);
    CHECK(std::fabs(score(5, 2) - score(5, 4)) > 1e-3);  // and it does depend on the distance
}

// ---- SwiGLU ------------------------------------------------------------------------------------

TEST(swiglu_forward_and_backward) {
    std::mt19937 rng(34);
    const size_t n = 64;
    std::vector<double> gate = random_tensor(n, rng, 4.0), up = random_tensor(n, rng), h(n);
    const std::vector<double> w = random_tensor(n, rng);
    swiglu_forward(h.data(), gate.data(), up.data(), n);
    for (size_t i = 0; i < n; i++)  // g / (1 + e^−g) · u
        CHECK_NEAR(h[i], gate[i] / (1 + std::exp(-gate[i])) * up[i], 1e-14);
    auto f = [&] {
        swiglu_forward(h.data(), gate.data(), up.data(), n);
        return weighted_sum(h, w);
    };
    std::vector<double> dg0 = random_tensor(n, rng), du0 = random_tensor(n, rng), dg = dg0,
                        du = du0;
    swiglu_backward(dg.data(), du.data(), w.data(), gate.data(), up.data(), n);
    check_gradient("dgate", added(dg, dg0), numeric_gradient(gate, f));
    check_gradient("dup", added(du, du0), numeric_gradient(up, f));
}

TEST(swiglu_mlp_forward_and_backward) {
    std::mt19937 rng(35);
    const int N = 5, C = 6, F = 9;
    std::vector<double> x = random_tensor(N * C, rng), wg = random_tensor(F * C, rng),
                        wu = random_tensor(F * C, rng), wd = random_tensor(C * F, rng);
    std::vector<double> out(N * C), gate(N * F), up(N * F), h(N * F);
    const std::vector<double> w = random_tensor(N * C, rng);
    auto f = [&] {
        swiglu_mlp_forward(out.data(), gate.data(), up.data(), h.data(), x.data(),
                           SwiGLUWeights<const double>{wg.data(), wu.data(), wd.data()}, N, C, F);
        return weighted_sum(out, w);
    };
    f();
    for (int r = 0; r < N; r++)  // out = (silu(x·Wgᵀ) ⊙ (x·Wuᵀ)) · Wdᵀ, written out
        for (int c = 0; c < C; c++) {
            double o = 0;
            for (int j = 0; j < F; j++) {
                double g = 0, u = 0;
                for (int i = 0; i < C; i++) {
                    g += x[r * C + i] * wg[j * C + i];
                    u += x[r * C + i] * wu[j * C + i];
                }
                o += g / (1 + std::exp(-g)) * u * wd[c * F + j];
            }
            CHECK_NEAR(out[r * C + c], o, 1e-12);  // sums of 54 order-1 products
        }
    std::vector<double> dx0 = random_tensor(N * C, rng), dwg0 = random_tensor(F * C, rng),
                        dwu0 = random_tensor(F * C, rng), dwd0 = random_tensor(C * F, rng);
    std::vector<double> dx = dx0, dwg = dwg0, dwu = dwu0, dwd = dwd0, scratch(3 * N * F, 7.0);
    swiglu_mlp_backward(dx.data(), SwiGLUWeights<double>{dwg.data(), dwu.data(), dwd.data()},
                        scratch.data(), w.data(), x.data(), gate.data(), up.data(), h.data(),
                        SwiGLUWeights<const double>{wg.data(), wu.data(), wd.data()}, N, C, F);
    check_gradient("dinp", added(dx, dx0), numeric_gradient(x, f));
    check_gradient("dw_gate", added(dwg, dwg0), numeric_gradient(wg, f));
    check_gradient("dw_up", added(dwu, dwu0), numeric_gradient(wu, f));
    check_gradient("dw_down", added(dwd, dwd0), numeric_gradient(wd, f));
}

// ---- grouped-query attention -------------------------------------------------------------------

// q, k, v and their gradients at one shape, random.
struct GQACase {
    int B, T, NH, KV, hs;
    std::vector<double> q, k, v;
    GQACase(int B_, int T_, int NH_, int KV_, int hs_, std::mt19937& rng)
        : B(B_), T(T_), NH(NH_), KV(KV_), hs(hs_) {
        q = random_tensor((size_t)B * T * NH * hs, rng, 2.0);
        k = random_tensor((size_t)B * T * KV * hs, rng, 2.0);
        v = random_tensor((size_t)B * T * KV * hs, rng);
    }
    std::vector<double> forward(std::vector<double>& att) const {
        std::vector<double> out(q.size());
        gqa_attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), B, T, NH, KV, hs);
        return out;
    }
    size_t att_size() const { return (size_t)B * NH * T * T; }
};

// GPT-2's packed qkv (B, T, 3·NH·hs) for cpu/attention.h: query head h beside a copy of key/value
// head kv_of(h), so that multi-head attention on it is what grouped-query attention should compute.
template <typename KvOf>
static std::vector<double> repeated_qkv(const GQACase& g, KvOf kv_of) {
    const int C = g.NH * g.hs;
    std::vector<double> qkv((size_t)g.B * g.T * 3 * C);
    for (int r = 0; r < g.B * g.T; r++)
        for (int h = 0; h < g.NH; h++)
            for (int i = 0; i < g.hs; i++) {
                const size_t kv_at = ((size_t)r * g.KV + kv_of(h)) * g.hs + i;
                qkv[(size_t)r * 3 * C + h * g.hs + i] = g.q[((size_t)r * g.NH + h) * g.hs + i];
                qkv[(size_t)r * 3 * C + C + h * g.hs + i] = g.k[kv_at];
                qkv[(size_t)r * 3 * C + 2 * C + h * g.hs + i] = g.v[kv_at];
            }
    return qkv;
}

// Grouped-query attention against cpu/attention.h on the repeated heads: the same output, the same
// dq, and dk, dv equal to the repeated heads' gradients summed over each group. Both compute the same
// GEMMs and softmax in double, so 1e-13 is round-off in sums of a few dozen order-1 terms.
static void check_gqa_against_multi_head(const GQACase& g) {
    const int C = g.NH * g.hs, N = g.B * g.T;
    std::vector<double> att(g.att_size()), mha_att(g.att_size()), mha_out(N * C);
    const std::vector<double> out = g.forward(att);
    // Query head h reads key/value head h / (NH/KV), written out here rather than taken from
    // kv_head_of, so that a wrong mapping in the op cannot agree with itself.
    auto kv_of = [&](int h) { return h / (g.NH / g.KV); };
    const std::vector<double> qkv = repeated_qkv(g, kv_of);
    attention_forward(mha_out.data(), mha_att.data(), qkv.data(), g.B, g.T, C, g.NH);
    CHECK(tst::rel_l2_error(out.data(), mha_out.data(), out.size()) <= 1e-13);

    std::mt19937 rng(36);
    const std::vector<double> dout = random_tensor(out.size(), rng);
    std::vector<double> dq(g.q.size(), 0.0), dk(g.k.size(), 0.0), dv(g.v.size(), 0.0),
        dqkv(qkv.size(), 0.0), dk_sum(g.k.size(), 0.0), dv_sum(g.v.size(), 0.0);
    gqa_attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), g.q.data(), g.k.data(),
                           g.v.data(), att.data(), g.B, g.T, g.NH, g.KV, g.hs);
    attention_backward(dqkv.data(), dout.data(), qkv.data(), mha_att.data(), g.B, g.T, C, g.NH);
    for (int r = 0; r < N; r++)
        for (int h = 0; h < g.NH; h++)
            for (int i = 0; i < g.hs; i++) {
                const size_t kv_at = ((size_t)r * g.KV + kv_of(h)) * g.hs + i;
                CHECK_NEAR(dq[((size_t)r * g.NH + h) * g.hs + i], dqkv[(size_t)r * 3 * C + h * g.hs + i],
                           1e-13);
                dk_sum[kv_at] += dqkv[(size_t)r * 3 * C + C + h * g.hs + i];
                dv_sum[kv_at] += dqkv[(size_t)r * 3 * C + 2 * C + h * g.hs + i];
            }
    for (size_t i = 0; i < dk.size(); i++) {
        CHECK_NEAR(dk[i], dk_sum[i], 1e-13);
        CHECK_NEAR(dv[i], dv_sum[i], 1e-13);
    }
}

TEST(gqa_with_as_many_kv_heads_as_query_heads_is_multi_head_attention) {
    std::mt19937 rng(37);
    check_gqa_against_multi_head(GQACase(2, 6, 2, 2, 4, rng));
    // And the same bits as cpu/attention.h: the same GEMMs on the same operands.
    GQACase g(2, 5, 3, 3, 4, rng);
    std::vector<double> att(g.att_size()), mha_att(g.att_size()), mha_out(g.q.size());
    const std::vector<double> out = g.forward(att);
    const std::vector<double> qkv = repeated_qkv(g, [](int h) { return h; });
    attention_forward(mha_out.data(), mha_att.data(), qkv.data(), g.B, g.T, g.NH * g.hs, g.NH);
    CHECK(out == mha_out && att == mha_att);
}

TEST(gqa_groups_consecutive_query_heads) {
    // Six query heads on two key/value heads: heads 0-2 read kv head 0 and heads 3-5 kv head 1 (as
    // Hugging Face's repeat_kv lays them out), not alternately. Multi-head attention on the heads
    // repeated the other way differs by order 1, so this comparison tells the two mappings apart.
    std::mt19937 rng(38);
    const GQACase g(2, 5, 6, 2, 4, rng);
    for (int h = 0; h < 6; h++) CHECK(kv_head_of(h, 6, 2) == (h < 3 ? 0 : 1));
    check_gqa_against_multi_head(g);
    std::vector<double> att(g.att_size()), wrong_att(g.att_size()), wrong(g.q.size());
    const std::vector<double> out = g.forward(att);
    const std::vector<double> qkv = repeated_qkv(g, [&](int h) { return h % g.KV; });
    attention_forward(wrong.data(), wrong_att.data(), qkv.data(), g.B, g.T, g.NH * g.hs, g.NH);
    CHECK(tst::rel_l2_error(out.data(), wrong.data(), out.size()) > 0.1);
    // Multi-query attention: every query head reads the one key/value head.
    check_gqa_against_multi_head(GQACase(1, 7, 3, 1, 6, rng));
}

static void check_gqa_gradients(GQACase g, std::mt19937& rng) {
    std::vector<double> att(g.att_size());
    const std::vector<double> w = random_tensor(g.q.size(), rng);
    auto f = [&] { return weighted_sum(g.forward(att), w); };
    f();
    std::vector<double> dq0 = random_tensor(g.q.size(), rng), dk0 = random_tensor(g.k.size(), rng),
                        dv0 = random_tensor(g.v.size(), rng);
    std::vector<double> dq = dq0, dk = dk0, dv = dv0;
    gqa_attention_backward(dq.data(), dk.data(), dv.data(), w.data(), g.q.data(), g.k.data(),
                           g.v.data(), att.data(), g.B, g.T, g.NH, g.KV, g.hs);
    check_gradient("dq", added(dq, dq0), numeric_gradient(g.q, f));
    check_gradient("dk", added(dk, dk0), numeric_gradient(g.k, f));
    check_gradient("dv", added(dv, dv0), numeric_gradient(g.v, f));
}

TEST(gqa_backward_matches_finite_differences) {
    std::mt19937 rng(39);
    check_gqa_gradients(GQACase(2, 6, 4, 2, 4, rng), rng);  // two query heads per kv head
    check_gqa_gradients(GQACase(1, 5, 3, 1, 4, rng), rng);  // one kv head for three, odd T
}

// ---- float instantiation against double --------------------------------------------------------

TEST(float_llama_ops_match_double_ops) {
    // RMSNorm, RoPE, grouped-query attention and the SwiGLU MLP in both precisions on the same
    // inputs; float round-off over sums of at most 32 terms keeps the outputs within 1e-5 relative
    // (the bound test_cpu_ops.cpp uses for GPT-2's ops).
    std::mt19937 rng(40);
    const int B = 2, T = 7, NH = 4, KV = 2, hs = 4, C = NH * hs, F = 24, N = B * T;
    const std::vector<double> x = random_tensor(N * C, rng), nw = random_tensor(C, rng),
                              k = random_tensor(N * KV * hs, rng), v = random_tensor(N * KV * hs, rng),
                              wg = random_tensor(F * C, rng, 0.3), wu = random_tensor(F * C, rng, 0.3),
                              wd = random_tensor(C * F, rng, 0.3);
    auto run = [&](auto zero) {
        using Real = decltype(zero);
        auto cast = [](const std::vector<double>& d) { return std::vector<Real>(d.begin(), d.end()); };
        std::vector<Real> xr = cast(x), nwr = cast(nw), kr = cast(k), vr = cast(v), wgr = cast(wg),
                          wur = cast(wu), wdr = cast(wd);
        std::vector<Real> normed(N * C), rstd(N), cos_t(T * hs / 2), sin_t(T * hs / 2),
            att(B * NH * T * T), y(N * C), gate(N * F), up(N * F), h(N * F), out(N * C);
        RopeScaling scaling;
        scaling.enabled = true;
        rope_tables(cos_t.data(), sin_t.data(), T, hs, 500000.0, scaling);
        rmsnorm_forward(normed.data(), rstd.data(), xr.data(), nwr.data(), N, C, Real(1e-5));
        rope_forward(normed.data(), normed.data(), cos_t.data(), sin_t.data(), B, T, NH, hs);
        gqa_attention_forward(y.data(), att.data(), normed.data(), kr.data(), vr.data(), B, T, NH,
                              KV, hs);
        swiglu_mlp_forward(out.data(), gate.data(), up.data(), h.data(), y.data(),
                           SwiGLUWeights<const Real>{wgr.data(), wur.data(), wdr.data()}, N, C, F);
        return std::vector<double>(out.begin(), out.end());
    };
    const std::vector<double> f = run(0.0f), d = run(0.0);
    const double err = tst::rel_l2_error(f.data(), d.data(), f.size());
    CHECK_MSG(err <= 1e-5, "rel L2 error float vs double %.3g", err);
}

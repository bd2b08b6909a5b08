// The fp32 reference ops (cpu/*.h), each in double precision:
//   forward against an independent straightforward formula written here,
//   backward against central finite differences of Σ out ⊙ w for random w (gradient buffers start
//   random, so the check also proves the op adds into them),
// and the float instantiation against the double one on the same inputs.
#include <omp.h>

#include "cpu/adamw.h"
#include "cpu/attention.h"
#include "cpu/crossentropy.h"
#include "cpu/encoder.h"
#include "cpu/fast_math.h"
#include "cpu/gelu.h"
#include "cpu/gemm.h"
#include "cpu/layernorm.h"
#include "cpu/matmul.h"
#include "cpu/residual.h"
#include "test/cpu/grad_check.h"

// ---- gemm: all four transpose combinations, strided operands, alpha and beta --------------------

template <typename Real, typename Gemm>
static void check_gemm(Gemm gemm_fn, double tol, const char* what) {
    std::mt19937 rng(1);
    const int M = 37, N = 29, K = 43, pad = 3;  // odd sizes; leading dimensions padded by 3
    for (int ta = 0; ta < 2; ta++) {
        for (int tb = 0; tb < 2; tb++) {
            const int a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K,
                      b_cols = tb ? K : N;
            const int lda = a_cols + pad, ldb = b_cols + pad, ldc = N + pad;
            std::vector<double> A = random_tensor((size_t)a_rows * lda, rng);
            std::vector<double> B = random_tensor((size_t)b_rows * ldb, rng);
            std::vector<double> C0 = random_tensor((size_t)M * ldc, rng);
            const double alpha = 0.75, beta = -0.5;
            std::vector<double> expect = C0;
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    double s = 0;
                    for (int k = 0; k < K; k++)
                        s += (ta ? A[k * lda + i] : A[i * lda + k]) *
                             (tb ? B[j * ldb + k] : B[k * ldb + j]);
                    expect[i * ldc + j] = alpha * s + beta * C0[i * ldc + j];
                }
            std::vector<Real> a(A.begin(), A.end()), b(B.begin(), B.end()), c(C0.begin(), C0.end());
            gemm_fn(ta, tb, M, N, K, Real(alpha), a.data(), lda, b.data(), ldb, Real(beta),
                    c.data(), ldc);
            std::vector<double> got(c.begin(), c.end());
            const double err = tst::rel_l2_error(got.data(), expect.data(), got.size());
            CHECK_MSG(err <= tol, "%s trans_a=%d trans_b=%d: rel L2 error %.3g", what, ta, tb, err);
        }
    }
}

TEST(gemm_matches_naive_product) {
    // Round-off only: float sums of 43 terms stay near 1e-7 relative.
    check_gemm<float>([](auto... a) { gemm(a...); }, 1e-6, "gemm<float>");
    check_gemm<double>([](auto... a) { gemm(a...); }, 1e-13, "gemm<double>");
}

TEST(gemm_loop_fallback_matches_naive_product) {
    check_gemm<float>([](auto... a) { gemm_loops(a...); }, 1e-6, "gemm_loops<float>");
    check_gemm<double>([](auto... a) { gemm_loops(a...); }, 1e-13, "gemm_loops<double>");
}

// ---- encoder -----------------------------------------------------------------------------------

TEST(encoder_forward_and_backward) {
    std::mt19937 rng(2);
    const int B = 2, T = 5, C = 6, V = 7;
    const std::vector<int> tokens = {3, 1, 3, 6, 0,
                                     3, 2, 1, 1, 5};  // repeats within and across rows
    std::vector<double> wte = random_tensor(V * C, rng), wpe = random_tensor(T * C, rng);
    std::vector<double> w = random_tensor(B * T * C, rng), out(B * T * C);
    encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                CHECK(out[(b * T + t) * C + c] == wte[tokens[b * T + t] * C + c] + wpe[t * C + c]);

    auto f = [&] {
        encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
        return weighted_sum(out, w);
    };
    std::vector<double> dwte0 = random_tensor(V * C, rng), dwpe0 = random_tensor(T * C, rng);
    std::vector<double> dwte = dwte0, dwpe = dwpe0;
    encoder_backward(dwte.data(), dwpe.data(), w.data(), tokens.data(), B, T, C);
    check_gradient("dwte", added(dwte, dwte0), numeric_gradient(wte, f));
    check_gradient("dwpe", added(dwpe, dwpe0), numeric_gradient(wpe, f));
}

// ---- layernorm ---------------------------------------------------------------------------------

TEST(layernorm_forward_and_backward) {
    std::mt19937 rng(3);
    const int N = 6, C = 10;
    std::vector<double> x = random_tensor(N * C, rng), weight = random_tensor(C, rng),
                        bias = random_tensor(C, rng);
    std::vector<double> out(N * C), mean(N), rstd(N), w = random_tensor(N * C, rng);
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), weight.data(), bias.data(), N,
                      C);
    for (int n = 0; n < N; n++) {  // two-pass textbook formula
        double m = 0, var = 0;
        for (int c = 0; c < C; c++) m += x[n * C + c] / C;
        for (int c = 0; c < C; c++) var += (x[n * C + c] - m) * (x[n * C + c] - m) / C;
        for (int c = 0; c < C; c++)
            CHECK_NEAR(out[n * C + c],
                       (x[n * C + c] - m) / std::sqrt(var + 1e-5) * weight[c] + bias[c], 1e-12);
    }
    auto f = [&] {
        layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), weight.data(),
                          bias.data(), N, C);
        return weighted_sum(out, w);
    };
    f();
    std::vector<double> dx0 = random_tensor(N * C, rng), dw0 = random_tensor(C, rng),
                        db0 = random_tensor(C, rng);
    std::vector<double> dx = dx0, dw = dw0, db = db0;
    layernorm_backward(dx.data(), dw.data(), db.data(), w.data(), x.data(), weight.data(),
                       mean.data(), rstd.data(), N, C);
    check_gradient("dinp", added(dx, dx0), numeric_gradient(x, f));
    check_gradient("dweight", added(dw, dw0), numeric_gradient(weight, f));
    check_gradient("dbias", added(db, db0), numeric_gradient(bias, f));
}

// ---- matmul ------------------------------------------------------------------------------------

TEST(matmul_forward_and_backward) {
    std::mt19937 rng(4);
    const int N = 5, IC = 7, OC = 9;
    std::vector<double> x = random_tensor(N * IC, rng), weight = random_tensor(OC * IC, rng);
    std::vector<double> bias = random_tensor(OC, rng), out(N * OC), w = random_tensor(N * OC, rng);
    matmul_forward(out.data(), x.data(), weight.data(), bias.data(), N, IC, OC);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = bias[o];
            for (int i = 0; i < IC; i++) s += x[n * IC + i] * weight[o * IC + i];
            CHECK_NEAR(out[n * OC + o], s, 1e-12);
        }
    auto f = [&] {
        matmul_forward(out.data(), x.data(), weight.data(), bias.data(), N, IC, OC);
        return weighted_sum(out, w);
    };
    std::vector<double> dx0 = random_tensor(N * IC, rng), dw0 = random_tensor(OC * IC, rng),
                        db0 = random_tensor(OC, rng);
    std::vector<double> dx = dx0, dw = dw0, db = db0;
    matmul_backward(dx.data(), dw.data(), db.data(), w.data(), x.data(), weight.data(), N, IC, OC);
    check_gradient("dinp", added(dx, dx0), numeric_gradient(x, f));
    check_gradient("dweight", added(dw, dw0), numeric_gradient(weight, f));
    check_gradient("dbias", added(db, db0), numeric_gradient(bias, f));
}

// ---- attention ---------------------------------------------------------------------------------

TEST(attention_forward_and_backward) {
    std::mt19937 rng(5);
    const int B = 2, T = 6, C = 8, NH = 2, hs = C / NH;
    std::vector<double> qkv = random_tensor(B * T * 3 * C, rng, 2.0), out(B * T * C),
                        att(B * NH * T * T);
    std::vector<double> w = random_tensor(B * T * C, rng);
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    // Reference: scores for every (t, t2), causal mask with −∞, softmax, weighted sum of values.
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                std::vector<double> score(T);
                double max_score = -INFINITY, sum = 0;
                for (int t2 = 0; t2 < T; t2++) {
                    double dot = 0;
                    for (int i = 0; i < hs; i++)
                        dot += qkv[(b * T + t) * 3 * C + h * hs + i] *
                               qkv[(b * T + t2) * 3 * C + C + h * hs + i];
                    score[t2] = t2 <= t ? dot / std::sqrt((double)hs) : -INFINITY;
                    max_score = std::fmax(max_score, score[t2]);
                }
                for (double& s : score) sum += s = std::exp(s - max_score);
                for (int i = 0; i < hs; i++) {
                    double o = 0;
                    for (int t2 = 0; t2 < T; t2++)
                        o += score[t2] / sum * qkv[(b * T + t2) * 3 * C + 2 * C + h * hs + i];
                    CHECK_NEAR(out[(b * T + t) * C + h * hs + i], o, 1e-12);
                }
            }
    auto f = [&] {
        attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
        return weighted_sum(out, w);
    };
    f();
    std::vector<double> dqkv0 = random_tensor(B * T * 3 * C, rng), dqkv = dqkv0;
    attention_backward(dqkv.data(), w.data(), qkv.data(), att.data(), B, T, C, NH);
    check_gradient("dqkv", added(dqkv, dqkv0), numeric_gradient(qkv, f));
}

// ---- gelu, residual ----------------------------------------------------------------------------

TEST(gelu_forward_and_backward) {
    std::mt19937 rng(6);
    const size_t n = 64;
    std::vector<double> x = random_tensor(n, rng, 4.0), out(n), w = random_tensor(n, rng);
    gelu_forward(out.data(), x.data(), n);
    // The tanh form approximates the exact GELU x·Φ(x) to within about 5e-4 on this range.
    for (size_t i = 0; i < n; i++)
        CHECK_NEAR(out[i], x[i] * 0.5 * std::erfc(-x[i] / std::sqrt(2.0)), 1e-3);
    auto f = [&] {
        gelu_forward(out.data(), x.data(), n);
        return weighted_sum(out, w);
    };
    std::vector<double> dx0 = random_tensor(n, rng), dx = dx0;
    gelu_backward(dx.data(), x.data(), w.data(), n);
    check_gradient("dinp", added(dx, dx0), numeric_gradient(x, f));
}

TEST(residual_forward_and_backward) {
    std::mt19937 rng(7);
    const size_t n = 40;
    std::vector<double> a = random_tensor(n, rng), b = random_tensor(n, rng), out(n),
                        w = random_tensor(n, rng);
    residual_forward(out.data(), a.data(), b.data(), n);
    for (size_t i = 0; i < n; i++) CHECK(out[i] == a[i] + b[i]);
    auto f = [&] {
        residual_forward(out.data(), a.data(), b.data(), n);
        return weighted_sum(out, w);
    };
    std::vector<double> da0 = random_tensor(n, rng), db0 = random_tensor(n, rng), da = da0,
                        db = db0;
    residual_backward(da.data(), db.data(), w.data(), n);
    check_gradient("da", added(da, da0), numeric_gradient(a, f));
    check_gradient("db", added(db, db0), numeric_gradient(b, f));
}

// ---- cross-entropy over a padded vocabulary ----------------------------------------------------

TEST(crossentropy_forward_and_backward_ignore_padding) {
    std::mt19937 rng(8);
    const int N = 4, V = 11, Vp = 16;
    const std::vector<int> targets = {0, 10, 4, 4};
    std::vector<double> logits = random_tensor(N * Vp, rng, 3.0), losses(N), lse(N);
    for (int n = 0; n < N; n++)
        for (int v = V; v < Vp; v++)
            logits[n * Vp + v] = 50.0 + v;  // would dominate any softmax they entered
    crossentropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), N, V, Vp);
    for (int n = 0; n < N; n++) {  // −log softmax(target) over the real vocabulary only
        double z = 0;
        for (int v = 0; v < V; v++) z += std::exp(logits[n * Vp + v]);
        CHECK_NEAR(losses[n], -std::log(std::exp(logits[n * Vp + targets[n]]) / z), 1e-12);
    }
    const double dloss = 0.3;
    auto f = [&] {
        crossentropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), N, V, Vp);
        double s = 0;
        for (double l : losses) s += dloss * l;
        return s;
    };
    f();
    std::vector<double> d0 = random_tensor(N * Vp, rng), d = d0;
    crossentropy_backward(d.data(), logits.data(), lse.data(), targets.data(), dloss, N, V, Vp);
    std::vector<double> numeric = numeric_gradient(logits, f);
    check_gradient("dlogits", added(d, d0), numeric);
    for (int n = 0; n < N; n++)
        for (int v = V; v < Vp; v++) {
            CHECK(d[n * Vp + v] == d0[n * Vp + v]);  // padding gradient untouched ...
            CHECK(numeric[n * Vp + v] == 0);         // ... and the loss really ignores it
        }
}

// ---- adamw elementwise and the gradient norm ---------------------------------------------------

TEST(adamw_update_matches_pytorch_form) {
    // Reference written as PyTorch's AdamW orders it: decay p first, then the Adam step.
    std::mt19937 rng(9);
    const size_t n = 50;
    std::vector<double> p = random_tensor(n, rng), m(n, 0), v(n, 0), ref_p = p, ref_m(n, 0),
                        ref_v(n, 0);
    const double lr = 0.01, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, scale = 0.5;
    for (int step = 1; step <= 4; step++) {
        std::vector<double> g = random_tensor(n, rng);
        adamw_update(p.data(), m.data(), v.data(), g.data(), n, lr, b1, b2, eps, wd, scale, step);
        for (size_t i = 0; i < n; i++) {
            const double gi = g[i] * scale;
            ref_p[i] *= 1 - lr * wd;
            ref_m[i] = b1 * ref_m[i] + (1 - b1) * gi;
            ref_v[i] = b2 * ref_v[i] + (1 - b2) * gi * gi;
            ref_p[i] -= lr * (ref_m[i] / (1 - std::pow(b1, step))) /
                        (std::sqrt(ref_v[i] / (1 - std::pow(b2, step))) + eps);
        }
        for (size_t i = 0; i < n; i++) {
            CHECK_NEAR(p[i], ref_p[i], 1e-14);
            CHECK_NEAR(m[i], ref_m[i], 1e-15);
            CHECK_NEAR(v[i], ref_v[i], 1e-15);
        }
    }
}

TEST(sum_of_squares_is_exact_and_thread_count_independent) {
    std::mt19937 rng(10);
    const size_t n = 300007;  // several chunks plus a ragged end
    std::vector<float> x = to_float(random_tensor(n, rng));
    double naive = 0;
    for (float v : x) naive += (double)v * v;
    const double two = global_sum_of_squares(x.data(), n);
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const double one = global_sum_of_squares(x.data(), n);
    omp_set_num_threads(threads);
    CHECK_NEAR(two, naive, 1e-9 * naive);
    CHECK(one == two);
}

// ---- float instantiation against double --------------------------------------------------------

TEST(float_ops_match_double_ops) {
    // One small layer's worth of forward ops in both precisions; float round-off over sums of
    // ≤ 64 terms keeps every output within 1e-5 relative (the kernels' fp32 bound, test/kernels/kernel_test.h).
    std::mt19937 rng(11);
    const int B = 2, T = 8, C = 16, NH = 4, N = B * T;
    std::vector<double> x = random_tensor(N * C, rng), lw = random_tensor(C, rng),
                        lb = random_tensor(C, rng);
    std::vector<double> W = random_tensor(3 * C * C, rng, 0.3), bias = random_tensor(3 * C, rng);
    auto run = [&](auto zero) {
        using Real = decltype(zero);
        std::vector<Real> xr(x.begin(), x.end()), lwr(lw.begin(), lw.end()),
            lbr(lb.begin(), lb.end());
        std::vector<Real> Wr(W.begin(), W.end()), br(bias.begin(), bias.end());
        std::vector<Real> ln(N * C), mean(N), rstd(N), qkv(N * 3 * C), att(B * NH * T * T),
            y(N * C), g(N * C);
        layernorm_forward(ln.data(), mean.data(), rstd.data(), xr.data(), lwr.data(), lbr.data(), N,
                          C);
        matmul_forward(qkv.data(), ln.data(), Wr.data(), br.data(), N, C, 3 * C);
        attention_forward(y.data(), att.data(), qkv.data(), B, T, C, NH);
        gelu_forward(g.data(), y.data(), (size_t)N * C);
        return std::vector<double>(g.begin(), g.end());
    };
    std::vector<double> f = run(0.0f), d = run(0.0);
    const double err = tst::rel_l2_error(f.data(), d.data(), f.size());
    CHECK_MSG(err <= 1e-5, "rel L2 error float vs double %.3g", err);
}

// ---- the float exp and tanh the ops vectorise with ---------------------------------------------

TEST(float_exp_and_tanh_match_the_standard_library) {
    double worst_exp = 0, worst_tanh = 0;
    for (float x = -87.0f; x <= 88.0f; x += 0.001953125f) {  // 2^-9 steps: 89,600 points
        const double want = std::exp((double)x);
        worst_exp = std::fmax(worst_exp, std::fabs(exp_of(x) - want) / want);
    }
    for (float u = -12.0f; u <= 12.0f; u += 0.0009765625f)
        worst_tanh = std::fmax(worst_tanh, std::fabs(tanh_of(u) - std::tanh((double)u)));
    CHECK_MSG(worst_exp <= 3e-7, "exp_of: worst relative error %.3g (float ulp is 6e-8)",
              worst_exp);
    CHECK_MSG(worst_tanh <= 3e-7, "tanh_of: worst absolute error %.3g", worst_tanh);
    CHECK(exp_of(-1000.0f) < 1e-37f && exp_of(1000.0f) < INFINITY);  // clamped, never inf
}

TEST(attention_heads_on_parallel_threads_match_one_thread) {
    // Big enough to run the heads on OpenMP threads, each calling the BLAS concurrently; the
    // result must be the same bits as on one thread (and so independent of the thread count).
    std::mt19937 rng(12);
    const int B = 4, T = 64, C = 128, NH = 4;
    static_assert((size_t)B * T * T * C >= PARALLEL_MIN_WORK, "must take the parallel path");
    const std::vector<float> qkv = to_float(random_tensor(B * T * 3 * C, rng)),
                             dout = to_float(random_tensor(B * T * C, rng));
    auto run = [&](int threads) {
        const int saved = omp_get_max_threads();
        omp_set_num_threads(threads);
        std::vector<float> out(B * T * C), att(B * NH * T * T), dqkv(B * T * 3 * C, 0.0f);
        attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
        attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
        omp_set_num_threads(saved);
        out.insert(out.end(), dqkv.begin(), dqkv.end());
        return out;
    };
    const std::vector<float> one = run(1), two = run(2);
    CHECK(one == two);
}

// cpu/muon.h and the models' Muon step (cpu/muon_step.h) against a double-precision Muon written in
// the tests from its definition (test/cpu/muon_reference.h), with plain loops for every product:
//   - Newton–Schulz and the whole update of one matrix (momentum, Nesterov or not, the orthogonalized
//     step, weight decay, the shape's scale, the clipping factor) over several steps, for square, tall
//     and wide matrices, in fp32 and in double;
//   - a whole GPT-2 and a whole Llama 3 model: the matrices Muon takes (listed here from each family's
//     layout, GPT-2's qkv weight split into its three C×C blocks) get the reference's update, and every
//     other tensor gets exactly, bit for bit, what AdamW's own step gives it (the same weights, m and v).
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "base/muon_layout.h"
#include "cpu/gpt_model.h"
#include "cpu/llama_model.h"
#include "cpu/muon.h"
#include "test/cpu/muon_reference.h"
#include "test/test.h"

namespace {

double normal(std::mt19937& rng) { return std::normal_distribution<double>(0.0, 1.0)(rng); }

using namespace muon_reference;

struct Shape {
    int rows, cols;
    const char* name;
};
const Shape kShapes[] = {{24, 24, "square"}, {48, 16, "tall"}, {12, 40, "wide"}, {1, 9, "one row"}};

TEST(newton_schulz_matches_double_reference) {
    std::mt19937 rng(3);
    for (const Shape& s : kShapes)
        for (int steps : {1, 5, 9}) {
            Matrix u((size_t)s.rows * s.cols);
            for (double& x : u) x = normal(rng);
            const Matrix want = reference_newton_schulz(u, s.rows, s.cols, steps);
            MuonScratch<double> scratch_d;
            Matrix got_d(u.size());
            newton_schulz(u.data(), got_d.data(), s.rows, s.cols, steps, scratch_d);
            const double error_d = tst::rel_l2_error(got_d.data(), want.data(), u.size());
            CHECK_MSG(error_d < 1e-12, "%s %dx%d, %d steps, double: %g off", s.name, s.rows, s.cols, steps, error_d);
            const std::vector<float> uf(u.begin(), u.end());
            std::vector<float> got_f(u.size());
            MuonScratch<float> scratch_f;
            newton_schulz(uf.data(), got_f.data(), s.rows, s.cols, steps, scratch_f);
            const std::vector<double> got(got_f.begin(), got_f.end());
            const double error_f = tst::rel_l2_error(got.data(), want.data(), u.size());
            CHECK_MSG(error_f < 1e-5, "%s %dx%d, %d steps, float: %g off", s.name, s.rows, s.cols, steps, error_f);
        }
}

// What makes it Muon: five iterations leave every singular value of the result near 1, so O Oᵀ (of
// the wide orientation) is near the identity, whatever the scale of u.
TEST(newton_schulz_flattens_the_singular_values) {
    std::mt19937 rng(4);
    for (const Shape& s : kShapes) {
        if (s.rows == 1) continue;
        Matrix u((size_t)s.rows * s.cols);
        for (double& x : u) x = 1e-3 * normal(rng);
        Matrix o(u.size());
        MuonScratch<double> scratch;
        newton_schulz(u.data(), o.data(), s.rows, s.cols, 5, scratch);
        const bool tall = s.rows > s.cols;
        const int m = tall ? s.cols : s.rows, n = tall ? s.rows : s.cols;
        const Matrix x = tall ? transposed(o, s.rows, s.cols) : o;
        const Matrix gram = product(x, x, m, n, m, true);
        for (int i = 0; i < m; i++)  // the diagonal: squared row norms, between 0.5² and 1.2²
            CHECK_MSG(gram[(size_t)i * m + i] > 0.25 && gram[(size_t)i * m + i] < 1.44, "%s: row %d has %g",
                      s.name, i, gram[(size_t)i * m + i]);
    }
}

// Four steps of muon_update, in float and in double, against the reference.
void check_update(bool nesterov) {
    std::mt19937 rng(7);
    Constants k;
    k.nesterov = nesterov;
    for (const Shape& s : kShapes) {
        const size_t size = (size_t)s.rows * s.cols;
        Matrix w(size), buffer(size, 0.0), grad(size);
        for (double& x : w) x = (float)(0.1 * normal(rng));
        std::vector<float> wf(w.begin(), w.end()), bf(size, 0.0f), gf(size);
        Matrix wd = w, bd = buffer;
        MuonScratch<float> scratch_f;
        MuonScratch<double> scratch_d;
        for (int step = 1; step <= 4; step++) {
            for (size_t i = 0; i < size; i++) gf[i] = (float)(0.01 * normal(rng)), grad[i] = gf[i];
            reference_muon(w.data(), buffer.data(), grad.data(), s.rows, s.cols, k);
            muon_update<float>(wf.data(), bf.data(), gf.data(), s.rows, s.cols, (float)k.lr, (float)k.momentum,
                               nesterov, k.ns_steps, (float)k.decay, (float)k.grad_scale, scratch_f);
            muon_update<double>(wd.data(), bd.data(), grad.data(), s.rows, s.cols, (float)k.lr, (float)k.momentum,
                                nesterov, k.ns_steps, (float)k.decay, (float)k.grad_scale, scratch_d);
            const std::vector<double> wf_d(wf.begin(), wf.end()), bf_d(bf.begin(), bf.end());
            const double weights_f = tst::rel_l2_error(wf_d.data(), w.data(), size);
            const double buffer_f = tst::rel_l2_error(bf_d.data(), buffer.data(), size);
            const double weights_d = tst::rel_l2_error(wd.data(), w.data(), size);
            CHECK_MSG(weights_f < 1e-6 && buffer_f < 1e-6, "%s, nesterov %d, step %d, float: weights %g, buffer %g off",
                      s.name, nesterov, step, weights_f, buffer_f);
            CHECK_MSG(weights_d < 1e-13, "%s, nesterov %d, step %d, double: weights %g off", s.name, nesterov, step,
                      weights_d);
        }
    }
}

TEST(update_matches_double_reference_nesterov) { check_update(true); }
TEST(update_matches_double_reference_plain_momentum) { check_update(false); }

// The step moves a matrix by lr · √max(1, out/in) · O with O's singular values near 1: its size does
// not follow the gradient's scale (the first step's u is (1 − μ²) g or (1 − μ) g, all the same to NS).
TEST(step_size_ignores_the_gradient_scale) {
    for (double scale : {1e-4, 1.0, 1e3}) {
        std::mt19937 rng(9);
        const int rows = 32, cols = 8;
        std::vector<double> w((size_t)rows * cols, 0.0), buffer(w.size(), 0.0), grad(w.size());
        for (double& g : grad) g = scale * normal(rng);
        MuonScratch<double> scratch;
        muon_update<double>(w.data(), buffer.data(), grad.data(), rows, cols, 0.01, 0.95, true, 5, 0.0, 1.0, scratch);
        double moved = 0;
        for (double x : w) moved += x * x;
        // ‖O‖_F ≈ √min(out, in) = √8, times lr · √(32/8) = 0.02
        CHECK_MSG(std::sqrt(moved) > 0.02 * std::sqrt(8.0) * 0.6 && std::sqrt(moved) < 0.02 * std::sqrt(8.0) * 1.2,
                  "gradient scale %g: the step's norm is %g", scale, std::sqrt(moved));
    }
}

// The matrices Muon should take, written here from each family's layout.
std::vector<MuonMatrix> expected_matrices(const GPTConfig& c) {
    const ParamLayout layout = param_layout(c);
    const size_t C = c.channels;
    std::vector<MuonMatrix> matrices;
    for (int l = 0; l < c.num_layers; l++)
        for (int part = 0; part < 3; part++)  // q, k, v
            matrices.push_back({layout.offset[QKVW] + (size_t)l * 3 * C * C + part * C * C, (int)C, (int)C});
    for (int l = 0; l < c.num_layers; l++) matrices.push_back({layout.offset[ATTPROJW] + l * C * C, (int)C, (int)C});
    for (int l = 0; l < c.num_layers; l++) matrices.push_back({layout.offset[FCW] + l * 4 * C * C, 4 * (int)C, (int)C});
    for (int l = 0; l < c.num_layers; l++)
        matrices.push_back({layout.offset[FCPROJW] + l * 4 * C * C, (int)C, 4 * (int)C});
    return matrices;
}
std::vector<MuonMatrix> expected_matrices(const LlamaConfig& c) {
    std::vector<MuonMatrix> matrices;
    for (const LlamaTensor& t : llama_tensors(c))
        if (t.kind == Q_PROJ || t.kind == K_PROJ || t.kind == V_PROJ || t.kind == O_PROJ || t.kind == GATE_PROJ ||
            t.kind == UP_PROJ || t.kind == DOWN_PROJ)
            matrices.push_back({t.offset, t.rows, t.cols});
    return matrices;
}

// A model's weights, moments and gradients set to random values, then one Muon step and, on a copy,
// one AdamW step (step 3: the moments are not fresh). Muon's matrices must move as the reference
// moves them from the values before; every other element must hold exactly what AdamW left there.
template <typename Model, typename Config>
void check_model_step(const Config& config, bool nesterov) {
    std::mt19937 rng(13);
    Model before(config, 1, 4);
    const size_t n = before.params.size();
    for (size_t i = 0; i < n; i++) {
        before.params[i] = (float)(0.05 * normal(rng)), before.grads[i] = (float)(0.01 * normal(rng));
        before.adam_m[i] = (float)(0.001 * normal(rng)), before.adam_v[i] = (float)(1e-5 * std::fabs(normal(rng)));
    }
    Model muon = before, adamw = before;
    const MuonLayout layout = muon_layout(config);
    for (const AdamWTensor& t : layout.adamw)  // Muon's v packed: each AdamW tensor's at its v_offset
        for (size_t i = 0; i < t.size; i++) muon.adam_v[t.v_offset + i] = before.adam_v[t.offset + i];
    Constants k;
    k.nesterov = nesterov;
    OptimizerSettings s{0.002f};
    s.kind = OptimizerKind::MUON;
    s.weight_decay = (float)k.decay, s.grad_scale = (float)k.grad_scale;
    s.muon_learning_rate = (float)k.lr, s.muon_momentum = (float)k.momentum, s.muon_nesterov = nesterov;
    s.ns_steps = k.ns_steps;
    const int step = 3;
    muon.muon_step(s, step);
    adamw.adamw_step(s.learning_rate, s.beta1, s.beta2, s.eps, s.weight_decay, s.grad_scale, step);

    std::vector<int> in_muon(n, 0);
    const std::vector<MuonMatrix> expected = expected_matrices(config);
    CHECK_MSG(layout.matrices.size() == expected.size(), "%zu Muon matrices, %zu expected", layout.matrices.size(),
              expected.size());
    for (size_t j = 0; j < expected.size(); j++) {
        const MuonMatrix& w = expected[j];
        CHECK_MSG(layout.matrices[j].offset == w.offset && layout.matrices[j].rows == w.rows &&
                      layout.matrices[j].cols == w.cols,
                  "matrix %zu: at %zu (%d, %d), expected at %zu (%d, %d)", j, layout.matrices[j].offset,
                  layout.matrices[j].rows, layout.matrices[j].cols, w.offset, w.rows, w.cols);
        auto slice = [&](const std::vector<float>& v) {
            return std::vector<double>(v.begin() + w.offset, v.begin() + w.offset + w.size());
        };
        std::vector<double> p = slice(before.params), b = slice(before.adam_m);
        const std::vector<double> g = slice(before.grads);
        reference_muon(p.data(), b.data(), g.data(), w.rows, w.cols, k);
        const std::vector<double> got_p = slice(muon.params), got_b = slice(muon.adam_m);
        const double error = tst::rel_l2_error(got_p.data(), p.data(), w.size());
        const double buffer_error = tst::rel_l2_error(got_b.data(), b.data(), w.size());
        CHECK_MSG(error < 1e-6 && buffer_error < 1e-6, "matrix %zu (%d, %d): weights %g, momentum %g off", j, w.rows,
                  w.cols, error, buffer_error);
        for (size_t i = 0; i < w.size(); i++) in_muon[w.offset + i]++;
    }
    size_t adamw_elements = 0;
    for (size_t i = 0; i < n; i++) {
        CHECK_MSG(in_muon[i] <= 1, "element %zu is in two Muon matrices", i);
        if (in_muon[i]) continue;
        CHECK_MSG(muon.params[i] == adamw.params[i] && muon.adam_m[i] == adamw.adam_m[i],
                  "element %zu: not AdamW's update", i);
        adamw_elements++;
    }
    CHECK(adamw_elements == layout.adamw_elements && adamw_elements + layout.muon_elements == n);
    for (const AdamWTensor& t : layout.adamw)
        for (size_t i = 0; i < t.size; i++)
            CHECK_MSG(muon.adam_v[t.v_offset + i] == adamw.adam_v[t.offset + i], "v of element %zu", t.offset + i);
}

GPTConfig tiny_gpt() {
    GPTConfig c;
    c.max_seq_len = 8, c.vocab_size = 60, c.padded_vocab_size = 64, c.num_layers = 2, c.num_heads = 2, c.channels = 16;
    return c;
}
LlamaConfig tiny_llama() {
    LlamaConfig c;
    c.num_layers = 2, c.channels = 16, c.num_heads = 4, c.num_kv_heads = 2, c.ffn_channels = 24;
    c.vocab_size = 11, c.max_seq_len = 8;
    return c;
}

}  // namespace

TEST(gpt2_step_muon_on_block_matrices_adamw_elsewhere) { check_model_step<GPTModel<float>>(tiny_gpt(), true); }
TEST(gpt2_step_without_nesterov) { check_model_step<GPTModel<float>>(tiny_gpt(), false); }
TEST(llama3_step_muon_on_block_matrices_adamw_elsewhere) { check_model_step<LlamaModel<float>>(tiny_llama(), true); }
TEST(llama3_step_without_nesterov) { check_model_step<LlamaModel<float>>(tiny_llama(), false); }

// The whole CPU model (cpu/gpt_model.h, cpu/gpt_cpu.h) at a tiny config:
//   every gradient tensor of GPTModel<double> against central finite differences of its loss,
//   the float model against the double model (loss, logits, gradients),
//   padded vocabulary rows that never contribute, gradient accumulation, AdamW against a
//   hand-written double reference with decay on the weight matrices only, and a single batch that
//   a few hundred AdamW steps overfit (loss < 0.1) through the gpt_cpu_* API.
#include <algorithm>
#include <cstring>

#include "cpu/gpt_cpu.h"
#include "cpu/gpt_model.h"
#include "test/cpu/grad_check.h"

static GPTConfig tiny_config() {
    GPTConfig c;
    c.max_seq_len = 16;
    c.vocab_size = 200;
    c.padded_vocab_size = 256;
    c.num_layers = 2;
    c.num_heads = 4;
    c.channels = 32;
    return c;
}
static const int B = 2, T = 8;

// Random parameters, padded wte rows included (they must not matter); LayerNorm weights near 1.
static std::vector<double> random_params(const GPTConfig& c, std::mt19937& rng) {
    const ParamLayout layout = param_layout(c);
    std::vector<double> p = random_tensor(layout.total, rng, 0.15);
    for (int t : {LN1W, LN2W, LNFW})
        for (size_t i = 0; i < layout.size[t]; i++) p[layout.offset[t] + i] += 1.0;
    return p;
}

static std::vector<int> random_tokens(int n, int V, std::mt19937& rng) {
    std::vector<int> tokens(n);
    for (int& t : tokens) t = (int)(rng() % V);
    return tokens;
}

static const char* tensor_name(int t) {
    static const char* names[NUM_PARAM_TENSORS] = {
        "wte",  "wpe",  "ln1w", "ln1b", "qkvw",    "qkvb",    "attprojw", "attprojb",
        "ln2w", "ln2b", "fcw",  "fcb",  "fcprojw", "fcprojb", "lnfw",     "lnfb"};
    return names[t];
}

TEST(model_gradients_match_finite_differences) {
    std::mt19937 rng(21);
    const GPTConfig c = tiny_config();
    GPTModel<double> model(c, B, T);
    model.params = random_params(c, rng);
    const std::vector<int> in = random_tokens(B * T, c.vocab_size, rng),
                           tg = random_tokens(B * T, c.vocab_size, rng);
    auto loss = [&] { return model.forward(in.data(), tg.data(), B, T); };
    loss();
    model.zero_grad();
    model.backward(1.0);
    const std::vector<double> grads = model.grads;
    const double h = 1e-5;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        const size_t at = model.layout.offset[t], n = model.layout.size[t];
        // The whole tensor at once: the derivative along a random direction d is Σ grad·d.
        std::vector<double> d = random_tensor(n, rng),
                            saved(model.params.begin() + at, model.params.begin() + at + n);
        double along = 0;
        for (size_t i = 0; i < n; i++) along += grads[at + i] * d[i];
        for (size_t i = 0; i < n; i++) model.params[at + i] = saved[i] + h * d[i];
        const double up = loss();
        for (size_t i = 0; i < n; i++) model.params[at + i] = saved[i] - h * d[i];
        const double down = loss();
        std::copy(saved.begin(), saved.end(), model.params.begin() + at);
        const double numeric = (up - down) / (2 * h);
        CHECK_MSG(std::fabs(along - numeric) <= 1e-6 * std::fmax(1e-3, std::fabs(numeric)),
                  "%s along a random direction: analytic %.12g vs finite difference %.12g",
                  tensor_name(t), along, numeric);
        // And eight single elements.
        for (int k = 0; k < 8; k++) {
            const size_t i = at + rng() % n;
            const double keep = model.params[i];
            model.params[i] = keep + h;
            const double u = loss();
            model.params[i] = keep - h;
            const double dn = loss();
            model.params[i] = keep;
            const double num = (u - dn) / (2 * h);
            CHECK_MSG(std::fabs(grads[i] - num) <= 1e-7 + 1e-6 * std::fabs(num),
                      "%s[%zu]: analytic %.12g vs finite difference %.12g", tensor_name(t), i - at,
                      grads[i], num);
        }
    }
}

TEST(padded_vocabulary_never_contributes) {
    std::mt19937 rng(22);
    const GPTConfig c = tiny_config();
    GPTModel<double> model(c, B, T);
    model.params = random_params(c, rng);
    const std::vector<int> in = random_tokens(B * T, c.vocab_size, rng),
                           tg = random_tokens(B * T, c.vocab_size, rng);
    const size_t pad_begin = model.layout.offset[WTE] + (size_t)c.vocab_size * c.channels;
    const size_t pad_end = model.layout.offset[WTE] + (size_t)c.padded_vocab_size * c.channels;
    const double loss_random_padding = model.forward(in.data(), tg.data(), B, T);
    model.zero_grad();
    model.backward(1.0);
    for (size_t i = pad_begin; i < pad_end; i++) CHECK(model.grads[i] == 0);
    for (size_t i = pad_begin; i < pad_end; i++) model.params[i] = (i % 2 ? 1e3 : 0.0);
    const double loss_other_padding = model.forward(in.data(), tg.data(), B, T);
    CHECK_NEAR(loss_other_padding, loss_random_padding, 1e-13);
}

TEST(float_model_matches_double_model) {
    std::mt19937 rng(23);
    const GPTConfig c = tiny_config();
    GPTModel<double> d(c, B, T);
    GPTModel<float> f(c, B, T);
    f.params = to_float(random_params(c, rng));
    d.params.assign(f.params.begin(), f.params.end());  // the same (float-representable) values
    const std::vector<int> in = random_tokens(B * T, c.vocab_size, rng),
                           tg = random_tokens(B * T, c.vocab_size, rng);
    const double dl = d.forward(in.data(), tg.data(), B, T);
    const float fl = f.forward(in.data(), tg.data(), B, T);
    CHECK_NEAR(fl, dl, 1e-5 * dl);
    std::vector<double> logits_f(f.logits.begin(), f.logits.begin() + B * T * c.padded_vocab_size);
    const double logit_err = tst::rel_l2_error(logits_f.data(), d.logits.data(), logits_f.size());
    CHECK_MSG(logit_err <= 1e-5, "logits rel L2 error %.3g", logit_err);
    d.zero_grad();
    f.zero_grad();
    d.backward(1.0);
    f.backward(1.0f);
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        const size_t at = d.layout.offset[t], n = d.layout.size[t];
        std::vector<double> gf(f.grads.begin() + at, f.grads.begin() + at + n);
        const double err = tst::rel_l2_error(gf.data(), d.grads.data() + at, n);
        CHECK_MSG(err <= 1e-5, "%s gradient rel L2 error float vs double %.3g", tensor_name(t),
                  err);
    }
}

TEST(gradients_accumulate_across_micro_batches) {
    std::mt19937 rng(24);
    const GPTConfig c = tiny_config();
    GPTModel<double> model(c, B, T);
    model.params = random_params(c, rng);
    const std::vector<int> in1 = random_tokens(B * T, c.vocab_size, rng),
                           tg1 = random_tokens(B * T, c.vocab_size, rng);
    const std::vector<int> in2 = random_tokens(B * T, c.vocab_size, rng),
                           tg2 = random_tokens(B * T, c.vocab_size, rng);
    auto grads_of = [&](const std::vector<int>& in, const std::vector<int>& tg) {
        model.zero_grad();
        model.forward(in.data(), tg.data(), B, T);
        model.backward(1.0);
        return model.grads;
    };
    const std::vector<double> g1 = grads_of(in1, tg1), g2 = grads_of(in2, tg2);
    model.zero_grad();
    model.forward(in1.data(), tg1.data(), B, T);
    model.backward(0.5);
    model.forward(in2.data(), tg2.data(), B, T);
    model.backward(0.5);
    for (size_t i = 0; i < g1.size(); i++) CHECK_NEAR(model.grads[i], 0.5 * (g1[i] + g2[i]), 1e-14);
}

TEST(adamw_step_decays_only_weight_matrices) {
    std::mt19937 rng(25);
    const GPTConfig c = tiny_config();
    GPTModel<double> model(c, B, T);
    model.params = random_params(c, rng);
    const ParamLayout& layout = model.layout;
    const double lr = 3e-3, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, scale = 0.8;
    const int matrices[] = {WTE, WPE, QKVW, ATTPROJW, FCW, FCPROJW};  // GPT-2's decayed tensors
    std::vector<double> p = model.params, m(p.size(), 0), v(p.size(), 0);
    for (int step = 1; step <= 3; step++) {
        model.grads = random_tensor(p.size(), rng);
        model.adamw_step(lr, b1, b2, eps, wd, scale, step);
        for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
            const bool decayed =
                std::find(std::begin(matrices), std::end(matrices), t) != std::end(matrices);
            for (size_t i = layout.offset[t]; i < layout.offset[t] + layout.size[t]; i++) {
                const double g = scale * model.grads[i];
                if (decayed) p[i] *= 1 - lr * wd;
                m[i] = b1 * m[i] + (1 - b1) * g;
                v[i] = b2 * v[i] + (1 - b2) * g * g;
                p[i] -= lr * (m[i] / (1 - std::pow(b1, step))) /
                        (std::sqrt(v[i] / (1 - std::pow(b2, step))) + eps);
            }
        }
        for (size_t i = 0; i < p.size(); i++) CHECK_NEAR(model.params[i], p[i], 1e-13);
    }
    // With no gradient at all, only decay moves a parameter: matrices shrink, the rest stay.
    std::vector<double> before = model.params;
    std::fill(model.grads.begin(), model.grads.end(), 0.0);
    std::fill(model.adam_m.begin(), model.adam_m.end(), 0.0);
    std::fill(model.adam_v.begin(), model.adam_v.end(), 0.0);
    model.adamw_step(lr, b1, b2, eps, wd, 1.0, 1);
    CHECK(model.params[layout.offset[LN1W]] == before[layout.offset[LN1W]]);
    CHECK(model.params[layout.offset[FCB] + 3] == before[layout.offset[FCB] + 3]);
    CHECK_NEAR(model.params[layout.offset[FCW] + 3], before[layout.offset[FCW] + 3] * (1 - lr * wd),
               1e-15);
}

TEST(api_single_batch_overfits) {
    std::mt19937 rng(26);
    const GPTConfig c = tiny_config();
    GPTCpu* model = gpt_cpu_create(c, B, T);
    std::vector<float>& params = gpt_cpu_params(model);
    const ParamLayout layout = param_layout(c);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (float& p : params) p = normal(rng);
    for (int t : {LN1W, LN2W, LNFW})
        std::fill_n(params.begin() + layout.offset[t], layout.size[t], 1.0f);
    for (int t : {LN1B, LN2B, LNFB, QKVB, ATTPROJB, FCB, FCPROJB})
        std::fill_n(params.begin() + layout.offset[t], layout.size[t], 0.0f);
    std::fill(params.begin() + layout.offset[WTE] + (size_t)c.vocab_size * c.channels,
              params.begin() + layout.offset[WTE] + (size_t)c.padded_vocab_size * c.channels, 0.0f);
    const std::vector<int> in = random_tokens(B * T, c.vocab_size, rng),
                           tg = random_tokens(B * T, c.vocab_size, rng);
    OptimizerSettings adamw;
    adamw.learning_rate = 1e-2f;
    adamw.weight_decay = 0.0f;
    float first = 0, loss = 0;
    for (int step = 1; step <= 300; step++) {
        loss = gpt_cpu_forward(model, in.data(), tg.data(), B, T);
        if (step == 1) first = loss;
        gpt_cpu_zero_grad(model);
        gpt_cpu_backward(model, 1.0f);
        CHECK(std::isfinite(gpt_cpu_grad_norm(model)));
        gpt_cpu_update(model, adamw, step);
        if (loss < 0.05f) break;
    }
    CHECK_MSG(first > 4.5f, "initial loss %.3f should be near ln(200) = 5.3", first);
    CHECK_MSG(loss < 0.1f, "loss after overfitting one batch: %.4f", loss);
    gpt_cpu_free(model);
}

TEST(api_reports_memory_and_rejects_misuse) {
    const GPTConfig c = tiny_config();
    GPTCpu* model = gpt_cpu_create(c, B, T);
    const GPTCpuMemory mem = gpt_cpu_memory(model);
    const size_t total = param_layout(c).total;
    CHECK(mem.parameters == total * 4 && mem.gradients == total * 4 &&
          mem.optimizer_state == total * 8);
    CHECK(mem.activations >= (size_t)B * T * c.padded_vocab_size * 4);  // at least the logits
    // What the memory check computes before allocating is what was allocated.
    for (int b : {1, B})
        for (int t : {1, T}) {
            GPTCpu* other = gpt_cpu_create(c, b, t);
            const GPTCpuMemory made = gpt_cpu_memory(other), planned = gpt_cpu_memory_needed(c, b, t);
            CHECK(made.parameters == planned.parameters && made.gradients == planned.gradients &&
                  made.optimizer_state == planned.optimizer_state &&
                  made.activations == planned.activations);
            gpt_cpu_free(other);
        }
    // gpt_cpu_grad_norm is the L2 norm of the gradient buffer.
    std::vector<float>& grads = gpt_cpu_grads(model);
    double sq = 0;
    for (size_t i = 0; i < grads.size(); i++)
        sq += (double)(grads[i] = (float)((int)(i % 7) - 3) * 1e-3f) * grads[i];
    CHECK_NEAR(gpt_cpu_grad_norm(model), std::sqrt(sq), 1e-9);

    std::vector<int> in(B * T, 1);
    CHECK(std::isnan(gpt_cpu_forward(model, in.data(), nullptr, B, T)));  // logits only
    bool threw = false;
    try {
        gpt_cpu_backward(model, 1.0f);
    } catch (const std::logic_error&) {
        threw = true;
    }
    CHECK_MSG(threw, "backward after a forward without targets must throw");
    in[3] = c.vocab_size;  // a padding id is not a token
    threw = false;
    try {
        gpt_cpu_forward(model, in.data(), nullptr, B, T);
    } catch (const std::invalid_argument&) {
        threw = true;
    }
    CHECK_MSG(threw, "a token outside the vocabulary must be rejected");
    threw = false;
    try {
        gpt_cpu_forward(model, in.data(), nullptr, B, T + 1);
    } catch (const std::invalid_argument&) {
        threw = true;
    }
    CHECK_MSG(threw, "T beyond the allocated T must be rejected");
    gpt_cpu_free(model);

    GPTConfig bad = tiny_config();
    bad.num_heads = 5;  // does not divide C = 32
    threw = false;
    try {
        gpt_cpu_free(gpt_cpu_create(bad, B, T));
    } catch (const std::invalid_argument&) {
        threw = true;
    }
    CHECK_MSG(threw, "heads not dividing channels must be rejected");
    threw = false;
    try {
        gpt_cpu_free(gpt_cpu_create(tiny_config(), B, tiny_config().max_seq_len + 1));
    } catch (const std::invalid_argument&) {
        threw = true;
    }
    CHECK_MSG(threw, "T beyond maxT must be rejected");
}

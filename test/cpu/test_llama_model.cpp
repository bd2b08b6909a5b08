// The whole CPU Llama model (cpu/llama_model.h, cpu/llama_cpu.h) at tiny shapes:
//   the parameter layout (Hugging Face's names and order, the published models' sizes),
//   the loss's gradient for every parameter of LlamaModel<double> against central finite
//   differences, at a grouped-query shape and at an odd one (three query heads on one kv head,
//   odd T, scaled RoPE),
//   the grouped-query model against the multi-head model with its kv heads repeated (which tells a
//   wrong kv-head mapping from the right one), the float model against the double model, and a few
//   hundred AdamW steps through the llama_cpu_* API that learn a short repeated sequence.
#include <algorithm>
#include <map>

#include "cpu/llama_cpu.h"
#include "cpu/llama_model.h"
#include "test/cpu/grad_check.h"

// 16 channels in 4 query heads on 2 kv heads, 2 layers, a vocabulary of 11, θ = 500000.
static LlamaConfig small_gqa_config() {
    LlamaConfig c;
    c.num_layers = 2;
    c.channels = 16;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.ffn_channels = 24;
    c.vocab_size = 11;
    c.max_seq_len = 8;
    return c;
}

// Three query heads of 4 channels on one kv head, an FFN width of 20, scaled RoPE with a short
// original context and θ = 100, so that positions 0-6 rotate every pair visibly and the scaling
// moves some frequencies.
static LlamaConfig odd_config() {
    LlamaConfig c = small_gqa_config();
    c.channels = 12;
    c.num_heads = 3;
    c.num_kv_heads = 1;
    c.ffn_channels = 20;
    c.rope_theta = 100;
    c.rope_scaling.enabled = true;
    c.rope_scaling.original_max_position = 16;
    return c;
}

// Matrices uniform in ±[0.1, 0.5] (logits of order 1), RMSNorm weights near 1.
static std::vector<double> random_params(const LlamaConfig& c, std::mt19937& rng) {
    std::vector<double> p = random_tensor(llama_param_count(c), rng, 0.5);
    for (const LlamaTensor& t : llama_tensors(c))
        if (!t.is_matrix())
            for (size_t i = 0; i < t.size(); i++) p[t.offset + i] = 1.0 + 0.2 * p[t.offset + i];
    return p;
}

static std::vector<int> random_tokens(int n, int V, std::mt19937& rng) {
    std::vector<int> tokens(n);
    for (int& t : tokens) t = (int)(rng() % V);
    return tokens;
}

// ---- the parameter layout ----------------------------------------------------------------------

TEST(layout_names_and_orders_tensors_as_hugging_face) {
    const LlamaConfig c = small_gqa_config();
    const std::vector<LlamaTensor> t = llama_tensors(c);
    CHECK(t.size() == 1 + 9 * 2 + 2);
    CHECK(t[0].name == "model.embed_tokens.weight" && t[0].rows == 11 && t[0].cols == 16);
    const char* layer1[] = {"input_layernorm", "self_attn.q_proj", "self_attn.k_proj",
                            "self_attn.v_proj", "self_attn.o_proj", "post_attention_layernorm",
                            "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
    const int shapes[9][2] = {{16, 1}, {16, 16}, {8, 16}, {8, 16}, {16, 16},
                              {16, 1}, {24, 16}, {24, 16}, {16, 24}};
    for (int k = 0; k < 9; k++) {
        const LlamaTensor& x = t[llama_layer_tensor_index(1, k)];
        CHECK_MSG(x.name == std::string("model.layers.1.") + layer1[k] + ".weight", "%s",
                  x.name.c_str());
        CHECK(x.layer == 1 && x.kind == k && x.rows == shapes[k][0] && x.cols == shapes[k][1]);
    }
    CHECK(t[llama_final_norm_index(c)].name == "model.norm.weight");
    CHECK(t[llama_lm_head_index(c)].name == "lm_head.weight" && t.back().rows == 11);
    size_t offset = 0;  // one tensor after the other, no gaps
    for (const LlamaTensor& x : t) {
        CHECK(x.offset == offset);
        offset += x.size();
    }
    CHECK(offset == llama_param_count(c));
}

TEST(named_shapes_have_the_published_sizes) {
    // Llama 3.1 8B's 8,030,261,248 parameters (lm_head untied, as published); Llama 3.2 3B's
    // 3,212,749,824 count its tied lm_head once, so this layout holds one more (V, C) matrix.
    CHECK(llama_param_count(llama31_8b()) == 8030261248ull);
    const LlamaConfig b3 = llama32_3b();
    CHECK(llama_param_count(b3) - (size_t)b3.vocab_size * b3.channels == 3212749824ull);
    for (const LlamaConfig& c : {llama32_1b(), llama32_3b(), llama31_8b()}) {
        CHECK(llama_config_valid(c) && c.num_kv_heads == 8 && c.vocab_size == 128256);
        CHECK(c.rope_theta == 500000.0 && c.rope_scaling.enabled);
    }
    CHECK(llama32_1b().head_size() == 64 && llama32_3b().head_size() == 128);
    CHECK(llama31_8b().rope_scaling.factor == 8.0 && llama32_1b().rope_scaling.factor == 32.0);
}

// ---- gradients against finite differences ------------------------------------------------------

// Every parameter's gradient against (loss(p + h) − loss(p − h)) / 2h, h = 1e-6. The loss is a
// mean of order 2.4 computed in double, so the difference's rounding error is about
// 1e-16 · 2.4 / 1e-6 ≈ 3e-10 and its truncation error (h² times a third derivative) about 1e-12;
// the worst error measured at both shapes is 9e-10. 1e-8 absolute plus 1e-6 relative leaves ten
// times that, while a missing or wrong term moves gradients (of order 1e-3 to 1e-1 here) by far
// more.
static void check_model_gradients(const LlamaConfig& c, int B, int T, uint32_t seed) {
    std::mt19937 rng(seed);
    LlamaModel<double> model(c, B, T);
    model.params = random_params(c, rng);
    const std::vector<int> in = random_tokens(B * T, c.vocab_size, rng),
                           tg = random_tokens(B * T, c.vocab_size, rng);
    model.forward(in.data(), tg.data(), B, T);
    model.zero_grad();
    model.backward(1.0);
    const std::vector<double> grads = model.grads;
    const double h = 1e-6;
    for (const LlamaTensor& t : model.tensors)
        for (size_t i = t.offset; i < t.offset + t.size(); i++) {
            const double keep = model.params[i];
            model.params[i] = keep + h;
            const double up = model.forward(in.data(), tg.data(), B, T);
            model.params[i] = keep - h;
            const double down = model.forward(in.data(), tg.data(), B, T);
            model.params[i] = keep;
            const double numeric = (up - down) / (2 * h), err = std::fabs(grads[i] - numeric);
            CHECK_MSG(err <= 1e-8 + 1e-6 * std::fabs(numeric),
                      "%s[%zu]: analytic %.12g vs finite difference %.12g", t.name.c_str(),
                      i - t.offset, grads[i], numeric);
        }
}

TEST(gqa_model_gradients_match_finite_differences) {
    check_model_gradients(small_gqa_config(), 2, 5, 41);
}

TEST(odd_model_gradients_match_finite_differences) {
    check_model_gradients(odd_config(), 1, 7, 42);
}

// ---- the kv-head mapping -----------------------------------------------------------------------

TEST(gqa_model_equals_multi_head_model_with_repeated_kv_heads) {
    // Hugging Face's repeat_kv: query head h reads kv head h / (H/KV). The multi-head model whose
    // k_proj and v_proj rows for head h are the grouped model's rows for kv head h / (H/KV) must
    // give the same logits: the same products and sums in the same order (they agree bit for bit;
    // 1e-12 would still be round-off). Repeating them the other way (h % KV) moves the logits by
    // order 1 (1.1 relative), which shows that the comparison can tell the mappings apart.
    std::mt19937 rng(43);
    const LlamaConfig gqa = small_gqa_config();
    LlamaConfig mha = gqa;
    mha.num_kv_heads = gqa.num_heads;
    const int B = 2, T = 6, hs = gqa.head_size(), group = gqa.num_heads / gqa.num_kv_heads;
    LlamaModel<double> grouped(gqa, B, T);
    grouped.params = random_params(gqa, rng);
    const std::vector<int> in = random_tokens(B * T, gqa.vocab_size, rng),
                           tg = random_tokens(B * T, gqa.vocab_size, rng);
    grouped.forward(in.data(), tg.data(), B, T);
    auto logits_repeated = [&](auto kv_of) {
        LlamaModel<double> repeated(mha, B, T);
        std::map<std::string, const LlamaTensor*> source;
        for (const LlamaTensor& t : grouped.tensors) source[t.name] = &t;
        for (const LlamaTensor& t : repeated.tensors) {
            const LlamaTensor& s = *source.at(t.name);
            const bool kv = t.kind == K_PROJ || t.kind == V_PROJ;
            for (int r = 0; r < t.rows; r++) {
                const int from = kv ? kv_of(r / hs) * hs + r % hs : r;
                std::copy_n(grouped.params.begin() + s.offset + (size_t)from * t.cols, t.cols,
                            repeated.params.begin() + t.offset + (size_t)r * t.cols);
            }
        }
        repeated.forward(in.data(), tg.data(), B, T);
        const auto begin = repeated.logits.begin();
        return std::vector<double>(begin, begin + B * T * gqa.vocab_size);
    };
    const std::vector<double> right = logits_repeated([&](int h) { return h / group; }),
                              wrong = logits_repeated([&](int h) { return h % gqa.num_kv_heads; });
    const double err = tst::rel_l2_error(grouped.logits.data(), right.data(), right.size());
    CHECK_MSG(err <= 1e-12, "grouped vs repeated multi-head logits: rel L2 error %.3g", err);
    const double apart = tst::rel_l2_error(grouped.logits.data(), wrong.data(), wrong.size());
    CHECK_MSG(apart > 1e-2, "the other mapping differs by only %.3g", apart);
}

// ---- float against double ----------------------------------------------------------------------

TEST(float_model_matches_double_model) {
    // The same (float-representable) parameters in both precisions. Float round-off in sums of at
    // most 24 terms, through two layers, keeps the loss, logits and gradients within 1e-5 relative
    // (GPT-2's model test uses the same bound); measured: 2e-8 (loss), 3e-7 (logits), at most
    // 9e-7 (the gradients).
    std::mt19937 rng(44);
    const LlamaConfig c = small_gqa_config();
    const int B = 2, T = 8;
    LlamaModel<double> d(c, B, T);
    LlamaModel<float> f(c, B, T);
    f.params = to_float(random_params(c, rng));
    d.params.assign(f.params.begin(), f.params.end());
    const std::vector<int> in = random_tokens(B * T, c.vocab_size, rng),
                           tg = random_tokens(B * T, c.vocab_size, rng);
    const double dl = d.forward(in.data(), tg.data(), B, T);
    const float fl = f.forward(in.data(), tg.data(), B, T);
    CHECK_NEAR(fl, dl, 1e-5 * dl);
    std::vector<double> logits_f(f.logits.begin(), f.logits.begin() + B * T * c.vocab_size);
    const double logit_err = tst::rel_l2_error(logits_f.data(), d.logits.data(), logits_f.size());
    CHECK_MSG(logit_err <= 1e-5, "logits rel L2 error %.3g", logit_err);
    d.zero_grad();
    f.zero_grad();
    d.backward(1.0);
    f.backward(1.0f);
    for (const LlamaTensor& t : d.tensors) {
        std::vector<double> gf(f.grads.begin() + t.offset, f.grads.begin() + t.offset + t.size());
        const double err = tst::rel_l2_error(gf.data(), d.grads.data() + t.offset, t.size());
        CHECK_MSG(err <= 1e-5, "%s gradient rel L2 error float vs double %.3g", t.name.c_str(), err);
    }
}

// ---- training through the API ------------------------------------------------------------------

TEST(api_adamw_learns_a_repeated_sequence) {
    // Next-token prediction on 0 1 2 ... 10 0 1 2 ...: every target follows from its input, so a
    // few hundred AdamW steps take the loss from about ln(11) = 2.4 to near zero. Matrices start
    // N(0, 0.02), RMSNorm weights at 1.
    const LlamaConfig c = small_gqa_config();
    const int B = 2, T = 8;
    LlamaCpu* model = llama_cpu_create(c, B, T);
    std::vector<float>& params = llama_cpu_params(model);
    std::mt19937 rng(45);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (const LlamaTensor& t : llama_tensors(c))
        for (size_t i = t.offset; i < t.offset + t.size(); i++)
            params[i] = t.is_matrix() ? normal(rng) : 1.0f;
    std::vector<int> in(B * T), tg(B * T);
    for (int i = 0; i < B * T; i++) {
        in[i] = (i + 3) % c.vocab_size;
        tg[i] = (i + 4) % c.vocab_size;
    }
    OptimizerSettings adamw;
    adamw.learning_rate = 1e-2f;
    adamw.weight_decay = 0.1f;
    float first = 0, loss = 0;
    for (int step = 1; step <= 300; step++) {
        loss = llama_cpu_forward(model, in.data(), tg.data(), B, T);
        if (step == 1) first = loss;
        if (loss < 0.05f) break;
        llama_cpu_zero_grad(model);
        llama_cpu_backward(model, 1.0f);
        CHECK(std::isfinite(llama_cpu_grad_norm(model)));
        llama_cpu_update(model, adamw, step);
    }
    CHECK_MSG(std::fabs(first - std::log(11.0f)) < 0.1f, "initial loss %.3f, not near ln(11)", first);
    CHECK_MSG(loss < 0.05f, "loss after 300 steps: %.4f", loss);
    llama_cpu_free(model);
}

// LAMB and LARS take each tensor's own norms (model.layers.1.mlp.up_proj.weight is one tensor): one
// step of each against the definitions in double, written here, per tensor of llama_tensors; weight
// decay on the matrices, and under --layer-adaptation matrices no trust ratio for the norms' weights.
static void check_layer_adaptive_step(OptimizerKind kind, LayerAdaptation adaptation) {
    const LlamaConfig c = odd_config();
    const int B = 1, T = 5;
    LlamaCpu* model = llama_cpu_create(c, B, T);
    std::mt19937 rng(46);
    std::normal_distribution<float> normal(0.0f, 0.1f);
    for (float& p : llama_cpu_params(model)) p = normal(rng);
    for (float& m : llama_cpu_adam_m(model)) m = 0.01f * normal(rng);
    for (float& v : llama_cpu_adam_v(model)) v = 0.01f * std::fabs(normal(rng));
    std::vector<int> in(B * T), tg(B * T);
    for (int i = 0; i < B * T; i++) in[i] = (3 * i + 1) % c.vocab_size, tg[i] = (5 * i + 2) % c.vocab_size;
    llama_cpu_zero_grad(model);
    llama_cpu_forward(model, in.data(), tg.data(), B, T);
    llama_cpu_backward(model, 1.0f);
    const std::vector<float> p0 = llama_cpu_params(model), m0 = llama_cpu_adam_m(model),
                             v0 = llama_cpu_adam_v(model), g = llama_cpu_grads(model);
    OptimizerSettings s;
    s.kind = kind, s.layer_adaptation = adaptation;
    s.learning_rate = 0.01f, s.weight_decay = 0.1f, s.grad_scale = 0.7f;
    s.beta1 = 0.9f, s.beta2 = 0.999f, s.eps = 1e-6f, s.momentum = 0.9f, s.trust_coefficient = 0.001f;
    const int step = 3;
    llama_cpu_update(model, s, step);
    double worst = 0;
    for (const LlamaTensor& t : llama_tensors(c)) {
        const size_t n = t.size(), o = t.offset;
        const double wd = t.is_matrix() ? s.weight_decay : 0.0;
        const bool adapt = t.is_matrix() || adaptation == LayerAdaptation::ALL;
        std::vector<double> u(n);
        double pp = 0, uu = 0;
        for (size_t i = 0; i < n; i++) {
            const double gi = (double)s.grad_scale * g[o + i], p = p0[o + i];
            if (kind == OptimizerKind::LAMB) {
                const double m = s.beta1 * (double)m0[o + i] + (1 - (double)s.beta1) * gi;
                const double v = s.beta2 * (double)v0[o + i] + (1 - (double)s.beta2) * gi * gi;
                u[i] = (m / (1 - std::pow((double)s.beta1, step))) /
                           (std::sqrt(v / (1 - std::pow((double)s.beta2, step))) + s.eps) + wd * p;
            } else {
                u[i] = gi + wd * p;
            }
            pp += p * p, uu += u[i] * u[i];
        }
        const bool norms = pp > 0 && uu > 0;  // else the ratio is 1 (LARS's ℓ too)
        const double ratio = norms ? std::sqrt(pp) / std::sqrt(uu) : 1.0;
        for (size_t i = 0; i < n; i++) {
            double expected;
            if (kind == OptimizerKind::LAMB) {
                expected = p0[o + i] - s.learning_rate * (adapt ? ratio : 1.0) * u[i];
            } else {  // LARS: b = μ·b + ℓ·g', ℓ = η·‖p‖/‖g'‖
                const double local = adapt && norms ? s.trust_coefficient * ratio : 1.0;
                expected = p0[o + i] - s.learning_rate * (s.momentum * (double)m0[o + i] + local * u[i]);
            }
            const double got = llama_cpu_params(model)[o + i];
            worst = std::max(worst, std::fabs(got - expected) / (std::fabs(expected) + 1e-3));
        }
    }
    // fp32 arithmetic against double over tensors of up to a few hundred values
    CHECK_MSG(worst < 2e-5, "%s: worst relative error %.3g", optimizer_name(kind), worst);
    llama_cpu_free(model);
}

TEST(api_lamb_step_per_tensor) { check_layer_adaptive_step(OptimizerKind::LAMB, LayerAdaptation::ALL); }
TEST(api_lamb_step_matrices_only) { check_layer_adaptive_step(OptimizerKind::LAMB, LayerAdaptation::MATRICES); }
TEST(api_lars_step_per_tensor) { check_layer_adaptive_step(OptimizerKind::LARS, LayerAdaptation::ALL); }
TEST(api_lars_step_matrices_only) { check_layer_adaptive_step(OptimizerKind::LARS, LayerAdaptation::MATRICES); }

TEST(api_rejects_misuse) {
    const LlamaConfig c = small_gqa_config();
    LlamaConfig bad = c;
    bad.num_kv_heads = 3;  // 4 query heads do not split into 3 groups
    auto throws = [](auto f) {
        try {
            f();
        } catch (const std::exception&) {
            return true;
        }
        return false;
    };
    CHECK(throws([&] { llama_cpu_free(llama_cpu_create(bad, 1, 4)); }));
    CHECK(throws([&] { llama_cpu_free(llama_cpu_create(c, 1, c.max_seq_len + 1)); }));
    LlamaCpu* model = llama_cpu_create(c, 1, 4);
    const int in[4] = {1, 2, 3, 4}, out_of_vocabulary[4] = {1, 2, 11, 0};
    CHECK(throws([&] { llama_cpu_forward(model, out_of_vocabulary, nullptr, 1, 4); }));
    CHECK(throws([&] { llama_cpu_forward(model, in, nullptr, 1, 5); }));
    CHECK(std::isnan(llama_cpu_forward(model, in, nullptr, 1, 4)));
    CHECK(throws([&] { llama_cpu_backward(model, 1.0f); }));  // no targets in the last forward
    llama_cpu_free(model);
}

// GPT-2 built from the reference ops, templated on the scalar type: GPTModel<float> is the CPU
// trainer's model (cpu/gpt_cpu.cpp wraps it in the gpt_cpu_* API of cpu/gpt_cpu.h), and the tests
// run GPTModel<double> against central finite differences and against the float model.
// forward() reads like the network:
//   x = wte[tokens] + wpe[positions]
//   each layer: x = x + attproj(attention(qkv(ln1(x))));  x = x + fcproj(gelu(fc(ln2(x))))
//   logits = lnf(x) · wteᵀ;  loss = mean cross-entropy over the real (unpadded) vocabulary
// and backward() walks the same steps in reverse. Every backward op adds into its gradient outputs.
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/gpt_config.h"
#include "base/model_tensors.h"
#include "base/optimizer_settings.h"
#include "base/step_phases.h"
#include "cpu/adamw.h"
#include "cpu/attention.h"
#include "cpu/batch_checks.h"
#include "cpu/crossentropy.h"
#include "cpu/encoder.h"
#include "cpu/gelu.h"
#include "cpu/lamb.h"
#include "cpu/lars.h"
#include "cpu/layernorm.h"
#include "cpu/matmul.h"
#include "cpu/muon_step.h"
#include "cpu/parallel.h"
#include "cpu/residual.h"

template <typename Real>
struct GPTModel {
    GPTConfig config;
    ParamLayout layout;
    int max_B, max_T;
    std::vector<Real> params, grads, adam_m, adam_v;  // layout.total each (see muon_step for v)
    std::vector<MuonScratch<Real>> muon_scratch;  // one per OpenMP thread (cpu/muon_step.h)
    // Where the phase timers are told that the work changes phase (base/step_timeline.h): the phase,
    // and the layer whose forward or backward pass begins (-1: none). Unset: not timed.
    std::function<void(StepPhase, int layer, bool backward)> on_phase;
    void mark(StepPhase phase, int layer = -1, bool backward = false) {
        if (on_phase) on_phase(phase, layer, backward);
    }

    // What forward saves for backward, sized for max_B · max_T positions (N below); per-layer
    // tensors hold L consecutive slices.
    std::vector<Real> encoded;                  // (N, C)
    std::vector<Real> ln1, ln1_mean, ln1_rstd;  // (L, N, C), (L, N), (L, N)
    std::vector<Real> qkv;                      // (L, N, 3C)
    std::vector<Real> atty;                     // (L, N, C) attention output, before attproj
    std::vector<Real> att;                      // (L, B, NH, T, T) attention probabilities
    std::vector<Real> residual2;                // (L, N, C) x + attention branch
    std::vector<Real> ln2, ln2_mean, ln2_rstd;  // (L, N, C), (L, N), (L, N)
    std::vector<Real> fch, fch_gelu;            // (L, N, 4C)
    std::vector<Real> residual3;                // (L, N, C) the layer's output
    std::vector<Real> lnf, lnf_mean, lnf_rstd;  // (N, C), (N), (N)
    std::vector<Real> logits;                   // (N, Vp)
    std::vector<Real> logsumexp, losses;        // (N)
    // Scratch reused by every layer: a branch's output in forward, gradients in backward.
    std::vector<Real> branch, dresidual, dln, datty, dlnf;  // (N, C)
    std::vector<Real> dqkv;                                 // (N, 3C)
    std::vector<Real> dfch, dfch_gelu;                      // (N, 4C)
    std::vector<Real> dlogits;                              // (N, Vp)

    int B = 0, T = 0;  // shape of the last forward
    std::vector<int> inputs, targets;
    bool have_targets = false;
    Real loss = NAN;

    GPTModel(const GPTConfig& c, int B_max, int T_max)
        : config(c), layout(param_layout(c)), max_B(B_max), max_T(T_max) {
        if (B_max < 1 || T_max < 1 || T_max > c.max_seq_len || c.num_layers < 1 || c.channels < 1 ||
            c.num_heads < 1 || c.channels % c.num_heads != 0 || c.vocab_size < 1 ||
            c.vocab_size > c.padded_vocab_size)
            throw std::invalid_argument("GPTModel: impossible configuration or batch shape");
        const size_t N = (size_t)B_max * T_max, L = c.num_layers, C = c.channels;
        const size_t NH = c.num_heads, Vp = c.padded_vocab_size;
        for (auto* v : {&params, &grads, &adam_m, &adam_v}) v->assign(layout.total, 0);
        encoded.resize(N * C);
        for (auto* v : {&ln1, &atty, &residual2, &ln2, &residual3}) v->resize(L * N * C);
        for (auto* v : {&ln1_mean, &ln1_rstd, &ln2_mean, &ln2_rstd}) v->resize(L * N);
        qkv.resize(L * N * 3 * C);
        att.resize(L * B_max * NH * T_max * T_max);
        fch.resize(L * N * 4 * C);
        fch_gelu.resize(L * N * 4 * C);
        lnf.resize(N * C);
        for (auto* v : {&lnf_mean, &lnf_rstd, &logsumexp, &losses}) v->resize(N);
        logits.resize(N * Vp);
        for (auto* v : {&branch, &dresidual, &dln, &datty, &dlnf}) v->resize(N * C);
        dqkv.resize(N * 3 * C);
        dfch.resize(N * 4 * C);
        dfch_gelu.resize(N * 4 * C);
        dlogits.resize(N * Vp);
    }

    // Parameter tensor `tensor` of `layer` (layer ignored for wte, wpe, lnfw, lnfb).
    Real* param_of(std::vector<Real>& buffer, int tensor, int layer = 0) {
        const bool per_layer = tensor >= LN1W && tensor <= FCPROJB;
        const size_t layer_size = per_layer ? layout.size[tensor] / config.num_layers : 0;
        return buffer.data() + layout.offset[tensor] + layer * layer_size;
    }
    Real* p(int tensor, int layer = 0) { return param_of(params, tensor, layer); }
    Real* g(int tensor, int layer = 0) { return param_of(grads, tensor, layer); }

    // Mean cross-entropy over the B·T positions (NAN without targets); logits are always computed.
    Real forward(const int* tokens, const int* target_tokens, int B_, int T_) {
        check_batch_shape("gpt", B_, T_, max_B, max_T);
        B = B_, T = T_;
        const int N = B * T, C = config.channels, L = config.num_layers, NH = config.num_heads;
        const int V = config.vocab_size, Vp = config.padded_vocab_size;
        check_token_ids("gpt", tokens, N, config.vocab_size, "input");
        inputs.assign(tokens, tokens + N);
        have_targets = target_tokens != nullptr;
        if (have_targets) {
            check_token_ids("gpt", target_tokens, N, config.vocab_size, "target");
            targets.assign(target_tokens, target_tokens + N);
        }

        mark(StepPhase::FORWARD);
        encoder_forward(encoded.data(), tokens, p(WTE), p(WPE), B, T, C);
        const Real* x = encoded.data();
        for (int l = 0; l < L; l++) {
            mark(StepPhase::FORWARD, l);
            Real* l_ln1 = ln1.data() + (size_t)l * N * C;
            Real* l_qkv = qkv.data() + (size_t)l * N * 3 * C;
            Real* l_atty = atty.data() + (size_t)l * N * C;
            Real* l_att = att.data() + (size_t)l * B * NH * T * T;
            Real* l_res2 = residual2.data() + (size_t)l * N * C;
            Real* l_ln2 = ln2.data() + (size_t)l * N * C;
            Real* l_fch = fch.data() + (size_t)l * N * 4 * C;
            Real* l_fch_gelu = fch_gelu.data() + (size_t)l * N * 4 * C;
            Real* l_res3 = residual3.data() + (size_t)l * N * C;

            layernorm_forward(l_ln1, &ln1_mean[l * N], &ln1_rstd[l * N], x, p(LN1W, l), p(LN1B, l),
                              N, C);
            matmul_forward(l_qkv, l_ln1, p(QKVW, l), p(QKVB, l), N, C, 3 * C);
            attention_forward(l_atty, l_att, l_qkv, B, T, C, NH);
            matmul_forward(branch.data(), l_atty, p(ATTPROJW, l), p(ATTPROJB, l), N, C, C);
            residual_forward(l_res2, x, branch.data(), (size_t)N * C);
            layernorm_forward(l_ln2, &ln2_mean[l * N], &ln2_rstd[l * N], l_res2, p(LN2W, l),
                              p(LN2B, l), N, C);
            matmul_forward(l_fch, l_ln2, p(FCW, l), p(FCB, l), N, C, 4 * C);
            gelu_forward(l_fch_gelu, l_fch, (size_t)N * 4 * C);
            matmul_forward(branch.data(), l_fch_gelu, p(FCPROJW, l), p(FCPROJB, l), N, 4 * C, C);
            residual_forward(l_res3, l_res2, branch.data(), (size_t)N * C);
            x = l_res3;
        }
        mark(StepPhase::FORWARD);
        layernorm_forward(lnf.data(), lnf_mean.data(), lnf_rstd.data(), x, p(LNFW), p(LNFB), N, C);
        mark(StepPhase::LOSS);
        matmul_forward(logits.data(), lnf.data(), p(WTE), (const Real*)nullptr, N, C, Vp);

        loss = NAN;
        if (!have_targets) return loss;
        crossentropy_forward(losses.data(), logsumexp.data(), logits.data(), targets.data(), N, V,
                             Vp);
        double sum = 0;
        for (int n = 0; n < N; n++) sum += losses[n];
        loss = (Real)(sum / N);
        return loss;
    }

    // Adds loss_scale · d(loss of the last forward)/d(params) into grads.
    void backward(Real loss_scale) {
        if (!have_targets) throw std::logic_error("gpt backward: the last forward had no targets");
        const int N = B * T, C = config.channels, L = config.num_layers, NH = config.num_heads;
        const int V = config.vocab_size, Vp = config.padded_vocab_size;

        mark(StepPhase::LOSS);
        fill_zero(dlogits, (size_t)N * Vp);
        crossentropy_backward(dlogits.data(), logits.data(), logsumexp.data(), targets.data(),
                              loss_scale / N, N, V, Vp);
        fill_zero(dlnf, (size_t)N * C);
        matmul_backward(dlnf.data(), g(WTE), (Real*)nullptr, dlogits.data(), lnf.data(), p(WTE), N,
                        C, Vp);
        mark(StepPhase::BACKWARD);
        const Real* last = residual3.data() + (size_t)(L - 1) * N * C;
        fill_zero(dresidual, (size_t)N * C);
        layernorm_backward(dresidual.data(), g(LNFW), g(LNFB), dlnf.data(), last, p(LNFW),
                           lnf_mean.data(), lnf_rstd.data(), N, C);

        // dresidual holds d(loss)/d(the residual stream) at the current point. A residual add
        // passes it unchanged into its branch, and the LayerNorm that starts the branch adds the
        // branch's gradient back into it, which leaves d(loss)/d(the add's input).
        for (int l = L - 1; l >= 0; l--) {
            mark(StepPhase::BACKWARD, l, true);
            const Real* x = l == 0 ? encoded.data() : residual3.data() + (size_t)(l - 1) * N * C;
            const Real* l_ln1 = ln1.data() + (size_t)l * N * C;
            const Real* l_qkv = qkv.data() + (size_t)l * N * 3 * C;
            const Real* l_atty = atty.data() + (size_t)l * N * C;
            const Real* l_att = att.data() + (size_t)l * B * NH * T * T;
            const Real* l_res2 = residual2.data() + (size_t)l * N * C;
            const Real* l_ln2 = ln2.data() + (size_t)l * N * C;
            const Real* l_fch = fch.data() + (size_t)l * N * 4 * C;
            const Real* l_fch_gelu = fch_gelu.data() + (size_t)l * N * 4 * C;

            // MLP branch: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2))))
            fill_zero(dfch_gelu, (size_t)N * 4 * C);
            matmul_backward(dfch_gelu.data(), g(FCPROJW, l), g(FCPROJB, l), dresidual.data(),
                            l_fch_gelu, p(FCPROJW, l), N, 4 * C, C);
            fill_zero(dfch, (size_t)N * 4 * C);
            gelu_backward(dfch.data(), l_fch, dfch_gelu.data(), (size_t)N * 4 * C);
            fill_zero(dln, (size_t)N * C);
            matmul_backward(dln.data(), g(FCW, l), g(FCB, l), dfch.data(), l_ln2, p(FCW, l), N, C,
                            4 * C);
            layernorm_backward(dresidual.data(), g(LN2W, l), g(LN2B, l), dln.data(), l_res2,
                               p(LN2W, l), &ln2_mean[l * N], &ln2_rstd[l * N], N, C);

            // Attention branch: residual2 = x + attproj(attention(qkv(ln1(x))))
            fill_zero(datty, (size_t)N * C);
            matmul_backward(datty.data(), g(ATTPROJW, l), g(ATTPROJB, l), dresidual.data(), l_atty,
                            p(ATTPROJW, l), N, C, C);
            fill_zero(dqkv, (size_t)N * 3 * C);
            attention_backward(dqkv.data(), datty.data(), l_qkv, l_att, B, T, C, NH);
            fill_zero(dln, (size_t)N * C);
            matmul_backward(dln.data(), g(QKVW, l), g(QKVB, l), dqkv.data(), l_ln1, p(QKVW, l), N,
                            C, 3 * C);
            layernorm_backward(dresidual.data(), g(LN1W, l), g(LN1B, l), dln.data(), x, p(LN1W, l),
                               &ln1_mean[l * N], &ln1_rstd[l * N], N, C);
        }
        mark(StepPhase::BACKWARD);
        encoder_backward(g(WTE), g(WPE), dresidual.data(), inputs.data(), B, T, C);
    }

    void zero_grad() { fill_zero(grads, grads.size()); }

    double grad_norm() const {
        return std::sqrt(global_sum_of_squares(grads.data(), grads.size()));
    }

    void adamw_step(Real lr, Real beta1, Real beta2, Real eps, Real weight_decay, Real grad_scale,
                    int step) {
        for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
            const size_t at = layout.offset[t];
            adamw_update(params.data() + at, adam_m.data() + at, adam_v.data() + at,
                         grads.data() + at, layout.size[t], lr, beta1, beta2, eps,
                         is_weight_matrix(t) ? weight_decay : Real(0), grad_scale, step);
        }
    }

    // LAMB and LARS, tensor by tensor as Hugging Face names them (base/model_tensors.h): each layer's
    // slice of a per-layer array is its own tensor, with its own trust ratio. LARS keeps its momentum
    // in adam_m and leaves adam_v untouched.
    void lamb_step(const OptimizerSettings& s, int step) {
        for (const ModelTensor& t : model_tensors(config)) {
            const bool matrix = is_weight_matrix(t.kind);
            lamb_update(params.data() + t.offset, adam_m.data() + t.offset, adam_v.data() + t.offset,
                        grads.data() + t.offset, t.size, Real(s.learning_rate), Real(s.beta1), Real(s.beta2),
                        Real(s.eps), matrix ? Real(s.weight_decay) : Real(0), Real(s.grad_scale), step,
                        matrix || s.layer_adaptation == LayerAdaptation::ALL);
        }
    }
    void lars_step(const OptimizerSettings& s) {
        for (const ModelTensor& t : model_tensors(config)) {
            const bool matrix = is_weight_matrix(t.kind);
            lars_update(params.data() + t.offset, adam_m.data() + t.offset, grads.data() + t.offset, t.size,
                        Real(s.learning_rate), Real(s.momentum), Real(s.trust_coefficient),
                        matrix ? Real(s.weight_decay) : Real(0), Real(s.grad_scale),
                        matrix || s.layer_adaptation == LayerAdaptation::ALL);
        }
    }

    // Muon on the blocks' matrices, AdamW on the rest (cpu/muon_step.h): adam_m holds Muon's momentum
    // at its matrices' elements, and the trainer shrinks adam_v to AdamW's tensors' elements, packed.
    void muon_step(const OptimizerSettings& s, int step) {
        muon_and_adamw_step(muon_layout(config), params.data(), adam_m.data(), adam_v.data(), grads.data(), s, step,
                            muon_scratch);
    }

    size_t activation_bytes() const {
        size_t n = 0;
        for (const auto* v :
             {&encoded,  &ln1,      &ln1_mean,  &ln1_rstd,  &qkv,      &atty,      &att, &residual2,
              &ln2,      &ln2_mean, &ln2_rstd,  &fch,       &fch_gelu, &residual3, &lnf, &lnf_mean,
              &lnf_rstd, &logits,   &logsumexp, &losses,    &branch,   &dresidual, &dln, &datty,
              &dlnf,     &dqkv,     &dfch,      &dfch_gelu, &dlogits})
            n += v->size();
        return n * sizeof(Real);
    }
};

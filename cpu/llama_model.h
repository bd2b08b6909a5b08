// Llama 3 built from the reference ops, templated on the scalar type: LlamaModel<float> is the CPU
// model (cpu/llama_cpu.cpp wraps it in the llama_cpu_* API of cpu/llama_cpu.h), and the tests run
// LlamaModel<double> against central finite differences and against the float model.
// forward() reads like the network (parameters as base/llama_config.h lays them out):
//   x = embed_tokens[tokens]
//   each layer: x = x + o_proj(attention(rope(q_proj(n)), rope(k_proj(n)), v_proj(n))),
//                   n = input_layernorm(x)
//               x = x + down_proj(silu(gate_proj(n)) ⊙ up_proj(n)),  n = post_attention_layernorm(x)
//   logits = norm(x) · lm_headᵀ;  loss = mean cross-entropy over the B·T targets
// with RMSNorm (cpu/rmsnorm.h), RoPE (cpu/rope.h), grouped-query causal attention
// (cpu/gqa_attention.h) and the SwiGLU MLP (cpu/swiglu.h); no biases anywhere. backward() walks
// the same steps in reverse; every backward op adds into its gradient outputs.
#pragma once
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/llama_config.h"
#include "base/optimizer_settings.h"
#include "cpu/adamw.h"
#include "cpu/batch_checks.h"
#include "cpu/crossentropy.h"
#include "cpu/encoder.h"
#include "cpu/gqa_attention.h"
#include "cpu/lamb.h"
#include "cpu/lars.h"
#include "cpu/matmul.h"
#include "cpu/muon_step.h"
#include "cpu/parallel.h"
#include "cpu/residual.h"
#include "cpu/rmsnorm.h"
#include "cpu/rope.h"
#include "cpu/swiglu.h"

template <typename Real>
struct LlamaModel {
    LlamaConfig config;
    std::vector<LlamaTensor> tensors;  // llama_tensors(config)
    int max_B, max_T;
    int C, H, KV, hs, F, V, L;  // the config's sizes, for brevity
    int Cq, Ckv;                // H·hs and KV·hs: the query and the key/value widths
    std::vector<Real> params, grads, adam_m, adam_v;  // llama_param_count(config) each (see muon_step for v)
    std::vector<MuonScratch<Real>> muon_scratch;  // one per OpenMP thread (cpu/muon_step.h)
    std::vector<Real> rope_cos, rope_sin;             // (max_T, hs/2)

    // What forward saves for backward, for max_B · max_T positions (N below); per-layer tensors
    // hold L consecutive slices.
    std::vector<Real> residual;            // (L + 1, N, C): the embedding, then each layer's output
    std::vector<Real> attn_in;             // (L, N, C) input_layernorm's output
    std::vector<Real> attn_rstd;           // (L, N)
    std::vector<Real> q, k, v;             // (L, N, Cq), (L, N, Ckv) ×2; q and k after RoPE
    std::vector<Real> att;                 // (L, B, H, T, T) attention probabilities
    std::vector<Real> atty;                // (L, N, Cq) attention output, before o_proj
    std::vector<Real> mid;                 // (L, N, C) x + attention branch
    std::vector<Real> mlp_in, mlp_rstd;    // (L, N, C), (L, N) post_attention_layernorm's
    std::vector<Real> gate, up, h;         // (L, N, F)
    std::vector<Real> final_in, final_rstd;  // (N, C), (N): model.norm's
    std::vector<Real> logits;              // (N, V)
    std::vector<Real> logsumexp, losses;   // (N)
    // Scratch reused by every layer: a branch's output in forward, gradients in backward.
    std::vector<Real> branch, dresidual, dnorm;  // (N, C)
    std::vector<Real> datty, dq_rot, dq;         // (N, Cq)
    std::vector<Real> dk_rot, dk, dv;            // (N, Ckv)
    std::vector<Real> mlp_scratch;               // (3, N, F)
    std::vector<Real> dlogits;                   // (N, V)

    int B = 0, T = 0;  // shape of the last forward
    std::vector<int> inputs, targets;
    bool have_targets = false;
    Real loss = NAN;

    LlamaModel(const LlamaConfig& c, int B_max, int T_max)
        : config(c), tensors(llama_tensors(c)), max_B(B_max), max_T(T_max) {
        if (!llama_config_valid(c) || B_max < 1 || T_max < 1 || T_max > c.max_seq_len)
            throw std::invalid_argument("LlamaModel: impossible configuration or batch shape");
        C = c.channels, H = c.num_heads, KV = c.num_kv_heads, hs = c.head_size();
        F = c.ffn_channels, V = c.vocab_size, L = c.num_layers;
        Cq = H * hs, Ckv = KV * hs;
        for (auto* b : {&params, &grads, &adam_m, &adam_v}) b->assign(llama_param_count(c), 0);
        rope_cos.resize((size_t)T_max * hs / 2);
        rope_sin.resize((size_t)T_max * hs / 2);
        rope_tables(rope_cos.data(), rope_sin.data(), T_max, hs, c.rope_theta, c.rope_scaling);
        allocate_activations((size_t)B_max * T_max);
    }

    void allocate_activations(size_t N) {
        const size_t Ls = L;
        residual.resize((Ls + 1) * N * C);
        for (auto* b : {&attn_in, &mid, &mlp_in}) b->resize(Ls * N * C);
        for (auto* b : {&attn_rstd, &mlp_rstd}) b->resize(Ls * N);
        for (auto* b : {&q, &atty}) b->resize(Ls * N * Cq);
        for (auto* b : {&k, &v}) b->resize(Ls * N * Ckv);
        att.resize(Ls * max_B * H * max_T * max_T);
        for (auto* b : {&gate, &up, &h}) b->resize(Ls * N * F);
        final_in.resize(N * C);
        for (auto* b : {&final_rstd, &logsumexp, &losses}) b->resize(N);
        logits.resize(N * V);
        for (auto* b : {&branch, &dresidual, &dnorm}) b->resize(N * C);
        for (auto* b : {&datty, &dq_rot, &dq}) b->resize(N * Cq);
        for (auto* b : {&dk_rot, &dk, &dv}) b->resize(N * Ckv);
        mlp_scratch.resize(3 * N * F);
        dlogits.resize(N * V);
    }

    // Layer l's tensor `kind` (LlamaLayerTensor), in the parameters or the gradients.
    Real* p_at(int index) { return params.data() + tensors[index].offset; }
    Real* g_at(int index) { return grads.data() + tensors[index].offset; }
    Real* p(int l, int kind) { return p_at(llama_layer_tensor_index(l, kind)); }
    Real* g(int l, int kind) { return g_at(llama_layer_tensor_index(l, kind)); }

    // Slice l of a per-layer buffer whose slices hold `per_position` values for each of B·T positions.
    Real* at(std::vector<Real>& buffer, int l, size_t per_position) {
        return buffer.data() + (size_t)l * B * T * per_position;
    }
    Real* att_of(int l) { return att.data() + (size_t)l * B * H * T * T; }

    // Mean cross-entropy over the B·T positions (NAN without targets); logits are always computed.
    Real forward(const int* tokens, const int* target_tokens, int B_, int T_) {
        check_batch_shape("llama", B_, T_, max_B, max_T);
        B = B_, T = T_;
        const int N = B * T;
        check_token_ids("llama", tokens, N, V, "input");
        inputs.assign(tokens, tokens + N);
        have_targets = target_tokens != nullptr;
        if (have_targets) {
            check_token_ids("llama", target_tokens, N, V, "target");
            targets.assign(target_tokens, target_tokens + N);
        }
        encoder_forward(residual.data(), tokens, p_at(llama_embedding_index()), (const Real*)nullptr,
                        B, T, C);
        for (int l = 0; l < L; l++) layer_forward(l);
        const int norm = llama_final_norm_index(config), head = llama_lm_head_index(config);
        rmsnorm_forward(final_in.data(), final_rstd.data(), at(residual, L, C), p_at(norm), N, C,
                        Real(config.rmsnorm_eps));
        matmul_forward(logits.data(), final_in.data(), p_at(head), (const Real*)nullptr, N, C, V);
        loss = NAN;
        if (!have_targets) return loss;
        crossentropy_forward(losses.data(), logsumexp.data(), logits.data(), targets.data(), N, V, V);
        double sum = 0;
        for (int n = 0; n < N; n++) sum += losses[n];
        loss = (Real)(sum / N);
        return loss;
    }

    void layer_forward(int l) {
        const int N = B * T;
        const Real eps = Real(config.rmsnorm_eps);
        Real *x = at(residual, l, C), *n1 = at(attn_in, l, C), *ql = at(q, l, Cq),
             *kl = at(k, l, Ckv), *vl = at(v, l, Ckv), *yl = at(atty, l, Cq), *xm = at(mid, l, C),
             *n2 = at(mlp_in, l, C);
        rmsnorm_forward(n1, at(attn_rstd, l, 1), x, p(l, ATTN_NORM), N, C, eps);
        matmul_forward(ql, n1, p(l, Q_PROJ), (const Real*)nullptr, N, C, Cq);
        matmul_forward(kl, n1, p(l, K_PROJ), (const Real*)nullptr, N, C, Ckv);
        matmul_forward(vl, n1, p(l, V_PROJ), (const Real*)nullptr, N, C, Ckv);
        rope_forward(ql, ql, rope_cos.data(), rope_sin.data(), B, T, H, hs);
        rope_forward(kl, kl, rope_cos.data(), rope_sin.data(), B, T, KV, hs);
        gqa_attention_forward(yl, att_of(l), ql, kl, vl, B, T, H, KV, hs);
        matmul_forward(branch.data(), yl, p(l, O_PROJ), (const Real*)nullptr, N, Cq, C);
        residual_forward(xm, x, branch.data(), (size_t)N * C);

        rmsnorm_forward(n2, at(mlp_rstd, l, 1), xm, p(l, MLP_NORM), N, C, eps);
        swiglu_mlp_forward(branch.data(), at(gate, l, F), at(up, l, F), at(h, l, F), n2,
                           mlp_weights(l), N, C, F);
        residual_forward(at(residual, l + 1, C), xm, branch.data(), (size_t)N * C);
    }

    SwiGLUWeights<const Real> mlp_weights(int l) {
        return {p(l, GATE_PROJ), p(l, UP_PROJ), p(l, DOWN_PROJ)};
    }

    // Adds loss_scale · d(loss of the last forward)/d(params) into grads.
    void backward(Real loss_scale) {
        if (!have_targets) throw std::logic_error("llama backward: the last forward had no targets");
        const int N = B * T, norm = llama_final_norm_index(config),
                  head = llama_lm_head_index(config);
        fill_zero(dlogits, (size_t)N * V);
        crossentropy_backward(dlogits.data(), logits.data(), logsumexp.data(), targets.data(),
                              loss_scale / N, N, V, V);
        fill_zero(dnorm, (size_t)N * C);
        matmul_backward(dnorm.data(), g_at(head), (Real*)nullptr, dlogits.data(), final_in.data(),
                        p_at(head), N, C, V);
        fill_zero(dresidual, (size_t)N * C);
        rmsnorm_backward(dresidual.data(), g_at(norm), dnorm.data(), at(residual, L, C), p_at(norm),
                         final_rstd.data(), N, C);
        // dresidual holds d(loss)/d(the residual stream) at the current point; each branch's
        // RMSNorm adds the branch's gradient back into it (as in cpu/gpt_model.h).
        for (int l = L - 1; l >= 0; l--) {
            mlp_backward(l);
            attention_backward(l);
        }
        encoder_backward(g_at(llama_embedding_index()), (Real*)nullptr, dresidual.data(),
                         inputs.data(), B, T, C);
    }

    // residual[l + 1] = mid + down_proj(swiglu(post_attention_layernorm(mid)))
    void mlp_backward(int l) {
        const int N = B * T;
        fill_zero(dnorm, (size_t)N * C);
        swiglu_mlp_backward(dnorm.data(), SwiGLUWeights<Real>{g(l, GATE_PROJ), g(l, UP_PROJ),
                                                              g(l, DOWN_PROJ)},
                            mlp_scratch.data(), dresidual.data(), at(mlp_in, l, C), at(gate, l, F),
                            at(up, l, F), at(h, l, F), mlp_weights(l), N, C, F);
        rmsnorm_backward(dresidual.data(), g(l, MLP_NORM), dnorm.data(), at(mid, l, C),
                         p(l, MLP_NORM), at(mlp_rstd, l, 1), N, C);
    }

    // mid = x + o_proj(attention(rope(q_proj(n)), rope(k_proj(n)), v_proj(n))), n = input_layernorm(x)
    void attention_backward(int l) {
        const int N = B * T;
        const Real* n1 = at(attn_in, l, C);
        fill_zero(datty, (size_t)N * Cq);
        matmul_backward(datty.data(), g(l, O_PROJ), (Real*)nullptr, dresidual.data(), at(atty, l, Cq),
                        p(l, O_PROJ), N, Cq, C);
        for (auto* b : {&dq_rot, &dq}) fill_zero(*b, (size_t)N * Cq);
        for (auto* b : {&dk_rot, &dk, &dv}) fill_zero(*b, (size_t)N * Ckv);
        gqa_attention_backward(dq_rot.data(), dk_rot.data(), dv.data(), datty.data(), at(q, l, Cq),
                               at(k, l, Ckv), at(v, l, Ckv), att_of(l), B, T, H, KV, hs);
        rope_backward(dq.data(), dq_rot.data(), rope_cos.data(), rope_sin.data(), B, T, H, hs);
        rope_backward(dk.data(), dk_rot.data(), rope_cos.data(), rope_sin.data(), B, T, KV, hs);
        fill_zero(dnorm, (size_t)N * C);
        matmul_backward(dnorm.data(), g(l, Q_PROJ), (Real*)nullptr, dq.data(), n1, p(l, Q_PROJ), N,
                        C, Cq);
        matmul_backward(dnorm.data(), g(l, K_PROJ), (Real*)nullptr, dk.data(), n1, p(l, K_PROJ), N,
                        C, Ckv);
        matmul_backward(dnorm.data(), g(l, V_PROJ), (Real*)nullptr, dv.data(), n1, p(l, V_PROJ), N,
                        C, Ckv);
        rmsnorm_backward(dresidual.data(), g(l, ATTN_NORM), dnorm.data(), at(residual, l, C),
                         p(l, ATTN_NORM), at(attn_rstd, l, 1), N, C);
    }

    void zero_grad() { fill_zero(grads, grads.size()); }

    double grad_norm() const { return std::sqrt(global_sum_of_squares(grads.data(), grads.size())); }

    // AdamW on every tensor, with weight decay on the matrices (embedding, projections, lm_head)
    // and none on the RMSNorm weights.
    void adamw_step(Real lr, Real beta1, Real beta2, Real eps, Real weight_decay, Real grad_scale,
                    int step) {
        for (const LlamaTensor& t : tensors)
            adamw_update(params.data() + t.offset, adam_m.data() + t.offset, adam_v.data() + t.offset,
                         grads.data() + t.offset, t.size(), lr, beta1, beta2, eps,
                         t.is_matrix() ? weight_decay : Real(0), grad_scale, step);
    }
    // LAMB and LARS per tensor (cpu/lamb.h, cpu/lars.h): weight decay on the matrices; under
    // --layer-adaptation matrices the norms' trust ratio scales the matrices' updates only.
    void lamb_step(const OptimizerSettings& s, int step) {
        for (const LlamaTensor& t : tensors)
            lamb_update(params.data() + t.offset, adam_m.data() + t.offset, adam_v.data() + t.offset,
                        grads.data() + t.offset, t.size(), Real(s.learning_rate), Real(s.beta1), Real(s.beta2),
                        Real(s.eps), t.is_matrix() ? Real(s.weight_decay) : Real(0), Real(s.grad_scale), step,
                        t.is_matrix() || s.layer_adaptation == LayerAdaptation::ALL);
    }
    void lars_step(const OptimizerSettings& s) {
        for (const LlamaTensor& t : tensors)
            lars_update(params.data() + t.offset, adam_m.data() + t.offset, grads.data() + t.offset, t.size(),
                        Real(s.learning_rate), Real(s.momentum), Real(s.trust_coefficient),
                        t.is_matrix() ? Real(s.weight_decay) : Real(0), Real(s.grad_scale),
                        t.is_matrix() || s.layer_adaptation == LayerAdaptation::ALL);
    }

    // Muon on the blocks' matrices, AdamW on the rest (cpu/muon_step.h): adam_m holds Muon's momentum
    // at its matrices' elements, and the trainer shrinks adam_v to AdamW's tensors' elements, packed.
    void muon_step(const OptimizerSettings& s, int step) {
        muon_and_adamw_step(muon_layout(config), params.data(), adam_m.data(), adam_v.data(), grads.data(), s, step,
                            muon_scratch);
    }

    // Bytes of everything sized by the batch (what allocate_activations holds).
    size_t activation_bytes() const {
        size_t n = 0;
        for (const auto* b : {&residual, &attn_in, &attn_rstd, &q, &k, &v, &att, &atty, &mid, &mlp_in, &mlp_rstd,
                              &gate, &up, &h, &final_in, &final_rstd, &logits, &logsumexp, &losses, &branch,
                              &dresidual, &dnorm, &datty, &dq_rot, &dq, &dk_rot, &dk, &dv, &mlp_scratch, &dlogits})
            n += b->size();
        return n * sizeof(Real);
    }
};

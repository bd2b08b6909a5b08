// Llama 3's layer maths (llama_layers.h), top to bottom, as cpu/llama_cpu.cpp computes it:
//   x = embed_tokens[tokens]
//   each layer: x += o_proj(attention(rope(qkv(rmsnorm1(x)))));  x += down(swiglu(gate|up(rmsnorm2(x))))
//   logits = norm(x) · lm_headᵀ;  loss = cross-entropy(logits, targets)
// then the same steps backward. q, k and v are one product (their weights are adjacent on the
// device), so are gate and up; RoPE rotates the query and key heads of the product in place, so the
// attention keeps (and its backward reads) the rotated ones. Each residual add is fused with the
// RMSNorm that follows it. What a layer keeps for the backward pass, and what -r recomputes, is
// activations.h's (its MLP activation is SwiGLU's here; the norms keep rstd only).
// The products are the tensor group's (c_.tp, parallel/comm/tensor_parallel.h; the plain products with
// one tensor rank), cut as GPT-2's are (param_table.h): q|k|v and gate|up column-parallel (this
// rank's heads of each of q, k and v; its slice of each of gate and up, so that SwiGLU pairs them on
// the rank), o_proj and down_proj row-parallel, the embedding and lm_head vocabulary-parallel; RoPE and
// the attention run on the rank's heads, whose query heads share the rank's key/value heads as in the
// whole model (T divides KV, so each group of H/KV query heads stays on one rank).
// Shapes: N = B·T positions, Nl = the positions this rank keeps of the residual stream (N, or N/T with
// sequence parallelism over T tensor ranks), C channels; this rank's Hl = H/T query heads and
// KVl = KV/T key/value heads of hs, and Fl = F/T of the MLP width.
#include "gpu/llama_layers.h"

#include <algorithm>
#include <vector>

#include "base/rope_tables.h"
#include "kernels/attention.h"
#include "kernels/encoder.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "parallel/plan/param_table.h"

LlamaLayers::LlamaLayers(const LlamaConfig& config, int max_T, const LayerContext& context)
    : config_(config), eps_((float)config.rmsnorm_eps), c_(context) {
    const int half = config.head_size() / 2;
    std::vector<float> cos_table((size_t)max_T * half), sin_table((size_t)max_T * half);
    rope_tables(cos_table.data(), sin_table.data(), max_T, config.head_size(), config.rope_theta,
                config.rope_scaling);
    rope_cos_ = c_.buf.rope_cos, rope_sin_ = c_.buf.rope_sin;  // in the model's arena (LayerWidths::rope_pairs)
    const size_t bytes = cos_table.size() * sizeof(float);
    CUDA_CHECK(cudaMemcpy(rope_cos_, cos_table.data(), bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(rope_sin_, sin_table.data(), bytes, cudaMemcpyHostToDevice));
}

// The embedding's and lm_head's padded vocabulary Vp: V rounded up to 8 (zero rows past V), of which a
// tensor rank holds the rows of its slice (c_.tp.vocab_slice(Vp)).
int LlamaLayers::padded_vocab() const { return (int)vocab_slice_rows(config_.vocab_size, 1); }

// The buckets each unit reads and adds into (gpu/parameter_scope.h): a layer's own, and in the forward
// the norm above it (bucket_after), fused with its residual add; lm_head is in the final norm's bucket.
BucketUse LlamaLayers::uses(PassUnit::Kind unit, int l, bool training) const {
    const ParamBuckets& b = c_.buckets;
    const int EMBEDDING = b.vocabulary_bucket(), FINAL_NORM = b.final_norm_bucket();
    BucketUse use;
    switch (unit) {
        case PassUnit::EMBED: use.reads = {EMBEDDING}; break;
        case PassUnit::FORWARD_LAYER:
            use.reads = {b.layer_bucket(l)};
            if (c_.bucket_after(l) >= 0) use.reads.push_back(c_.bucket_after(l));
            break;
        case PassUnit::CLASSIFIER:
            use.reads = {FINAL_NORM};
            if (training) use.adds = {FINAL_NORM};
            break;
        case PassUnit::FINAL_NORM_BACKWARD: use = {{FINAL_NORM}, {FINAL_NORM}}; break;
        case PassUnit::BACKWARD_LAYER: use = {{b.layer_bucket(l)}, {b.layer_bucket(l)}}; break;
        case PassUnit::EMBED_BACKWARD: use.adds = {EMBEDDING}; break;
    }
    return use;
}

// ---- forward

// x (Nl, C) = embed_tokens[tokens]: the embedding without positions, each tensor rank looking up the
// tokens of its vocabulary slice (a row-parallel lookup).
void LlamaLayers::embed(int slot) {
    c_.tp.embedding_forward(c_.stage_input(slot), c_.buf.inputs, c_.weight(LLAMA_EMBEDDING), nullptr, c_.B, c_.T,
                            config_.channels, padded_vocab(), c_.stream);
}

// Layer l: x += o_proj(attention(rope(qkv(rmsnorm1(x)))));  x += down(swiglu(gate|up(rmsnorm2(x)))),
// then the RMSNorm that follows the layer (bucket_after): the next layer's input_layernorm, or on the
// last stage's top layer the final norm (a stage's top layer on another stage leaves it to the next).
void LlamaLayers::forward_layer(int l, int slot) {
    const int B = c_.B, T = c_.T, N = B * T, Nl = c_.local_positions(), C = config_.channels, hs = config_.head_size();
    const int Hl = local_heads(), KVl = local_kv_heads(), QKVl = (Hl + 2 * KVl) * hs, Fl = local_ffn();
    const LayerActivations y = c_.layer(l, slot);
    Activations& a = c_.buf.act;
    if (l == c_.stage.first_layer)  // a later layer's input_layernorm is fused with the residual add below it
        rmsnorm_forward(y.ln1, y.ln1_rstd, y.x, c_.weight(ATTN_NORM, l), Nl, C, eps_, c_.stream);      // (Nl, C)
    // attention branch: residual2 = x + o_proj(attention(rope(qkv(ln1)))), ln2 = RMSNorm(residual2)
    c_.tp.column_forward(y.qkv, y.ln1, c_.weight(Q_PROJ, l), nullptr, N, C, QKVl, c_.stream);    // (N, (Hl+2KVl)hs)
    rope_forward(y.qkv, rope_cos_, rope_sin_, B, T, Hl, KVl, hs, c_.stream);                    // q, k rotated
    attention_forward(y.atty, y.att_lse, y.qkv, B, T, Hl, KVl, hs, c_.stream);                  // (N, Hl·hs)
    c_.tp.row_forward(a.branch, y.atty, c_.weight(O_PROJ, l), nullptr, N, Hl * hs, C, c_.stream);  // (Nl, C)
    residual_rmsnorm_forward(y.residual2, y.ln2, y.ln2_rstd, y.x, a.branch, c_.weight(MLP_NORM, l), Nl, C, eps_,
                             c_.stream);
    // MLP branch: branch = down_proj(swiglu(gate|up(ln2)))
    c_.tp.column_forward(y.mlp_hidden, y.ln2, c_.weight(GATE_PROJ, l), nullptr, N, C, 2 * Fl, c_.stream);  // (N, 2Fl)
    swiglu_forward(y.mlp_activated, y.mlp_hidden, N, Fl, c_.stream);                                         // (N, Fl)
    c_.tp.row_forward(a.branch, y.mlp_activated, c_.weight(DOWN_PROJ, l), nullptr, N, Fl, C, c_.stream);  // (Nl, C)
    // residual3 = residual2 + branch, the layer's output, with the RMSNorm after it
    if (l + 1 < c_.stage.end_layer) {
        const LayerActivations next = c_.layer(l + 1, slot);
        residual_rmsnorm_forward(y.residual3, next.ln1, next.ln1_rstd, y.residual2, a.branch,
                                 c_.weight(ATTN_NORM, l + 1), Nl, C, eps_, c_.stream);
    } else if (c_.stage.last) {
        residual_rmsnorm_forward(y.residual3, a.lnf, final_rstd(slot), y.residual2, a.branch,
                                 c_.weight(LLAMA_FINAL_NORM), Nl, C, eps_, c_.stream);
    } else {
        residual_forward(y.residual3, y.residual2, a.branch, (size_t)Nl * C, c_.stream);
    }
}

// lm_head (logits = norm · lm_headᵀ, lm_head.h), in the final norm's bucket; its gradient only when
// training (a prepared bucket).
LmHead LlamaLayers::head(bool training) const {
    return {c_.weight(LLAMA_LM_HEAD), training ? c_.gradient(LLAMA_LM_HEAD) : nullptr, config_.vocab_size,
            padded_vocab(), config_.channels};
}

// Logits only, for what logits_at reads: the rows of sequence 0, in the first chunk.
void LlamaLayers::classifier_logits(int slot) {
    (void)slot;
    lm_head_logits(c_, head(false), c_.buf.act.lnf);
}

// The losses and their mean, and with `training` the head's backward: d(loss)/d(norm output) and
// lm_head's gradient.
void LlamaLayers::classifier(int slot, bool training, float loss_scale, int micro_steps) {
    lm_head_loss(c_, head(training), c_.buf.act.lnf, final_output_gradient(slot), training, loss_scale, micro_steps);
}

// ---- backward: dresidual holds d(loss)/d(residual stream) at this rank's positions; each branch's
// first RMSNorm adds the branch's contribution back into it. Products and attention overwrite their
// input gradients; every parameter gradient is added into, so micro-steps accumulate.

// The final norm, from the classifier's gradient: dresidual = its input gradient.
void LlamaLayers::final_norm_backward(int slot, floatX* dresidual) {
    const int Nl = c_.local_positions(), C = config_.channels;
    CUDA_CHECK(cudaMemsetAsync(dresidual, 0, (size_t)Nl * C * sizeof(floatX), c_.stream));
    rmsnorm_backward(dresidual, c_.gradient(LLAMA_FINAL_NORM), c_.buf.scratch, final_output_gradient(slot),
                     c_.stage_output(slot), c_.weight(LLAMA_FINAL_NORM), final_rstd(slot), Nl, C, c_.stream);
}

// Layer l backward, from d(loss)/d(its output) in dresidual to d(loss)/d(its input) there.
void LlamaLayers::backward_layer(int l, int slot, floatX* dresidual) {
    const int B = c_.B, T = c_.T, N = B * T, Nl = c_.local_positions(), C = config_.channels, hs = config_.head_size();
    const int Hl = local_heads(), KVl = local_kv_heads(), QKVl = (Hl + 2 * KVl) * hs, Fl = local_ffn();
    const LayerActivations y = c_.layer(l, slot);
    Activations& a = c_.buf.act;
    void* scratch = c_.buf.scratch;
    // What -r did not keep, recomputed as forward computed it: the SwiGLU output (-r 1), ln2 (-r 2; ln1
    // where the attention branch needs it).
    if (c_.recompute >= 1) swiglu_forward(y.mlp_activated, y.mlp_hidden, N, Fl, c_.stream);
    if (c_.recompute >= 2) rmsnorm_forward(y.ln2, nullptr, y.residual2, c_.weight(MLP_NORM, l), Nl, C, eps_, c_.stream);
    // MLP branch: down_proj's, SwiGLU's, gate|up's, then post_attention_layernorm's adds into dresidual
    c_.tp.prefetch_input(y.ln2, N, C, c_.stream);  // gate|up's weight gradient reads ln2 whole
    c_.tp.row_backward(a.dmlp_activated, c_.gradient(DOWN_PROJ, l), nullptr, scratch, dresidual, y.mlp_activated,
                       c_.weight(DOWN_PROJ, l), N, Fl, C, c_.stream);                                   // (N, Fl)
    swiglu_backward(a.dmlp_hidden, a.dmlp_activated, y.mlp_hidden, N, Fl, c_.stream);                                // (N, 2Fl)
    c_.tp.column_backward(a.dln, c_.gradient(GATE_PROJ, l), nullptr, scratch, a.dmlp_hidden, c_.tp.prefetched_input(c_.stream),
                          c_.weight(GATE_PROJ, l), N, C, 2 * Fl, c_.stream);                            // (Nl, C)
    rmsnorm_backward(dresidual, c_.gradient(MLP_NORM, l), scratch, a.dln, y.residual2, c_.weight(MLP_NORM, l),
                     y.ln2_rstd, Nl, C, c_.stream);
    // attention branch, up to input_layernorm's output gradient (in dln): o_proj's, the attention's,
    // RoPE's (the inverse rotation, in place), qkv's
    if (c_.recompute >= 2) rmsnorm_forward(y.ln1, nullptr, y.x, c_.weight(ATTN_NORM, l), Nl, C, eps_, c_.stream);
    c_.tp.prefetch_input(y.ln1, N, C, c_.stream);  // qkv's weight gradient reads ln1 whole
    c_.tp.row_backward(a.datty, c_.gradient(O_PROJ, l), nullptr, scratch, dresidual, y.atty, c_.weight(O_PROJ, l), N,
                       Hl * hs, C, c_.stream);                                                          // (N, Hl·hs)
    attention_backward(a.dqkv, scratch, a.datty, y.atty, y.att_lse, y.qkv, B, T, Hl, KVl, hs, c_.stream);
    rope_backward(a.dqkv, rope_cos_, rope_sin_, B, T, Hl, KVl, hs, c_.stream);
    c_.tp.column_backward(a.dln, c_.gradient(Q_PROJ, l), nullptr, scratch, a.dqkv, c_.tp.prefetched_input(c_.stream),
                          c_.weight(Q_PROJ, l), N, C, QKVl, c_.stream);                                 // (Nl, C)
    // input_layernorm's backward adds into dresidual, which becomes the gradient of the layer's input
    rmsnorm_backward(dresidual, c_.gradient(ATTN_NORM, l), scratch, a.dln, y.x, c_.weight(ATTN_NORM, l), y.ln1_rstd,
                     Nl, C, c_.stream);
}

// The embedding's rows: each tensor rank adds the gradients of its vocabulary slice's rows (kernels/
// encoder.h groups the tokens on the host, into the micro-batch's own pinned area).
void LlamaLayers::embed_backward(int micro_batch, const floatX* dresidual) {
    c_.tp.embedding_backward(c_.gradient(LLAMA_EMBEDDING), nullptr, dresidual, c_.pinned_inputs(micro_batch), c_.B,
                             c_.T, config_.channels, padded_vocab(), c_.buf.scratch,
                             c_.encoder_scratch(micro_batch), c_.stream);
}

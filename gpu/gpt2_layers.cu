// GPT-2's layer maths (gpt2_layers.h), top to bottom, in llm.c's order:
//   x = wte[tokens] + wpe
//   each layer: x += attproj(attention(qkv(ln1(x))));  x += fcproj(gelu(fc(ln2(x))))
//   logits = lnf(x) · wteᵀ;  loss = cross-entropy(logits, targets)
// then the same steps backward. Each line is a kernel (kernels/), or a linear layer or gather of the
// tensor group (c_.tp, parallel/comm/tensor_parallel.h: column- and row-parallel products, which are
// the plain products with one tensor rank). What a layer keeps for the backward pass, and what -r
// recomputes, is activations.h's; which buckets each unit reads and adds into is uses() below, and
// when each bucket's weights are there and where its gradients go is gpu/parameter_scope.h's. Each
// residual add is fused with the LayerNorm that follows it.
// Shapes: N = B·T positions, Nl = the positions this rank keeps of the residual stream (N, or N/T
// with sequence parallelism over T tensor ranks), C channels, Ct = C/T, NHt = NH/T heads of HS.
#include "gpu/gpt2_layers.h"

#include <cstdlib>

#include "kernels/attention.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"

LayerTensors GPT2Layers::layer_weights(int l) const {
    return {c_.weight(LN1W, l),     c_.weight(LN1B, l), c_.weight(QKVW, l), c_.weight(QKVB, l),
            c_.weight(ATTPROJW, l), c_.weight(ATTPROJB, l), c_.weight(LN2W, l), c_.weight(LN2B, l),
            c_.weight(FCW, l),      c_.weight(FCB, l),  c_.weight(FCPROJW, l), c_.weight(FCPROJB, l)};
}
LayerTensors GPT2Layers::layer_gradients(int l) const {
    return {c_.gradient(LN1W, l),     c_.gradient(LN1B, l), c_.gradient(QKVW, l), c_.gradient(QKVB, l),
            c_.gradient(ATTPROJW, l), c_.gradient(ATTPROJB, l), c_.gradient(LN2W, l), c_.gradient(LN2B, l),
            c_.gradient(FCW, l),      c_.gradient(FCB, l),  c_.gradient(FCPROJW, l), c_.gradient(FCPROJB, l)};
}

// The buckets each unit reads and adds into (gpu/parameter_scope.h). Two reach past their layer: a
// layer's residual add is fused with the LayerNorm above it (bucket_after), and a LayerNorm backward
// sums the column sums of the residual gradient it finishes, which are the fcproj bias gradient of the
// layer below it (fcproj_bias_in_norm).
BucketUse GPT2Layers::uses(PassUnit::Kind unit, int l, bool training) const {
    const ParamBuckets& b = c_.buckets;
    const int POSITIONS = b.position_bucket(), VOCABULARY = b.vocabulary_bucket(), FINAL_NORM = b.final_norm_bucket();
    const int top = c_.stage.end_layer - 1;
    BucketUse use;
    switch (unit) {
        case PassUnit::EMBED: use = {{POSITIONS, VOCABULARY}, {}}; break;
        case PassUnit::FORWARD_LAYER:
            use.reads = {b.layer_bucket(l)};
            if (c_.bucket_after(l) >= 0) use.reads.push_back(c_.bucket_after(l));
#ifdef TEST_BROKEN_VARIANTS  // a declaration broken on purpose (Makefile): the scope must stop the run
            if (getenv("TEST_UNDECLARED_BUCKET") && use.reads.size() > 1) use.reads.pop_back();
#endif
            break;
        case PassUnit::CLASSIFIER:  // tied to the token embedding
            use.reads = {VOCABULARY};
            if (training) use.adds = {VOCABULARY};
            break;
        case PassUnit::FINAL_NORM_BACKWARD:
            use = {{FINAL_NORM}, {FINAL_NORM}};
            if (fcproj_bias_in_norm(top)) use.adds.push_back(b.layer_bucket(top));
            break;
        case PassUnit::BACKWARD_LAYER:
            use = {{b.layer_bucket(l)}, {b.layer_bucket(l)}};
            if (l > c_.stage.first_layer && fcproj_bias_in_norm(l - 1)) use.adds.push_back(b.layer_bucket(l - 1));
            break;
        case PassUnit::EMBED_BACKWARD: use = {{}, {POSITIONS, VOCABULARY}}; break;
    }
    return use;
}

// ---- forward

// The first stage's input: x (Nl, C) = wte[tokens] + wpe, each tensor rank looking up the tokens of its
// vocabulary slice (a row-parallel lookup).
void GPT2Layers::embed(int slot) {
    const int C = config_.channels;
    c_.tp.embedding_forward(c_.stage_input(slot), c_.buf.inputs, c_.weight(WTE), c_.weight(WPE), c_.B, c_.T, C,
                          config_.padded_vocab_size, c_.stream);
}

// Layer l: x += attproj(attention(qkv(ln1(x))));  x += fcproj(gelu(fc(ln2(x)))), then the LayerNorm
// that follows the layer (bucket_after): the next layer's ln1, or on the last stage's top layer the
// final lnf (a stage's top layer on another stage leaves it to the next stage). GELU is its own pass
// (not the GEMM's epilogue) so that recomputing it in backward gives the very same bits.
void GPT2Layers::forward_layer(int l, int slot) {
    const int B = c_.B, T = c_.T, N = B * T, Nl = c_.local_positions(), C = config_.channels, Ct = C / c_.tp.size();
    const int NHt = config_.num_heads / c_.tp.size(), HS = C / config_.num_heads;
    const LayerActivations y = c_.layer(l, slot);
    const LayerTensors w = layer_weights(l);
    floatX* branch = c_.buf.act.branch;
    if (l == c_.stage.first_layer)  // a later layer's ln1 is fused with the residual add below it
        layernorm_forward(y.ln1, y.ln1_mean, y.ln1_rstd, y.x, w.ln1w, w.ln1b, Nl, C, c_.stream);           // (Nl, C)
    // attention branch: residual2 = x + attproj(attention(qkv(ln1))), ln2 = LayerNorm(residual2)
    c_.tp.column_forward(y.qkv, y.ln1, w.qkvw, w.qkvb, N, C, 3 * Ct, c_.stream);                        // (N, 3Ct)
    attention_forward(y.atty, y.att_lse, y.qkv, B, T, NHt, HS, c_.stream);                             // (N, Ct)
    c_.tp.row_forward(branch, y.atty, w.attprojw, w.attprojb, N, Ct, C, c_.stream);                     // (Nl, C)
    residual_layernorm_forward(y.residual2, y.ln2, y.ln2_mean, y.ln2_rstd, y.x, branch, w.ln2w, w.ln2b, Nl, C,
                               c_.stream);
    // MLP branch: branch = fcproj(gelu(fc(ln2)))
    c_.tp.column_forward(y.mlp_hidden, y.ln2, w.fcw, w.fcb, N, C, 4 * Ct, c_.stream);                          // (N, 4Ct)
    gelu_forward(y.mlp_activated, y.mlp_hidden, (size_t)N * 4 * Ct, c_.stream);                                   // (N, 4Ct)
    c_.tp.row_forward(branch, y.mlp_activated, w.fcprojw, w.fcprojb, N, 4 * Ct, C, c_.stream);              // (Nl, C)
    // residual3 = residual2 + branch, the layer's output, with the LayerNorm after it
    if (l + 1 < c_.stage.end_layer) {
        const LayerActivations next = c_.layer(l + 1, slot);
        residual_layernorm_forward(y.residual3, next.ln1, next.ln1_mean, next.ln1_rstd, y.residual2, branch,
                                   c_.weight(LN1W, l + 1), c_.weight(LN1B, l + 1), Nl, C, c_.stream);
    } else if (c_.stage.last) {
        residual_layernorm_forward(y.residual3, c_.buf.act.lnf, c_.buf.act.lnf_mean + (size_t)slot * c_.max_Nl,
                                   c_.buf.act.lnf_rstd + (size_t)slot * c_.max_Nl, y.residual2, branch,
                                   c_.weight(LNFW), c_.weight(LNFB), Nl, C, c_.stream);
    } else {
        residual_forward(y.residual3, y.residual2, branch, (size_t)Nl * C, c_.stream);
    }
}

// The LM head (logits = lnf · wteᵀ, lm_head.h) tied to the token embedding: the vocabulary bucket's
// wte, this rank's vocabulary slice of it; its gradient only when training (a prepared bucket).
LmHead GPT2Layers::head(bool training) const {
    return {c_.weight(WTE), training ? c_.gradient(WTE) : nullptr, config_.vocab_size, config_.padded_vocab_size,
            config_.channels};
}

// Logits only, for what logits_at reads.
void GPT2Layers::classifier_logits(int slot) {
    (void)slot;
    lm_head_logits(c_, head(false), c_.buf.act.lnf);
}

// The losses and, with `training`, the head's backward: d(loss)/d(lnf) into dlnf (of the slot) and
// wte's gradient.
void GPT2Layers::classifier(int slot, bool training, float loss_scale, int micro_steps) {
    lm_head_loss(c_, head(training), c_.buf.act.lnf, c_.buf.act.dlnf + (size_t)slot * c_.max_Nl * config_.channels,
                 training, loss_scale, micro_steps);
}

// ---- backward
// Gradients flow back through the same steps. dresidual holds d(loss)/d(residual stream) at this
// rank's positions; each branch reads it and its first LayerNorm adds the branch's contribution back
// into it. Matmul and attention backward overwrite their input gradients; every parameter gradient is
// added into, so micro-steps accumulate.
// The residual projections' bias gradients (attproj's, fcproj's: column sums of the residual gradient
// where their output was added) are summed by the LayerNorm backward that finishes that gradient
// anyway (ln2's, and ln1's of the layer above or lnf's), saving a pass over it, where this rank holds
// every position and that LayerNorm is on this stage (norms_sum_projection_biases, fcproj_bias_in_norm);
// otherwise (sequence parallelism, the top layer of a stage that sends to another) by the projection's
// own backward.

// The final LayerNorm, from the classifier's d(lnf): dresidual = its input gradient.
void GPT2Layers::final_norm_backward(int slot, floatX* dresidual) {
    const int Nl = c_.tp.local_positions(c_.B * c_.T), C = config_.channels, top = c_.stage.end_layer - 1;
    CUDA_CHECK(cudaMemsetAsync(dresidual, 0, (size_t)Nl * C * sizeof(floatX), c_.stream));
    layernorm_backward(dresidual, c_.gradient(LNFW), c_.gradient(LNFB), c_.buf.scratch, c_.buf.act.dlnf + (size_t)slot * c_.max_Nl * C,
                       c_.stage_output(slot), c_.weight(LNFW), c_.buf.act.lnf_mean + (size_t)slot * c_.max_Nl,
                       c_.buf.act.lnf_rstd + (size_t)slot * c_.max_Nl, Nl, C, c_.stream,
                       fcproj_bias_in_norm(top) ? c_.gradient(FCPROJB, top) : nullptr);
}

// Layer l backward, from d(loss)/d(its output) in dresidual to d(loss)/d(its input) there.
void GPT2Layers::backward_layer(int l, int slot, floatX* dresidual) {
    const int B = c_.B, T = c_.T, N = B * T, Nl = c_.local_positions(), C = config_.channels, Ct = C / c_.tp.size();
    const int NHt = config_.num_heads / c_.tp.size(), HS = C / config_.num_heads;
    const LayerActivations y = c_.layer(l, slot);
    const LayerTensors w = layer_weights(l), dw = layer_gradients(l);
    Activations& a = c_.buf.act;
    void* scratch = c_.buf.scratch;
    const bool sum_attproj_bias = norms_sum_projection_biases(), sum_fcproj_bias = fcproj_bias_in_norm(l);
    // What -r did not keep, recomputed bit for bit as forward computed it: the GELU output (-r 1), ln2
    // (-r 2; ln1 where the attention branch needs it).
    if (c_.recompute >= 1) gelu_forward(y.mlp_activated, y.mlp_hidden, (size_t)N * 4 * Ct, c_.stream);
    if (c_.recompute >= 2)
        layernorm_recompute(y.ln2, y.residual2, y.ln2_mean, y.ln2_rstd, w.ln2w, w.ln2b, Nl, C, c_.stream);
    // MLP branch: fcproj's input gradient through GELU's derivative (the GEMM's epilogue), fc's, then
    // ln2's backward adds into dresidual (and sums attproj's bias gradient, where it does)
    c_.tp.prefetch_input(y.ln2, N, C, c_.stream);  // fc's weight gradient reads ln2 whole
    c_.tp.row_backward(a.dmlp_hidden, dw.fcprojw, sum_fcproj_bias ? nullptr : dw.fcprojb, scratch, dresidual, y.mlp_activated,
                       w.fcprojw, N, 4 * Ct, C, c_.stream, y.mlp_hidden);                                    // (N, 4Ct)
    c_.tp.column_backward(a.dln, dw.fcw, dw.fcb, scratch, a.dmlp_hidden, c_.tp.prefetched_input(c_.stream), w.fcw, N, C,
                          4 * Ct, c_.stream);                                                          // (Nl, C)
    layernorm_backward(dresidual, dw.ln2w, dw.ln2b, scratch, a.dln, y.residual2, w.ln2w, y.ln2_mean, y.ln2_rstd, Nl, C,
                       c_.stream, sum_attproj_bias ? dw.attprojb : nullptr);
    // attention branch, up to ln1's output gradient (in dln): attproj's, the attention's, qkv's
    if (c_.recompute >= 2) layernorm_recompute(y.ln1, y.x, y.ln1_mean, y.ln1_rstd, w.ln1w, w.ln1b, Nl, C, c_.stream);
    c_.tp.prefetch_input(y.ln1, N, C, c_.stream);  // qkv's weight gradient reads ln1 whole
    c_.tp.row_backward(a.datty, dw.attprojw, sum_attproj_bias ? nullptr : dw.attprojb, scratch, dresidual, y.atty,
                       w.attprojw, N, Ct, C, c_.stream);                                               // (N, Ct)
    attention_backward(a.dqkv, scratch, a.datty, y.atty, y.att_lse, y.qkv, B, T, NHt, HS, c_.stream);  // (N, 3Ct)
    c_.tp.column_backward(a.dln, dw.qkvw, dw.qkvb, scratch, a.dqkv, c_.tp.prefetched_input(c_.stream), w.qkvw, N, C,
                          3 * Ct, c_.stream);                                                          // (Nl, C)
    // ln1's backward adds into dresidual, which becomes the gradient of the layer's input (and sums the
    // layer below's fcproj bias gradient, where it does: that layer's output was added there)
    const bool sums_bias_below = l > c_.stage.first_layer && fcproj_bias_in_norm(l - 1);
    layernorm_backward(dresidual, dw.ln1w, dw.ln1b, scratch, a.dln, y.x, w.ln1w, y.ln1_mean, y.ln1_rstd, Nl, C,
                       c_.stream, sums_bias_below ? c_.gradient(FCPROJB, l - 1) : nullptr);
}

// The embeddings: each tensor rank adds the gradients of its vocabulary slice's rows (and every rank
// the same wpe gradient, from every position). Without a pipeline wte's bucket already holds the
// classifier's gradient of this micro-batch. The encoder's backward groups the micro-batch's tokens
// on the host (kernels/encoder.h), into the micro-batch's own pinned area, so that the upload of the
// grouping is asynchronous.
void GPT2Layers::embed_backward(int micro_batch, const floatX* dresidual) {
    c_.tp.embedding_backward(c_.gradient(WTE), c_.gradient(WPE), dresidual, c_.pinned_inputs(micro_batch), c_.B, c_.T,
                           config_.channels, config_.padded_vocab_size, c_.buf.scratch,
                           c_.encoder_scratch(micro_batch), c_.stream);
}

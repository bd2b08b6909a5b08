// GPUModel's layer maths (gpt_model.h), top to bottom, in llm.c's order:
//   x = wte[tokens] + wpe
//   each layer: x += attproj(attention(qkv(ln1(x))));  x += fcproj(gelu(fc(ln2(x))))
//   logits = lnf(x) · wteᵀ;  loss = cross-entropy(logits, targets)
// then the same steps backward. Each line is a kernel (kernels/), or a linear layer or gather of the
// tensor group (tp_, parallel/comm/tensor_parallel.h: column- and row-parallel products, which are
// the plain products with one tensor rank). What a layer keeps for the backward pass, and what -r
// recomputes, is activations.h's; when each layer's weights are there and where its gradients go is
// gpt_passes.cu's. Each residual add is fused with the LayerNorm that follows it.
// Shapes: N = B·T positions, Nl = the positions this rank keeps of the residual stream (N, or N/T
// with sequence parallelism over T tensor ranks), C channels, Ct = C/T, NHt = NH/T heads of HS.
#include "gpu/gpt_model.h"

#include "kernels/attention.h"
#include "kernels/chunked_classifier.h"
#include "kernels/classifier.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"

LayerTensors GPUModel::layer_weights(int l) const {
    return {weight(LN1W, l),     weight(LN1B, l), weight(QKVW, l), weight(QKVB, l),
            weight(ATTPROJW, l), weight(ATTPROJB, l), weight(LN2W, l), weight(LN2B, l),
            weight(FCW, l),      weight(FCB, l),  weight(FCPROJW, l), weight(FCPROJB, l)};
}
LayerTensors GPUModel::layer_gradients(int l) const {
    return {gradient(LN1W, l),     gradient(LN1B, l), gradient(QKVW, l), gradient(QKVB, l),
            gradient(ATTPROJW, l), gradient(ATTPROJB, l), gradient(LN2W, l), gradient(LN2B, l),
            gradient(FCW, l),      gradient(FCB, l),  gradient(FCPROJW, l), gradient(FCPROJB, l)};
}

// ---- forward

// The first stage's input: x (Nl, C) = wte[tokens] + wpe, each tensor rank looking up the tokens of its
// vocabulary slice (a row-parallel lookup).
void GPUModel::embed(int slot) {
    const int C = config_.channels;
    tp_.embedding_forward(stage_input(slot), buf_.inputs, weight(WTE), weight(WPE), B_, T_, C,
                          config_.padded_vocab_size, stream_);
}

// ln1 of the stage's first layer, from the stage's input (later layers' ln1 is fused with the
// residual add before it: residual_and_next_norm).
void GPUModel::first_layer_norm(int slot) {
    const int Nl = tp_.local_positions(B_ * T_), C = config_.channels, l = stage_.first_layer;
    const LayerActivations y = layer_activations(l, slot);
    layernorm_forward(y.ln1, y.ln1_mean, y.ln1_rstd, y.x, weight(LN1W, l), weight(LN1B, l), Nl, C, stream_);
}

// Attention branch of layer l: branch (Nl, C) = attproj(attention(qkv(ln1))), and
// residual2 = x + branch, ln2 = LayerNorm(residual2).
void GPUModel::attention_forward_branch(int l, int slot) {
    const int B = B_, T = T_, N = B * T, Nl = tp_.local_positions(N), C = config_.channels, Ct = C / tp_.size();
    const int NHt = config_.num_heads / tp_.size(), HS = C / config_.num_heads;
    const LayerActivations y = layer_activations(l, slot);
    const LayerTensors w = layer_weights(l);
    tp_.column_forward(y.qkv, y.ln1, w.qkvw, w.qkvb, N, C, 3 * Ct, stream_);           // (N, 3Ct)
    attention_forward(y.atty, y.att_lse, y.qkv, B, T, NHt, HS, stream_);                // (N, Ct)
    tp_.row_forward(act_.branch, y.atty, w.attprojw, w.attprojb, N, Ct, C, stream_);   // (Nl, C)
    residual_layernorm_forward(y.residual2, y.ln2, y.ln2_mean, y.ln2_rstd, y.x, act_.branch, w.ln2w, w.ln2b, Nl,
                               C, stream_);
}

// MLP branch of layer l: branch (Nl, C) = fcproj(gelu(fc(ln2))). GELU is its own pass (not the
// GEMM's epilogue) so that recomputing it in backward gives the very same bits.
void GPUModel::mlp_forward_branch(int l, int slot) {
    const int N = B_ * T_, C = config_.channels, Ct = C / tp_.size();
    const LayerActivations y = layer_activations(l, slot);
    const LayerTensors w = layer_weights(l);
    tp_.column_forward(y.fch, y.ln2, w.fcw, w.fcb, N, C, 4 * Ct, stream_);                // (N, 4Ct)
    gelu_forward(y.fch_gelu, y.fch, (size_t)N * 4 * Ct, stream_);                         // (N, 4Ct)
    tp_.row_forward(act_.branch, y.fch_gelu, w.fcprojw, w.fcprojb, N, 4 * Ct, C, stream_);  // (Nl, C)
}

// residual3 = residual2 + branch, the layer's output, and the LayerNorm that follows it: the next
// layer's ln1, or on the last stage's top layer the final lnf (a stage's top layer on another stage
// leaves the LayerNorm to the next stage).
void GPUModel::residual_and_next_norm(int l, int slot) {
    const int Nl = tp_.local_positions(B_ * T_), C = config_.channels;
    const LayerActivations y = layer_activations(l, slot);
    if (l + 1 < stage_.end_layer) {
        const LayerActivations next = layer_activations(l + 1, slot);
        residual_layernorm_forward(y.residual3, next.ln1, next.ln1_mean, next.ln1_rstd, y.residual2, act_.branch,
                                   weight(LN1W, l + 1), weight(LN1B, l + 1), Nl, C, stream_);
    } else if (stage_.last) {
        residual_layernorm_forward(y.residual3, act_.lnf, act_.lnf_mean + (size_t)slot * max_Nl_,
                                   act_.lnf_rstd + (size_t)slot * max_Nl_, y.residual2, act_.branch, weight(LNFW),
                                   weight(LNFB), Nl, C, stream_);
    } else {
        residual_forward(y.residual3, y.residual2, act_.branch, (size_t)Nl * C, stream_);
    }
}

// Logits only, for what logits_at reads: the rows of sequence 0, in the first chunk (this rank's
// vocabulary slice).
void GPUModel::classifier_logits(int slot) {
    (void)slot;
    const int N = B_ * T_, C = config_.channels, Vs = tp_.vocab_slice(config_.padded_vocab_size);
    matmul_forward(act_.logits, tp_.whole_input(act_.lnf, N, C, stream_), weight(WTE), nullptr,
                   std::min(N, classifier_rows_), C, Vs, stream_);
}

// The LM head (logits = lnf · wteᵀ), the losses per position and their mean (in control->totals:
// kernels/classifier.h's loss_mean, summed in double in a fixed order on the device, read back once per
// step); with `training` the logits replaced by the loss gradient (scaled by loss_scale / N), the mean
// added into the step's running loss as 1/micro_steps of it, and the head's backward: d(loss)/d(lnf)
// into dlnf (of the slot) and wte's gradient. With one tensor rank all of it runs a chunk of rows at a
// time (classifier_rows). Under tensor parallelism each rank holds a slice of every row's logits: the
// slices' statistics (maximum, sum of exponentials, the target's logit) are gathered and combined into
// each row's log-sum-exp, so that the whole rows are never gathered.
void GPUModel::classifier(int slot, bool training, float loss_scale, int micro_steps) {
    const int N = B_ * T_, V = config_.vocab_size, Vp = config_.padded_vocab_size, C = config_.channels;
    Activations& a = act_;
    StepTotals& totals = buf_.control->totals;
    floatX* dlnf = a.dlnf + (size_t)slot * max_Nl_ * C;
    if (tp_.size() == 1) {
        chunked_classifier(a.losses, dlnf, training ? gradient(WTE) : nullptr, a.logits, a.lnf, weight(WTE),
                           buf_.targets, N, C, V, Vp, classifier_rows_, loss_scale / N, training, stream_);
        loss_mean(&totals.micro_loss, training ? &totals.loss_sum : nullptr, &totals.loss, a.losses, N, micro_steps,
                  stream_);
        return;
    }
    const int Vs = tp_.vocab_slice(Vp), begin = tp_.vocab_begin(Vp);
    const int valid = std::max(0, std::min(V - begin, Vs));  // real tokens in this slice
    tp_.column_forward(a.logits, a.lnf, weight(WTE), nullptr, N, C, Vs, stream_);  // (N, Vs)
    classifier_slice_stats(a.class_stats, a.logits, buf_.targets, N, begin, valid, Vs, stream_);
    tp_.gather(a.class_stats_all, a.class_stats, (size_t)N * 3, stream_);
    classifier_combine_stats(a.class_lse, a.losses, a.class_stats_all, tp_.size(), N, stream_);
    if (training)
        classifier_slice_gradient(a.logits, a.class_lse, buf_.targets, loss_scale / N, N, begin, valid, Vs, stream_);
    loss_mean(&totals.micro_loss, training ? &totals.loss_sum : nullptr, &totals.loss, a.losses, N, micro_steps,
              stream_);
    if (training)  // logits = lnf · wteᵀ backward: d(lnf) and wte's gradient (this vocabulary slice)
        tp_.column_backward(dlnf, gradient(WTE), nullptr, buf_.scratch, a.logits, tp_.whole_input(a.lnf, N, C, stream_),
                            weight(WTE), N, C, Vs, stream_);
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
void GPUModel::final_norm_backward(int slot, floatX* dresidual) {
    const int Nl = tp_.local_positions(B_ * T_), C = config_.channels, top = stage_.end_layer - 1;
    CUDA_CHECK(cudaMemsetAsync(dresidual, 0, (size_t)Nl * C * sizeof(floatX), stream_));
    layernorm_backward(dresidual, gradient(LNFW), gradient(LNFB), buf_.scratch, act_.dlnf + (size_t)slot * max_Nl_ * C,
                       stage_output(slot), weight(LNFW), act_.lnf_mean + (size_t)slot * max_Nl_,
                       act_.lnf_rstd + (size_t)slot * max_Nl_, Nl, C, stream_,
                       fcproj_bias_in_norm(top) ? gradient(FCPROJB, top) : nullptr);
}

// What -r did not keep, recomputed bit for bit as forward computed it: the GELU output (-r 1), ln2 (-r 2;
// ln1 is recomputed where the attention branch needs it).
void GPUModel::recompute(int l, int slot) {
    const int N = B_ * T_, Nl = tp_.local_positions(N), C = config_.channels, Ct = C / tp_.size();
    const LayerActivations y = layer_activations(l, slot);
    if (recompute_ >= 1) gelu_forward(y.fch_gelu, y.fch, (size_t)N * 4 * Ct, stream_);
    if (recompute_ >= 2)
        layernorm_recompute(y.ln2, y.residual2, y.ln2_mean, y.ln2_rstd, weight(LN2W, l), weight(LN2B, l), Nl, C,
                            stream_);
}

// MLP branch backward: fcproj's input gradient through GELU's derivative (the GEMM's epilogue), fc's,
// then ln2's backward adds into dresidual (and attproj's bias gradient, where it sums it).
void GPUModel::mlp_backward_branch(int l, int slot, floatX* dresidual) {
    const int N = B_ * T_, Nl = tp_.local_positions(N), C = config_.channels, Ct = C / tp_.size();
    const LayerActivations y = layer_activations(l, slot);
    const LayerTensors w = layer_weights(l), dw = layer_gradients(l);
    Activations& a = act_;
    tp_.prefetch_input(y.ln2, N, C, stream_);  // fc's weight gradient reads ln2 whole
    tp_.row_backward(a.dfch, dw.fcprojw, fcproj_bias_in_norm(l) ? nullptr : dw.fcprojb, buf_.scratch, dresidual,
                     y.fch_gelu, w.fcprojw, N, 4 * Ct, C, stream_, y.fch);                      // (N, 4Ct)
    tp_.column_backward(a.dln, dw.fcw, dw.fcb, buf_.scratch, a.dfch, tp_.prefetched_input(stream_), w.fcw, N, C,
                        4 * Ct, stream_);                                                        // (Nl, C)
    layernorm_backward(dresidual, dw.ln2w, dw.ln2b, buf_.scratch, a.dln, y.residual2, w.ln2w, y.ln2_mean, y.ln2_rstd,
                       Nl, C, stream_, norms_sum_projection_biases() ? dw.attprojb : nullptr);
}

// Attention branch backward, up to ln1's output gradient (in dln): attproj's, the attention's, qkv's.
void GPUModel::attention_backward_branch(int l, int slot, floatX* dresidual) {
    const int B = B_, T = T_, N = B * T, Nl = tp_.local_positions(N), C = config_.channels, Ct = C / tp_.size();
    const int NHt = config_.num_heads / tp_.size(), HS = C / config_.num_heads;
    const LayerActivations y = layer_activations(l, slot);
    const LayerTensors w = layer_weights(l), dw = layer_gradients(l);
    Activations& a = act_;
    if (recompute_ >= 2)
        layernorm_recompute(y.ln1, y.x, y.ln1_mean, y.ln1_rstd, w.ln1w, w.ln1b, Nl, C, stream_);
    tp_.prefetch_input(y.ln1, N, C, stream_);  // qkv's weight gradient reads ln1 whole
    tp_.row_backward(a.datty, dw.attprojw, norms_sum_projection_biases() ? nullptr : dw.attprojb, buf_.scratch,
                     dresidual, y.atty,
                     w.attprojw, N, Ct, C, stream_);                                             // (N, Ct)
    attention_backward(a.dqkv, buf_.scratch, a.datty, y.atty, y.att_lse, y.qkv, B, T, NHt, HS, stream_);  // (N, 3Ct)
    tp_.column_backward(a.dln, dw.qkvw, dw.qkvb, buf_.scratch, a.dqkv, tp_.prefetched_input(stream_), w.qkvw, N, C,
                        3 * Ct, stream_);                                                        // (Nl, C)
}

// ln1's backward adds into dresidual, which becomes the gradient of the layer's input (and the layer
// below's fcproj bias gradient, where it sums it: that layer's output was added there).
void GPUModel::input_norm_backward(int l, int slot, floatX* dresidual) {
    const bool sums_bias_below = l > stage_.first_layer && fcproj_bias_in_norm(l - 1);
    const int Nl = tp_.local_positions(B_ * T_), C = config_.channels;
    const LayerActivations y = layer_activations(l, slot);
    const LayerTensors w = layer_weights(l), dw = layer_gradients(l);
    layernorm_backward(dresidual, dw.ln1w, dw.ln1b, buf_.scratch, act_.dln, y.x, w.ln1w, y.ln1_mean, y.ln1_rstd, Nl, C,
                       stream_, sums_bias_below ? gradient(FCPROJB, l - 1) : nullptr);
}

// The embeddings: each tensor rank adds the gradients of its vocabulary slice's rows (and every rank
// the same wpe gradient, from every position). Without a pipeline wte's bucket already holds the
// classifier's gradient of this micro-batch. The encoder's backward groups the micro-batch's tokens
// on the host (kernels/encoder.h), into the micro-batch's own pinned area, so that the upload of the
// grouping is asynchronous.
void GPUModel::embed_backward(int micro_batch, const floatX* dresidual) {
    tp_.embedding_backward(gradient(WTE), gradient(WPE), dresidual, pinned_inputs(micro_batch), B_, T_,
                           config_.channels, config_.padded_vocab_size, buf_.scratch,
                           encoder_host_scratch_ + micro_batch * encoder_host_bytes_, stream_);
}

GPUModel::LayerActivations GPUModel::layer_activations(int l, int slot) const {
    const Activations& a = act_;
    const size_t C = config_.channels, Ct = C / tp_.size(), N = max_N_, Nl = max_Nl_;
    const size_t i = (size_t)slot * stage_.layers() + (l - stage_.first_layer);  // this slice
    const size_t ln = recompute_ < 2 ? i : 0, gelu = recompute_ < 1 ? i : 0;
    return {l == stage_.first_layer ? stage_input(slot) : a.residual3 + (i - 1) * Nl * C,
            a.ln1 + ln * Nl * C,
            a.qkv + i * N * 3 * Ct,
            a.atty + i * N * Ct,
            a.residual2 + i * Nl * C,
            a.ln2 + ln * Nl * C,
            a.fch + i * N * 4 * Ct,
            a.fch_gelu + gelu * N * 4 * Ct,
            a.residual3 + i * Nl * C,
            a.ln1_mean + i * Nl,
            a.ln1_rstd + i * Nl,
            a.ln2_mean + i * Nl,
            a.ln2_rstd + i * Nl,
            a.att_lse + i * N * config_.num_heads / tp_.size()};
}

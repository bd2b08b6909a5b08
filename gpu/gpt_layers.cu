// GPUModel's layer maths (gpt_model.h): the forward and backward passes of its pipeline stage.
#include "gpu/gpt_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/errors.h"
#include "gpu/memory_plan.h"
#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/chunked_classifier.h"
#include "kernels/classifier.h"
#include "kernels/common.h"
#include "kernels/elementwise.h"
#include "kernels/encoder.h"
#include "kernels/gelu.h"
#include "kernels/global_norm.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/step_guard.h"
#include "parallel/comm/nccl_check.h"
#include "parallel/plan/pipeline_schedule.h"

// ------------------------------------------------------------------------------------------------
// 2. Forward

GPUModel::LayerSlices GPUModel::layer_slices(int l, int slot) const {
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

// The stage's part of: x = wte[tokens] + wpe; each layer: x += attproj(attention(qkv(ln1(x))));
// x += fcproj(gelu(fc(ln2(x)))); logits = lnf(x) · wteᵀ. Each residual add is fused with the LayerNorm
// that follows it.
// Pipeline (pipeline_): a stage other than the first receives x from the previous stage; one other
// than the last sends its output to the next.
// ZeRO-3 (store_): each bucket's weights are gathered just before use, each layer's while the one
// before it computes, and released once its last kernel is issued.
// Tensor parallelism (tp_): each rank computes its heads, its hidden units and its vocabulary slice:
// before a column-parallel product (qkv, fc, the classifier) its input is gathered whole, after a
// row-parallel one (attproj, fcproj, the embeddings' lookup) the partial sums are reduced to the
// positions this rank keeps (all of them without sequence parallelism).
void GPUModel::forward_stage(int slot, Pass pass, float loss_scale, int micro_steps, bool last_micro_step) {
    const int B = B_, T = T_, N = B * T, Nl = tp_.local_positions(N), C = config_.channels;
    const int NHt = config_.num_heads / tp_.size(), HS = C / config_.num_heads, Ct = C / tp_.size();
    const int Vp = config_.padded_vocab_size, Vs = tp_.vocab_slice(Vp);
    const int POSITIONS = buckets_.position_bucket(), VOCABULARY = buckets_.vocabulary_bucket();
    const int FINAL_NORM = buckets_.final_norm_bucket();
    Activations& a = act_;
    cudaStream_t s = stream_;

    if (stage_.first) {  // the embeddings: each tensor rank looks up the tokens of its vocabulary slice
        store_.gather_weights(POSITIONS);
        store_.gather_weights(VOCABULARY);
        store_.wait_for_weights(POSITIONS);
        store_.wait_for_weights(VOCABULARY);
        encoder_forward_vocab_slice(partial_for(stage_input(slot)), buf_.inputs, p(WTE), tp_.vocab_begin(Vp), Vs,
                                    tp_.added_once(p(WPE)), B, T, C, s);
        tp_.reduce_positions(stage_input(slot), partial_for(stage_input(slot)), N, C, s);
        store_.release_weights(POSITIONS);
        if (!stage_.last) store_.release_weights(VOCABULARY);
    } else {
        pipeline_.receive_activations(stage_input(slot), (size_t)Nl * C, s);
    }
    store_.gather_weights(buckets_.layer_bucket(stage_.first_layer));
    store_.wait_for_weights(buckets_.layer_bucket(stage_.first_layer));
    const LayerSlices first = layer_slices(stage_.first_layer, slot);
    layernorm_forward(first.ln1, first.ln1_mean, first.ln1_rstd, first.x, p(LN1W, stage_.first_layer),
                      p(LN1B, stage_.first_layer), Nl, C, s);
    for (int l = stage_.first_layer; l < stage_.end_layer; l++) {
        const bool last_layer = l + 1 == stage_.end_layer;
        const int next_bucket = !last_layer ? buckets_.layer_bucket(l + 1) : FINAL_NORM;
        if (next_bucket >= 0) store_.gather_weights(next_bucket);  // prefetch: overlaps this layer's compute
        const LayerSlices y = layer_slices(l, slot);
        // Attention branch: residual2 = x + attproj(attention(qkv(ln1))), then ln2 of it.
        const floatX* ln1 = tp_.gather_positions(a.whole, y.ln1, N, C, s);
        matmul_forward(y.qkv, ln1, p(QKVW, l), p(QKVB, l), N, C, 3 * Ct, s);
        attention_forward(y.atty, y.att_lse, y.qkv, B, T, NHt, HS, s);
        matmul_forward(partial_for(a.branch), y.atty, p(ATTPROJW, l), tp_.added_once(p(ATTPROJB, l)), N, Ct, C, s);
        tp_.reduce_positions(a.branch, partial_for(a.branch), N, C, s);
        residual_layernorm_forward(y.residual2, y.ln2, y.ln2_mean, y.ln2_rstd, y.x, a.branch,
                                   p(LN2W, l), p(LN2B, l), Nl, C, s);
        // MLP branch: residual3 = residual2 + fcproj(gelu(fc(ln2))), then the next LayerNorm: the
        // next layer's ln1, or the final lnf. GELU is its own pass (not the GEMM's epilogue) so that
        // recomputing it in backward gives the very same bits.
        const floatX* ln2 = tp_.gather_positions(a.whole, y.ln2, N, C, s);
        matmul_forward(y.fch, ln2, p(FCW, l), p(FCB, l), N, C, 4 * Ct, s);
        gelu_forward(y.fch_gelu, y.fch, (size_t)N * 4 * Ct, s);
        matmul_forward(partial_for(a.branch), y.fch_gelu, p(FCPROJW, l), tp_.added_once(p(FCPROJB, l)), N,
                       4 * Ct, C, s);
        tp_.reduce_positions(a.branch, partial_for(a.branch), N, C, s);
        if (next_bucket >= 0) store_.wait_for_weights(next_bucket);
        if (!last_layer) {
            const LayerSlices next = layer_slices(l + 1, slot);
            residual_layernorm_forward(y.residual3, next.ln1, next.ln1_mean, next.ln1_rstd,
                                       y.residual2, a.branch, p(LN1W, l + 1), p(LN1B, l + 1), Nl, C, s);
        } else if (stage_.last) {
            residual_layernorm_forward(y.residual3, a.lnf, a.lnf_mean + (size_t)slot * max_Nl_,
                                       a.lnf_rstd + (size_t)slot * max_Nl_, y.residual2, a.branch, p(LNFW),
                                       p(LNFB), Nl, C, s);
        } else {
            residual_forward(y.residual3, y.residual2, a.branch, (size_t)Nl * C, s);
        }
        store_.release_weights(buckets_.layer_bucket(l));
    }
    if (!stage_.last) {
        pipeline_.send_activations(stage_output(slot), (size_t)Nl * C);
        return;
    }
    store_.release_weights(FINAL_NORM);
    if (!stage_.first) {
        store_.gather_weights(VOCABULARY);
        store_.wait_for_weights(VOCABULARY);
    }
    if (pass != Pass::LOGITS) return run_classifier(slot, pass == Pass::TRAINING, loss_scale, micro_steps, last_micro_step);
    // Logits only for what logits_at reads, the rows of sequence 0: the first chunk (this rank's slice).
    const floatX* lnf = tp_.gather_positions(a.whole, a.lnf, N, C, s);
    matmul_forward(a.logits, lnf, p(WTE), nullptr, std::min(N, classifier_rows_), C, Vs, s);
    store_.release_weights(VOCABULARY);
}

// The LM head (logits = lnf · wteᵀ), the losses per position and their mean (in control->totals:
// kernels/classifier.h's loss_mean, summed in double in a fixed order on the device, read back once per
// step); with `training` the logits replaced by the loss gradient (scaled by loss_scale / N), the mean
// added into the step's running loss as 1/micro_steps of it, and the head's backward: d(loss)/d(lnf)
// into dlnf (of the slot) and wte's gradient. With one tensor rank all of it runs a chunk of rows at a
// time (classifier_rows). Under tensor parallelism each rank holds a slice of every row's logits: the
// slices' statistics (maximum, sum of exponentials, the target's logit) are gathered and combined into
// each row's log-sum-exp, so that the whole rows are never gathered.
void GPUModel::run_classifier(int slot, bool training, float loss_scale, int micro_steps, bool last_micro_step) {
    const int N = B_ * T_, V = config_.vocab_size, Vp = config_.padded_vocab_size, C = config_.channels;
    const int VOCABULARY = buckets_.vocabulary_bucket();
    Activations& a = act_;
    cudaStream_t s = stream_;
    StepTotals& totals = buf_.control->totals;
    floatX* dlnf = a.dlnf + (size_t)slot * max_Nl_ * C;
    if (tp_.size() == 1) {  // the product, the loss and its backward, a chunk of rows at a time
        if (training) store_.prepare_gradients(VOCABULARY);
        chunked_classifier(a.losses, dlnf, training ? g(WTE) : nullptr, a.logits, a.lnf, p(WTE), buf_.targets, N, C,
                           V, Vp, classifier_rows_, loss_scale / N, training, s);
        loss_mean(&totals.micro_loss, training ? &totals.loss_sum : nullptr, &totals.loss, a.losses, N, micro_steps, s);
        if (training && !stage_.first) reduce_gradients(VOCABULARY, last_micro_step);  // the classifier's copy is done
        store_.release_weights(VOCABULARY);
        return;
    }
    const int Vs = tp_.vocab_slice(Vp), begin = tp_.vocab_begin(Vp);
    const int valid = std::max(0, std::min(V - begin, Vs));  // real tokens in this slice
    matmul_forward(a.logits, tp_.gather_positions(a.whole, a.lnf, N, C, s), p(WTE), nullptr, N, C, Vs, s);
    classifier_slice_stats(a.class_stats, a.logits, buf_.targets, N, begin, valid, Vs, s);
    tp_.gather(a.class_stats_all, a.class_stats, (size_t)N * 3, s);
    classifier_combine_stats(a.class_lse, a.losses, a.class_stats_all, tp_.size(), N, s);
    if (training) classifier_slice_gradient(a.logits, a.class_lse, buf_.targets, loss_scale / N, N, begin, valid, Vs, s);
    loss_mean(&totals.micro_loss, training ? &totals.loss_sum : nullptr, &totals.loss, a.losses, N, micro_steps, s);
    if (training) {  // logits = lnf · wteᵀ backward: d(lnf) and wte's gradient (this vocabulary slice)
        store_.prepare_gradients(VOCABULARY);
        const floatX* lnf = tp_.gather_positions(a.whole, a.lnf, N, C, s);
        matmul_backward(partial_for(dlnf), g(WTE), nullptr, buf_.scratch, a.logits, lnf, p(WTE), N, C,
                        tp_.vocab_slice(Vp), s);
        tp_.reduce_positions(dlnf, partial_for(dlnf), N, C, s);
        if (!stage_.first) reduce_gradients(VOCABULARY, last_micro_step);  // the classifier's copy is done
    }
    store_.release_weights(VOCABULARY);
}


// ------------------------------------------------------------------------------------------------
// 3. Backward

void GPUModel::zero_grad() { store_.zero_gradients(); }

void GPUModel::reduce_gradients(int bucket, bool last_micro_step) {
    const size_t summed = buckets_.buckets[bucket].sequence_summed;
    if (store_.reduces_gradients(last_micro_step) && summed > 0)
        tp_.sum_sequence_gradients(store_.gradients(bucket), summed, stream_);
    store_.reduce_gradients(bucket, last_micro_step);
}

// Gradients flow back through the same steps. dresidual holds d(loss)/d(residual stream) at this
// rank's positions: from the final LayerNorm's backward on the last stage, from the next stage
// otherwise; each branch reads it and its first LayerNorm adds the branch's contribution back into
// it; a stage other than the first sends what is left, the gradient of its input, to the previous
// one. Matmul and attention backward overwrite their input gradients; every parameter gradient is
// added into, so micro-steps accumulate. As soon as a bucket's gradients are final for this
// micro-step, they are reduced across the data ranks (parallel/comm/zero.h says when and how for each ZeRO
// stage): the final LayerNorm's first, then each layer's, the embeddings' last. Under ZeRO-3 each
// layer's weights are gathered again, the next layer down while this one computes. Under tensor
// parallelism the column-parallel products' input gradients are partial sums, reduced like the
// forward's row-parallel outputs, and the row-parallel products read the whole output gradient,
// gathered.
// The residual projections' bias gradients (attproj's, fcproj's: column sums of the residual
// gradient where their output was added) are summed by the LayerNorm backward that finishes that
// gradient anyway (ln2's, and ln1's of the layer above or lnf's), saving a pass over it, where this
// rank holds every position and that LayerNorm is on this stage; elsewhere (sequence parallelism,
// the top layer of a stage that sends to another) by the projection's own backward. A layer's
// gradients are therefore prepared before the LayerNorm above it runs.
void GPUModel::backward_layers(int slot, int micro_batch, bool last_micro_step) {
    const int B = B_, T = T_, N = B * T, Nl = tp_.local_positions(N);
    const int C = config_.channels, Ct = C / tp_.size(), NHt = config_.num_heads / tp_.size();
    const int HS = C / config_.num_heads;
    const int FINAL_NORM = buckets_.final_norm_bucket();
    const bool keep_ln = recompute_ < 2, keep_gelu = recompute_ < 1;
    const bool norms_sum_biases = Nl == N;
    auto fcproj_bias_in_norm = [&](int l) { return norms_sum_biases && (l + 1 < stage_.end_layer || stage_.last); };
    Activations& a = act_;
    cudaStream_t s = stream_;
    const int turn = pipeline_.stages() > 1 ? micro_batch % 2 : 0;
    floatX* dresidual = a.dresidual[turn];
    pipeline_.before_overwriting(turn, s);

    store_.gather_weights(buckets_.layer_bucket(stage_.end_layer - 1));
    if (stage_.last) {  // the final LayerNorm, from the classifier's d(lnf)
        store_.gather_weights(FINAL_NORM);
        store_.wait_for_weights(FINAL_NORM);
        store_.prepare_gradients(FINAL_NORM);
        const int top = stage_.end_layer - 1;
        if (fcproj_bias_in_norm(top)) store_.prepare_gradients(buckets_.layer_bucket(top));
        CUDA_CHECK(cudaMemsetAsync(dresidual, 0, (size_t)Nl * C * sizeof(floatX), s));
        layernorm_backward(dresidual, g(LNFW), g(LNFB), buf_.scratch, a.dlnf + (size_t)slot * max_Nl_ * C,
                           stage_output(slot), p(LNFW), a.lnf_mean + (size_t)slot * max_Nl_,
                           a.lnf_rstd + (size_t)slot * max_Nl_, Nl, C, s,
                           fcproj_bias_in_norm(top) ? g(FCPROJB, top) : nullptr);
        store_.release_weights(FINAL_NORM);
        reduce_gradients(FINAL_NORM, last_micro_step);
    } else {
        pipeline_.receive_gradients(dresidual, (size_t)Nl * C, s);
    }

    for (int l = stage_.end_layer - 1; l >= stage_.first_layer; l--) {
        const int bucket = buckets_.layer_bucket(l);
        if (l > stage_.first_layer) store_.gather_weights(buckets_.layer_bucket(l - 1));  // prefetch
        store_.wait_for_weights(bucket);
        if (!fcproj_bias_in_norm(l)) store_.prepare_gradients(bucket);  // else before the norm above
        const LayerSlices y = layer_slices(l, slot);

        // Recompute what -r did not keep, bit for bit as forward computed it.
        if (!keep_gelu) gelu_forward(y.fch_gelu, y.fch, (size_t)N * 4 * Ct, s);
        if (!keep_ln)
            layernorm_recompute(y.ln2, y.residual2, y.ln2_mean, y.ln2_rstd, p(LN2W, l), p(LN2B, l), Nl,
                                C, s);

        // MLP branch. fcproj's input gradient goes through GELU's derivative in the GEMM epilogue.
        // (fc's weight gradient needs ln2 whole: gathered while fcproj's backward computes.)
        const floatX* dbranch = tp_.gather_positions(a.whole, dresidual, N, C, s);
        tp_.start_gather(a.whole_ln, y.ln2, N, C, s);
        matmul_backward(a.dfch, g(FCPROJW, l), fcproj_bias_in_norm(l) ? nullptr : g(FCPROJB, l), buf_.scratch,
                        dbranch, y.fch_gelu, p(FCPROJW, l), N, 4 * Ct, C, s, y.fch);
        const floatX* ln2 = tp_.finish_gather(s);
        matmul_backward(partial_for(a.dln), g(FCW, l), g(FCB, l), buf_.scratch, a.dfch, ln2, p(FCW, l), N, C,
                        4 * Ct, s);
        tp_.reduce_positions(a.dln, partial_for(a.dln), N, C, s);
        layernorm_backward(dresidual, g(LN2W, l), g(LN2B, l), buf_.scratch, a.dln, y.residual2,
                           p(LN2W, l), y.ln2_mean, y.ln2_rstd, Nl, C, s,
                           norms_sum_biases ? g(ATTPROJB, l) : nullptr);

        // Attention branch (qkv's weight gradient needs ln1 whole: gathered while attproj's and the
        // attention's backward compute).
        dbranch = tp_.gather_positions(a.whole, dresidual, N, C, s);
        if (!keep_ln)
            layernorm_recompute(y.ln1, y.x, y.ln1_mean, y.ln1_rstd, p(LN1W, l), p(LN1B, l), Nl, C, s);
        tp_.start_gather(a.whole_ln, y.ln1, N, C, s);
        matmul_backward(a.datty, g(ATTPROJW, l), norms_sum_biases ? nullptr : g(ATTPROJB, l), buf_.scratch,
                        dbranch, y.atty, p(ATTPROJW, l), N, Ct, C, s);
        attention_backward(a.dqkv, buf_.scratch, a.datty, y.atty, y.att_lse, y.qkv, B, T, NHt, HS, s);
        const floatX* ln1 = tp_.finish_gather(s);
        matmul_backward(partial_for(a.dln), g(QKVW, l), g(QKVB, l), buf_.scratch, a.dqkv, ln1, p(QKVW, l), N,
                        C, 3 * Ct, s);
        tp_.reduce_positions(a.dln, partial_for(a.dln), N, C, s);
        const bool below = l > stage_.first_layer;  // the layer whose fcproj output this norm's input holds
        if (below && fcproj_bias_in_norm(l - 1)) store_.prepare_gradients(buckets_.layer_bucket(l - 1));
        layernorm_backward(dresidual, g(LN1W, l), g(LN1B, l), buf_.scratch, a.dln, y.x, p(LN1W, l),
                           y.ln1_mean, y.ln1_rstd, Nl, C, s,
                           below && fcproj_bias_in_norm(l - 1) ? g(FCPROJB, l - 1) : nullptr);
        store_.release_weights(bucket);
        reduce_gradients(bucket, last_micro_step);
    }
}

// The embeddings: each tensor rank adds the gradients of its vocabulary slice's rows (and every rank
// the same wpe gradient, from every position). Without a pipeline wte's bucket already holds the
// classifier's gradient of this micro-batch. The encoder's backward groups the micro-batch's tokens
// on the host (kernels/encoder.h), into the micro-batch's own pinned area, so that the upload of the
// grouping is asynchronous.
void GPUModel::backward_embeddings(int slot, int micro_batch, bool last_micro_step) {
    (void)slot;
    const int B = B_, T = T_, N = B * T, Nl = tp_.local_positions(N), C = config_.channels;
    const int Vp = config_.padded_vocab_size, Vs = tp_.vocab_slice(Vp);
    const int POSITIONS = buckets_.position_bucket(), VOCABULARY = buckets_.vocabulary_bucket();
    floatX* dresidual = act_.dresidual[pipeline_.stages() > 1 ? micro_batch % 2 : 0];
    cudaStream_t s = stream_;
    if (stage_.first) {
        const floatX* dencoded = tp_.gather_positions(act_.whole, dresidual, N, C, s);
        store_.prepare_gradients(POSITIONS);
        if (!stage_.last) store_.prepare_gradients(VOCABULARY);
        encoder_backward_vocab_slice(g(WTE), tp_.vocab_begin(Vp), Vs, g(WPE), dencoded, staged_inputs(micro_batch),
                                     B, T, C, buf_.scratch, encoder_host_scratch_ + micro_batch * encoder_host_bytes_, s);
        reduce_gradients(POSITIONS, last_micro_step);
        reduce_gradients(VOCABULARY, last_micro_step);
    } else {
        pipeline_.send_gradients(dresidual, (size_t)Nl * C, pipeline_.stages() > 1 ? micro_batch % 2 : 0);
    }
    store_.finish_backward();
}

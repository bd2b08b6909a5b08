// GPUModel's passes over its pipeline stage (gpt_model.h): the family's layer maths (layers_,
// model_layers.h), layer by layer, with what the parameters need around it (parallel/comm/parameter_store.h, params_):
//   forward   each bucket's weights are used once they are there, and released after its last
//             kernel is issued; the next layer's are asked for (prefetched) while this one computes
//   backward  the same, top layer first; a layer's gradients are prepared (a zeroed slot under
//             ZeRO-2/3) before the first kernel that adds into them, and reduced across the data
//             ranks as soon as they are final for this micro-step: the final LayerNorm's first, then
//             each layer's, the embeddings' last
// Without ZeRO-3 every weight is always there and those calls do nothing; without ZeRO-2/3 the
// preparing does nothing either, and reductions wait for the step's last micro-step.
// The stage's input and output, and the gradients between stages, are the step's (gpt_step.cu).
#include "gpu/gpt_model.h"

// The stage's forward pass: the embeddings (first stage), the layers, and on the last stage the final
// LayerNorm (fused into the top layer's residual add) and the classifier.
void GPUModel::forward_stage(int slot, Pass pass, float loss_scale, int micro_steps, bool last_micro_step) {
    const int POSITIONS = buckets_.position_bucket(), VOCABULARY = buckets_.vocabulary_bucket();
    const int FINAL_NORM = buckets_.final_norm_bucket();
    timer_.mark(StepPhase::FORWARD);
    if (stage_.first) {
        if (POSITIONS >= 0) params_.gather_weights(POSITIONS);  // -1: the family has none
        params_.gather_weights(VOCABULARY);
        if (POSITIONS >= 0) params_.wait_for_weights(POSITIONS);
        params_.wait_for_weights(VOCABULARY);
        layers_->embed(slot);
        if (POSITIONS >= 0) params_.release_weights(POSITIONS);
        if (!stage_.last || !tied_classifier_) params_.release_weights(VOCABULARY);  // a tied classifier uses it again
    }
    params_.use_weights(buckets_.layer_bucket(stage_.first_layer));
    layers_->first_layer_norm(slot);
    for (int l = stage_.first_layer; l < stage_.end_layer; l++) {
        timer_.mark(StepPhase::FORWARD, l);
        const int next = l + 1 < stage_.end_layer ? buckets_.layer_bucket(l + 1) : FINAL_NORM;  // -1: none
        if (next >= 0) params_.gather_weights(next);  // prefetch: arrives while this layer computes
        layers_->attention_forward_branch(l, slot);
        layers_->mlp_forward_branch(l, slot);
        if (next >= 0) params_.wait_for_weights(next);  // its LayerNorm follows the residual add
        layers_->residual_and_next_norm(l, slot);
        params_.release_weights(buckets_.layer_bucket(l));
    }
    timer_.mark(StepPhase::FORWARD);
    if (!stage_.last) return;
    if (pass != Pass::LOGITS) timer_.mark(StepPhase::LOSS);
    // The classifier's weights: the tied embedding's (GPT-2), or the final norm's bucket's own.
    const int CLASSIFIER = classifier_bucket();
    if (CLASSIFIER != FINAL_NORM) params_.release_weights(FINAL_NORM);
    if (!stage_.first && CLASSIFIER == VOCABULARY) params_.use_weights(VOCABULARY);
    if (pass == Pass::LOGITS) {
        layers_->classifier_logits(slot);
    } else {
        const bool training = pass == Pass::TRAINING;
        if (training) params_.prepare_gradients(CLASSIFIER);
        layers_->classifier(slot, training, loss_scale, micro_steps);
        if (training && !stage_.first && CLASSIFIER == VOCABULARY)
            reduce_gradients(VOCABULARY, last_micro_step);  // the classifier's copy is done
    }
    params_.release_weights(CLASSIFIER);
}

// The stage's layers backward, from the gradient of its output in dresidual (the classifier's on the
// last stage, which also runs the final LayerNorm's backward; received otherwise), leaving the
// gradient of the stage's input there.
void GPUModel::backward_layers(int slot, int micro_batch, bool last_micro_step) {
    floatX* dresidual = act_.dresidual[residual_gradient_turn(micro_batch)];
    const int FINAL_NORM = buckets_.final_norm_bucket();
    timer_.mark(StepPhase::BACKWARD);
    params_.gather_weights(buckets_.layer_bucket(stage_.end_layer - 1));  // prefetch
    if (stage_.last) {
        params_.use_weights(FINAL_NORM);
        if (tied_classifier_) params_.prepare_gradients(FINAL_NORM);  // else the classifier did (lm_head's)
        const int top = stage_.end_layer - 1;
        if (layers_->norm_above_adds_gradients(top)) params_.prepare_gradients(buckets_.layer_bucket(top));
        layers_->final_norm_backward(slot, dresidual);
        params_.release_weights(FINAL_NORM);
        reduce_gradients(FINAL_NORM, last_micro_step);
    }
    for (int l = stage_.end_layer - 1; l >= stage_.first_layer; l--) {
        const int bucket = buckets_.layer_bucket(l);
        timer_.mark(StepPhase::BACKWARD, l, true);
        if (l > stage_.first_layer) params_.gather_weights(buckets_.layer_bucket(l - 1));  // prefetch
        params_.wait_for_weights(bucket);
        if (!layers_->norm_above_adds_gradients(l)) params_.prepare_gradients(bucket);  // else before the norm above
        layers_->recompute(l, slot);
        layers_->mlp_backward_branch(l, slot, dresidual);
        layers_->attention_backward_branch(l, slot, dresidual);
        // The input norm's backward may add into the layer below's gradients (GPT-2: its fcproj bias).
        if (l > stage_.first_layer && layers_->norm_above_adds_gradients(l - 1))
            params_.prepare_gradients(buckets_.layer_bucket(l - 1));
        layers_->input_norm_backward(l, slot, dresidual);
        params_.release_weights(bucket);
        reduce_gradients(bucket, last_micro_step);
    }
    timer_.mark(StepPhase::BACKWARD);
}

// The embeddings backward (first stage): their gradients added and reduced.
void GPUModel::backward_embeddings(int micro_batch, bool last_micro_step) {
    if (!stage_.first) return;
    const int POSITIONS = buckets_.position_bucket(), VOCABULARY = buckets_.vocabulary_bucket();
    if (POSITIONS >= 0) params_.prepare_gradients(POSITIONS);
    // A tied classifier on this stage prepared the vocabulary's gradients.
    if (!stage_.last || !tied_classifier_) params_.prepare_gradients(VOCABULARY);
    layers_->embed_backward(micro_batch, act_.dresidual[residual_gradient_turn(micro_batch)]);
    if (POSITIONS >= 0) reduce_gradients(POSITIONS, last_micro_step);
    reduce_gradients(VOCABULARY, last_micro_step);
}

// A bucket's gradients across the data ranks (in fp32: widened first); under sequence parallelism its
// LayerNorm parameters' gradients (computed by each tensor rank from its own positions) summed over the
// tensor group first.
void GPUModel::reduce_gradients(int bucket, bool last_micro_step) {
    params_.widen_gradients(bucket);
    const size_t summed = buckets_.buckets[bucket].sequence_summed;
    if (params_.reduces_gradients(last_micro_step) && summed > 0)
        params_.with_gradients_to_reduce(bucket, [&](auto* gradients) {
            tp_.sum_sequence_gradients(gradients, summed, stream_);
        });
    params_.reduce_gradients(bucket, last_micro_step);
}

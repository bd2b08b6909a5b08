// GPUModel's passes over its pipeline stage (gpu_model.h): the family's layer maths (layers_,
// model_layers.h), unit by unit (the embedding, each layer, the classifier; backward the final norm,
// each layer from the top, the embedding), each inside the parameters' scope (scope_,
// gpu/parameter_scope.h), which gathers, waits for, prepares, releases and reduces each bucket from
// what the units declare. Without ZeRO-3 every weight is always there and those calls do nothing;
// without ZeRO-2/3 the preparing does nothing either, and reductions wait for the step's last
// micro-step. The stage's input and output, and the gradients between stages, are the step's
// (step.cu).
#include "gpu/gpu_model.h"

// The units of one micro-step on this stage (its forward only, for a pass that does not train), with
// what each declares and what the scope does around it.
std::vector<PassUnit> GPUModel::plan_micro_step(bool training) const {
    std::vector<PassUnit> units;
    auto add = [&](PassUnit::Kind kind, int l) {
        PassUnit unit;
        unit.kind = kind, unit.layer = l, unit.use = layers_->uses(kind, l, training);
        units.push_back(std::move(unit));
    };
    if (stage_.first) add(PassUnit::EMBED, 0);
    for (int l = stage_.first_layer; l < stage_.end_layer; l++) add(PassUnit::FORWARD_LAYER, l);
    if (stage_.last) add(PassUnit::CLASSIFIER, 0);
    if (training) {
        if (stage_.last) add(PassUnit::FINAL_NORM_BACKWARD, 0);
        for (int l = stage_.end_layer - 1; l >= stage_.first_layer; l--) add(PassUnit::BACKWARD_LAYER, l);
        if (stage_.first) add(PassUnit::EMBED_BACKWARD, 0);
    }
    plan_units(units);
    return units;
}

// One unit: the scope around it, then the reductions of the gradients it finished.
template <typename Maths>
void GPUModel::run_unit(const PassUnit& unit, bool last_micro_step, Maths&& maths) {
    scope_.enter(unit);
    maths();
    scope_.leave();
    for (int bucket : unit.reductions) reduce_gradients(bucket, last_micro_step);
}

// The stage's forward pass: the embeddings (first stage), the layers, and on the last stage the
// classifier (the final norm is fused into the top layer's residual add).
void GPUModel::forward_stage(int slot, Pass pass, float loss_scale, int micro_steps, bool last_micro_step) {
    timer_.mark(StepPhase::FORWARD);
    for (const PassUnit& unit : micro_step_units(pass)) {
        if (!unit.forward()) break;
        if (unit.kind == PassUnit::FORWARD_LAYER) timer_.mark(StepPhase::FORWARD, unit.layer);
        if (unit.kind == PassUnit::CLASSIFIER) {
            timer_.mark(StepPhase::FORWARD);
            if (pass != Pass::LOGITS) timer_.mark(StepPhase::LOSS);
        }
        run_unit(unit, last_micro_step, [&] {
            if (unit.kind == PassUnit::EMBED) layers_->embed(slot);
            if (unit.kind == PassUnit::FORWARD_LAYER) layers_->forward_layer(unit.layer, slot);
            if (unit.kind == PassUnit::CLASSIFIER && pass == Pass::LOGITS) layers_->classifier_logits(slot);
            if (unit.kind == PassUnit::CLASSIFIER && pass != Pass::LOGITS)
                layers_->classifier(slot, pass == Pass::TRAINING, loss_scale, micro_steps);
        });
    }
    if (!stage_.last) timer_.mark(StepPhase::FORWARD);
}

// The stage's layers backward, from the gradient of its output in dresidual (the classifier's on the
// last stage, which also runs the final norm's backward; received otherwise), leaving the gradient of
// the stage's input there.
void GPUModel::backward_layers(int slot, int micro_batch, bool last_micro_step) {
    floatX* dresidual = act_.dresidual[residual_gradient_turn(micro_batch)];
    timer_.mark(StepPhase::BACKWARD);
    for (const PassUnit& unit : micro_step_units(Pass::TRAINING)) {
        if (unit.kind == PassUnit::FINAL_NORM_BACKWARD)
            run_unit(unit, last_micro_step, [&] { layers_->final_norm_backward(slot, dresidual); });
        if (unit.kind == PassUnit::BACKWARD_LAYER) {
            timer_.mark(StepPhase::BACKWARD, unit.layer, true);
            run_unit(unit, last_micro_step, [&] { layers_->backward_layer(unit.layer, slot, dresidual); });
        }
    }
    timer_.mark(StepPhase::BACKWARD);
}

// The embeddings backward (first stage): their gradients added and reduced.
void GPUModel::backward_embeddings(int micro_batch, bool last_micro_step) {
    if (!stage_.first) return;
    run_unit(micro_step_units(Pass::TRAINING).back(), last_micro_step, [&] {
        layers_->embed_backward(micro_batch, act_.dresidual[residual_gradient_turn(micro_batch)]);
    });
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

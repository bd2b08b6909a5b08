// The layer maths of one model family, as the family-neutral GPU model (gpu/gpu_model.h) drives it.
// The core owns the passes, the step, ZeRO, the pipeline, the optimizer, CUDA graphs and the memory;
// a family (GPT2Layers: gpu/gpt2_layers.h, LlamaLayers: gpu/llama_layers.h) says what each unit of a
// micro-step computes, kernel by kernel, through a LayerContext (where this rank's weights, gradients
// and activations are now, the stream, the tensor group and the micro-batch's shape), and which
// parameter buckets each unit reads and adds into (uses). The core runs every unit inside the
// parameters' scope (gpu/parameter_scope.h), which gathers, waits, prepares, releases and reduces from
// those declarations alone; a unit never names a collective.
//
// A micro-step's units, in order (pipeline stage permitting):
//   forward   embed (first stage), forward_layer for each layer, classifier (last stage)
//   backward  final_norm_backward (last stage), backward_layer for each layer from the top,
//             embed_backward (first stage)
#pragma once
#include <cstddef>

#include "gpu/activations.h"
#include "gpu/placement.h"
#include "kernels/common.h"
#include "gpu/parameter_scope.h"
#include "parallel/comm/tensor_parallel.h"
#include "parallel/plan/param_buckets.h"

// One layer's slices of the activations of the micro-batch in a slot (activations.h): what its
// forward pass writes and its backward pass reads. Widths per position are LayerWidths'.
struct LayerActivations {
    const floatX* x;  // the layer's input: the stage's input, or the previous layer's residual3
    floatX *ln1, *qkv, *atty, *residual2, *ln2, *mlp_hidden, *mlp_activated, *residual3;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *att_lse;
};

// What the core hands a family's layers. The references are the core's own members: they follow the
// micro-batch's shape, the parameter store's buckets and the pinned memory as these change.
struct LayerContext {
    const ParamBuckets& buckets;     // where each tensor is in its bucket
    ParameterScope& scope;           // each bucket's weights and gradients, for the unit being run
    TensorParallel& tp;              // the tensor group's products and gathers
    const PipelineStage& stage;      // this rank's layers
    StepBuffers& buf;                // activations, tokens, scratch, the step's control block
    const LayerWidths& widths;       // the activations' widths (whole model)
    const cudaStream_t& stream;      // the compute stream
    const int& B;                    // the current micro-batch's shape
    const int& T;
    const size_t max_N, max_Nl;      // positions of the largest micro-batch, and those this rank keeps
    const int recompute;             // -r
    const int classifier_rows;       // rows of logits held at once (activations.h)
    int* const& pinned_tokens;       // each micro-batch's pinned tokens (inputs then targets, max_N each)
    char* const& encoder_host_scratch;  // the encoder backward's host grouping, per micro-batch
    const size_t& encoder_host_bytes;

    // Tensor t of layer l (l ignored outside the layers), this rank's slice, wherever its bucket is now
    // (the bucket must be among the running unit's declared reads, or adds for a gradient).
    floatX* weight(int t, int l = 0) const {
        return scope.weights(buckets.bucket_of(t, l)) + buckets.offset_in_bucket(t, l);
    }
    floatX* gradient(int t, int l = 0) const {
        return scope.gradients(buckets.bucket_of(t, l)) + buckets.offset_in_bucket(t, l);
    }
    // The bucket of the norm that follows layer l's residual add on this stage: the next layer's (its
    // input norm), the final norm's on the last stage's top layer; -1 where the next stage has it.
    int bucket_after(int l) const {
        if (l + 1 < stage.end_layer) return buckets.layer_bucket(l + 1);
        return stage.last ? buckets.final_norm_bucket() : -1;
    }
    // Layer l's slices (a layer of this stage) of every per-layer activation of the micro-batch in
    // `slot` (slice 0 of those -r does not keep per layer).
    LayerActivations layer(int l, int slot) const;
    // The stage's input and output activations of the micro-batch in `slot`.
    floatX* stage_input(int slot) const { return buf.act.encoded + (size_t)slot * max_Nl * widths.channels; }
    const floatX* stage_output(int slot) const { return layer(stage.end_layer - 1, slot).residual3; }
    // The micro-batch's pinned input tokens, and its area of the encoder backward's host scratch.
    const int* pinned_inputs(int micro_batch) const { return pinned_tokens + (size_t)micro_batch * 2 * max_N; }
    char* encoder_scratch(int micro_batch) const {
        return encoder_host_scratch + micro_batch * encoder_host_bytes;
    }
    int positions() const { return B * T; }                              // N
    int local_positions() const { return tp.local_positions(B * T); }    // Nl
};

class ModelLayers {
public:
    virtual ~ModelLayers() = default;
    // The buckets a unit reads and adds into (layer: for FORWARD_LAYER and BACKWARD_LAYER; training:
    // whether the classifier also runs its backward).
    virtual BucketUse uses(PassUnit::Kind unit, int layer, bool training) const = 0;
    // ---- forward
    virtual void embed(int slot) = 0;  // the first stage's input from the tokens
    // Layer l, whole: its input norm where it is the stage's first (else the layer below fused it with
    // its residual add), the attention and MLP branches, its output (the residual add) and the norm that
    // follows it (bucket_after: the next layer's input norm, or the final norm).
    virtual void forward_layer(int l, int slot) = 0;
    virtual void classifier_logits(int slot) = 0;  // logits of sequence 0 only, for logits_at
    // The loss (into the control block's totals) and with `training` the classifier's backward.
    virtual void classifier(int slot, bool training, float loss_scale, int micro_steps) = 0;
    // ---- backward (dresidual: d(loss)/d(residual stream) at this rank's positions)
    virtual void final_norm_backward(int slot, floatX* dresidual) = 0;
    // Layer l, whole: what -r did not keep recomputed, the MLP and attention branches' backward, and its
    // input norm's, which leaves the gradient of the layer's input in dresidual.
    virtual void backward_layer(int l, int slot, floatX* dresidual) = 0;
    virtual void embed_backward(int micro_batch, const floatX* dresidual) = 0;
};

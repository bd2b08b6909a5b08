// The layer maths of one model family, as the family-neutral GPU model (gpu/gpt_model.h) drives it.
// The core owns the passes, the step, ZeRO, the pipeline, the optimizer, CUDA graphs and the memory;
// a family (GPT2Layers: gpu/gpt2_layers.h, LlamaLayers: gpu/llama_layers.h) says what each step of
// a pass computes, kernel by kernel, through a LayerContext: where this rank's weights, gradients
// and activations are now, the stream, the tensor group and the micro-batch's shape.
//
// A forward pass of a pipeline stage calls, in this order:
//   embed (first stage), first_layer_norm, then for each layer attention_forward_branch,
//   mlp_forward_branch, residual_and_next_norm; on the last stage classifier (or classifier_logits)
// and a backward pass:
//   final_norm_backward (last stage), then for each layer from the top recompute,
//   mlp_backward_branch, attention_backward_branch, input_norm_backward; embed_backward (first stage)
#pragma once
#include <cstddef>

#include "gpu/activations.h"
#include "gpu/placement.h"
#include "kernels/common.h"
#include "parallel/comm/parameter_store.h"
#include "parallel/comm/tensor_parallel.h"
#include "parallel/plan/param_buckets.h"

// One layer's slices of the activations of the micro-batch in a slot (activations.h): what its
// forward pass writes and its backward pass reads. Widths per position are LayerWidths'.
struct LayerActivations {
    const floatX* x;  // the layer's input: the stage's input, or the previous layer's residual3
    floatX *ln1, *qkv, *atty, *residual2, *ln2, *fch, *fch_gelu, *residual3;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *att_lse;
};

// What the core hands a family's layers. The references are the core's own members: they follow the
// micro-batch's shape, the parameter store's buckets and the pinned memory as these change.
struct LayerContext {
    const ParamBuckets& buckets;     // where each tensor is in its bucket
    const ParameterStore& params;    // where each bucket's weights and gradients are now
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

    // Tensor t of layer l (l ignored outside the layers), this rank's slice, wherever its bucket is now.
    floatX* weight(int t, int l = 0) const {
        return params.weights(buckets.bucket_of(t, l)) + buckets.offset_in_bucket(t, l);
    }
    floatX* gradient(int t, int l = 0) const {
        return params.gradients(buckets.bucket_of(t, l)) + buckets.offset_in_bucket(t, l);
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
    // ---- forward
    virtual void embed(int slot) = 0;             // the first stage's input from the tokens
    virtual void first_layer_norm(int slot) = 0;  // the stage's first layer's input norm
    virtual void attention_forward_branch(int l, int slot) = 0;
    virtual void mlp_forward_branch(int l, int slot) = 0;
    // The layer's output (residual add) and the norm that follows it: the next layer's input norm, or
    // on the last stage's top layer the final norm.
    virtual void residual_and_next_norm(int l, int slot) = 0;
    virtual void classifier_logits(int slot) = 0;  // logits of sequence 0 only, for logits_at
    // The loss (into the control block's totals) and with `training` the classifier's backward.
    virtual void classifier(int slot, bool training, float loss_scale, int micro_steps) = 0;
    // ---- backward (dresidual: d(loss)/d(residual stream) at this rank's positions)
    virtual void final_norm_backward(int slot, floatX* dresidual) = 0;
    virtual void recompute(int l, int slot) = 0;  // what -r did not keep
    virtual void mlp_backward_branch(int l, int slot, floatX* dresidual) = 0;
    virtual void attention_backward_branch(int l, int slot, floatX* dresidual) = 0;
    virtual void input_norm_backward(int l, int slot, floatX* dresidual) = 0;
    virtual void embed_backward(int micro_batch, const floatX* dresidual) = 0;
    // Whether the backward of the norm above layer l (the next layer's input norm, or the final norm)
    // adds into layer l's gradients, so that the core prepares them before it.
    virtual bool norm_above_adds_gradients(int l) const = 0;
};

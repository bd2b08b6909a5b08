// GPT-2's layer maths on the GPU (gpt2_layers.cu), the family the GPU model (gpu_model.h) drives
// through ModelLayers (model_layers.h): learned positions, LayerNorm with biases, GELU MLP, the
// classifier tied to the token embedding.
#pragma once
#include "base/gpt_config.h"
#include "gpu/lm_head.h"
#include "gpu/model_layers.h"

// The parameter tensors of one GPT-2 layer (this rank's slices), where they are now: its weights or
// its gradients.
struct LayerTensors {
    floatX *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
};

class GPT2Layers : public ModelLayers {
public:
    GPT2Layers(const GPTConfig& config, const LayerContext& context) : config_(config), c_(context) {}

    BucketUse uses(PassUnit::Kind unit, int layer, bool training) const override;
    void embed(int slot) override;
    void forward_layer(int l, int slot) override;
    void classifier_logits(int slot) override;
    void classifier(int slot, bool training, float loss_scale, int micro_steps) override;
    void final_norm_backward(int slot, floatX* dresidual) override;
    void backward_layer(int l, int slot, floatX* dresidual) override;
    void embed_backward(int micro_batch, const floatX* dresidual) override;

private:
    LayerTensors layer_weights(int l) const;
    LmHead head(bool training) const;
    LayerTensors layer_gradients(int l) const;
    // Whether the residual projections' bias gradients are summed by the LayerNorm backward that
    // finishes the residual gradient they are column sums of: where this rank holds every position;
    // fcproj's of layer l where that LayerNorm (the next layer's ln1, or lnf) is on this stage too.
    bool norms_sum_projection_biases() const { return c_.tp.local_positions(c_.B * c_.T) == c_.B * c_.T; }
    bool fcproj_bias_in_norm(int l) const {
        return norms_sum_projection_biases() && (l + 1 < c_.stage.end_layer || c_.stage.last);
    }

    const GPTConfig config_;
    const LayerContext& c_;
};

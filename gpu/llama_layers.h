// Llama 3's layer maths on the GPU (llama_layers.cu), a family the GPU model (gpu_model.h) drives
// through ModelLayers (model_layers.h): no positions in the embedding (RoPE rotates the queries and
// keys), RMSNorm without biases, grouped-query attention, a SwiGLU MLP, and an lm_head of its own
// (untied from the embedding). Under tensor parallelism (parallel/comm/tensor_parallel.h) a rank holds
// H/T query heads and KV/T key/value heads, F/T of each of the MLP's gate and up, and a vocabulary
// slice of the embedding and of lm_head; with sequence parallelism the residual stream and the norms
// hold its N/T positions. A pipeline stage runs its layers (the embedding on the first, the final norm
// and lm_head on the last).
#pragma once
#include "base/llama_config.h"
#include "gpu/lm_head.h"
#include "gpu/model_layers.h"

class LlamaLayers : public ModelLayers {
public:
    // Fills RoPE's tables (StepBuffers' rope_cos and rope_sin, sized for sequences of up to max_T
    // positions by LayerWidths::rope_pairs).
    LlamaLayers(const LlamaConfig& config, int max_T, const LayerContext& context);

    BucketUse uses(PassUnit::Kind unit, int layer, bool training) const override;
    void embed(int slot) override;
    void forward_layer(int l, int slot) override;
    void classifier_logits(int slot) override;
    void classifier(int slot, bool training, float loss_scale, int micro_steps) override;
    void final_norm_backward(int slot, floatX* dresidual) override;
    void backward_layer(int l, int slot, floatX* dresidual) override;
    void embed_backward(int micro_batch, const floatX* dresidual) override;

private:
    // The final norm's saved rstd of the micro-batch in `slot`, and d(loss)/d(its output).
    float* final_rstd(int slot) const { return c_.buf.act.lnf_rstd + (size_t)slot * c_.max_Nl; }
    floatX* final_output_gradient(int slot) const {
        return c_.buf.act.dlnf + (size_t)slot * c_.max_Nl * config_.channels;
    }
    int padded_vocab() const;
    LmHead head(bool training) const;  // lm_head, this rank's vocabulary slice (lm_head.h)
    // This rank's heads and MLP width: H/T query heads, KV/T key/value heads, F/T of gate and of up.
    int local_heads() const { return config_.num_heads / c_.tp.size(); }
    int local_kv_heads() const { return config_.num_kv_heads / c_.tp.size(); }
    int local_ffn() const { return config_.ffn_channels / c_.tp.size(); }

    const LlamaConfig config_;
    const float eps_;
    const LayerContext& c_;
    float *rope_cos_ = nullptr, *rope_sin_ = nullptr;  // (max_T, hs/2) each, in the model's arena
};

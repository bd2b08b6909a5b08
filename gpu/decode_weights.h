// How a key/value-cache decoder on the GPU (gpu/gpt_decode.h, gpu/llama_decode.h) finds the weights:
// they stay where their owner keeps them (the GPU model's parameter buckets, or ./generate's upload of
// a model file), and the decoder asks for each tensor's device address as it needs it. And the
// decoder as the family-neutral GPU model holds it (FamilyDecoder), whichever family made it.
#pragma once
#include <functional>
#include <memory>

#include "kernels/common.h"

// Device address of parameter tensor `tensor` of layer `layer` (ignored for the tensors outside the
// layers), in the family's numbering: GPT-2's ParamTensor (base/gpt_config.h), Llama 3's
// LlamaLayerTensor and LlamaOuterTensor (parallel/plan/param_table.h). For a per-layer tensor, the
// layer's slice.
using DecodeWeights = std::function<const floatX*(int tensor, int layer)>;

// A family's decoder behind one interface: the cache's capacity in tokens, its truncation (to 0: a new
// sample), and one token through the model, its logits (V floats) out.
class FamilyDecoder {
public:
    virtual ~FamilyDecoder() = default;
    virtual int capacity() const = 0;
    virtual void truncate(int length) = 0;
    virtual void step(int token, const DecodeWeights& weights, float* logits) = 0;
};

// Decoder (GPUDecoder, LlamaGPUDecoder) as a FamilyDecoder, made from its family's config.
template <typename Decoder>
class FamilyDecoderOf final : public FamilyDecoder {
public:
    template <typename Config>
    FamilyDecoderOf(const Config& config, int max_len, cudaStream_t stream) : decoder_(config, max_len, stream) {}
    int capacity() const override { return decoder_.capacity(); }
    void truncate(int length) override { decoder_.truncate(length); }
    void step(int token, const DecodeWeights& weights, float* logits) override { decoder_.step(token, weights, logits); }

private:
    Decoder decoder_;
};

// How a key/value-cache decoder on the GPU (gpu/gpt_decode.h, gpu/llama_decode.h) finds the weights:
// they stay where their owner keeps them (the GPU model's parameter buckets, or ./generate's upload of
// a model file), and the decoder asks for each tensor's device address as it needs it.
#pragma once
#include <functional>

#include "kernels/common.h"

// Device address of parameter tensor `tensor` of layer `layer` (ignored for the tensors outside the
// layers), in the family's numbering: GPT-2's ParamTensor (base/gpt_config.h), Llama 3's
// LlamaLayerTensor and LlamaOuterTensor (parallel/plan/param_table.h). For a per-layer tensor, the
// layer's slice.
using DecodeWeights = std::function<const floatX*(int tensor, int layer)>;

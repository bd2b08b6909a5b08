// ./generate on the GPU for a Llama 3 model file: the file's weights uploaded once, in floatX (bf16, or
// fp32 with -DENABLE_FP32), in the file's own layout (base/llama_config.h: q_proj, k_proj and v_proj
// adjacent in each layer, so are gate_proj and up_proj, as the decoder's fused products read them),
// with lm_head's rows padded to a multiple of 8 by zeros; and LlamaGPUDecoder (gpu/llama_decode.h)
// stepping one token at a time through its key/value cache over them. generate_llama.cpp runs it
// behind train/cached_sampling.h, as it runs the CPU decoder. Device memory: the weights, the
// decoder's caches and one position's activations (LlamaGPUDecoder::device_bytes) and cuBLASLt's
// workspace, checked against what the device has free before anything is allocated
// (gpu/generation_device.h). The GPT-2 twin is gpu/gpu_generate.h. Header-only, built by nvcc
// (./generate) or through the emulator (build/generate_emu, build/generate_emu_fp32).
#pragma once
#include <memory>
#include <vector>

#include "base/errors.h"
#include "base/llama_config.h"
#include "gpu/decode_weights.h"
#include "gpu/generation_device.h"
#include "gpu/llama_decode.h"
#include "kernels/common.h"
#include "kernels/matmul.h"
#include "parallel/plan/param_buckets.h"
#include "parallel/plan/param_table.h"

// A Llama 3 model's weights on the device in the file's layout, lm_head padded to
// vocab_slice_rows(V, 1) rows (it comes last in the file, so the padding is the buffer's tail).
class LlamaDeviceWeights {
public:
    // Uploads params (fp32, the file's order: llama_param_count(config) floats).
    LlamaDeviceWeights(const LlamaConfig& config, const std::vector<float>& params)
        : config_(config), tensors_(llama_tensors(config)) {
        const size_t total = llama_param_count(config);
        if (params.size() != total) fail("gpu generation: %zu weights for a model of %zu", params.size(), total);
        CUDA_CHECK(cudaMalloc(&base_, bytes(config)));
        CUDA_CHECK(cudaMemset(base_, 0, bytes(config)));
        upload_weights(base_, params);
    }
    ~LlamaDeviceWeights() { cudaFree(base_); }
    LlamaDeviceWeights(const LlamaDeviceWeights&) = delete;
    LlamaDeviceWeights& operator=(const LlamaDeviceWeights&) = delete;

    // Device bytes of the weights: the file's parameters and lm_head's padding rows.
    static size_t bytes(const LlamaConfig& c) {
        const size_t padding = (vocab_slice_rows(c.vocab_size, 1) - c.vocab_size) * (size_t)c.channels;
        return (llama_param_count(c) + padding) * sizeof(floatX);
    }
    // Tensor t (LlamaLayerTensor of layer l, or LlamaOuterTensor) on the device.
    const floatX* weight(int t, int l) const {
        const int index = t == LLAMA_EMBEDDING    ? llama_embedding_index()
                          : t == LLAMA_FINAL_NORM ? llama_final_norm_index(config_)
                          : t == LLAMA_LM_HEAD    ? llama_lm_head_index(config_)
                                                  : llama_layer_tensor_index(l, t);
        return base_ + tensors_[index].offset;
    }
    DecodeWeights view() const {
        return [this](int t, int l) { return weight(t, l); };
    }

private:
    LlamaConfig config_;
    std::vector<LlamaTensor> tensors_;  // where each tensor starts
    floatX* base_ = nullptr;
};

class LlamaGPUGenerator {
public:
    // Uploads params (fp32, the file's order) for sequences of up to max_len tokens. Fails
    // (InputError) in one line when the device lacks the memory.
    LlamaGPUGenerator(const LlamaConfig& config, const std::vector<float>& params, int max_len) {
        check_generation_memory(LlamaDeviceWeights::bytes(config), LlamaGPUDecoder::device_bytes(config, max_len),
                                max_len);
        matmul_setup();
        weights_ = std::make_unique<LlamaDeviceWeights>(config, params);
        decoder_ = std::make_unique<LlamaGPUDecoder>(config, max_len, nullptr);
    }
    ~LlamaGPUGenerator() {
        decoder_.reset();
        weights_.reset();
        matmul_teardown();
    }
    LlamaGPUGenerator(const LlamaGPUGenerator&) = delete;
    LlamaGPUGenerator& operator=(const LlamaGPUGenerator&) = delete;

    // Empties the cache (a new sequence starts).
    void reset() { decoder_->truncate(0); }
    // Appends token and writes the next token's logits (the real vocabulary, fp32) to the host array.
    void step(int token, float* logits) { decoder_->step(token, weights_->view(), logits); }

private:
    std::unique_ptr<LlamaDeviceWeights> weights_;
    std::unique_ptr<LlamaGPUDecoder> decoder_;
};

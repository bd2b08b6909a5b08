// ./generate on the GPU: the model file's weights uploaded once, in floatX (bf16, or fp32 with
// -DENABLE_FP32), in ParamLayout order, and GPUDecoder (gpu/gpt_decode.h) stepping one token at a
// time through its key/value cache over them; generate.cpp runs it behind train/cached_sampling.h, as
// it runs the CPU decoder. Device memory: the weights (P·sizeof(floatX)), the decoder's caches and
// one position's activations (GPUDecoder::device_bytes) and cuBLASLt's workspace, checked against
// what the device has free before anything is allocated (gpu/generation_device.h, shared with the
// Llama 3 twin, gpu/llama_gpu_generate.h). Header-only, built by nvcc (./generate) or through the
// emulator (build/generate_emu, build/generate_emu_fp32).
#pragma once
#include <memory>
#include <vector>

#include "base/errors.h"
#include "base/gpt_config.h"
#include "gpu/generation_device.h"
#include "gpu/gpt_decode.h"
#include "kernels/common.h"
#include "kernels/matmul.h"

class GPUGenerator {
public:
    // Uploads params (fp32, ParamLayout order, as read from a model file) for sequences of up to
    // max_len tokens. Fails (InputError) in one line when the device lacks the memory.
    GPUGenerator(const GPTConfig& config, const std::vector<float>& params, int max_len)
        : config_(config), layout_(param_layout(config)) {
        if (params.size() != layout_.total)
            fail("gpu generation: %zu weights for a model of %zu", params.size(), layout_.total);
        const size_t weight_bytes = layout_.total * sizeof(floatX);
        check_generation_memory(weight_bytes, GPUDecoder::device_bytes(config, max_len), max_len);
        matmul_setup();
        CUDA_CHECK(cudaMalloc(&weights_, weight_bytes));
        upload_weights(weights_, params);
        decoder_ = std::make_unique<GPUDecoder>(config, max_len, nullptr);
    }
    ~GPUGenerator() {
        decoder_.reset();
        cudaFree(weights_);
        matmul_teardown();
    }
    GPUGenerator(const GPUGenerator&) = delete;
    GPUGenerator& operator=(const GPUGenerator&) = delete;

    // Empties the cache (a new sequence starts).
    void reset() { decoder_->truncate(0); }
    // Appends token and writes the next token's logits (the real vocabulary, fp32) to the host array.
    void step(int token, float* logits) {
        decoder_->step(token, [this](int t, int l) { return weight(t, l); }, logits);
    }

private:
    // Tensor t of layer l (l ignored for wte, wpe, lnfw, lnfb).
    const floatX* weight(int t, int l) const {
        const bool per_layer = t >= LN1W && t <= FCPROJB;
        return weights_ + layout_.offset[t] + (per_layer ? l * (layout_.size[t] / config_.num_layers) : 0);
    }

    GPTConfig config_;
    ParamLayout layout_;
    floatX* weights_ = nullptr;  // (P) every parameter, in ParamLayout order
    std::unique_ptr<GPUDecoder> decoder_;
};

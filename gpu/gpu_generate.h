// ./generate on the GPU: the model file's weights uploaded once, in floatX (bf16, or fp32 with
// -DENABLE_FP32), in ParamLayout order, and GPUDecoder (gpu/gpt_decode.h) stepping one token at a
// time through its key/value cache over them; generate.cpp runs it behind train/cached_sampling.h, as
// it runs the CPU decoder. Device memory: the weights (P·sizeof(floatX)), the decoder's caches and
// one position's activations (GPUDecoder::device_bytes) and cuBLASLt's workspace, checked against
// what the device has free before anything is allocated. Header-only, built by nvcc (./generate) or
// through the emulator (build/generate_emu, build/generate_emu_fp32).
#pragma once
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "base/errors.h"
#include "base/gpt_config.h"
#include "gpu/gpt_decode.h"
#include "kernels/common.h"
#include "kernels/matmul.h"

// The CUDA device generation would run on (device 0), or why there is none.
struct CudaDeviceProbe {
    bool found = false;
    std::string name;     // the device's name, when found
    std::string why_not;  // the runtime's error name (e.g. cudaErrorNoDevice), when not
};
inline CudaDeviceProbe probe_cuda_device() {
    CudaDeviceProbe probe;
    int devices = 0;
    const cudaError_t err = cudaGetDeviceCount(&devices);
    if (err != cudaSuccess || devices == 0) {
        cudaGetLastError();  // clear the sticky error of a failed probe
        probe.why_not = err != cudaSuccess ? cudaGetErrorName(err) : "cudaGetDeviceCount found 0";
        return probe;
    }
    CUDA_CHECK(cudaSetDevice(0));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    probe.found = true;
    probe.name = prop.name;
    return probe;
}

class GPUGenerator {
public:
    // Uploads params (fp32, ParamLayout order, as read from a model file) for sequences of up to
    // max_len tokens. Fails (InputError) in one line when the device lacks the memory.
    GPUGenerator(const GPTConfig& config, const std::vector<float>& params, int max_len)
        : config_(config), layout_(param_layout(config)) {
        if (params.size() != layout_.total)
            fail("gpu generation: %zu weights for a model of %zu", params.size(), layout_.total);
        const size_t weight_bytes = layout_.total * sizeof(floatX);
        const size_t cache_bytes = GPUDecoder::device_bytes(config, max_len);
        size_t free_bytes = 0, total_bytes = 0;
        CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
        const size_t need = weight_bytes + cache_bytes + MATMUL_WORKSPACE_BYTES;
        if (need > free_bytes)
            fail("out of GPU memory: the weights (%.1f MiB, " PRECISION_NAME ") and the key/value cache "
                 "of %d tokens (%.1f MiB) need %.1f MiB, and the device has %.1f MiB free (--device cpu "
                 "runs on the CPU)", weight_bytes / 1048576.0, max_len, cache_bytes / 1048576.0,
                 need / 1048576.0, free_bytes / 1048576.0);
        matmul_setup();
        CUDA_CHECK(cudaMalloc(&weights_, weight_bytes));
        // Narrowed and copied in slices, so the host holds one slice of floatX at a time.
        std::vector<floatX> slice(std::min<size_t>(layout_.total, (size_t)1 << 24));
        for (size_t start = 0; start < layout_.total; start += slice.size()) {
            const size_t n = std::min(slice.size(), layout_.total - start);
            for (size_t i = 0; i < n; i++) slice[i] = (floatX)params[start + i];
            CUDA_CHECK(
                cudaMemcpy(weights_ + start, slice.data(), n * sizeof(floatX), cudaMemcpyHostToDevice));
        }
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

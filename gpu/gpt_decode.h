// Incremental decoding on the GPU with a key/value cache: the GPU twin of cpu/gpt_decode.h, for the
// CUDA trainer's samples. Each new token runs GPT-2's forward pass for one position, with the same
// kernels as the training forward (gpu/gpt2_layers.cu), its keys and values appended to per-layer caches:
//   x = wte[token] + wpe[pos]
//   each layer: qkv = qkv(ln1(x)); K[pos], V[pos] = k, v; x += attproj(attention of q over K, V[0..pos])
//               x += fcproj(gelu(fc(ln2(x))))
//   logits = lnf(x) · wteᵀ
// so a token costs one row of every matrix product plus attention over the cache
// (kernels/decode_attention.h) instead of a forward pass over the whole prefix.
//
// The weights stay where their owner keeps them: step() takes a function (gpu/decode_weights.h) that
// returns the device address of tensor t (a ParamTensor) of layer l, in ParamLayout's shapes (for
// per-layer tensors, the layer's slice). Buffers: the caches, 2·L·max_len·C floatX, and one
// position's activations, allocated once (DeviceArena). Header-only, built by nvcc or through the emulator like kernels/.
#pragma once
#include <algorithm>
#include <vector>

#include "base/errors.h"
#include "base/gpt_config.h"
#include "gpu/decode_weights.h"
#include "kernels/common.h"
#include "kernels/decode_attention.h"
#include "kernels/device_arena.h"
#include "kernels/encoder.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"

class GPUDecoder {
public:
    // Caches for sequences of up to max_len tokens (≤ config.max_seq_len), on `stream`.
    GPUDecoder(const GPTConfig& config, int max_len, cudaStream_t stream)
        : GPUDecoder(config, max_len, stream, true) {}
    // Device bytes such a decoder allocates (the caches dominate: 2·L·max_len·C floatX), for a memory
    // check before it exists. Fails (InputError) for a shape the constructor refuses.
    static size_t device_bytes(const GPTConfig& config, int max_len) {
        return GPUDecoder(config, max_len, nullptr, false).arena_.bytes();
    }

private:
    // The buffers requested, and allocated unless `allocate` is false (device_bytes).
    GPUDecoder(const GPTConfig& config, int max_len, cudaStream_t stream, bool allocate)
        : config_(config), capacity_(max_len), stream_(stream) {
        const int C = config.channels, NH = config.num_heads;
        if (max_len < 1 || max_len > config.max_seq_len || NH < 1 || C % NH != 0 || C % 8 != 0 ||
            decode_attention_shape_error(0, NH, NH, C / NH, max_len))
            fail("gpu decoder: cannot decode %d tokens of a model with %d channels in %d heads "
                 "(maximum sequence length %d)", max_len, C, NH, config.max_seq_len);
        const size_t L = config.num_layers, cache = L * max_len * C;
        auto request = [&](auto** pointer, size_t count) {
            arena_.request(pointer, count, MemoryKind::ACTIVATIONS);
        };
        request(&k_cache_, cache);
        request(&v_cache_, cache);
        for (floatX** row : {&x_, &residual_, &ln_, &atty_, &branch_}) request(row, C);
        request(&qkv_, 3 * (size_t)C);
        request(&fch_, 4 * (size_t)C);
        request(&fch_gelu_, 4 * (size_t)C);
        request(&logits_, (size_t)config.padded_vocab_size);
        request(&token_, 1);
        if (!allocate) return;
        arena_.allocate("the key/value cache of the samples");
        logits_host_.resize(config.vocab_size);
    }

public:
    int length() const { return length_; }
    int capacity() const { return capacity_; }
    // Forgets the last tokens: keeps the first `length` (0 starts a new sequence).
    void truncate(int length) { length_ = std::max(0, std::min(length, length_)); }

    // Appends token at position length() and writes the next token's logits (the first V, fp32) into
    // the host array logits. Fails (InputError) when the cache is full or the token is not in the
    // vocabulary.
    void step(int token, const DecodeWeights& w, float* logits) {
        const GPTConfig& c = config_;
        const int C = c.channels, NH = c.num_heads, HS = C / NH, L = c.num_layers, pos = length_;
        const size_t layer_cache = (size_t)capacity_ * C;
        cudaStream_t s = stream_;
        if (pos >= capacity_) fail("gpu decoder: the cache holds %d tokens and is full", capacity_);
        if (token < 0 || token >= c.vocab_size)
            fail("gpu decoder: token %d is outside the vocabulary [0, %d)", token, c.vocab_size);
        token_host_ = token;
        CUDA_CHECK(cudaMemcpyAsync(token_, &token_host_, sizeof(int), cudaMemcpyHostToDevice, s));

        encoder_forward(x_, token_, w(WTE, 0), w(WPE, 0) + (size_t)pos * C, 1, 1, C, s);
        layernorm_forward(ln_, nullptr, nullptr, x_, w(LN1W, 0), w(LN1B, 0), 1, C, s);
        for (int l = 0; l < L; l++) {
            // Attention branch: residual = x + attproj(attention(qkv(ln))), then ln = ln2(residual).
            matmul_forward(qkv_, ln_, w(QKVW, l), w(QKVB, l), 1, C, 3 * C, s);
            decode_attention_forward(atty_, k_cache_ + l * layer_cache, v_cache_ + l * layer_cache, qkv_,
                                     pos, NH, NH, HS, capacity_, s);
            matmul_forward(branch_, atty_, w(ATTPROJW, l), w(ATTPROJB, l), 1, C, C, s);
            residual_layernorm_forward(residual_, ln_, nullptr, nullptr, x_, branch_, w(LN2W, l),
                                       w(LN2B, l), 1, C, s);
            // MLP branch: x = residual + fcproj(gelu(fc(ln))), then the next layer's ln1 (or lnf).
            matmul_forward(fch_, ln_, w(FCW, l), w(FCB, l), 1, C, 4 * C, s);
            gelu_forward(fch_gelu_, fch_, (size_t)4 * C, s);
            matmul_forward(branch_, fch_gelu_, w(FCPROJW, l), w(FCPROJB, l), 1, 4 * C, C, s);
            const bool last = l + 1 == L;
            residual_layernorm_forward(x_, ln_, nullptr, nullptr, residual_, branch_,
                                       last ? w(LNFW, 0) : w(LN1W, l + 1),
                                       last ? w(LNFB, 0) : w(LN1B, l + 1), 1, C, s);
        }
        matmul_forward(logits_, ln_, w(WTE, 0), nullptr, 1, C, c.padded_vocab_size, s);
        CUDA_CHECK(cudaMemcpyAsync(logits_host_.data(), logits_, c.vocab_size * sizeof(floatX),
                                   cudaMemcpyDeviceToHost, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
        for (int i = 0; i < c.vocab_size; i++) logits[i] = (float)logits_host_[i];
        length_++;
    }

private:
    GPTConfig config_;
    int capacity_, length_ = 0;
    cudaStream_t stream_;
    DeviceArena arena_;
    floatX *k_cache_ = nullptr, *v_cache_ = nullptr;  // (L, NH, capacity, HS) each
    floatX *x_ = nullptr, *residual_ = nullptr;        // (C) the residual stream, before and after
                                                        //     a layer's attention branch
    floatX *ln_ = nullptr, *atty_ = nullptr, *branch_ = nullptr;  // (C)
    floatX* qkv_ = nullptr;                                       // (3C)
    floatX *fch_ = nullptr, *fch_gelu_ = nullptr;                 // (4C)
    floatX* logits_ = nullptr;                                    // (Vp)
    int* token_ = nullptr;
    int token_host_ = 0;
    std::vector<floatX> logits_host_;
};

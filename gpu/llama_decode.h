// Incremental decoding of Llama 3 on the GPU with a key/value cache: the GPU twin of
// cpu/llama_decode.h, for the CUDA trainer's samples and ./generate. Each new token runs Llama 3's
// forward pass for one position with the same kernels as the training forward (gpu/llama_layers.cu),
// its keys (after RoPE) and values appended to per-layer caches that hold the KV key/value heads only:
//   x = embed_tokens[token]
//   each layer: qkv = q|k|v_proj(input_layernorm(x)); q, k rotated by position p's angles (RoPE)
//               K[p], V[p] = k, v; x += o_proj(attention of each query head over its key/value
//               head's K, V[0..p])   (grouped-query: H query heads share KV key/value heads)
//               x += down_proj(swiglu(gate|up_proj(post_attention_layernorm(x))))
//   logits = norm(x) · lm_headᵀ
// so a token costs one row of every matrix product plus attention over the cache
// (kernels/decode_attention.h) instead of a forward pass over the whole prefix. RoPE's tables are
// built as gpu/llama_layers.cu builds them (base/rope_tables.h, Llama 3.1's frequency scaling
// included), for the cache's positions; position p rotates with row p of them (kernels/rope.h on one
// row, its tables offset to row p).
//
// The weights stay where their owner keeps them: step() takes a function (gpu/decode_weights.h) that
// returns the device address of a tensor in the GPU model's numbering (LlamaLayerTensor for a layer's,
// LlamaOuterTensor for the others), where q_proj is followed by k_proj and v_proj (one product of
// (H + 2·KV)·hs rows) and gate_proj by up_proj (2F rows), as in the model file and the GPU model's
// buckets; lm_head has the vocabulary rounded up to 8 rows (vocab_slice_rows), those past V zero or
// ignored. Buffers, allocated once (DeviceArena): the caches, 2·L·max_len·KV·hs floatX, RoPE's tables
// (max_len·hs floats) and one position's activations. Header-only, built by nvcc or through the
// emulator like kernels/.
#pragma once
#include <algorithm>
#include <string>
#include <vector>

#include "base/errors.h"
#include "base/llama_config.h"
#include "base/rope_tables.h"
#include "gpu/decode_weights.h"
#include "kernels/common.h"
#include "kernels/decode_attention.h"
#include "kernels/device_arena.h"
#include "kernels/encoder.h"
#include "kernels/matmul.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "parallel/plan/param_buckets.h"
#include "parallel/plan/param_table.h"

class LlamaGPUDecoder {
public:
    // Caches for sequences of up to max_len tokens (≤ config.max_seq_len), on `stream`.
    LlamaGPUDecoder(const LlamaConfig& config, int max_len, cudaStream_t stream)
        : LlamaGPUDecoder(config, max_len, stream, true) {}
    // Device bytes such a decoder allocates (for long sequences the caches dominate), for a memory
    // check before it exists. Fails (InputError) for a shape the constructor refuses.
    static size_t device_bytes(const LlamaConfig& config, int max_len) {
        return LlamaGPUDecoder(config, max_len, nullptr, false).arena_.bytes();
    }
    // Why the decoder cannot run this shape (its kernels' 128-bit rows: C, the products' widths and F
    // multiples of 8; head sizes up to 256), or "" when it can.
    static std::string shape_error(const LlamaConfig& c, int max_len) {
        if (!llama_config_valid(c)) return "not a valid Llama 3 shape";
        const int hs = c.head_size(), H = c.num_heads, KV = c.num_kv_heads;
        if (c.channels % 8 != 0 || (H * hs) % 8 != 0 || ((H + 2 * KV) * hs) % 8 != 0 || c.ffn_channels % 8 != 0)
            return "C, H*hs, (H+2*KV)*hs and F must be multiples of 8";
        if (max_len < 1 || max_len > c.max_seq_len) return "the cache must hold from 1 to maxT tokens";
        if (const char* error = decode_attention_shape_error(0, H, KV, hs, max_len)) return error;
        return "";
    }

private:
    // The buffers requested, and allocated unless `allocate` is false (device_bytes).
    LlamaGPUDecoder(const LlamaConfig& config, int max_len, cudaStream_t stream, bool allocate)
        : config_(config), capacity_(max_len), stream_(stream) {
        const std::string error = shape_error(config, max_len);
        if (!error.empty())
            fail("gpu decoder: cannot decode %d tokens of a Llama 3 model with %d channels in %d heads on %d "
                 "key/value heads, MLP %d (maximum sequence length %d): %s",
                 max_len, config.channels, config.num_heads, config.num_kv_heads, config.ffn_channels,
                 config.max_seq_len, error.c_str());
        const size_t C = config.channels, hs = config.head_size(), H = config.num_heads;
        const size_t KV = config.num_kv_heads, F = config.ffn_channels, L = config.num_layers;
        auto request = [&](auto** pointer, size_t count) {
            arena_.request(pointer, count, MemoryKind::ACTIVATIONS);
        };
        request(&k_cache_, L * KV * max_len * hs);
        request(&v_cache_, L * KV * max_len * hs);
        request(&rope_cos_, (size_t)max_len * (hs / 2));
        request(&rope_sin_, (size_t)max_len * (hs / 2));
        for (floatX** row : {&x_, &residual_, &ln_, &branch_}) request(row, C);
        request(&qkv_, (H + 2 * KV) * hs);
        request(&atty_, H * hs);
        request(&gate_up_, 2 * F);
        request(&activated_, F);
        request(&logits_, vocab_slice_rows(config.vocab_size, 1));
        request(&token_, 1);
        if (!allocate) return;
        arena_.allocate("the key/value cache of the samples");
        std::vector<float> cos_table((size_t)max_len * (hs / 2)), sin_table(cos_table.size());
        rope_tables(cos_table.data(), sin_table.data(), max_len, (int)hs, config.rope_theta, config.rope_scaling);
        const size_t table_bytes = cos_table.size() * sizeof(float);
        CUDA_CHECK(cudaMemcpy(rope_cos_, cos_table.data(), table_bytes, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(rope_sin_, sin_table.data(), table_bytes, cudaMemcpyHostToDevice));
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
        const LlamaConfig& c = config_;
        const int C = c.channels, hs = c.head_size(), H = c.num_heads, KV = c.num_kv_heads;
        const int F = c.ffn_channels, L = c.num_layers, pos = length_, half = hs / 2;
        const int QKV = (H + 2 * KV) * hs, Vp = (int)vocab_slice_rows(c.vocab_size, 1);
        const float eps = (float)c.rmsnorm_eps;
        const size_t layer_cache = (size_t)KV * capacity_ * hs;
        cudaStream_t s = stream_;
        if (pos >= capacity_) fail("gpu decoder: the cache holds %d tokens and is full", capacity_);
        if (token < 0 || token >= c.vocab_size)
            fail("gpu decoder: token %d is outside the vocabulary [0, %d)", token, c.vocab_size);
        token_host_ = token;
        CUDA_CHECK(cudaMemcpyAsync(token_, &token_host_, sizeof(int), cudaMemcpyHostToDevice, s));

        encoder_forward(x_, token_, w(LLAMA_EMBEDDING, 0), nullptr, 1, 1, C, s);
        rmsnorm_forward(ln_, nullptr, x_, w(ATTN_NORM, 0), 1, C, eps, s);
        for (int l = 0; l < L; l++) {
            // Attention branch: residual = x + o_proj(attention(rope(qkv(ln)))), ln = RMSNorm(residual).
            matmul_forward(qkv_, ln_, w(Q_PROJ, l), nullptr, 1, C, QKV, s);
            rope_forward(qkv_, rope_cos_ + (size_t)pos * half, rope_sin_ + (size_t)pos * half, 1, 1, H, KV, hs, s);
            decode_attention_forward(atty_, k_cache_ + l * layer_cache, v_cache_ + l * layer_cache, qkv_, pos, H,
                                     KV, hs, capacity_, s);
            matmul_forward(branch_, atty_, w(O_PROJ, l), nullptr, 1, H * hs, C, s);
            residual_rmsnorm_forward(residual_, ln_, nullptr, x_, branch_, w(MLP_NORM, l), 1, C, eps, s);
            // MLP branch: x = residual + down_proj(swiglu(gate|up(ln))), then the next layer's input
            // norm (or the final norm).
            matmul_forward(gate_up_, ln_, w(GATE_PROJ, l), nullptr, 1, C, 2 * F, s);
            swiglu_forward(activated_, gate_up_, 1, F, s);
            matmul_forward(branch_, activated_, w(DOWN_PROJ, l), nullptr, 1, F, C, s);
            const floatX* next_norm = l + 1 == L ? w(LLAMA_FINAL_NORM, 0) : w(ATTN_NORM, l + 1);
            residual_rmsnorm_forward(x_, ln_, nullptr, residual_, branch_, next_norm, 1, C, eps, s);
        }
        matmul_forward(logits_, ln_, w(LLAMA_LM_HEAD, 0), nullptr, 1, C, Vp, s);
        CUDA_CHECK(cudaMemcpyAsync(logits_host_.data(), logits_, c.vocab_size * sizeof(floatX),
                                   cudaMemcpyDeviceToHost, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
        for (int i = 0; i < c.vocab_size; i++) logits[i] = (float)logits_host_[i];
        length_++;
    }

private:
    LlamaConfig config_;
    int capacity_, length_ = 0;
    cudaStream_t stream_;
    DeviceArena arena_;
    floatX *k_cache_ = nullptr, *v_cache_ = nullptr;  // (L, KV, capacity, hs) each, keys after RoPE
    float *rope_cos_ = nullptr, *rope_sin_ = nullptr;  // (capacity, hs/2) each
    floatX *x_ = nullptr, *residual_ = nullptr;        // (C) the residual stream, before and after a
                                                        //     layer's attention branch
    floatX *ln_ = nullptr, *branch_ = nullptr;          // (C)
    floatX* qkv_ = nullptr;                             // ((H + 2·KV)·hs)
    floatX* atty_ = nullptr;                            // (H·hs)
    floatX *gate_up_ = nullptr, *activated_ = nullptr;  // (2F), (F)
    floatX* logits_ = nullptr;                          // (V rounded up to 8)
    int* token_ = nullptr;
    int token_host_ = 0;
    std::vector<floatX> logits_host_;
};

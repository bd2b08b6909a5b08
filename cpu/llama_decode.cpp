// The Llama 3 key/value-cache decoder (see llama_decode.h).
#include "cpu/llama_decode.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/attention.h"
#include "cpu/encoder.h"
#include "cpu/gemm.h"
#include "cpu/gqa_attention.h"
#include "cpu/matmul.h"
#include "cpu/residual.h"
#include "cpu/rmsnorm.h"
#include "cpu/rope.h"
#include "cpu/swiglu.h"

struct LlamaDecoder {
    LlamaConfig config;
    std::vector<LlamaTensor> tensors;  // llama_tensors(config): where each weight is in params
    int capacity, length = 0;
    int C, H, KV, hs, F, V, L, Cq, Ckv;  // the config's sizes, named as in cpu/llama_model.h
    std::vector<float> keys, values;        // (L, KV, capacity, hs): head-major, so each key/value
                                            // head's keys are one (length × hs) matrix
    std::vector<float> rope_cos, rope_sin;  // (capacity, hs/2), as the model tabulates them
    std::vector<float> x, norm, branch;     // (C) the position's residual stream and scratch
    std::vector<float> q, atty;             // (Cq) queries after RoPE, attention output
    std::vector<float> k, v;                // (Ckv) the position's keys after RoPE, and values
    std::vector<float> gate, up, h;         // (F) the MLP's
    std::vector<float> scores;              // (H, capacity) attention probabilities

    LlamaDecoder(const LlamaConfig& c, int max_len)
        : config(c), tensors(llama_config_valid(c) ? llama_tensors(c) : std::vector<LlamaTensor>()),
          capacity(max_len) {
        if (!llama_config_valid(c) || max_len < 1 || max_len > c.max_seq_len)
            throw std::invalid_argument("llama decoder: impossible shape (max_len " +
                                        std::to_string(max_len) + ")");
        C = c.channels, H = c.num_heads, KV = c.num_kv_heads, hs = c.head_size();
        F = c.ffn_channels, V = c.vocab_size, L = c.num_layers;
        Cq = H * hs, Ckv = KV * hs;
        keys.resize((size_t)L * KV * max_len * hs);
        values.resize(keys.size());
        rope_cos.resize((size_t)max_len * hs / 2);
        rope_sin.resize(rope_cos.size());
        rope_tables(rope_cos.data(), rope_sin.data(), max_len, hs, c.rope_theta, c.rope_scaling);
        for (auto* b : {&x, &norm, &branch}) b->resize(C);
        for (auto* b : {&q, &atty}) b->resize(Cq);
        for (auto* b : {&k, &v}) b->resize(Ckv);
        for (auto* b : {&gate, &up, &h}) b->resize(F);
        scores.resize((size_t)H * max_len);
    }

    const float* w(const float* params, int index) const { return params + tensors[index].offset; }
    const float* w(const float* params, int layer, int kind) const {
        return w(params, llama_layer_tensor_index(layer, kind));
    }
    // Where key/value head kvh of layer l keeps position pos.
    size_t cache_at(int l, int kvh, int pos) const {
        return (((size_t)l * KV + kvh) * capacity + pos) * hs;
    }

    // The attention output at the newest position: per query head, softmax over its key/value
    // head's cached keys, then the weighted sum of the cached values.
    void attend(int l) {
        const int pos = length;
        const float scale = 1.0f / std::sqrt((float)hs);
#pragma omp parallel for schedule(static) if (worth_parallel((size_t)(pos + 1) * Cq * 2))
        for (int head = 0; head < H; head++) {
            const int kvh = kv_head_of(head, H, KV);
            const float* K = keys.data() + cache_at(l, kvh, 0);    // (pos + 1, hs)
            const float* Vc = values.data() + cache_at(l, kvh, 0);  // (pos + 1, hs)
            float* row = scores.data() + (size_t)head * capacity;
            gemm(false, true, 1, pos + 1, hs, scale, q.data() + head * hs, Cq, K, hs, 0.0f, row,
                 pos + 1);
            causal_softmax_row(row, pos);
            gemm(false, false, 1, hs, pos + 1, 1.0f, row, pos + 1, Vc, hs, 0.0f,
                 atty.data() + head * hs, Cq);
        }
    }

    void layer(const float* params, int l) {
        const int pos = length;
        const float eps = (float)config.rmsnorm_eps;
        const float* cos_p = rope_cos.data() + (size_t)pos * hs / 2;
        const float* sin_p = rope_sin.data() + (size_t)pos * hs / 2;
        float rstd;  // RMSNorm's statistic, not needed after the forward
        rmsnorm_forward(norm.data(), &rstd, x.data(), w(params, l, ATTN_NORM), 1, C, eps);
        matmul_forward(q.data(), norm.data(), w(params, l, Q_PROJ), (const float*)nullptr, 1, C, Cq);
        matmul_forward(k.data(), norm.data(), w(params, l, K_PROJ), (const float*)nullptr, 1, C, Ckv);
        matmul_forward(v.data(), norm.data(), w(params, l, V_PROJ), (const float*)nullptr, 1, C, Ckv);
        // One row of one position: the tables' row pos is the rotation at position pos.
        rope_forward(q.data(), q.data(), cos_p, sin_p, 1, 1, H, hs);
        rope_forward(k.data(), k.data(), cos_p, sin_p, 1, 1, KV, hs);
        for (int kvh = 0; kvh < KV; kvh++) {
            std::copy_n(k.data() + kvh * hs, hs, keys.data() + cache_at(l, kvh, pos));
            std::copy_n(v.data() + kvh * hs, hs, values.data() + cache_at(l, kvh, pos));
        }
        attend(l);
        matmul_forward(branch.data(), atty.data(), w(params, l, O_PROJ), (const float*)nullptr, 1,
                       Cq, C);
        residual_forward(x.data(), x.data(), branch.data(), C);
        rmsnorm_forward(norm.data(), &rstd, x.data(), w(params, l, MLP_NORM), 1, C, eps);
        swiglu_mlp_forward(branch.data(), gate.data(), up.data(), h.data(), norm.data(),
                           SwiGLUWeights<const float>{w(params, l, GATE_PROJ), w(params, l, UP_PROJ),
                                                      w(params, l, DOWN_PROJ)},
                           1, C, F);
        residual_forward(x.data(), x.data(), branch.data(), C);
    }

    void step(const float* params, int token, float* logits) {
        if (length >= capacity)
            throw std::invalid_argument("llama decoder: the cache holds " + std::to_string(capacity) +
                                        " tokens and is full");
        if (token < 0 || token >= V)
            throw std::invalid_argument("llama decoder: token " + std::to_string(token) +
                                        " is outside the vocabulary [0, " + std::to_string(V) + ")");
        encoder_forward(x.data(), &token, w(params, llama_embedding_index()), (const float*)nullptr,
                        1, 1, C);
        for (int l = 0; l < L; l++) layer(params, l);
        float rstd;
        rmsnorm_forward(norm.data(), &rstd, x.data(), w(params, llama_final_norm_index(config)), 1, C,
                        (float)config.rmsnorm_eps);
        matmul_forward(logits, norm.data(), w(params, llama_lm_head_index(config)),
                       (const float*)nullptr, 1, C, V);
        length++;
    }
};

LlamaDecoder* llama_decoder_create(const LlamaConfig& config, int max_len) {
    return new LlamaDecoder(config, max_len);
}
void llama_decoder_free(LlamaDecoder* decoder) { delete decoder; }

size_t llama_decoder_bytes(const LlamaConfig& c, int max_len) {
    const size_t hs = c.head_size(), Cq = (size_t)c.num_heads * hs, Ckv = (size_t)c.num_kv_heads * hs;
    const size_t floats = 2 * (size_t)c.num_layers * max_len * Ckv  // the caches
                          + (size_t)max_len * hs                     // RoPE's tables
                          + 3 * (size_t)c.channels + 2 * Cq + 2 * Ckv + 3 * (size_t)c.ffn_channels +
                          (size_t)c.num_heads * max_len;
    return sizeof(float) * floats;
}

int llama_decoder_length(const LlamaDecoder* decoder) { return decoder->length; }
int llama_decoder_capacity(const LlamaDecoder* decoder) { return decoder->capacity; }

void llama_decoder_truncate(LlamaDecoder* decoder, int length) {
    decoder->length = std::max(0, std::min(length, decoder->length));
}

void llama_decoder_step(LlamaDecoder* decoder, const float* params, int token, float* logits) {
    decoder->step(params, token, logits);
}

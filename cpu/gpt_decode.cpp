// The key/value-cache decoder (see gpt_decode.h).
#include "cpu/gpt_decode.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/attention.h"
#include "cpu/encoder.h"
#include "cpu/gelu.h"
#include "cpu/layernorm.h"
#include "cpu/matmul.h"
#include "cpu/residual.h"

struct GPTDecoder {
    GPTConfig config;
    ParamLayout layout;
    int capacity, length = 0;
    std::vector<float> keys, values;        // (L, NH, capacity, hs): head-major, so each head's
                                            // keys are one (length × hs) matrix
    std::vector<float> x, ln, atty, branch;  // (C) the position's residual stream and scratch
    std::vector<float> qkv;                  // (3C)
    std::vector<float> fch, fch_gelu;        // (4C)
    std::vector<float> scores;               // (NH, capacity) attention probabilities
    std::vector<float> logits;               // (Vp)

    GPTDecoder(const GPTConfig& c, int max_len) : config(c), layout(param_layout(c)), capacity(max_len) {
        if (max_len < 1 || max_len > c.max_seq_len || c.num_heads < 1 || c.channels % c.num_heads)
            throw std::invalid_argument("gpt decoder: impossible shape (max_len " +
                                        std::to_string(max_len) + ")");
        const size_t L = c.num_layers, C = c.channels;
        keys.resize(L * max_len * C);
        values.resize(L * max_len * C);
        for (auto* v : {&x, &ln, &atty, &branch}) v->resize(C);
        qkv.resize(3 * C);
        fch.resize(4 * C);
        fch_gelu.resize(4 * C);
        scores.resize((size_t)c.num_heads * max_len);
        logits.resize(c.padded_vocab_size);
    }

    const float* p(const float* params, int tensor, int layer = 0) const {
        const bool per_layer = tensor >= LN1W && tensor <= FCPROJB;
        const size_t layer_size = per_layer ? layout.size[tensor] / config.num_layers : 0;
        return params + layout.offset[tensor] + layer * layer_size;
    }

    // The attention branch's input to attproj at the newest position: per head, softmax over the
    // cached keys, then the weighted sum of the cached values.
    void attend(int l) {
        const int C = config.channels, NH = config.num_heads, hs = C / NH, pos = length;
        const float scale = 1.0f / std::sqrt((float)hs);
#pragma omp parallel for schedule(static) if (worth_parallel((size_t)(pos + 1) * C * 2))
        for (int h = 0; h < NH; h++) {
            const size_t head = ((size_t)l * NH + h) * capacity * hs;
            const float* K = keys.data() + head;    // (pos + 1, hs)
            const float* V = values.data() + head;  // (pos + 1, hs)
            float* row = scores.data() + (size_t)h * capacity;
            gemm(false, true, 1, pos + 1, hs, scale, qkv.data() + h * hs, 3 * C, K, hs, 0.0f, row,
                 pos + 1);
            causal_softmax_row(row, pos);
            gemm(false, false, 1, hs, pos + 1, 1.0f, row, pos + 1, V, hs, 0.0f,
                 atty.data() + h * hs, C);
        }
    }

    void step(const float* params, int token, float* out) {
        const GPTConfig& c = config;
        const int C = c.channels, NH = c.num_heads, hs = C / NH, pos = length;
        if (pos >= capacity)
            throw std::invalid_argument("gpt decoder: the cache holds " + std::to_string(capacity) +
                                        " tokens and is full");
        if (token < 0 || token >= c.vocab_size)
            throw std::invalid_argument("gpt decoder: token " + std::to_string(token) +
                                        " is outside the vocabulary [0, " +
                                        std::to_string(c.vocab_size) + ")");
        float mean, rstd;  // LayerNorm statistics, not needed after the forward
        encoder_forward(x.data(), &token, p(params, WTE), p(params, WPE) + (size_t)pos * C, 1, 1, C);
        for (int l = 0; l < c.num_layers; l++) {
            layernorm_forward(ln.data(), &mean, &rstd, x.data(), p(params, LN1W, l),
                              p(params, LN1B, l), 1, C);
            matmul_forward(qkv.data(), ln.data(), p(params, QKVW, l), p(params, QKVB, l), 1, C, 3 * C);
            for (int h = 0; h < NH; h++) {
                const size_t at = (((size_t)l * NH + h) * capacity + pos) * hs;
                std::copy_n(qkv.data() + C + h * hs, hs, keys.data() + at);
                std::copy_n(qkv.data() + 2 * C + h * hs, hs, values.data() + at);
            }
            attend(l);
            matmul_forward(branch.data(), atty.data(), p(params, ATTPROJW, l),
                           p(params, ATTPROJB, l), 1, C, C);
            residual_forward(x.data(), x.data(), branch.data(), C);
            layernorm_forward(ln.data(), &mean, &rstd, x.data(), p(params, LN2W, l),
                              p(params, LN2B, l), 1, C);
            matmul_forward(fch.data(), ln.data(), p(params, FCW, l), p(params, FCB, l), 1, C, 4 * C);
            gelu_forward(fch_gelu.data(), fch.data(), (size_t)4 * C);
            matmul_forward(branch.data(), fch_gelu.data(), p(params, FCPROJW, l),
                           p(params, FCPROJB, l), 1, 4 * C, C);
            residual_forward(x.data(), x.data(), branch.data(), C);
        }
        layernorm_forward(ln.data(), &mean, &rstd, x.data(), p(params, LNFW), p(params, LNFB), 1, C);
        matmul_forward(logits.data(), ln.data(), p(params, WTE), (const float*)nullptr, 1, C,
                       c.padded_vocab_size);
        std::copy_n(logits.data(), c.vocab_size, out);
        length++;
    }
};

GPTDecoder* gpt_decoder_create(const GPTConfig& config, int max_len) {
    return new GPTDecoder(config, max_len);
}
void gpt_decoder_free(GPTDecoder* decoder) { delete decoder; }

size_t gpt_decoder_bytes(const GPTConfig& c, int max_len) {
    const size_t C = c.channels;
    return sizeof(float) * (2 * (size_t)c.num_layers * max_len * C + 4 * C + 3 * C + 8 * C +
                            (size_t)c.num_heads * max_len + c.padded_vocab_size);
}

int gpt_decoder_length(const GPTDecoder* decoder) { return decoder->length; }
int gpt_decoder_capacity(const GPTDecoder* decoder) { return decoder->capacity; }

void gpt_decoder_truncate(GPTDecoder* decoder, int length) {
    decoder->length = std::max(0, std::min(length, decoder->length));
}

void gpt_decoder_step(GPTDecoder* decoder, const float* params, int token, float* logits) {
    decoder->step(params, token, logits);
}

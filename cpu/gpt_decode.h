// Incremental decoding with a key/value cache: GPT-2's forward pass one token at a time, each new
// token's keys and values appended to per-layer caches, so that the next token costs one row of every
// matrix product plus attention over the cache, instead of a forward pass over the whole prefix.
//   step(token at position p):  x = wte[token] + wpe[p]
//     each layer: q, k, v = qkv(ln1(x)); K[p], V[p] = k, v; x += attproj(softmax(q·K[0..p]ᵀ/√hs)·V[0..p])
//                 x += fcproj(gelu(fc(ln2(x))))
//     logits = lnf(x) · wteᵀ
// It calls the same reference ops as cpu/gpt_model.h, row by row (the softmax is attention.h's own
// causal_softmax_row), so its logits match a full forward pass over the prefix to rounding.
#pragma once
#include <cstddef>

#include "base/gpt_config.h"

struct GPTDecoder;  // the caches and one position's activations (cpu/gpt_decode.cpp)

// Caches for sequences of up to max_len tokens (≤ config.max_seq_len); throws std::invalid_argument
// for an impossible shape.
GPTDecoder* gpt_decoder_create(const GPTConfig& config, int max_len);
void gpt_decoder_free(GPTDecoder* decoder);
// Bytes gpt_decoder_create(config, max_len) allocates (the caches dominate: 2·L·max_len·C floats).
size_t gpt_decoder_bytes(const GPTConfig& config, int max_len);

int gpt_decoder_length(const GPTDecoder* decoder);    // tokens in the cache
int gpt_decoder_capacity(const GPTDecoder* decoder);  // max_len
// Forgets the last tokens: keeps the first `length` (0 starts a new sequence).
void gpt_decoder_truncate(GPTDecoder* decoder, int length);

// Appends token at position length() and writes the logits of the next token (the first V, fp32)
// into logits. params: the model's weights in ParamLayout order (param_layout(config).total floats),
// the same for every step of a sequence. Throws std::invalid_argument when the cache is full or
// the token is outside the vocabulary.
void gpt_decoder_step(GPTDecoder* decoder, const float* params, int token, float* logits);

// Incremental decoding of Llama 3 with a key/value cache: the CPU model's forward pass
// (cpu/llama_model.h) one token at a time, each new token's keys (after RoPE) and values appended
// to per-layer caches that hold the KV key/value heads only, so that the next token costs one row
// of every matrix product plus attention over the cache, instead of a forward pass over the prefix.
//   step(token at position p):  x = embed_tokens[token]
//     each layer: n = input_layernorm(x)
//                 q = rope_p(q_proj(n)), K[p] = rope_p(k_proj(n)), V[p] = v_proj(n)
//                 per query head h, reading key/value head h / (H/KV):
//                   y_h = softmax(q_h · K_kv[0..p]ᵀ / √hs) · V_kv[0..p]
//                 x += o_proj(y)
//                 x += down_proj(silu(gate_proj(m)) ⊙ up_proj(m)),  m = post_attention_layernorm(x)
//     logits = norm(x) · lm_headᵀ
// rope_p rotates by position p's angles, from the same tables as the model (cpu/rope.h, Llama 3.1's
// frequency scaling included). It calls the model's ops row by row (RMSNorm, the products, RoPE,
// SwiGLU, and attention.h's causal_softmax_row), so its logits match a full forward pass over the
// prefix to rounding.
#pragma once
#include <cstddef>

#include "base/llama_config.h"

struct LlamaDecoder;  // the caches and one position's activations (cpu/llama_decode.cpp)

// Caches for sequences of up to max_len tokens (≤ config.max_seq_len); throws std::invalid_argument
// for an impossible shape.
LlamaDecoder* llama_decoder_create(const LlamaConfig& config, int max_len);
void llama_decoder_free(LlamaDecoder* decoder);
// Bytes llama_decoder_create(config, max_len) allocates (for long sequences the caches dominate:
// 2·L·max_len·KV·hs floats).
size_t llama_decoder_bytes(const LlamaConfig& config, int max_len);

int llama_decoder_length(const LlamaDecoder* decoder);    // tokens in the cache
int llama_decoder_capacity(const LlamaDecoder* decoder);  // max_len
// Forgets the last tokens: keeps the first `length` (0 starts a new sequence).
void llama_decoder_truncate(LlamaDecoder* decoder, int length);

// Appends token at position length() and writes the next token's V logits into logits. params:
// the model's weights in base/llama_config.h's order (llama_param_count(config) floats), the same
// for every step of a sequence. Throws std::invalid_argument when the cache is full or the token is
// outside the vocabulary.
void llama_decoder_step(LlamaDecoder* decoder, const float* params, int token, float* logits);

// Llama 3 model shapes by name, beside GPT-2's descriptors (base/model_descriptor.h):
//   llama3.2-1b  llama3.2-3b  llama3.1-8b        the published shapes (base/llama_config.h)
//   llama3:L2:C64:H4:KV2:T64[:F176][:V512]       any shape, for tests and small runs: L layers,
//                                                 C channels, H query heads, KV key/value heads,
//                                                 T max sequence length; F the MLP width, V the
//                                                 vocabulary (fields in any order after "llama3")
// F defaults to llama_default_ffn_channels(C); V to Llama 3's 128256. The custom shapes use RoPE
// θ = 500000 without Llama 3.1's frequency scaling (which only matters beyond 8192 positions) and
// RMSNorm ε = 1e-5; the named shapes are Meta's configs, scaling included.
#pragma once
#include <string>

#include "base/llama_config.h"

// True if the text names a Llama 3 shape (llama3:... or one of the named shapes), as opposed to a
// GPT-2 descriptor or a file path.
bool is_llama_descriptor(const std::string& text);

// The config a descriptor names; throws InputError ("model '<descriptor>': <problem>") otherwise.
LlamaConfig llama_config_from_descriptor(const std::string& descriptor);

// The MLP width for C channels when the descriptor gives none: Meta's rule, 8C/3 rounded up to a
// multiple of 256; below 256 channels, rounded up to a multiple of 16 instead, so that tiny test
// shapes keep an MLP about 8C/3 wide (C = 64: 176, C = 768: 2048, C = 4096: 11008). The published
// models widen theirs beyond this rule, so the named shapes carry their own F.
int llama_default_ffn_channels(int channels);

// Throws InputError ("<what>: <problem>") unless the shape can be built: every size positive, heads
// dividing channels into an even head size, key/value heads dividing heads, θ and ε positive, and
// a parameter count this trainer can hold.
void validate_llama_config(const LlamaConfig& config, const std::string& what);

// "L=2 C=64 H=4 KV=2 F=176 V=512 maxT=64", for messages and logs.
std::string describe_llama_config(const LlamaConfig& config);

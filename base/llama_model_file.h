// Llama 3 model files, ours in llm.c's style (llm.c never merged a Llama 3 model file): a header
// of 256 little-endian int32 slots, then the parameters in base/llama_config.h's order (the
// embedding, each layer's nine tensors, the final norm, lm_head), fp32 or bf16, nothing after.
//   [0]  magic 20250327 (LLAMA3_MODEL_FILE_MAGIC, base/formats.h)
//   [1]  version 1
//   [2]  bytes per weight: 4 (fp32) or 2 (bf16)
//   [3]  L, layers            [4]  C, channels         [5]  H, query heads
//   [6]  KV, key/value heads  [7]  F, MLP width        [8]  V, vocabulary (not padded)
//   [9]  maxT                 [10] 1 when Llama 3.1's RoPE scaling is on, else 0
//   [11] the scaling's original_max_position
//   [12..13] RoPE θ, [14..15] RMSNorm ε, [16..17] the scaling's factor, [18..19] its
//            low_freq_factor, [20..21] its high_freq_factor: each an IEEE float64, its 8 bytes
//            little-endian over two slots
//   [22..255] zero
// Writing goes through AtomicFile; reading checks the magic (naming a GPT-2 model file, or any other
// file kind it knows, as such), the version, the header's shape and zero slots, and that the file
// holds exactly the bytes the header implies, each failure a one-line InputError.
#pragma once
#include <string>
#include <vector>

#include "base/llama_config.h"
#include "base/model_file.h"

struct LlamaModelFile {
    LlamaConfig config;
    WeightType type = WeightType::FP32;
    std::vector<float> params;  // llama_param_count(config) values (bf16 widened to fp32)
};

void write_llama_model_file(const std::string& path, const LlamaConfig& config, const float* params,
                            WeightType type);
// The bytes write_llama_model_file writes, for a writer that writes them later or elsewhere.
std::vector<char> llama_model_file_image(const LlamaConfig& config, const float* params, WeightType type);
LlamaModelFile read_llama_model_file(const std::string& path);
// The header of an open file, checked as read_llama_model_file checks it (the file's size too); the
// weights follow at byte FILE_HEADER_BYTES.
LlamaConfig read_llama_model_header(FileReader& file, WeightType* type);

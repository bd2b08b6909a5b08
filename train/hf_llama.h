// Llama 3 as Hugging Face transformers stores it (LlamaForCausalLM), to and from our Llama 3 model
// files (base/llama_model_file.h). A folder holds config.json (the shape: hidden_size,
// intermediate_size, num_attention_heads, num_key_value_heads, num_hidden_layers, vocab_size,
// max_position_embeddings, rope_theta, rope_scaling, rms_norm_eps, tie_word_embeddings) and
// model.safetensors (or its shards, listed by model.safetensors.index.json).
//
// The tensors are ours one for one: base/llama_config.h names them as transformers does and stores
// every matrix (out features, in features) as nn.Linear does, so nothing is transposed; the norms'
// weights are (C) there and (C, 1) in our list. When tie_word_embeddings is true the folder may
// omit lm_head.weight, and import copies model.embed_tokens.weight into it.
//
// No permutation of q_proj and k_proj either: transformers applies RoPE in the "rotate half"
// layout, rotating channel i of a head with channel i + head_dim/2, and its Llama checkpoints store
// the projections' rows in that order. cpu/rope.h rotates the same pairs (i, i + hs/2), so rows
// that transformers reads as pair (i, i + hs/2) are read as that pair by our model too. (Meta's own
// checkpoints rotate adjacent channels (2i, 2i + 1) instead, and differ from these by a permutation
// of q_proj's and k_proj's rows within each head; they are not read here.)
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "base/llama_config.h"
#include "base/llama_model_file.h"
#include "train/safetensors.h"

// config.json's text for a model whose weights are stored as dtype (lm_head untied: it is written).
std::string hf_llama_config_json(const LlamaConfig& config, StDtype dtype);
// The shape a parsed config.json describes, every field this trainer depends on checked (model_type
// llama, the sizes, SiLU, no biases, head_dim = C/H, rope_scaling absent or of rope_type llama3);
// *tied receives tie_word_embeddings. Each problem is one InputError line starting with `what`.
LlamaConfig parse_hf_llama_config(const nlohmann::json& config, const std::string& what,
                                  bool* tied);

// Writes dir (config.json, model.safetensors as dtype F32, F16 or BF16, generation_config.json)
// into a temporary folder renamed to dir at the end; dir must not exist, or be an empty folder.
void export_hf_llama_folder(const LlamaModelFile& model, const std::string& dir, StDtype dtype);

// Reads a LlamaForCausalLM folder. type is BF16 when every weight was stored as BF16, otherwise
// FP32; `source_dtypes` (may be null) receives the dtypes found, e.g. "F32". A NaN or an infinity in
// a weight is an InputError naming the tensor, unless allow_nonfinite.
LlamaModelFile import_hf_llama_folder(const std::string& dir, std::string* source_dtypes = nullptr,
                                      bool allow_nonfinite = false);

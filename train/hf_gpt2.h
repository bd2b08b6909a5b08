// GPT-2 as Hugging Face transformers stores it (GPT2LMHeadModel), to and from our model files.
// A folder holds config.json (the shape), model.safetensors (the weights; larger models may be split
// into model-0000k-of-0000n.safetensors listed by model.safetensors.index.json), and usually
// generation_config.json and the tokenizer files (vocab.json, merges.txt, tokenizer_config.json).
//
// Tensor names and layouts, ours (base/gpt_config.h) ↔ transformers' (prefix "transformer."):
//   wte (Vp, C)           wte.weight (V, C): the first V rows; the padded rows are ours only
//   wpe (maxT, C)         wpe.weight (n_positions, C)
//   ln1w ln1b (L, C)      h.{l}.ln_1.weight / .bias (C)
//   qkvw (L, 3C, C)       h.{l}.attn.c_attn.weight (C, 3C): Conv1D stores (in, out), the transpose
//   qkvb (L, 3C)          h.{l}.attn.c_attn.bias (3C)
//   attprojw (L, C, C)    h.{l}.attn.c_proj.weight (C, C), transposed;  attprojb: .bias (C)
//   ln2w ln2b (L, C)      h.{l}.ln_2.weight / .bias (C)
//   fcw (L, 4C, C)        h.{l}.mlp.c_fc.weight (C, 4C), transposed;   fcb: .bias (4C)
//   fcprojw (L, C, 4C)    h.{l}.mlp.c_proj.weight (4C, C), transposed; fcprojb: .bias (C)
//   lnfw lnfb (C)         ln_f.weight / .bias (C)
//   (tied to wte)         lm_head.weight (V, C): optional; when present it must equal wte
// Folders saved from GPT2Model (no "transformer." prefix) and the causal-mask buffers older
// checkpoints carry (h.{l}.attn.bias, h.{l}.attn.masked_bias) are read too.
#pragma once
#include <string>
#include <vector>

#include "base/gpt_config.h"
#include "base/model_file.h"
#include "train/safetensors.h"

// config.json's text for a model whose weights are stored as dtype.
std::string hf_config_json(const GPTConfig& config, StDtype dtype);
// The shape config.json describes (Vp = V rounded up to 128). Every field this trainer depends on is
// checked (model_type gpt2, the sizes, GELU's tanh form, LayerNorm ε 1e-5, n_inner, tied embeddings,
// plain attention scaling); each problem is one InputError line starting with `what`.
GPTConfig parse_hf_config(const std::string& text, const std::string& what);

// One of our tensors (or one layer's slice of it) under its transformers name.
struct HfTensor {
    std::string name;              // without the "transformer." prefix
    int tensor, layer;             // ParamTensor and layer (0 for the unlayered ones)
    std::vector<uint64_t> shape;   // transformers' shape
    bool transposed;               // Conv1D weight: transformers' (in, out) is our (out, in)ᵀ
};
std::vector<HfTensor> hf_gpt2_tensors(const GPTConfig& config);

// GPT-2's tokenizer files to copy into an exported folder: encoder.json (as vocab.json) and
// vocab.bpe (as merges.txt), which are already in transformers' formats; empty: none.
struct HfTokenizerFiles {
    std::string encoder_json, vocab_bpe;
};

// Writes dir: config.json, model.safetensors (dtype F32, F16 or BF16), generation_config.json, and
// with tokenizer files vocab.json, merges.txt and tokenizer_config.json. Everything is written into a
// temporary folder renamed to dir at the end, so dir appears complete or not at all; dir must not
// exist, or be an empty folder.
void export_hf_folder(const ModelFile& model, const std::string& dir, StDtype dtype,
                      const HfTokenizerFiles& tokenizer);

// Reads a folder as above into our layout (padded wte rows zero). type is BF16 when every weight
// was stored as BF16, otherwise FP32 (F16 and BF16 widen exactly). `source_dtypes` (may be null)
// receives the dtypes found, e.g. "F16". A NaN or an infinity in a weight is an InputError naming
// the tensor, unless allow_nonfinite.
ModelFile import_hf_folder(const std::string& dir, std::string* source_dtypes = nullptr,
                           bool allow_nonfinite = false);

// A model family's parameters as the planner sees them: one table entry per tensor, saying where the
// tensor is in the family's file layout, how tensor parallelism cuts it, and which bucket holds it on
// the device. parallel/plan/param_buckets.h builds every rank's device layout from such a table, so
// that GPT-2 and Llama 3 share the buckets, ZeRO's shards, checkpoints' re-cutting and the optimizer.
//
// The tables, in device order within each bucket:
//   GPT-2     positions: wpe | vocabulary: wte (tied: the classifier's copy on the last stage) |
//             layer: ln1w ln1b ln2w ln2b attprojb fcprojb qkvw qkvb attprojw fcw fcb fcprojw |
//             final norm: lnfw lnfb
//   Llama 3   vocabulary: embed_tokens (first stage only: lm_head is untied) |
//             layer: input_layernorm post_attention_layernorm q_proj k_proj v_proj o_proj gate_proj
//                    up_proj down_proj |
//             final norm: norm lm_head
// The replicated tensors come first in their bucket and the norms first of all (param_buckets.h says
// why).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "base/gpt_config.h"
#include "base/llama_config.h"

// How tensor parallelism's T ranks share a tensor (Megatron-LM's layout; rank t of T):
enum class TensorSplit {
    REPLICATED,  // whole on every rank (norms, biases of row-parallel products, positions)
    HEADS,       // column-parallel by heads: the rows are `blocks` equal blocks (GPT-2's query, key and
                 // value thirds; one block for each of Llama's q, k, v), and rank t holds rows
                 // [t·R/T, (t+1)·R/T) of each block of R rows: its heads of each
    COLUMN,      // column-parallel: rows [t·rows/T, (t+1)·rows/T)
    ROW,         // row-parallel: columns [t·cols/T, (t+1)·cols/T) of every row
    VOCABULARY,  // vocabulary-parallel: rows [t·Vs, (t+1)·Vs), Vs = vocab_slice_rows(rows, T), the
                 // rows past the last zero padding on the device
};

// The bucket a tensor goes in.
enum class ParamGroup { POSITIONS, VOCABULARY, LAYER, FINAL_NORM };

struct ParamSpec {
    int id;             // the family's tensor number, 0 .. tensors − 1, as segments name it (GPT-2:
                        // ParamTensor; Llama 3: LlamaLayerTensor for a layer's, LlamaOuterTensor
                        // for the others)
    std::string name;   // for messages
    ParamGroup group;   // LAYER: one copy per layer
    size_t offset;      // where it starts in the file layout (layer 0's copy for a per-layer tensor)
    size_t layer_stride;  // elements from layer l's copy to layer l+1's (0 outside the layers)
    size_t rows, row_length;  // (out, in) for a matrix; a vector is `rows` rows of one element
    TensorSplit split;
    int blocks = 1;     // HEADS: equal row blocks split separately
    size_t head_rows = 1;  // HEADS: rows of one head (the head size); a rank holds whole heads
    bool sequence_summed = false;  // a norm's: under sequence parallelism each tensor rank computes
                                   // its gradient from its own positions, and the group sums them
    bool decayed = false;          // a weight matrix: AdamW decays it
    size_t size() const { return rows * row_length; }
    // The length of a row of the weight matrix (what PowerSGD factors), 0 for a vector.
    size_t matrix_row_length() const { return decayed ? row_length : 0; }
};

struct ParamTable {
    std::vector<ParamSpec> tensors;  // grouped by bucket, in device order within each
    int num_layers = 0;
    size_t channels = 0;      // the model's C
    size_t layout_total = 0;  // the whole model's parameters in the file layout
    bool tied_classifier = false;  // the classifier reuses the vocabulary bucket (a copy on the last
                                   // pipeline stage)
    const ParamSpec& spec(int id) const;  // the entry with this id
    // The model's tensors numbered one layer's copy at a time, in the order of their ids and then of
    // the layers (GPT-2: base/model_tensors.h's list), and how many there are: the layer-adaptive
    // optimizers keep a pair of sums per tensor (kernels/layer_adaptive.h), numbered so on every rank.
    int tensor_index(int id, int layer) const;
    int tensor_count() const;
};

// Llama 3's tensors outside the layers, numbered after LlamaLayerTensor's.
enum LlamaOuterTensor { LLAMA_EMBEDDING = NUM_LLAMA_LAYER_TENSORS, LLAMA_FINAL_NORM, LLAMA_LM_HEAD, NUM_LLAMA_TENSORS };

// GPT-2's 16 tensors in llm.c's file layout (base/gpt_config.h).
ParamTable gpt2_param_table(const GPTConfig& c);
// Llama 3's tensors in its layer-major layout (base/llama_config.h): q, k and v split by heads, so
// tensor ranks must divide both H and KV.
ParamTable llama_param_table(const LlamaConfig& c);

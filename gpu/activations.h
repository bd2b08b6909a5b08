// The GPU model's buffers sized by the micro-batch: what the forward pass keeps for the backward
// pass (Activations), the token ids, the kernels' scratch and the step's control block (StepBuffers),
// requested in the model's device arena.
#pragma once
#include <cstddef>

#include "base/gpt_config.h"
#include "base/train_options.h"
#include "gpu/placement.h"
#include "kernels/common.h"
#include "kernels/device_arena.h"
#include "kernels/step_guard.h"
#include "parallel/comm/tensor_parallel.h"


// What the forward pass keeps for the backward pass, for micro-batches of up to N = B·T positions.
// Per-layer tensors hold a slice per layer of the stage and per micro-batch in flight (slot). With
// tensor parallelism over T ranks (parallel/comm/tensor_parallel.h) the attention and MLP activations hold
// this rank's heads and hidden units (C/T, 3C/T, 4C/T wide), and with sequence parallelism the residual
// stream and the LayerNorms hold this rank's Nl = N/T positions (Nl = N otherwise). With
// recomputation, some tensors hold one slice that every layer and slot reuses, and backward recomputes
// its contents from what was kept:
//   -r 0  everything kept
//   -r 1  the MLP's activation outputs (GELU's, SwiGLU's) recomputed from its inputs (mlp_hidden)
//   -r 2  also the LayerNorm outputs, from their inputs and the saved mean and rstd
struct Activations {
    floatX* encoded;                   // (slots, Nl, C) the stage's input: the embeddings, or what the
                                       // previous stage sent
    floatX* ln1;                       // (layers·slots or 1, Nl, C)
    float *ln1_mean, *ln1_rstd;        // (layers·slots, Nl)
    floatX* qkv;                       // (layers·slots, N, 3C/T)
    floatX* atty;                      // (layers·slots, N, C/T) attention output
    float* att_lse;                    // (layers·slots, B, NH/T, T) log-sum-exp of each attention row
    floatX* residual2;                 // (layers·slots, Nl, C) residual stream after attention
    floatX* ln2;                       // (layers·slots or 1, Nl, C)
    float *ln2_mean, *ln2_rstd;        // (layers·slots, Nl)
    floatX* mlp_hidden;                // (layers·slots, N, hidden/T) the MLP's first product's output: its
                                       // activation's input (GPT-2: 4C for GELU; Llama 3: gate|up, 2F)
    floatX* mlp_activated;             // (layers·slots or 1, N, activated/T) the activation's output
                                       // (GPT-2: GELU's, 4C; Llama 3: SwiGLU's, F)
    floatX* residual3;                 // (layers·slots, Nl, C) residual stream after the MLP: the layer's output
    // The last stage: the final LayerNorm and the classifier.
    floatX* lnf;                       // (Nl, C)
    float *lnf_mean, *lnf_rstd;        // (slots, Nl)
    floatX* dlnf;                      // (slots, Nl, C) d(loss)/d(lnf), from the classifier's backward
    floatX* logits;                    // (R, Vs) this rank's vocabulary slice (Vs = Vp with one rank) of
                                       // R rows (classifier_rows); the classifier overwrites it with
                                       // d(loss)/d(logits)
    float* losses;                     // (N)
    // Working buffers reused by every layer.
    floatX* branch;                    // (Nl, C) an attention or MLP branch's output, before the add
    floatX* dresidual[2];              // (Nl, C) d(loss)/d(residual stream); with a pipeline two, taken in
                                       // turns by micro-batches (one may still be on its way to the
                                       // previous stage)
    floatX* dln;                       // (Nl, C)
    floatX* datty;                     // (N, C/T)
    floatX* dqkv;                      // (N, 3C/T)
    floatX* dmlp_hidden;               // (N, hidden/T) the MLP's first product's output gradient
    floatX* dmlp_activated;            // (N, activated/T) its activation's output gradient, where the
                                       // activation narrows (Llama's SwiGLU: F of 2F); else null
    // Sequence parallelism only: the whole (N, C) input of a column-parallel product (gathered), a
    // LayerNorm output gathered in backward while another product computes, and a row-parallel
    // product's partial sums before they are reduce-scattered.
    floatX *whole, *whole_ln, *partial;
    // Tensor parallelism only: the classifier's per-row statistics, this rank's (N, 3) and every rank's
    // (T, N, 3), and the rows' log-sum-exp (N). With tensor or pipeline parallelism: one row of logits
    // gathered whole or sent from the last stage (T·Vs ≥ Vp).
    float *class_stats, *class_stats_all, *class_lse;
    floatX* logits_row;
};

// The widths per position of a layer's activations in the whole model (a tensor rank holds 1/T of each
// but the residual stream's, `channels`): the family's layer shapes, which size the buffers.
struct LayerWidths {
    size_t channels;   // C: the residual stream, the norms, the branches' outputs
    size_t qkv;        // the fused query, key and value projection (GPT-2: 3C)
    size_t attention;  // the attention's output (all query heads)
    size_t heads;      // query heads (each position keeps a log-sum-exp per head)
    size_t head_size;
    size_t hidden;     // the MLP's first product (GPT-2: 4C)
    size_t activated;  // the MLP's activation output, the last product's input (GPT-2: 4C)
    bool rms_norms = false;  // RMSNorm (Llama 3) rather than LayerNorm
    size_t rope_pairs = 0;   // RoPE (Llama 3): the rotation tables' entries per position (head size / 2);
                             // 0 without RoPE
};

// The rows of logits the classifier holds at once (see activations.cu).
int classifier_rows(const TensorParallel& tp, int B, int T, int Vp);
// For tests: chunks of at most this many bytes from now on (models made later use it).
void set_classifier_chunk_bytes(size_t bytes);

// Everything sized by the micro-batch: activations, token ids, kernel scratch.
struct StepBuffers {
    Activations act{};
    int* inputs = nullptr;   // (N) token ids of the current micro-batch
    int* targets = nullptr;
    void* scratch = nullptr;   // kernel scratch, the largest any kernel asks for
    StepControl* control = nullptr;  // the step's values in and its loss, norm and verdict out
                                     // (kernels/step_guard.h)
    float *rope_cos = nullptr, *rope_sin = nullptr;  // RoPE's tables, (T, rope_pairs) each (LayerWidths),
                                                     // filled by the family's layers
};
// Requests them in the arena, for micro-batches of up to opt.batch_size × opt.seq_len tokens on a rank
// of a tensor group of `tp` ranks and of pipeline stage `stage` (see struct Activations for what -r,
// -tp, -sp and -pp change).
// Layers of `widths`, a padded vocabulary of Vp.
void request_step_buffers(DeviceArena* arena, StepBuffers* buffers, const LayerWidths& widths, int Vp,
                          const TrainOptions& opt, const TensorParallel& tp, const PipelineStage& stage);

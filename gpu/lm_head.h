// The LM head of either family (logits = norm output · weightᵀ, the loss, and its backward): GPT-2's
// classifier tied to wte (gpt2_layers.h), Llama 3's untied lm_head (llama_layers.h). A family hands
// its head's weight and gradient, this rank's vocabulary slice of them (Vs rows of C, Vs = Vp with
// one tensor rank; parallel/plan/param_buckets.h), and the final norm's output and gradient buffers.
#pragma once
#include "gpu/model_layers.h"

struct LmHead {
    const floatX* weight;  // (Vs, C) this rank's vocabulary slice
    floatX* gradient;      // its gradient (added into when training)
    int vocab_size, padded_vocab, channels;  // V, Vp and C of the whole model
};

// Logits only, for what logits_at reads: the rows of sequence 0, in the first chunk (this rank's
// vocabulary slice), from the final norm's output `norm` (this rank's positions).
void lm_head_logits(const LayerContext& c, const LmHead& head, const floatX* norm);
// The losses per position and their mean (in the control block's totals: kernels/classifier.h's
// loss_mean, summed in double in a fixed order on the device, read back once per step); with
// `training` the logits replaced by the loss gradient (scaled by loss_scale / N), the mean added into
// the step's running loss as 1/micro_steps of it, and the head's backward: d(loss)/d(norm) into dnorm
// (this rank's positions) and the head's weight gradient.
// With one tensor rank all of it runs a chunk of rows at a time (classifier_rows). Under tensor
// parallelism each rank holds a slice of every row's logits: the slices' statistics (maximum, sum of
// exponentials, the target's logit) are gathered and combined into each row's log-sum-exp, so that the
// whole rows are never gathered.
void lm_head_loss(const LayerContext& c, const LmHead& head, const floatX* norm, floatX* dnorm, bool training,
                  float loss_scale, int micro_steps);

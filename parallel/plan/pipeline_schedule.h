// Pipeline parallelism's plan (-pp P): which layers each stage holds, and in which order a stage runs
// the forward and backward passes of a step's micro-batches. Host-only: the trainer executes the
// actions (gpu/step.cu), the planner and the tests read them.
//
// Schedules, for m micro-batches over P stages:
//   gpipe  every forward, then every backward: F0 F1 ... F(m-1) B0 B1 ... B(m-1). A stage keeps the
//          activations of all m micro-batches.
//   1f1b   stage s runs min(P−s−1, m) forwards ahead ("warm-up"), then alternates one forward and one
//          backward, then finishes the backwards: F0 .. F(w-1), then F(w) B0 F(w+1) B1 ..., then the
//          remaining B. Stage s keeps at most min(P−s, m) micro-batches' activations: the first stage
//          P, not m.
// Both run the backward passes in micro-batch order, so every stage adds each parameter's gradients
// in the same order under both (and as one rank accumulating m micro-steps does): the same bits.
// Both leave each stage idle for the same share of a step, the bubble (P−1)/(m+P−1).
#pragma once
#include <string>
#include <vector>

#include "base/model_shape.h"

struct PipelineAction {
    bool forward;     // the forward pass of the micro-batch, or its backward pass
    int micro_batch;  // 0 .. m−1
};

// The actions of stage `stage` of `stages` for m micro-batches; kind is "1f1b" or "gpipe".
std::vector<PipelineAction> pipeline_schedule(const std::string& kind, int stages, int stage, int micro_batches);

// The most micro-batches whose activations the stage keeps at once under that schedule.
int micro_batches_in_flight(const std::string& kind, int stages, int stage, int micro_batches);

// The share of a step each stage waits for the others: (P−1)/(m+P−1).
double pipeline_bubble(int stages, int micro_batches);

// The stages' layers: stage s holds layers [first[s], first[s+1]) (first has stages + 1 entries), at
// least one each, contiguous, chosen to balance the stages' forward FLOPs per token (base/model_shape.h):
// a layer's products and attention, the classifier's product on the last stage (for GPT-2 124M about
// 5.5 layers' worth). Sequences of T tokens.
std::vector<int> stage_layers(const ModelShape& shape, int T, int stages);

// "layers 0-3 | 4-7 | 8-10 | 11 + classifier"
std::string describe_stage_layers(const std::vector<int>& first);

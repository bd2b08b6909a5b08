// The training loop, written once for every trainer: flags → setup (model shape, data, resume point,
// all checked before anything is written) → report → steps (accumulation, clipping, the optimizer, validation,
// samples, checkpoints, metrics) → teardown. A trainer supplies its defaults and a function that
// creates its TrainModel (base/train_model.h); train_gpt_cpu.cpp and train_gpt.cu are each that plus
// a short main().
//
// Ranks are part of the loop: each rank reads its own slice of every batch, only rank 0 prints and
// writes shared files, each rank writes its own training-state file. Every problem with the input ends
// the program with one "error: ..." line and exit status 1.
#pragma once
#include <functional>
#include <memory>

#include "base/ranks.h"
#include "base/train_model.h"
#include "train/train_flags.h"

struct TrainerSpec {
    TrainOptions defaults;  // the trainer's defaults, before flags
    RankGroup* ranks = nullptr;  // this process's place among the ranks (nullptr: a single rank)
    // Creates the model for micro-batches of B = opt.batch_size sequences of T = opt.seq_len tokens.
    // Throws InputError when it cannot (e.g. it would not fit in memory, naming what to lower).
    std::function<std::unique_ptr<TrainModel>(const ModelConfig&, const TrainOptions&)> create_model;
    // Optional: a note printed in the start-up report about flags the trainer ignores.
    std::function<void(const TrainOptions&)> report_ignored_flags;
    // Optional: the host memory create_model will allocate, computed without allocating, so that a
    // run that cannot fit stops with one error first (train/memory_check.h). Unset: the model's
    // host memory is not counted (a GPU model checks its device memory itself).
    std::function<ModelMemory(const ModelConfig&, const TrainOptions&)> host_memory_needed;
    // For --dry-run (train/run_plan.h): the memory one rank of a run of num_ranks ranks holds and the
    // bytes it sends per step, computed without allocating anything; and the free bytes of the memory
    // the model lives in (0: unknown).
    std::function<ModelMemory(const ModelConfig&, const TrainOptions&, int num_ranks, bool communicates)>
        plan_memory;
    std::function<double()> device_memory;
    // Whether the trainer splits a model across ranks (-tp, -pp).
    bool model_parallel = false;
};

// Parses argv, trains, and returns the process exit status (0, 1 after an "error:" line, or 128 +
// the signal's number after SIGINT or SIGTERM stopped the run, train/interrupts.h).
int run_training(int argc, char** argv, const TrainerSpec& spec);

// Training FLOPs per token of the forward and backward pass: 6 per parameter (a multiply-add forward,
// two backward) plus attention's score and value products, 6·L·A·T per token (A the attention width,
// GPT-2's C) with causal masking halving the 12·L·A·T of the full square. Recomputed activations are
// not counted (as is usual for MFU).
double training_flops_per_token(const ModelConfig& config, int T);

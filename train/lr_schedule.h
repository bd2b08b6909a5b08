// Learning-rate schedules with llm.c's semantics. step counts from 0 (the first update), max_steps
// is the run's length, min_lr = lr · final_fraction:
//   every schedule but constant warms up linearly: lr · (step + 1) / warmup for step < warmup
//   cosine    then min_lr + (lr - min_lr) · ½(1 + cos(π · p)),  p = (step - warmup) / (max -
//   warmup) linear    then lr - (lr - min_lr) · p constant  lr at every step (no warmup) wsd then
//   lr until 80% of max_steps, then min_lr + (lr - min_lr) · (1 - sqrt(q)),
//             q = (step - decay_start) / (max - decay_start)  (warmup-stable-decay)
#pragma once
#include <string>

#include "base/train_options.h"  // ScheduleKind, TrainOptions

struct LRSchedule {
    ScheduleKind kind = ScheduleKind::COSINE;
    double learning_rate = 3e-4;
    int warmup_steps = 0;
    int max_steps = 1;
    double final_fraction = 1.0;
};

// "cosine" | "linear" | "constant" | "wsd" → kind; false if unknown.
bool parse_schedule_kind(const std::string& name, ScheduleKind* kind);
const char* schedule_name(ScheduleKind kind);

double learning_rate_at(const LRSchedule& schedule, int step);

// The peak rate for a global batch (--lr-scaling, --base-batch): -l was tuned for base_batch tokens
// per step, and a run of tokens_per_step scales it by
//   none    1
//   linear  tokens_per_step / base_batch
//   sqrt    sqrt(tokens_per_step / base_batch)
// The schedule (warmup, decay) then runs from the scaled peak as it would from -l.
enum class LRScaling { NONE, LINEAR, SQRT };
bool parse_lr_scaling(const std::string& name, LRScaling* rule);  // false if unknown
const char* lr_scaling_name(LRScaling rule);
double scaled_peak_lr(double learning_rate, LRScaling rule, long long tokens_per_step, long long base_batch);
// A checked run's peak: -l scaled by --lr-scaling for its -d tokens per step against --base-batch.
double peak_learning_rate(const TrainOptions& options);

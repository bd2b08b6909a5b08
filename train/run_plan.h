// What a run will hold and send, said before anything is allocated: the start-up report's memory
// and network lines, and --dry-run, which prints the whole plan for any number of ranks (--plan-ranks)
// and any device size (--device-memory) and exits: "how many GPUs, and which -z, for this model at
// this batch?" answered in a second, from a laptop if need be.
#pragma once
#include "base/model_config.h"
#include "base/train_model.h"
#include "train/train_flags.h"
#include "train/train_loop.h"

// `memory: parameters X MiB | gradients X MiB | master weights X MiB | optimizer state X MiB |
// activations X MiB | overhead X MiB | total X MiB` (overhead where the model's device holds more than
// its buffers, then a line with its parts) and, with several ranks, `network: X MiB sent per step by each rank`
// (followed by `(data group X MiB, tensor group X MiB)` under tensor parallelism), and
// `network by node: X MiB within the node, X MiB across nodes` (parallel/plan/traffic.h).
void print_memory_report(const ModelMemory& memory);

// A plan fits when its total per rank is at most this share of the device. The margin is for what the
// plan cannot see: the kernels CUDA loads lazily at their first launch (the trainer's own and
// cuBLASLt's, tens to hundreds of MiB), NCCL's choices on a machine other than the one whose figures
// gpu/device_overhead.h holds (channels, transports, versions), the 2 MiB pages the device hands
// memory out in, and other processes on the GPU. 10% of an 80 GiB card is 8 GiB: more than those add
// up to on the machines measured, so a plan that fits runs.
constexpr double kFitsShare = 0.90;

// The ranks a run plans for: --plan-ranks with --dry-run, else the ranks started. Fails when a run
// started on several ranks is asked to plan for another count.
int planned_ranks(const TrainOptions& opt, const RankGroup& ranks);

// --dry-run: prints the model, the ranks and ZeRO stage, the per-rank memory, the network traffic
// per step and whether it fits the device (its free memory, or --device-memory), from rank 0 only.
// Needs spec.plan_memory. Returns the exit status (0).
int print_run_plan(const TrainerSpec& spec, const TrainOptions& opt, const ModelConfig& config,
                   int num_ranks, bool main_rank);

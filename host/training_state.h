// The training-state file, state_NNNNNNNN_RRRRR.bin: everything rank R needs to continue a run
// bit for bit. Our own format, little-endian:
//   header  magic "GPTSTATE" (8 bytes), version (u32), 0 (u32), payload bytes (u64),
//           FNV-1a 64 checksum of the payload (u64)
//   payload RunShape (the run's configuration, checked on resume), step, data loader position,
//           sampling RNG state, the loss and grad-norm outlier windows, then the fp32 master
//           weights and AdamW m and v: the whole model's in ParamLayout order, or with `sharded`
//           set, this rank's ZeRO shard of them, the same for every stage
//           (parallel/param_buckets.h: the rank's chunk of every bucket, for RunShape::num_ranks ranks).
// Written through AtomicFile (temp name, fsync, rename). Reading checks magic, version, size and
// checksum, each failure a one-line InputError naming the file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "host/dataloader.h"
#include "host/gpt_config.h"
#include "host/outlier_detector.h"

// What must be the same for a resumed run to be a continuation.
struct RunShape {
    GPTConfig config;
    int32_t batch_size = 0;   // B
    int32_t seq_len = 0;      // T
    int64_t total_batch = 0;  // tokens per step (-d)
    int32_t num_ranks = 1;
    int32_t shuffle = 0;  // data loader mode
    uint64_t data_seed = 0;
};

struct TrainingState {
    RunShape shape;
    int32_t rank = 0;
    int64_t step = 0;  // updates done
    LoaderPosition loader;
    uint64_t sample_rng_state = 0;
    OutlierDetector loss_detector, norm_detector;  // windows behind -sl and -sg
    int64_t sharded = 0;  // 1: params, adam_m, adam_v hold this rank's ZeRO shard; 0: the whole model
    std::vector<float> params;  // fp32 master weights, param_layout(config).total
    std::vector<float> adam_m, adam_v;
};

constexpr uint32_t TRAINING_STATE_VERSION = 1;

void write_training_state(const std::string& path, const TrainingState& state);
TrainingState read_training_state(const std::string& path);

// Throws InputError naming the file and the first field where saved and current differ.
void check_same_run(const RunShape& saved, const RunShape& current, const std::string& path);

// FNV-1a 64 over bytes, continuing from hash (start with FNV_OFFSET).
constexpr uint64_t FNV_OFFSET = 0xCBF29CE484222325ull;
uint64_t fnv1a64(const void* data, size_t bytes, uint64_t hash);

// Resuming a run on any mesh with each rank reading only what it keeps. A checkpoint's state files
// hold one rank's part each of the fp32 master weights and AdamW moments, with its ParamLayout ranges
// (train/training_state.h); the model file holds the whole working weights (base/model_file.h). A
// rank of the resumed run learns from its model where it keeps which elements (a Placement,
// base/model_part.h), and reads just those slices of the files, seeking to each. Its host memory is
// then its own share of the model, the files' range tables and a buffer of fixed size (the state
// files' checksums are streamed through it), however large the model; the values are the files'
// bytes, so the run continues exactly as it would from the whole model.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "base/model_config.h"
#include "base/model_files.h"
#include "base/model_part.h"
#include "base/ranks.h"
#include "train/training_state.h"

// What one rank's resume read and held, for the start-up report and the tests.
struct ReshardingCounts {
    uint64_t bytes_read = 0;  // the slices of weights and state it read
    uint64_t bytes_held = 0;  // the most the reader held at once: its arrays and the range tables
    uint64_t resident_growth = 0;  // how far its resident memory rose above where it started
    bool resident_growth_known = false;  // false where the kernel keeps no resettable peak
};
// Every rank's counts on rank 0 (a collective; the others get an empty list).
std::vector<ReshardingCounts> gather_counts(const ReshardingCounts& mine, RankGroup& ranks);
// One line: the most any rank read, held and grew by, against the whole model's weights and optimizer
// state (16 bytes for each of its `total` parameters).
std::string resharding_report(const std::vector<ReshardingCounts>& ranks, size_t total);

// The state files of one checkpoint, opened and checked: each file as open_training_state checks it,
// the files ranks 0 to N-1 of one run, and together holding every element of the model once.
class CheckpointState {
public:
    // `first`: rank 0's file, already opened; its shape says how many ranks wrote the checkpoint.
    CheckpointState(const std::string& dir, long long step, TrainingStateFile first);
    const TrainingState& first() const { return files_[0].state(); }
    // The master weights, AdamW m and v of the placement's elements, each an array of
    // placement.size (zero where the placement names no element).
    void read_placed(const Placement& placement, std::vector<float>* master, std::vector<float>* m,
                     std::vector<float>* v, ReshardingCounts* counts);
    // Gradient compression's state as rank `rank` wrote it (empty where no such rank wrote one: the
    // checkpoint has fewer ranks). Each rank keeps its own residuals, so only the same rank's file
    // can continue them.
    CompressionState compression_of_rank(int rank) {
        if (rank < 0 || rank >= (int)files_.size()) return CompressionState();
        return files_[rank].read_compression();
    }
    int ranks() const { return (int)files_.size(); }

private:
    std::vector<TrainingStateFile> files_;
    std::vector<CoveredRange> tiles_;  // every file's ranges sorted by offset: they tile the model
};

// The working weights of the placement's elements from a model file, checked to hold `config`'s shape.
std::vector<float> read_placed_weights(ModelWeightsReader& file, const ModelConfig& config,
                                       const Placement& placement, ReshardingCounts* counts);

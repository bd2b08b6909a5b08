// The training-state file, state_NNNNNNNN_RRRRR.bin: everything rank R needs to continue a run
// bit for bit. Our own format, little-endian:
//   header  magic "GPTSTATE" (8 bytes), version (u32), 0 (u32), payload bytes (u64), checksum of the
//           payload (u64: XXH64, base/xxhash64.h; FNV-1a 64 up to version 4)
//   payload RunShape (the run's configuration, checked on resume), step, data loader position,
//           sampling RNG state, the loss and grad-norm outlier windows, the mesh that wrote it
//           (data ranks, -tp, -pp) and the optimizer (i32: 0 AdamW, 1 LAMB, 2 LARS, 3 Muon; files
//           written before LAMB and LARS existed hold 0 there), then the part of the fp32 master weights
//           and the optimizer's m and v this rank is responsible for: its ranges in ParamLayout order (u64
//           count, then u64 offset and length pairs) and the three arrays (u64 lengths, then fp32
//           values). AdamW and LAMB keep their first and second moments in m and v; LARS keeps its
//           momentum buffer in m and writes v as zeros; Muon keeps its momentum buffer in m at the
//           elements of its matrices (base/muon_layout.h), with zeros in v there, and AdamW's two
//           moments at the other elements. So every file has three arrays of one length, and Muon
//           needed no new version: an older build refuses its files as of an unknown optimizer.
//           Version 3 adds, between the ranges and the three arrays' lengths, gradient compression's
//           state (base/compression_state.h; --grad-compression): method (i32: 0 none, 1 powersgd,
//           2 int8, 3 sign), the data ranks it was made for (i32), its layout fingerprint (u64), a u64
//           count and that many fp32 values (the error-feedback residuals and PowerSGD's Q factors,
//           count 0 without compression).
//           Version 4 adds, after the mesh and the optimizer, the model's family (i32: 0 GPT-2,
//           1 Llama 3) and Llama 3's own shape (i32 key/value heads, MLP width, RoPE scaling on,
//           its original_max_position, one unused; f64 RoPE θ, RMSNorm ε, the scaling's factor,
//           low_freq_factor, high_freq_factor; all zero for GPT-2); a Llama 3 state's six config slots
//           hold maxT, V, V, L, H, C. Earlier versions are GPT-2's.
//           Version 5 changes only the checksum, from FNV-1a 64 to XXH64: FNV-1a multiplies once per
//           byte, each multiply waiting for the one before, which took 7 ms of a core for a 5.6 MB
//           state (most of what writing a checkpoint costs the CPU); XXH64 takes 0.35 ms.
// The files of all ranks of a checkpoint cover the model exactly once (base/model_part.h), so a run
// on any mesh and ZeRO stage reassembles them without knowing how they were cut. Version 1 files
// (whole-model state without ranges) are read too, as AdamW's, version 2 files as without compression,
// and every version's checksum is checked by its own rule.
// Written through AtomicFile (temp name, fsync, rename). Reading checks magic, version, size and
// checksum, each failure a one-line InputError naming the file; the checksum is streamed, so a reader
// can check a file and then take only slices of its arrays (open_training_state).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/compression_state.h"
#include "base/file_io.h"
#include "base/model_config.h"
#include "base/model_part.h"
#include "base/optimizer_settings.h"
#include "base/outlier_detector.h"
#include "train/dataloader.h"

// What must be the same for a resumed run to be a continuation.
struct RunShape {
    ModelConfig config;
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
    int32_t data_ranks = 1;  // data-parallel ranks: the loader's slices (shape.num_ranks are all ranks)
    int32_t tensor_parallel = 1, pipeline_parallel = 1;  // the rest of the mesh that wrote it
    OptimizerKind optimizer = OptimizerKind::ADAMW;      // whose state adam_m and adam_v hold
    CompressionState compression;     // gradient compression's residuals and factors on this rank
    std::vector<LayoutRange> ranges;  // where params, adam_m, adam_v belong in ParamLayout order
    std::vector<float> params;        // fp32 master weights
    std::vector<float> adam_m, adam_v;
};

constexpr uint32_t TRAINING_STATE_VERSION = 5;

void write_training_state(const std::string& path, const TrainingState& state);
// The bytes write_training_state writes, for a writer that writes them later or elsewhere.
std::vector<char> training_state_image(const TrainingState& state);
TrainingState read_training_state(const std::string& path);

// A state file opened for reading slices of its arrays (train/resharding.h): every check of
// read_training_state done (the checksum streamed through a fixed-size buffer), every field read but
// the three arrays and the compression state's values, which are read on demand.
class TrainingStateFile {
public:
    TrainingStateFile(TrainingState state, uint64_t values, FileReader file, uint64_t arrays_at,
                      uint64_t compression_at, uint64_t compression_values)
        : state_(std::move(state)), values_(values), file_(std::move(file)), arrays_at_(arrays_at),
          compression_at_(compression_at), compression_values_(compression_values) {}
    const TrainingState& state() const { return state_; }  // its arrays and compression values empty
    const std::string& path() const { return file_.path(); }
    uint64_t values() const { return values_; }  // the length of each array
    // Values [first, first + count) of array 0 (master weights), 1 (AdamW m) or 2 (v) into out.
    void read_values(int array, uint64_t first, uint64_t count, float* out);
    // The compression state with its values (method 0 and none: the run did not compress).
    CompressionState read_compression();

private:
    TrainingState state_;
    uint64_t values_;
    FileReader file_;
    uint64_t arrays_at_;  // file offset of the first array
    uint64_t compression_at_, compression_values_;  // file offset and count of the compression values
};
TrainingStateFile open_training_state(const std::string& path);

// The number of ranks that wrote the checkpoint a state file belongs to (its run's num_ranks), read
// from the file's fixed fields alone, without its checksum: a quick look for listing an output
// folder's checkpoints (train/checkpoint.h), not a check. 0 where the file cannot be read that far or
// is no training state.
int state_file_rank_count(const std::string& path);

// Throws InputError naming the file and the first field where saved and current differ.
void check_same_run(const RunShape& saved, const RunShape& current, const std::string& path);
// Throws InputError when the state was written by another optimizer than this run's: one optimizer's
// moments are no starting point for another's.
void check_same_optimizer(OptimizerKind saved, OptimizerKind current, const std::string& path);

// The checksum a state file of `version` holds for its payload (tests, and the fuzzer's repairs).
uint64_t training_state_checksum(uint32_t version, const void* payload, size_t bytes);

// FNV-1a 64 over bytes, continuing from hash (start with FNV_OFFSET).
constexpr uint64_t FNV_OFFSET = 0xCBF29CE484222325ull;
uint64_t fnv1a64(const void* data, size_t bytes, uint64_t hash);

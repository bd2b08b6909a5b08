// In-memory snapshots (--snapshot-every N): a restart that loses at most N steps. Every N steps each
// rank keeps its checkpoint part (its training-state file; rank 0 also the model file) in node-local
// memory, and a copy of the previous rank's part, passed around the ring of ranks, so that the parts
// of a node that is lost for good survive on the next rank's node. Written by a background thread
// (train/background_writer.h) while the next step runs; the loop waits for it at the next step
// boundary, before that step is logged, so a logged step is always covered by a snapshot.
//
// Layout (ROOT: gpt_snapshots_<hash of the output folder's absolute path>, a folder the run makes in
// --snapshot-dir, by default /dev/shm):
//   ROOT/held_by_RRRRR/SSSSSSSS_of_NNNNN/   what rank R of a run on N ranks holds of step S:
//       state_SSSSSSSS_RRRRR.bin and, for R = 0, model_SSSSSSSS.bin        (its own part)
//       state_SSSSSSSS_QQQQQ.bin and, for Q = 0, model_SSSSSSSS.bin        (rank Q = R − 1's copy)
// with the output folder's file names and formats (train/checkpoint.h). A rank keeps its newest two
// snapshots (the one being written and the one before) and removes older ones.
//
// Restart (recover_snapshot, before the resume point is chosen): the ranks list the snapshot files
// they can see on their nodes; rank 0 picks the newest step whose model file and every rank's state
// file are present somewhere, and if that is newer than the newest complete checkpoint in the output
// folder, the rank that holds each part copies it there and rank 0 marks the checkpoint done. The
// resume then reads it as any checkpoint, on whatever mesh the restart has (train/resharding.h).
// Every node's snapshots of the run are then removed: the new run takes its own. A finished run
// removes them too (remove_snapshots). A removal takes only what the run made: files and folders
// with the names above, each folder only once nothing else is left in it, ROOT last; a file of
// another name put there survives, and so does the --snapshot-dir folder itself.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "base/ranks.h"
#include "base/train_options.h"
#include "train/background_writer.h"
#include "train/training_state.h"
#include "base/model_files.h"

// Where this run's snapshots go ("" without an output folder).
std::string snapshot_root(const TrainOptions& opt);
// Refuses a --snapshot-dir that is not a folder, is the output folder or holds it (one line each).
void check_snapshot_dir(const TrainOptions& opt);
// Removes the snapshot files and folders this code makes below `root`, then `root` where it is left
// empty; nothing of another name.
void remove_snapshot_tree(const std::string& root);

// A checkpoint as one rank holds it at a step boundary, before it becomes files: its training state
// (with its part of the master weights and moments) and, on rank 0, the whole model's working weights.
struct CheckpointPart {
    long long step = 0;
    int rank = 0, num_ranks = 1;
    ModelConfig config;
    WeightType weight_type = WeightType::FP32;
    std::vector<float> weights;  // empty except on rank 0
    TrainingState state;
};
// Its files in an output folder (train/checkpoint.h names and formats): as bytes in memory (for the
// snapshots, which pass them to the next rank), or written there, piece by piece.
std::vector<FileImage> checkpoint_files(const std::string& dir, const CheckpointPart& part);
void write_checkpoint_files(const std::string& dir, const CheckpointPart& part);
// Hands the part's arrays back for the next checkpoint's host copy (base/host_arrays.h), once its
// files are written or made; leaves them empty.
void reuse_part_arrays(CheckpointPart& part);

// Passes this rank's part to the next rank (a collective) and returns the files to write for the
// snapshot (its own part and the previous rank's copy) and the older snapshot folders to remove
// first. Call it once the snapshot before is complete on every rank: that one is kept.
struct SnapshotWrite {
    std::vector<FileImage> files;
    std::function<void()> remove;  // removes the older snapshot folders (BackgroundWriter::queue's `first`)
    size_t bytes = 0;  // the memory the snapshot takes on this rank's node
};
SnapshotWrite prepare_snapshot(const std::string& root, const CheckpointPart& mine, RankGroup& ranks);

// On restart (every rank): brings the newest complete snapshot into the output folder when it is newer
// than its newest complete checkpoint, then removes the snapshots of every node. Returns the step
// recovered (0: none); rank 0 says what it did in one line. Without -y 1 it only removes them.
long long recover_snapshot(const TrainOptions& opt, RankGroup& ranks);

// Removes this run's snapshots on this node (a collective: every rank waits for the others first).
void remove_snapshots(const std::string& root, RankGroup& ranks);

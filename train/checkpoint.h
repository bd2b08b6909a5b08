// The output folder (-o DIR) as llm.c lays it out:
//   model_NNNNNNNN.bin        weights at step N (llm.c model file)
//   state_NNNNNNNN_RRRRR.bin  training state of rank R at step N (train/training_state.h)
//   DONE_NNNNNNNN             written last, once every file of checkpoint N is in place
//   metrics.jsonl             the metrics log (train/metrics_log.h)
// A checkpoint counts only when its DONE marker, its model file and all its ranks' state files
// exist; resume picks the newest such step. Every file is written to a temporary name and renamed,
// so none ever exists half-written.
// A write that fails (a full disk) removes what it had written of its checkpoint, and a restart with
// -y 1 tidies the folder before it picks its checkpoint: the files of checkpoints that never got a
// DONE marker are removed, and checkpoints whose marker remains but whose files do not all exist
// (deleted, a disk lost) are moved aside, whole, into DIR/damaged_NNNNNNNN/, where nothing overwrites
// them.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "base/ranks.h"
#include "base/train_options.h"

std::string checkpoint_model_path(const std::string& dir, long long step);
std::string checkpoint_state_path(const std::string& dir, long long step, int rank);
std::string checkpoint_done_path(const std::string& dir, long long step);
std::string metrics_log_path(const std::string& dir);

// Writes the (empty) DONE marker of a checkpoint whose other files are already written.
void mark_checkpoint_done(const std::string& dir, long long step);

// Steps of the complete checkpoints in dir, oldest first (none if dir does not exist).
std::vector<long long> complete_checkpoints(const std::string& dir, int num_ranks);

// Deletes every checkpoint but the newest `keep` complete ones (keep ≤ 0: delete nothing) and the
// major ones, whose step is a multiple of major_every (llm.c's -nm; 0: none). The DONE marker goes
// first, so a crash midway never leaves a checkpoint that looks complete but is not.
void prune_checkpoints(const std::string& dir, int keep, int num_ranks, int major_every = 0);

// Runs `write`, which writes rank `rank`'s files of checkpoint `step` (its state file, on rank 0 also
// the model file); when it fails (a full disk), removes those of them it had already written, so that
// nothing of a checkpoint that will never be complete stays behind, and rethrows the error.
void write_checkpoint_or_remove_it(const std::string& dir, long long step, int rank,
                                   const std::function<void()>& write);

// Removes the model and state files (exactly model_NNNNNNNN.bin, state_NNNNNNNN_RRRRR.bin) of every
// step that has no DONE marker: what a checkpoint that never completed left. Returns one line per
// step ("removed the incomplete checkpoint of step 30 (model_00000030.bin): it never completed").
// Only where no trainer writes in dir.
std::vector<std::string> remove_incomplete_checkpoints(const std::string& dir);

// The names of the files checkpoint `step` lacks: its model file and rank 0's state file, and the
// state files of the other ranks rank 0's file says wrote it (believed only once that file proves
// sound, so that a corrupt rank count sets nothing aside). Empty when none is missing.
std::vector<std::string> missing_checkpoint_files(const std::string& dir, long long step);

// A checkpoint whose DONE marker exists but some of whose files do not, and where the rest went.
struct DamagedCheckpoint {
    long long step = 0;
    std::vector<std::string> missing;  // file names
    std::vector<std::string> moved;    // the file names that were there, the DONE marker last
    std::string folder;                // where they went: DIR/damaged_NNNNNNNN (_2, _3, ... if taken)
};
// Moves every damaged checkpoint's files into a folder of its own, the DONE marker last (a crash on
// the way leaves a checkpoint that is still damaged, never one whose files look like leftovers), and
// says what it did. Only where no trainer writes in dir.
std::vector<DamagedCheckpoint> set_aside_damaged_checkpoints(const std::string& dir);
// "damaged checkpoint of step 6: model_00000006.bin is missing; its other files (...) were moved to
// DIR/damaged_00000006, where nothing overwrites them".
std::string describe_damaged_checkpoint(const DamagedCheckpoint& damaged);

// At start with -y 1, before the resume point is chosen (every rank): rank 0 removes what checkpoints
// that never completed left and sets the damaged ones aside; the other ranks wait for it. Returns
// rank 0's lines for the start-up report, one per checkpoint it removed or moved ("" elsewhere, and
// without -y 1 or -o).
std::string tidy_checkpoints_for_resume(const TrainOptions& opt, RankGroup& ranks);

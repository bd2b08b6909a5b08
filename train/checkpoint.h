// The output folder (-o DIR) as llm.c lays it out:
//   model_NNNNNNNN.bin        weights at step N (llm.c model file)
//   state_NNNNNNNN_RRRRR.bin  training state of rank R at step N (train/training_state.h)
//   DONE_NNNNNNNN             written last, once every file of checkpoint N is in place
//   metrics.jsonl             the metrics log (train/metrics_log.h)
// A checkpoint counts only when its DONE marker, its model file and all its ranks' state files
// exist; resume picks the newest such step. Every file is written to a temporary name and renamed,
// so none ever exists half-written.
#pragma once
#include <string>
#include <vector>

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

// A run's checkpoints (-n, -o) and in-memory snapshots (--snapshot-every), for the training loop:
// when each is due, their host copy taken at a step boundary, their files written in the background
// (train/background_writer.h) while the next steps run, and what they cost the loop, told once.
//
// The run's set-up calls prepare (and, on rank 0, record_snapshot_folder and print_plan); then the
// loop calls it at three points of a step boundary, on every rank alike (each may be a collective):
//   finish_earlier_writes  before the step is logged: the snapshot started at an earlier boundary
//                          is waited for (a logged step is always covered by one); the checkpoint
//                          started there is marked done where every rank has written its files;
//   save                   once the run knows whether it stops here: the checkpoint or snapshot due
//                          after this step, taken and queued (at the run's end, the checkpoint is
//                          waited for until it is marked done);
//   end_snapshots          at the run's end: the snapshots are removed, its checkpoint replaces them.
// One checkpoint is written at a time, and one snapshot: the one before is complete on every rank
// before the next is taken. Rank 0 marks a checkpoint done (its DONE marker, train/checkpoint.h),
// prunes older ones and announces it on its writer's thread, behind the checkpoint's files.
#pragma once
#include <functional>
#include <string>

#include "base/model_file.h"
#include "base/ranks.h"
#include "base/train_options.h"
#include "train/background_writer.h"
#include "train/snapshots.h"

class CheckpointKeeper {
public:
    explicit CheckpointKeeper(RankGroup& ranks) : ranks_(ranks), main_rank_(ranks.rank == 0) {}
    CheckpointKeeper(const CheckpointKeeper&) = delete;
    CheckpointKeeper& operator=(const CheckpointKeeper&) = delete;

    // Once the flags are checked and the output folder is locked, before the resume point is chosen
    // (every rank): takes the run's settings, and with -y 1 tidies the output folder (the files of
    // incomplete checkpoints removed, damaged checkpoints set aside; tidy_report says what).
    void prepare(const TrainOptions& opt);
    const std::string& tidy_report() const { return tidy_report_; }
    // Rank 0, once the output folder is prepared, with --snapshot-every: writes snapshots.path there,
    // where this run's snapshots are, for a supervisor that abandons the run.
    void record_snapshot_folder() const;
    // For the start-up report (rank 0): where checkpoints and snapshots go and the host memory they
    // hold on the way, for a model of `parameters` whose working weights are `weight_type`.
    void print_plan(size_t parameters, WeightType weight_type) const;

    void finish_earlier_writes();
    // Whether a checkpoint or a snapshot is due after `step`; `ending`: the run ends there (its last
    // step, or a stop), which always takes a checkpoint where there is an output folder.
    bool due(long long step, bool ending) const { return checkpoint_due(step, ending) || snapshot_due(step, ending); }
    // Takes what is due after `step` from `take_part` (the host copy of this rank's part, called once)
    // and queues its writing.
    void save(long long step, bool ending, const std::function<CheckpointPart()>& take_part);
    void end_snapshots();

private:
    bool checkpoint_due(long long step, bool ending) const;
    bool snapshot_due(long long step, bool ending) const;
    void start_checkpoint(CheckpointPart part);
    void finish_checkpoint(bool wait, bool last = false);
    void wait_for_checkpoint_done(bool last = false);
    std::function<void()> checkpoint_done_job(long long step, std::string cost) const;
    std::string checkpoint_cost(bool last);
    void start_snapshot(const CheckpointPart& part);
    void finish_snapshot();
    void tell_snapshot_cost();

    RankGroup& ranks_;
    const bool main_rank_;
    TrainOptions opt_;           // the run's flags, as prepare took them
    std::string tidy_report_;    // -y 1: incomplete checkpoints removed, damaged ones set aside
    std::string snapshot_root_;  // where this run's snapshots go (train/snapshots.h; "" without -o)

    BackgroundWriter checkpoint_writer_;
    long long checkpoint_pending_ = 0;   // the step of the checkpoint being written (0: none)
    double checkpoint_boundary_ms_ = 0;  // what taking it cost the loop
    double first_checkpoint_ms_ = -1;    // the same for the run's first, copied into fresh memory
    int checkpoints_finished_ = 0;
    size_t checkpoint_bytes_ = 0;  // this rank's files of it
    bool checkpoint_cost_told_ = false;

    BackgroundWriter snapshot_writer_;
    long long snapshot_pending_ = 0;  // the step of the snapshot being written (0: none)
    double snapshot_boundary_ms_ = 0;
    double first_snapshot_ms_ = -1;  // the same for the run's first, made in fresh memory
    int snapshots_finished_ = 0;
    size_t snapshot_bytes_ = 0;
    bool snapshot_cost_told_ = false;
};

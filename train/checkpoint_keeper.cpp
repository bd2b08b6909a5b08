// A run's checkpoints and snapshots, for the training loop (train/checkpoint_keeper.h).
#include "train/checkpoint_keeper.h"

#include <chrono>
#include <cstdio>
#include <memory>
#include <utility>

#include "base/errors.h"
#include "base/file_io.h"
#include "train/checkpoint.h"
#include "train/run_folder.h"
#include "train/run_report.h"

void CheckpointKeeper::prepare(const TrainOptions& opt) {
    opt_ = opt;
    snapshot_root_ = snapshot_root(opt);
    tidy_report_ = tidy_checkpoints_for_resume(opt, ranks_);
}

void CheckpointKeeper::record_snapshot_folder() const {
    if (opt_.snapshot_every <= 0) return;
    AtomicFile where(opt_.output_dir + "/snapshots.path");
    const std::string line = snapshot_root_ + "\n";
    where.write(line.data(), line.size());
    where.commit();
}

// (Measured costs follow the first of each: checkpoint_cost, tell_snapshot_cost.)
void CheckpointKeeper::print_plan(size_t parameters, WeightType weight_type) const {
    if (opt_.output_dir.empty()) return;
    const double MiB = 1048576.0;
    const double model_file = parameters * (weight_type == WeightType::FP32 ? 4.0 : 2.0) / MiB;
    const double state_part = 12.0 * parameters / ranks_.num_ranks / MiB;  // about
    printf("checkpoints: %s, %s; host memory while one is written: about %.1f MiB on rank 0, %.1f MiB on the "
           "others\n",
           opt_.checkpoint_every > 0 ? strprintf("every %d steps", opt_.checkpoint_every).c_str() : "at the end",
           opt_.checkpoint_async ? "written in the background" : "written before the next step",
           model_file + state_part, state_part);
    const int copies = ranks_.num_ranks > 1 ? 2 : 1;  // its own part, and the previous rank's
    if (opt_.snapshot_every > 0)
        printf("snapshots: every %d steps in %s (node memory)%s: about %.1f MiB a snapshot per rank, %.1f MiB with "
               "the model file (rank 0%s); two at a time while the next is written beside the newest\n",
               opt_.snapshot_every, snapshot_root_.c_str(), copies > 1 ? ", with a copy on the next rank" : "",
               copies * state_part, copies * state_part + model_file, copies > 1 ? " and rank 1" : "");
}

// The writes started at an earlier step boundary: the snapshot before this step must be complete
// before the step is logged (then a restart loses at most the steps after the newest logged one).
void CheckpointKeeper::finish_earlier_writes() {
    finish_snapshot();
    finish_checkpoint(false);
}

bool CheckpointKeeper::checkpoint_due(long long step, bool ending) const {
    return !opt_.output_dir.empty() && ((opt_.checkpoint_every > 0 && step % opt_.checkpoint_every == 0) || ending);
}

bool CheckpointKeeper::snapshot_due(long long step, bool ending) const {
    return opt_.snapshot_every > 0 && step % opt_.snapshot_every == 0 && !ending;
}

// The checkpoint and the snapshot share one host copy; what taking it cost the loop is kept for each
// one's cost line (the snapshot's includes the ring exchange, prepare_snapshot).
void CheckpointKeeper::save(long long step, bool ending, const std::function<CheckpointPart()>& take_part) {
    const bool checkpoint = checkpoint_due(step, ending), snapshot = snapshot_due(step, ending);
    // One checkpoint at a time: the one before is written on every rank before this one is taken,
    // and the host arrays it is done with come back for this copy (base/host_arrays.h).
    if (checkpoint) finish_checkpoint(true);
    const auto copy_start = std::chrono::steady_clock::now();
    CheckpointPart part = take_part();
    const double taken_ms = ms_since(copy_start);
    if (snapshot) {
        start_snapshot(part);
        snapshot_boundary_ms_ = ms_since(copy_start);
        if (first_snapshot_ms_ < 0) first_snapshot_ms_ = snapshot_boundary_ms_;
    }
    if (checkpoint) {
        checkpoint_boundary_ms_ = taken_ms;
        if (first_checkpoint_ms_ < 0) first_checkpoint_ms_ = taken_ms;
        start_checkpoint(std::move(part));
        if (ending) wait_for_checkpoint_done(true);  // the run ends with its checkpoint written
    } else {
        reuse_part_arrays(part);  // the snapshot's files are made from it
    }
}

// A disk checkpoint of the run's last step replaces the snapshots.
void CheckpointKeeper::end_snapshots() {
    finish_snapshot();
    tell_snapshot_cost();
    remove_snapshots(snapshot_root_, ranks_);
}

// ---- checkpoints ----

void CheckpointKeeper::start_checkpoint(CheckpointPart part) {
    finish_checkpoint(true);  // one at a time: the one before has its files written on every rank
    checkpoint_pending_ = part.step;
    checkpoint_bytes_ = 4 * (part.weights.size() + 3 * part.state.params.size());
    // The files (serialised, checksummed, rounded to bf16) are made and written on the writer's thread.
    auto shared = std::make_shared<CheckpointPart>(std::move(part));
    // A write that fails (a full disk) removes what it wrote of the checkpoint before its error ends the run.
    checkpoint_writer_.queue([shared, dir = opt_.output_dir]() {
        write_checkpoint_or_remove_it(dir, shared->step, shared->rank, [&] { write_checkpoint_files(dir, *shared); });
        reuse_part_arrays(*shared);
    });
    if (!opt_.checkpoint_async) wait_for_checkpoint_done();
}

// The checkpoint being written is done once every rank has written its files: rank 0 then queues its
// marking done (checkpoint_done_job). `wait`: until then; otherwise only where every rank has already
// finished (asked at every step boundary while one is pending: a collective, which every rank reaches
// with the same checkpoint pending). `last`: the run's last checkpoint.
void CheckpointKeeper::finish_checkpoint(bool wait, bool last) {
    if (checkpoint_pending_ == 0) return;
    if (wait) checkpoint_writer_.wait();
    if (ranks_.mean(checkpoint_writer_.finished() ? 1.0 : 0.0) < 1.0 - 1e-9) return;
    checkpoint_writer_.wait();  // (finished) its write error, if any
    const long long step = checkpoint_pending_;
    checkpoint_pending_ = 0;
    checkpoints_finished_++;
    if (!main_rank_) return;
    checkpoint_writer_.queue(checkpoint_done_job(step, checkpoint_cost(last)));
}

// Waits until the checkpoint being written is complete: its DONE marker written and announced.
// `last`: the run's last checkpoint.
void CheckpointKeeper::wait_for_checkpoint_done(bool last) {
    finish_checkpoint(true, last);
    checkpoint_writer_.wait();
}

// Rank 0's part of a checkpoint whose files every rank has written: its DONE marker (only now, when
// they are all durable), the pruning of older ones and the announcement. A job on rank 0's writer,
// queued behind those files and ahead of the next checkpoint's, so that the loop does not wait for
// the marker's fsync or the removals; `cost`, where not empty, is printed after the announcement.
std::function<void()> CheckpointKeeper::checkpoint_done_job(long long step, std::string cost) const {
    return [dir = opt_.output_dir, keep = opt_.checkpoints_keep, ranks = ranks_.num_ranks,
            major = opt_.major_checkpoint_every, step, cost = std::move(cost)]() {
        mark_checkpoint_done(dir, step);
        prune_checkpoints(dir, keep, ranks, major);
        announce_checkpoint(dir, step, ranks);
        if (!cost.empty()) printf("%s\n", cost.c_str());
        fflush(stdout);
    };
}

// What the checkpoints written in the background cost the loop, told once (rank 0, as a checkpoint
// finishes): for the second checkpoint (the first one's host copy, into fresh memory, beside it) or
// for the run's only one (`last`); "" otherwise.
std::string CheckpointKeeper::checkpoint_cost(bool last) {
    if (checkpoint_cost_told_ || !opt_.checkpoint_async || !(checkpoints_finished_ >= 2 || last)) return "";
    checkpoint_cost_told_ = true;
    const std::string first =
        checkpoints_finished_ >= 2 ? strprintf("; the first, into fresh memory, %.1f ms", first_checkpoint_ms_) : "";
    return strprintf("checkpoint cost: %.1f ms of the loop at the step boundary (the host copy%s), %.1f ms "
                     "written in the background; about %.1f MiB of files on rank 0",
                     checkpoint_boundary_ms_, first.c_str(), checkpoint_writer_.last_job_ms(),
                     checkpoint_bytes_ / 1048576.0);
}

// ---- snapshots ----

void CheckpointKeeper::start_snapshot(const CheckpointPart& part) {
    finish_snapshot();
    const long long step = part.step;
    SnapshotWrite write = prepare_snapshot(snapshot_root_, part, ranks_);
    snapshot_bytes_ = write.bytes;
    snapshot_writer_.queue(std::move(write.files), std::move(write.remove));
    snapshot_pending_ = step;
}

// Waits until the snapshot being written is complete on every rank: the loop does so before it logs
// the next step, so that every logged step but the newest is covered by a snapshot.
void CheckpointKeeper::finish_snapshot() {
    if (snapshot_pending_ == 0) return;
    snapshot_writer_.wait();
    ranks_.barrier();
    snapshot_pending_ = 0;
    if (++snapshots_finished_ == 2) tell_snapshot_cost();
}

// What the snapshots cost the loop, told once (rank 0): for the second snapshot (the first one's,
// made in fresh memory, beside it), or at the run's end for its only one.
void CheckpointKeeper::tell_snapshot_cost() {
    if (!main_rank_ || snapshot_cost_told_ || snapshots_finished_ == 0) return;
    snapshot_cost_told_ = true;
    const std::string first =
        snapshots_finished_ >= 2 ? strprintf("; the first, in fresh memory, %.1f ms", first_snapshot_ms_) : "";
    const int ranks = ranks_.num_ranks;
    printf("snapshot cost: %.1f ms of the loop at the step boundary (the host copy%s%s), %.1f ms written in "
           "the background; %.1f MiB of node memory a snapshot on rank 0%s, up to %.1f MiB while the next is "
           "written beside the newest, in %s\n",
           snapshot_boundary_ms_, ranks > 1 ? " and the ring exchange" : "", first.c_str(),
           snapshot_writer_.last_job_ms(), snapshot_bytes_ / 1048576.0,
           ranks > 1 ? strprintf(" (its part and rank %d's copy)", ranks - 1).c_str() : "",
           2 * snapshot_bytes_ / 1048576.0, snapshot_root_.c_str());
}

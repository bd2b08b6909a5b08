// End-to-end tests of checkpoints that fail or are damaged, through the trainer binary
// ($BIN/train_gpt_cpu, or the one $TRAINER names) on a tiny model and synthetic shards: a checkpoint
// whose write fails on a full disk leaves none of its files, and a restart resumes from the one
// before; what an incomplete checkpoint left is removed at the next -y 1 start; a checkpoint whose
// DONE marker remains but whose model or state file is gone is set aside whole in damaged_NNNNNNNN/
// (where nothing overwrites it), and the run resumes from the newest complete one, or from step 0.
#include <sys/stat.h>

#include <sstream>

#include "base/file_io.h"
#include "test/train/host_test_util.h"
#include "test/train/trainer_runs.h"
#include "train/checkpoint.h"

static const char* MODEL = "custom:L2:C64:H2:V64:T16";

// A run every 2 steps (-n 2) with -x `steps` into `out`.
static std::string run_args(const std::string& data, const std::string& out, int steps) {
    return "-i " + data + "/train.bin -j " + data + "/val.bin -e " + MODEL + " -b 2 -t 8 -n 2 -v 0 -s 0 -x " +
           std::to_string(steps) + " -o " + out;
}

static bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The names in a folder, one a line.
static std::string folder_listing(const std::string& dir) {
    std::string listing;
    tst::run_command("ls -A " + dir, &listing);
    return listing;
}

// The output's lines that start with `prefix`.
static std::vector<std::string> lines_starting(const std::string& output, const std::string& prefix) {
    std::vector<std::string> found;
    std::istringstream lines(output);
    std::string line;
    while (std::getline(lines, line))
        if (line.rfind(prefix, 0) == 0) found.push_back(line);
    return found;
}

// Where the disk fills up once a checkpoint's model file is written, so that its state file (three
// times larger: master weights, m and v) cannot be. A small tmpfs holding the output folder where
// mounting one is permitted (then the disk is full: ENOSPC); otherwise a file size limit (ulimit -f,
// with SIGXFSZ ignored, so the write fails with EFBIG) on the trainer's process.
class SmallDisk {
public:
    SmallDisk() : mount_point_(tst::make_temp_dir() + "/disk") {
        mkdir(mount_point_.c_str(), 0755);
        // Two checkpoints (1.7 MiB each) and the next one's model file (0.4 MiB), not its state file.
        mounted_ = tst::run_command("mount -t tmpfs -o size=4500k tmpfs " + mount_point_) == 0;
    }
    ~SmallDisk() {
        if (mounted_) tst::run_command("umount " + mount_point_);
    }
    std::string output_folder() const { return mount_point_ + "/out"; }
    std::string how() const { return mounted_ ? "a full tmpfs" : "ulimit -f"; }
    // The trainer's command line with `args`, its writes limited.
    std::string limited(const std::string& args) const {
        if (mounted_) return trainer() + " " + args;
        return "bash -c 'trap \"\" XFSZ; ulimit -f 600; exec " + trainer() + " " + args + "'";
    }
    // Room again for the restart.
    void grow() const {
        if (mounted_) tst::run_command("mount -o remount,size=64m " + mount_point_);
    }

private:
    std::string mount_point_;
    bool mounted_ = false;
};

// Checkpoint 6 fails half-way (rank 0's model file written, its state file not): the run ends with one
// error line naming the file, and leaves no file of step 6, no temporary one; a plain restart with
// -y 1 resumes from step 4 and finishes.
TEST(a_checkpoint_that_fails_to_write_leaves_nothing_behind) {
    const std::string data = data_dir();
    const SmallDisk disk;
    const std::string out = disk.output_folder(), run = run_args(data, out, 6);
    std::string log;
    CHECK_MSG(run_trainer(run + " --stop-at 4", &log) == 0, "%s", log.c_str());
    const int status = tst::run_command(disk.limited(run + " -y 1"), &log);
    CHECK_MSG(status != 0, "exit 0 on %s: %s", disk.how().c_str(), log.c_str());
    const std::vector<std::string> errors = lines_starting(log, "error: ");
    CHECK_MSG(errors.size() == 1 && has(errors[0], "state_00000006_00000.bin") &&
                  log.compare(log.size() - errors[0].size() - 1, std::string::npos, errors[0] + "\n") == 0,
              "not one error line at the end, naming the state file (%s): %s", disk.how().c_str(), log.c_str());
    const std::string listing = folder_listing(out);
    CHECK_MSG(!has(listing, "00000006") && !has(listing, ".tmp."), "%s", listing.c_str());
    CHECK(complete_checkpoints(out, 1) == (std::vector<long long>{2, 4}));

    disk.grow();
    CHECK_MSG(run_trainer(run + " -y 1", &log) == 0, "%s", log.c_str());
    CHECK_MSG(has(log, "resumed from step 4") && !has(log, "removed the incomplete"), "%s", log.c_str());
    CHECK(complete_checkpoints(out, 1) == (std::vector<long long>{2, 4, 6}));
}

// What an incomplete checkpoint left (model and state files of a step without its DONE marker, past
// the run's end here, so nothing would ever replace them) is removed by the next -y 1 start, in one
// line; the run resumes as before.
TEST(a_leftover_of_an_incomplete_checkpoint_is_removed_at_start) {
    const std::string data = data_dir(), out = tst::make_temp_dir() + "/out", run = run_args(data, out, 4);
    std::string log;
    CHECK_MSG(run_trainer(run, &log) == 0, "%s", log.c_str());
    write_all(checkpoint_model_path(out, 30), read_all(checkpoint_model_path(out, 4)));
    write_all(checkpoint_state_path(out, 30, 0), read_all(checkpoint_state_path(out, 4, 0)));
    CHECK_MSG(run_trainer(run + " -y 1", &log) == 0, "%s", log.c_str());
    CHECK_MSG(lines_starting(log, "removed the incomplete checkpoint") ==
                  std::vector<std::string>{"removed the incomplete checkpoint of step 30 (model_00000030.bin and "
                                           "state_00000030_00000.bin): it never completed"},
              "%s", log.c_str());
    CHECK_MSG(has(log, "resumed from step 4") && has(log, "nothing to do"), "%s", log.c_str());
    CHECK(!path_exists(checkpoint_model_path(out, 30)) && !path_exists(checkpoint_state_path(out, 30, 0)));
    CHECK(complete_checkpoints(out, 1) == (std::vector<long long>{2, 4}));
}

// The newest checkpoint (6) lost its model file, its DONE marker kept: -y 1 names it in one line of
// the report, moves its other files into damaged_00000006/ unchanged, resumes from step 4 and
// finishes (writing a new checkpoint 6 beside them).
TEST(a_damaged_newest_checkpoint_is_set_aside_and_the_run_resumes_from_the_one_before) {
    const std::string data = data_dir(), out = tst::make_temp_dir() + "/out";
    std::string log;
    CHECK_MSG(run_trainer(run_args(data, out, 6), &log) == 0, "%s", log.c_str());
    const std::vector<unsigned char> state = read_all(checkpoint_state_path(out, 6, 0));
    remove(checkpoint_model_path(out, 6).c_str());
    CHECK_MSG(run_trainer(run_args(data, out, 8) + " -y 1 --accept-changes 1", &log) == 0, "%s", log.c_str());
    const std::vector<std::string> damaged = lines_starting(log, "damaged checkpoint");
    CHECK_MSG(damaged.size() == 1 && has(damaged[0], "step 6: model_00000006.bin is missing") &&
                  has(damaged[0], out + "/damaged_00000006"),
              "%s", log.c_str());
    CHECK_MSG(has(log, "resumed from step 4 in " + out), "%s", log.c_str());
    CHECK(read_all(out + "/damaged_00000006/state_00000006_00000.bin") == state);
    CHECK(path_exists(out + "/damaged_00000006/DONE_00000006"));
    CHECK(complete_checkpoints(out, 1) == (std::vector<long long>{2, 4, 6, 8}));
}

// The run's only checkpoint (2) lost its state file: -y 1 says so, keeps its model file in
// damaged_00000002/, and starts from step 0 as with no checkpoint at all; its own checkpoint 2
// replaces nothing.
TEST(a_damaged_only_checkpoint_is_kept_and_the_run_starts_over) {
    const std::string data = data_dir(), out = tst::make_temp_dir() + "/out", run = run_args(data, out, 2);
    std::string log;
    CHECK_MSG(run_trainer(run, &log) == 0, "%s", log.c_str());
    const std::vector<unsigned char> model = read_all(checkpoint_model_path(out, 2));
    remove(checkpoint_state_path(out, 2, 0).c_str());
    CHECK_MSG(run_trainer(run + " -y 1", &log) == 0, "%s", log.c_str());
    CHECK_MSG(lines_starting(log, "damaged checkpoint of step 2: state_00000002_00000.bin is missing").size() == 1,
              "%s", log.c_str());
    CHECK_MSG(has(log, "no complete checkpoint in " + out + " yet, so training starts from step 0"), "%s",
              log.c_str());
    CHECK(read_all(out + "/damaged_00000002/model_00000002.bin") == model);
    CHECK(path_exists(out + "/damaged_00000002/DONE_00000002"));
    CHECK(complete_checkpoints(out, 1) == std::vector<long long>{2});
}

// End-to-end tests of what a run owns and what it waits on, through train_gpt_cpu on a tiny model:
// one run per output folder (a second trainer is refused while the first finishes untouched; a
// crashed run's lock does not block its restart), snapshots removed without touching what else is in
// --snapshot-dir, inputs that are not regular files refused at once, a flag given twice, a dangling
// symbolic link as -o, and a stop signal that ends the run within a bounded time (during a long sample,
// or with --stop-timeout where the step boundary is not reached).
#include <chrono>
#include <sstream>

#include "base/file_io.h"
#include "test/train/host_test_util.h"
#include "test/train/trainer_runs.h"

static const char* MODEL = "custom:L2:C64:H2:V64:T16";

static bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

static std::string training_flags(const std::string& data) {
    return "-i " + data + "/train.bin -j " + data + "/val.bin -e " + MODEL + " -b 2 -t 8 -l 1e-3 -v 0 -s 0";
}

static std::string file_text(const std::string& path) {
    const std::vector<unsigned char> bytes = read_all(path);
    return std::string(bytes.begin(), bytes.end());
}

// The "step N/M | loss X | lr Y | norm Z" part of each step line: what must not depend on timing.
static std::vector<std::string> step_records(const std::string& output) {
    std::vector<std::string> records;
    std::istringstream lines(output);
    std::string line;
    while (std::getline(lines, line))
        if (line.rfind("step ", 0) == 0) records.push_back(line.substr(0, line.rfind(" | ", line.find(" ms |"))));
    return records;
}

// A shell loop that waits (up to 10 s) until `condition` holds while process $pid lives.
static std::string wait_until(const std::string& condition) {
    return "i=0; while [ $i -lt 2000 ] && ! { " + condition + "; } && kill -0 $pid 2>/dev/null; do sleep 0.005; "
           "i=$((i+1)); done; ";
}

// Runs the trainer in the background with its output in `log`, sends it SIGTERM `delay` seconds
// after `condition` holds, and returns its exit status; *ms: from the signal to the end.
static int terminate_after(const std::string& args, const std::string& log, const std::string& condition,
                           const char* delay, int* ms) {
    std::string status;
    tst::run_command(trainer() + " " + args + " > " + log + " 2>&1 & pid=$!; " + wait_until(condition) + "sleep " +
                         delay + "; start=$(date +%s%N); kill -TERM $pid; wait $pid; "
                         "echo \"exit $? $(( ($(date +%s%N) - start) / 1000000 ))\"",
                     &status);
    int rc = -1;
    sscanf(status.c_str() + status.find("exit "), "exit %d %d", &rc, ms);
    return rc;
}

TEST(a_second_trainer_on_a_folder_is_refused_and_the_first_finishes_untouched) {
    const std::string data = data_dir(), root = tst::make_temp_dir();
    const std::string folder = root + "/run", alone = root + "/alone";
    const std::string run = training_flags(data) + " -x 3000 -n 1500 --log-every 500";
    // The first trainer is frozen (SIGSTOP) once it holds the folder, the second tried meanwhile.
    const std::string script =
        trainer() + " " + run + " -o " + folder + " -y 1 > " + root + "/first.log 2>&1 & pid=$!; " +
        wait_until("[ -s " + folder + "/run.lock ]") + "kill -STOP $pid; echo \"pid $pid\"; start=$(date +%s%N); " +
        trainer() + " " + run + " -o " + folder + " -y 1 --seed 7 > " + root + "/second.log 2>&1; " +
        "echo \"second $? $(( ($(date +%s%N) - start) / 1000000 ))\"; kill -CONT $pid; wait $pid; echo \"first $?\"";
    std::string status;
    tst::run_command(script, &status);
    const long pid = atol(status.c_str() + status.find("pid ") + 4);
    int second_rc = -1, second_ms = -1, first_rc = -1;
    sscanf(status.c_str() + status.find("second "), "second %d %d", &second_rc, &second_ms);
    sscanf(status.c_str() + status.find("first "), "first %d", &first_rc);
    const std::string second = file_text(root + "/second.log"), first = file_text(root + "/first.log");
    CHECK_MSG(second_rc == 1 && second.rfind("error: -o (--output-dir): ", 0) == 0 &&
                  second.find('\n') == second.size() - 1,
              "rc %d: %s", second_rc, second.c_str());
    CHECK_MSG(has(second, folder + " is in use by pid " + std::to_string(pid) + " on host ") && has(second, " since "),
              "%s", second.c_str());
    CHECK_MSG(second_ms < 5000, "the second trainer took %d ms to stop", second_ms);
    CHECK_MSG(first_rc == 0, "first: rc %d: %s", first_rc, first.c_str());
    // The first run's files are those of the same run alone.
    std::string out;
    CHECK_MSG(run_trainer(run + " -o " + alone, &out) == 0, "%s", out.c_str());
    CHECK(step_records(first) == step_records(out) && !step_records(out).empty());
    for (const char* file : {"model_00003000.bin", "state_00003000_00000.bin", "model_00001500.bin", "DONE_00003000"}) {
        CHECK_MSG(path_exists(alone + "/" + file) && read_all(folder + "/" + file) == read_all(alone + "/" + file),
                  "%s differs from the run alone", file);
    }
    CHECK_MSG(!path_exists(folder + "/run.lock"), "the lock file stayed after the run");
}

TEST(a_crashed_runs_lock_does_not_block_its_restart) {
    const std::string data = data_dir(), root = tst::make_temp_dir(), folder = root + "/run";
    const std::string run = training_flags(data) + " -x 1000000 --log-every 1000 -o " + folder + " -y 1";
    std::string status;
    tst::run_command(trainer() + " " + run + " > " + root + "/crashed.log 2>&1 & pid=$!; " +
                         wait_until("grep -q '^step 1000/' " + root + "/crashed.log") +
                         "kill -KILL $pid; wait $pid; echo \"pid $pid\"",
                     &status);
    const long pid = atol(status.c_str() + status.find("pid ") + 4);
    CHECK_MSG(path_exists(folder + "/run.lock"), "no lock file left by the killed run: %s", status.c_str());
    std::string out;
    const int rc = run_trainer(training_flags(data) + " -x 5 -o " + folder + " -y 1", &out);
    CHECK_MSG(rc == 0 && has(out, "step 5/5"), "rc %d: %s", rc, out.c_str());
    CHECK_MSG(has(out, "run.lock was left by pid " + std::to_string(pid)) && has(out, "taken over"), "%s",
              out.c_str());
}

TEST(snapshots_are_removed_without_what_else_is_in_the_snapshot_dir) {
    const std::string data = data_dir(), root = tst::make_temp_dir();
    const std::string snapshots = root + "/snapshots", out_dir = root + "/out";
    tst::run_command("mkdir -p " + snapshots + " && echo keep > " + snapshots + "/notes.txt", nullptr);
    std::string out;
    const int rc = run_trainer(training_flags(data) + " -x 4 --snapshot-every 1 --snapshot-dir " + snapshots +
                                   " -o " + out_dir,
                               &out);
    CHECK_MSG(rc == 0, "%s", out.c_str());
    CHECK_MSG(file_text(snapshots + "/notes.txt") == "keep\n", "the foreign file did not survive");
    std::string listing;
    tst::run_command("ls -A " + snapshots, &listing);
    CHECK_MSG(listing == "notes.txt\n", "left in --snapshot-dir: %s", listing.c_str());
    CHECK(path_exists(out_dir + "/model_00000004.bin") && path_exists(out_dir + "/DONE_00000004"));
}

TEST(a_snapshot_dir_that_is_or_holds_the_output_folder_or_a_file_is_refused) {
    const std::string data = data_dir(), root = tst::make_temp_dir(), out_dir = root + "/out";
    const std::string run = training_flags(data) + " -x 2 --snapshot-every 1 -o " + out_dir + " --snapshot-dir ";
    tst::run_command("mkdir -p " + out_dir + " && echo keep > " + root + "/file", nullptr);
    fails_cleanly(run + out_dir, {"--snapshot-dir", "is the output folder"}, out_dir);
    fails_cleanly(run + out_dir + "/../out/", {"--snapshot-dir", "is the output folder"}, out_dir);
    fails_cleanly(run + root, {"--snapshot-dir", "holds the output folder"}, out_dir);
    fails_cleanly(run + root + "/file", {"--snapshot-dir", "is not a folder"}, out_dir);
    CHECK(file_text(root + "/file") == "keep\n");
}

TEST(inputs_that_are_not_regular_files_are_refused_at_once) {
    const std::string data = data_dir(), root = tst::make_temp_dir(), fifo = root + "/fifo";
    tst::run_command("mkfifo " + fifo, nullptr);
    const std::string rest = " -e " + std::string(MODEL) + " -b 2 -t 8 -x 2 -v 0 -s 0";
    const auto start = std::chrono::steady_clock::now();
    fails_cleanly("-i " + fifo + rest, {"-i (--train-data)", fifo, "is a FIFO (named pipe), not a regular file"}, root);
    fails_cleanly("-i " + data + "/train.bin -e " + fifo + " -b 2 -t 8 -x 2 -v 0 -s 0",
                  {"-e (--model)", fifo, "FIFO"}, root);
    fails_cleanly("-i /dev/zero" + rest, {"/dev/zero", "is a character device, not a regular file"}, root);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK_MSG(seconds < 10, "%.1f s", seconds);
}

TEST(a_flag_given_twice_is_an_error_unless_after_override) {
    const std::string data = data_dir(), root = tst::make_temp_dir();
    const std::string run = training_flags(data);
    fails_cleanly(run + " -x 2 -x 3", {"-x (--max-steps): given twice", "--override"}, root);
    fails_cleanly(run + " -x 2 --max-steps=3", {"-x (--max-steps): given twice"}, root);
    std::string out;
    CHECK_MSG(run_trainer(run + " -x 2 --override -x 3", &out) == 0 && has(out, "step 3/3"), "%s", out.c_str());
}

TEST(a_dangling_symbolic_link_as_output_folder_is_named) {
    const std::string data = data_dir(), root = tst::make_temp_dir();
    tst::run_command("ln -s " + root + "/missing " + root + "/link", nullptr);
    fails_cleanly(training_flags(data) + " -x 2 -o " + root + "/link",
                  {"-o (--output-dir)", "is a symbolic link to", "missing", "which does not exist"}, root);
}

// A sample of far more tokens than the context stops at SIGTERM, and the run checkpoints at once.
TEST(sigterm_during_a_long_sample_checkpoints_within_seconds) {
    const std::string data = data_dir(), root = tst::make_temp_dir(), folder = root + "/run";
    const std::string run = "-i " + data + "/train.bin -e " + MODEL + " -b 2 -t 8 -v 0 -s 1 -g 1000000 -x 5 " +
                            "--tokenizer " + data + "/tokenizer.bin -o " + folder;
    int ms = -1;
    const int rc = terminate_after(run, root + "/log", "grep -q '^step 1/' " + root + "/log", "0.3", &ms);
    const std::string out = file_text(root + "/log");
    CHECK_MSG(rc == 143 && ms < 10000, "rc %d after %d ms: %s", rc, ms, out.c_str());
    CHECK_MSG(has(out, "of 1000000 tokens (SIGTERM)") && has(out, "stopped at step 1;"), "%s", out.c_str());
    CHECK(path_exists(folder + "/DONE_00000001") && path_exists(folder + "/model_00000001.bin"));
}

TEST(a_sample_ends_at_sample_seconds) {
    const std::string data = data_dir();
    std::string out;
    const auto start = std::chrono::steady_clock::now();
    const int rc = run_trainer("-i " + data + "/train.bin -e " + MODEL + " -b 2 -t 8 -v 0 -s 1 -g 1000000 -x 1 " +
                                   "--sample-seconds 0.5 --tokenizer " + data + "/tokenizer.bin",
                               &out);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK_MSG(rc == 0 && has(out, "of 1000000 tokens (--sample-seconds 0.5)") && seconds < 10, "%.1f s: %s", seconds,
              out.c_str());
}

// Validation far longer than --stop-timeout (the untrained model's, before step 1): the run ends
// there, naming what it waited on, and leaves no half-written file.
TEST(a_stop_that_cannot_reach_the_step_boundary_ends_within_stop_timeout) {
    const std::string data = data_dir(), root = tst::make_temp_dir(), folder = root + "/run";
    const std::string run = "-i " + data + "/train.bin -j " + data + "/val.bin -e " + MODEL +
                            " -b 2 -t 8 -s 0 -x 3 -v 2 -m 100000000 --stop-timeout 1 -o " + folder;
    int ms = -1;
    const int rc = terminate_after(run, root + "/log", "grep -q '^batch: ' " + root + "/log", "0.2", &ms);
    const std::string out = file_text(root + "/log");
    CHECK_MSG(rc == 143 && ms < 8000, "rc %d after %d ms: %s", rc, ms, out.c_str());
    CHECK_MSG(has(out, "error: no step boundary within --stop-timeout 1 s of SIGTERM (waiting on: validation); "
                       "exiting without a checkpoint"),
              "%s", out.c_str());
    std::string listing;
    tst::run_command("ls -A " + folder, &listing);
    CHECK_MSG(!has(listing, ".tmp.") && !has(listing, "DONE_"), "%s", listing.c_str());
}

// End-to-end tests of a trainer binary (train_gpt_cpu in $BIN, or the one $TRAINER names: the
// emulated CUDA trainer train_gpt_emu runs the model-dependent ones too,
// test/trainer/test_train_gpt_emu.sh) on a tiny model and synthetic shards the test writes itself:
// a single batch overfits; 20 steps straight and 10 + resume + 10 give the same per-step losses and
// bitwise-identical checkpoints; old checkpoints are pruned; bad input (missing shard, bad flags,
// corrupted checkpoint, resume with another config) ends with one error line, a non-zero exit and
// no output file. Then safe runs: a folder holding another run is refused, resumed
// settings that bend the run need --accept-changes, SIGTERM/SIGINT stop with a checkpoint (and the
// resumed run matches an uninterrupted one bit for bit), dead runs' temporary files are removed,
// validation follows -i, files of the wrong kind and models too big are named, the default data is
// found from any directory, HellaSwag, llm.c's flags, the help's example and the CPU GEMM choice.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "base/decode_table.h"
#include "base/file_io.h"
#include "base/host_arrays.h"
#include "base/model_descriptor.h"
#include "base/model_file.h"
#include "base/rng.h"
#include "test/train/host_test_util.h"
#include "test/train/trainer_runs.h"
#include "train/checkpoint.h"
#include "train/hellaswag.h"

// Head size 32: the smallest the CUDA attention kernels support.
static const char* MODEL = "custom:L2:C64:H2:V64:T16";

// The "step N/M | loss X | lr Y | norm Z" part of each step line, and the "val loss" lines:
// everything a run prints that must not depend on timing.
static std::vector<std::string> step_records(const std::string& output) {
    std::vector<std::string> records;
    std::istringstream lines(output);
    std::string line;
    while (std::getline(lines, line)) {
        if (line.rfind("step ", 0) == 0) {
            size_t cut = line.find(" ms |");
            records.push_back(line.substr(0, line.rfind(" | ", cut)));
        } else if (line.rfind("val loss ", 0) == 0) {
            records.push_back(line);
        }
    }
    return records;
}

static std::vector<std::string> sample_lines(const std::string& output) {
    std::vector<std::string> samples;
    std::istringstream lines(output);
    std::string line;
    while (std::getline(lines, line))
        if (line.rfind("sample: ", 0) == 0) samples.push_back(line);
    return samples;
}


TEST(trainer_help_exits_cleanly) {
    std::string out;
    CHECK(run_trainer("--help", &out) == 0);
    CHECK(out.find("--batch-size") != std::string::npos);
}

TEST(single_batch_overfits) {
    const std::string data = data_dir();
    std::string out;
    int rc = run_trainer("-i " + data + "/train.bin -j " + data + "/val.bin -e " + MODEL +
                             " -b 2 -t 16 -a 1 -x 50 -k constant -l 8e-3 -c 0 -v 0 -s 0",
                         &out);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out.c_str());
    // 32 random tokens memorised: cross-entropy from ln(64) = 4.16 to below 0.1 (measured 0.0007 on the
    // CPU trainer and both emulated ones).
    CHECK_MSG(last_loss(out) < 0.1, "final loss %g", last_loss(out));
}

// The Hopper attention kernels (TMA + wgmma, --attention-kernel hopper) inside whole training runs:
// head size 64 (C 128, 2 heads). test/trainer/test_train_gpt_emu.sh runs it on the emulated bf16
// trainer; the CPU trainer accepts the flag and has one attention, so it passes there as well.
TEST(hopper_attention_training_overfits) {
    const std::string data = data_dir();
    std::string out;
    int rc = run_trainer("-i " + data + "/train.bin -j " + data + "/val.bin -e custom:L1:C128:H2:V64:T16"
                         " -b 2 -t 16 -a 1 -x 30 -k constant -l 5e-3 -c 0 -v 0 -s 0 --attention-kernel hopper",
                         &out);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out.c_str());
    if (getenv("SHOW_LOSS")) printf("  final loss %g\n", last_loss(out));
    CHECK_MSG(last_loss(out) < 0.1, "final loss %g", last_loss(out));
}

TEST(resume_continues_bitwise) {
    const std::string data = data_dir(), straight = tst::make_temp_dir() + "/out",
                      split = tst::make_temp_dir() + "/out";
    // Two micro-steps per step, shuffled data, cosine with warmup, validation and sampling on.
    const std::string common = "-i " + data + "/train.bin -j " + data + "/val.bin -e " + MODEL +
                               " -b 2 -t 8 -d 32 --shuffle 1 --seed 11 -x 20 -k cosine -u 3 -q 0.1"
                               " -l 2e-3 -c 0.1 -v 5 -m 2 -s 5 -g 4 -n 10 --tokenizer " +
                               data + "/tokenizer.bin";
    std::string a, b1, b2;
    CHECK_MSG(run_trainer(common + " --override -o " + straight, &a) == 0, "%s", a.c_str());
    CHECK_MSG(run_trainer(common + " --override -o " + split + " --stop-at 10", &b1) == 0, "%s", b1.c_str());
    CHECK(complete_checkpoints(split, 1) == std::vector<long long>{10});
    // As if the first run had gone on past its checkpoint before dying: a step the resume redoes.
    tst::run_command("echo '{\"step\":11,\"loss\":99.0}' >> " + metrics_log_path(split));
    CHECK_MSG(run_trainer(common + " --override -o " + split + " -y 1", &b2) == 0, "%s", b2.c_str());
    CHECK(b2.find("resumed from step 10") != std::string::npos);
    // The resumed run's metrics log holds each step once (the stale step 11 is gone).
    auto lines = [](const std::string& path) {
        std::vector<unsigned char> bytes = read_all(path);
        return std::count(bytes.begin(), bytes.end(), '\n');
    };
    CHECK(lines(metrics_log_path(split)) == 21 && lines(metrics_log_path(straight)) == 21);
    CHECK(sample_lines(a).size() == 4);  // at steps 5, 10, 15, 20
    CHECK(sample_lines(a) == sample_lines(b1 + b2));
    // Stopping off the sampling and validation grid (step 7) changes nothing either.
    const std::string odd = tst::make_temp_dir() + "/out";
    std::string c1, c2;
    CHECK_MSG(run_trainer(common + " --override -o " + odd + " --stop-at 7", &c1) == 0, "%s", c1.c_str());
    CHECK_MSG(run_trainer(common + " --override -o " + odd + " -y 1", &c2) == 0, "%s", c2.c_str());
    CHECK(sample_lines(a) == sample_lines(c1 + c2));
    CHECK(read_all(straight + "/state_00000020_00000.bin") ==
          read_all(odd + "/state_00000020_00000.bin"));

    std::vector<std::string> whole = step_records(a), first = step_records(b1),
                             second = step_records(b2);
    first.insert(first.end(), second.begin(), second.end());
    CHECK_MSG(whole.size() == 20 + 5, "%zu records",
              whole.size());  // 20 steps, val at 0,5,10,15,20
    CHECK(first == whole);
    for (const char* file :
         {"state_00000020_00000.bin", "model_00000020.bin", "state_00000010_00000.bin"}) {
        std::vector<unsigned char> x = read_all(straight + "/" + file),
                                   y = read_all(split + "/" + file);
        CHECK_MSG(!x.empty() && x == y, "%s differs", file);
    }
    // The weights a run ends with are the ones its model file holds, readable as a model to start
    // from.
    ModelFile m = read_model_file(straight + "/model_00000020.bin");
    CHECK(m.config.num_layers == 2 && m.config.channels == 64 && m.config.vocab_size == 64);
    std::string c;
    CHECK_MSG(run_trainer("-i " + data + "/train.bin -j " + data + "/val.bin -e " + straight +
                              "/model_00000020.bin -b 2 -t 8 -x 2 -s 0",
                          &c) == 0,
              "%s", c.c_str());
}

TEST(checkpoints_are_pruned_to_the_newest) {
    const std::string data = data_dir(), out = tst::make_temp_dir() + "/out";
    std::string log;
    CHECK(run_trainer("-i " + data + "/train.bin -j " + data + "/val.bin -e " + MODEL +
                          " -b 2 -t 8 -x 12 -n 3 -nk 2 -v 0 -s 0 -o " + out,
                      &log) == 0);
    CHECK(complete_checkpoints(out, 1) == (std::vector<long long>{9, 12}));
    CHECK(!path_exists(checkpoint_model_path(out, 6)) &&
          !path_exists(checkpoint_state_path(out, 3, 0)));
    // metrics.jsonl: a step-0 line would need -v; here one JSON line per step.
    std::vector<unsigned char> bytes = read_all(metrics_log_path(out));
    std::string text(bytes.begin(), bytes.end());
    CHECK(std::count(text.begin(), text.end(), '\n') == 12);
    std::string last_line = text.substr(text.rfind('\n', text.size() - 2) + 1);
    CHECK_MSG(last_line.rfind("{\"step\":12,\"loss\":", 0) == 0, "last line %s", last_line.c_str());
}

// -lg N: every N steps the GPU's clocks, power, temperature and throttle reasons end the step line
// and go to metrics.jsonl; without a GPU to read (the CPU trainer, the emulated device) they say n/a.
TEST(gpu_telemetry_every_n_steps) {
    const std::string data = data_dir(), out = tst::make_temp_dir() + "/out";
    std::string log;
    CHECK(run_trainer("-i " + data + "/train.bin -e " + MODEL + " -b 2 -t 8 -x 3 -lg 2 -v 0 -s 0 -o " + out,
                      &log) == 0);
    const std::vector<unsigned char> bytes = read_all(metrics_log_path(out));
    const std::string text(bytes.begin(), bytes.end());
    for (int step = 1; step <= 3; step++) {
        const size_t line = log.find(strprintf("step %d/3 |", step));
        const std::string step_line = line == std::string::npos ? "" : log.substr(line, log.find('\n', line) - line);
        const size_t at = text.find(strprintf("{\"step\":%d,", step));
        const std::string json = at == std::string::npos ? "" : text.substr(at, text.find('\n', at) - at);
        const bool read = step == 2;
        CHECK_MSG((step_line.find(" | GPU n/a (") != std::string::npos) == read, "step line: %s", step_line.c_str());
        CHECK_MSG((json.find(",\"gpu\":\"n/a\"") != std::string::npos) == read, "metrics: %s", json.c_str());
    }
}


TEST(bad_input_fails_cleanly) {
    const std::string data = data_dir(), fresh = tst::make_temp_dir() + "/out";
    const std::string base =
        "-j " + data + "/val.bin -e " + MODEL + " -b 2 -t 8 -x 4 -v 2 -s 0 -o " + fresh;
    const std::string ok = "-i " + data + "/train.bin " + base;
    fails_cleanly("-i " + data + "/missing_*.bin " + base,
                  {"-i (--train-data)", "missing_*.bin", "no file matches"}, fresh);
    fails_cleanly(ok + " --override -b x", {"-b (--batch-size)", "'x' is not an integer"}, fresh);
    fails_cleanly(ok + " --override --frobnicate 1", {"unknown flag '--frobnicate'"}, fresh);
    fails_cleanly(ok + " --override -t 17", {"-t (--seq-len)", "17", "16"}, fresh);
    fails_cleanly(ok + " --override -d 100", {"-d (--total-batch)", "16"}, fresh);
    fails_cleanly(ok + " --override -e custom:L2:C64:H3:V64:T16",
                  {"-e (--model)", "3 heads do not divide 64 channels"}, fresh);
    fails_cleanly(ok + " --override -e " + data + "/nothing.bin", {"-e (--model)", "nothing.bin"}, fresh);
    fails_cleanly(ok + " --override -e " + data + "/train.bin", {"train.bin", "not a model file"}, fresh);
    std::vector<uint16_t> big(200, 64);  // token 64 is outside the model's vocabulary of 64
    write_shard(data + "/bad_tokens.bin", big);
    fails_cleanly("-i " + data + "/bad_tokens.bin " + base,
                  {"bad_tokens.bin", "outside the vocabulary"}, fresh);
    CHECK(!path_exists(fresh));  // nothing was created by any of these

    // -y 1 with no checkpoint yet starts afresh; then resumes that must be refused.
    std::string log;
    CHECK_MSG(run_trainer(ok + " --override -y 1", &log) == 0, "%s", log.c_str());
    CHECK(log.find("training starts from step 0") != std::string::npos);
    CHECK(complete_checkpoints(fresh, 1) == std::vector<long long>{4});
    fails_cleanly(ok + " --override -y 1 -b 4", {"state_00000004_00000.bin", "-b (batch size) = 2", "4"},
                  fresh);
    fails_cleanly(ok + " --override -y 1 -e custom:L3:C64:H2:V64:T16",
                  {"state_00000004_00000.bin", "L=2", "L=3"}, fresh);
    const std::string state = checkpoint_state_path(fresh, 4, 0);
    std::vector<unsigned char> bytes = read_all(state);
    bytes[bytes.size() - 9] ^= 1;
    write_all(state, bytes);
    fails_cleanly(ok + " --override -y 1 -x 8", {"state_00000004_00000.bin", "checksum mismatch"}, fresh);
    bytes.resize(bytes.size() / 2);
    write_all(state, bytes);
    fails_cleanly(ok + " --override -y 1 -x 8", {"state_00000004_00000.bin", "does not match its header"},
                  fresh);
}

// ---- safe runs: output folders, resume changes, interrupts, memory, data, errors ----

static bool has(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

// The emulated CUDA trainer runs a step of the tiny model in ~0.3 s, the CPU one in ~0.3 ms: tests
// that need a run still going when they act size it by this.
static bool trainer_is_emulated() { return has(trainer(), "_emu"); }

static std::string folder_listing(const std::string& dir) {
    std::string listing;
    tst::run_command("ls -A " + dir + " 2>/dev/null", &listing);
    return listing;
}

// Starts the trainer in the background, waits until it has printed step `wait_step`, sends it
// `signal_name` (TERM, INT) and returns its exit status; its output goes to *output. The trainer
// is frozen (SIGSTOP) while the signal is sent, so it arrives within one step of the one seen.
static int run_and_signal(const std::string& args, const char* signal_name, int wait_step,
                          std::string* output) {
    const std::string log = tst::make_temp_dir() + "/log";
    const std::string script =
        trainer() + " " + args + " > " + log + " 2>&1 & pid=$!; i=0; "
        "while [ $i -lt 3000 ] && ! grep -q '^step " + std::to_string(wait_step) + "/' " + log +
        " && kill -0 $pid 2>/dev/null; do sleep 0.01; i=$((i+1)); done; "
        "kill -STOP $pid; kill -" + signal_name + " $pid; kill -CONT $pid; wait $pid; "
        "echo \"exit $?\"";
    std::string status;
    tst::run_command(script, &status);
    std::vector<unsigned char> bytes = read_all(log);
    output->assign(bytes.begin(), bytes.end());
    return atoi(status.c_str() + status.rfind("exit ") + 5);
}

// The step named in "stopped at step N; ..." (-1 if absent).
static int stopped_step(const std::string& output) {
    size_t at = output.find("stopped at step ");
    return at == std::string::npos ? -1 : atoi(output.c_str() + at + 16);
}

TEST(output_folder_of_another_run_is_refused) {
    const std::string data = data_dir(), out = tst::make_temp_dir() + "/out";
    const std::string run = "-i " + data + "/train.bin -j " + data + "/val.bin -e " + MODEL +
                            " -b 2 -t 8 -x 4 -v 2 -m 1 -s 0 -o " + out;
    std::string log;
    CHECK_MSG(run_trainer(run, &log) == 0, "%s", log.c_str());
    // Each checkpoint is announced; run.json records the settings, the files and the commit.
    CHECK_MSG(has(log, "checkpoint: step 4 saved in " + out), "%s", log.c_str());
    std::vector<unsigned char> bytes = read_all(out + "/run.json");
    const std::string record(bytes.begin(), bytes.end());
    for (const char* key : {"\"commit\"", "\"command\"", "\"--max-steps\": \"4\"",
                            "\"--batch-size\": \"2\"", "\"train_files\"", "train.bin\"",
                            "\"model_config\": \"GPT-2 L=2 H=2 C=64 V=64"})
        CHECK_MSG(has(record, key), "run.json lacks %s:\n%s", key, record.c_str());
    // The same command again (llm.c's habit, and the quickstart's re-run) changes nothing there.
    const std::vector<unsigned char> metrics = read_all(metrics_log_path(out));
    fails_cleanly(run, {"-o (--output-dir)", "already holds a run", "checkpoint files of step 4",
                        "metrics.jsonl", "-y 1", "another folder"},
                  out);
    fails_cleanly(run + " --override -y 0 -x 20", {"-o (--output-dir)", "already holds a run"}, out);
    CHECK(read_all(metrics_log_path(out)) == metrics && read_all(out + "/run.json") == bytes);
    CHECK(complete_checkpoints(out, 1) == std::vector<long long>{4});
}

TEST(resume_refuses_changes_that_bend_the_run) {
    const std::string data = data_dir(), out = tst::make_temp_dir() + "/out";
    const std::string run = "-i " + data + "/train.bin -j " + data + "/val.bin -e " + MODEL +
                            " -b 2 -t 8 -v 0 -s 0 -o " + out;
    std::string log;
    CHECK_MSG(run_trainer(run + " --override -x 3", &log) == 0, "%s", log.c_str());
    fails_cleanly(run + " --override -x 6 -y 1",
                  {"-y (--resume)", "-x (--max-steps) '3' -> '6'", "--accept-changes 1"}, out);
    fails_cleanly(run + " --override -x 3 -y 1 -l 0.01",
                  {"-y (--resume)", "-l (--learning-rate)", "--accept-changes 1"}, out);
    fails_cleanly(run + " --override -x 3 -y 1 -d 32",
                  {"-y (--resume)", "-d (--total-batch)", "--accept-changes 1"}, out);
    // Accepted on purpose: the changes are listed, then the run goes on.
    CHECK_MSG(run_trainer(run + " --override -x 5 -y 1 -m 3 --accept-changes 1", &log) == 0, "%s", log.c_str());
    CHECK_MSG(has(log, "resume: changed since the saved run: -x (--max-steps) '3' -> '5'") &&
                  has(log, "-m (--val-batches) '") && has(log, "' -> '3'") &&
                  has(log, "resumed from step 3"),
              "%s", log.c_str());
    CHECK(complete_checkpoints(out, 1) == (std::vector<long long>{3, 5}));
    // A -x the run has already passed trains nothing: said, not silently "resumed".
    fails_cleanly(run + " --override -x 4 -y 1 --accept-changes 1",
                  {"-x (--max-steps)", "already at step 5", "past step 4"}, out);
    // Changes that do not bend the run are only reported; -e names a model the checkpoint replaces.
    const std::string other = data + "/other_model.bin";
    tst::run_command("cp " + checkpoint_model_path(out, 3) + " " + other);
    CHECK_MSG(run_trainer(run + " --override -x 5 -y 1 -m 3 -v 5 -e " + other, &log) == 0, "%s", log.c_str());
    CHECK_MSG(has(log, "-v (--val-every) '0' -> '5'") &&
                  has(log, "resumed checkpoint; -e '" + other + "' not loaded"),
              "%s", log.c_str());
}

TEST(sigterm_stops_with_a_checkpoint_and_resume_matches_an_uninterrupted_run) {
    const std::string data = data_dir(), straight = tst::make_temp_dir() + "/out",
                      stopped = tst::make_temp_dir() + "/out";
    const int steps = trainer_is_emulated() ? 12 : 600;
    const std::string run = "-i " + data + "/train.bin -j " + data + "/val.bin -e " + MODEL +
                            " -b 2 -t 8 -v 0 -s 0 --shuffle 1 -x " + std::to_string(steps);
    std::string a, b, c;
    CHECK_MSG(run_trainer(run + " --override -o " + straight, &a) == 0, "%s", a.c_str());
    const int status = run_and_signal(run + " --override -o " + stopped, "TERM", 2, &b);
    const int n = stopped_step(b);
    CHECK_MSG(status == 128 + 15 && n >= 2 && n < steps, "exit %d, stopped at %d:\n%s", status, n,
              b.c_str());
    CHECK_MSG(has(b, strprintf("stopped at step %d; resume with -y 1", n)), "%s", b.c_str());
    CHECK(complete_checkpoints(stopped, 1) == std::vector<long long>{n});
    CHECK_MSG(!has(folder_listing(stopped), ".tmp."), "%s", folder_listing(stopped).c_str());
    CHECK_MSG(run_trainer(run + " --override -o " + stopped + " -y 1", &c) == 0, "%s", c.c_str());
    const std::string last = strprintf("%08d", steps);
    for (const std::string& file : {"model_" + last + ".bin", "state_" + last + "_00000.bin"}) {
        const std::vector<unsigned char> x = read_all(straight + "/" + file),
                                         y = read_all(stopped + "/" + file);
        CHECK_MSG(!x.empty() && x == y, "%s differs from the uninterrupted run's", file.c_str());
    }
}

// A model whose arrays pass the 32 MiB over which a checkpoint's host copy reuses the arrays the
// checkpoint before handed back (base/host_arrays.h): checkpoints (and snapshots) after every step,
// each taken into the last one's arrays, hold the same bytes as one taken into fresh memory.
TEST(checkpoints_taken_into_reused_host_arrays_are_unchanged) {
    const std::string data = data_dir(), every = tst::make_temp_dir() + "/out",
                      once = tst::make_temp_dir() + "/out", stopped = tst::make_temp_dir() + "/out";
    const char* model = "custom:L1:C256:H4:V32768:T8";
    CHECK(parameter_count(gpt2_model(config_from_descriptor(model))) * sizeof(float) > kReusedArrayBytes);
    const std::string run = "-i " + data + "/train.bin -e " + model + " -b 2 -t 8 -v 0 -s 0 -x 4 -l 1e-3";
    std::string a, b, c;
    CHECK_MSG(run_trainer(run + " --override -n 1 -nk 4 --snapshot-every 1 -o " + every, &a) == 0, "%s", a.c_str());
    CHECK_MSG(run_trainer(run + " --override -n 4 -o " + once, &b) == 0, "%s", b.c_str());
    CHECK_MSG(run_trainer(run + " --override -n 4 --stop-at 3 -o " + stopped, &c) == 0, "%s", c.c_str());
    for (const auto& [folder, step] : {std::pair{once, 4}, std::pair{stopped, 3}})
        for (const std::string& file : {strprintf("model_%08d.bin", step), strprintf("state_%08d_00000.bin", step)}) {
            const std::vector<unsigned char> x = read_all(every + "/" + file), y = read_all(folder + "/" + file);
            CHECK_MSG(!x.empty() && x == y, "%s differs", file.c_str());
        }
}

TEST(sigint_without_output_folder_says_nothing_was_saved) {
    const std::string data = data_dir();
    const int steps = trainer_is_emulated() ? 12 : 600;
    std::string out;
    const int status =
        run_and_signal("-i " + data + "/train.bin -j " + data + "/val.bin -e " + MODEL +
                           " -b 2 -t 8 -v 0 -s 0 -x " + std::to_string(steps),
                       "INT", 2, &out);
    CHECK_MSG(status == 128 + 2 && has(out, "by SIGINT; nothing was saved (no -o)"), "exit %d: %s",
              status, out.c_str());
}

TEST(temporary_files_of_a_dead_run_are_removed_at_start) {
    const std::string data = data_dir(), out = tst::make_temp_dir() + "/out";
    const std::string run = "-i " + data + "/train.bin -j " + data + "/val.bin -e " + MODEL +
                            " -b 2 -t 8 -x 2 -v 0 -s 0 -o " + out;
    std::string log;
    CHECK_MSG(run_trainer(run, &log) == 0, "%s", log.c_str());
    // What SIGKILL during a checkpoint write leaves: PID 999999999 cannot be running.
    write_all(out + "/state_00000004_00000.bin.tmp.999999999", {1, 2, 3});
    CHECK_MSG(run_trainer(run + " --override -y 1", &log) == 0, "%s", log.c_str());
    CHECK_MSG(has(log, "removed 1 temporary file(s) left in " + out) && has(log, "nothing to do"),
              "%s", log.c_str());
    CHECK(!path_exists(out + "/state_00000004_00000.bin.tmp.999999999"));
}

TEST(validation_comes_from_the_training_data_or_nowhere) {
    const std::string data = data_dir();
    const std::string common = " -e " + std::string(MODEL) + " -b 2 -t 8 -x 4 -v 2 -m 1 -s 0";
    std::string out;
    // -i .../train.bin without -j: .../val.bin beside it is the validation data, and says so.
    CHECK_MSG(run_trainer("-i " + data + "/train.bin" + common + " --override --log-every 3", &out) == 0, "%s",
              out.c_str());
    CHECK_MSG(has(out, "validation: '" + data + "/val.bin', found beside -i"), "%s", out.c_str());
    CHECK(has(out, "val loss "));
    // The report says how much of the data the steps cover: 3000 tokens hold 187 batches of 16.
    CHECK_MSG(has(out, "4 steps of 16 tokens cover 0.02 epochs"), "%s", out.c_str());
    // --log-every 3: steps 1 (first), 2 and 4 (validation), 3; all four here.
    CHECK(step_records(out).size() == 4 + 3);
    // No matching validation shard: no validation at all, said once.
    tst::run_command("cp " + data + "/train.bin " + data + "/mine_train.bin");
    CHECK_MSG(run_trainer("-i " + data + "/mine_train.bin" + common, &out) == 0, "%s", out.c_str());
    CHECK_MSG(has(out, "validation: none: -i was given without -j, and there is no '" + data +
                           "/mine_val.bin' beside it"),
              "%s", out.c_str());
    CHECK(!has(out, "val loss "));
    CHECK_MSG(run_trainer("-i " + data + "/train.bin" + common + " --override -v 0 -x 7 --log-every 3", &out) ==
                  0,
              "%s", out.c_str());
    std::vector<std::string> lines = step_records(out);
    CHECK_MSG(lines.size() == 4 && lines[0].rfind("step 1/7", 0) == 0 &&
                  lines[1].rfind("step 3/7", 0) == 0 && lines[3].rfind("step 7/7", 0) == 0,
              "%s", out.c_str());
}

TEST(wrong_kinds_of_files_are_named_with_their_flag) {
    const std::string data = data_dir(), fresh = tst::make_temp_dir() + "/out";
    const std::string base = " -e " + std::string(MODEL) + " -b 2 -t 8 -x 2 -v 1 -s 0 -o " + fresh;
    const std::string ok = "-i " + data + "/train.bin -j " + data + "/val.bin" + base;
    GPTConfig config = config_from_descriptor(MODEL);
    std::vector<float> weights(param_layout(config).total, 0.01f);
    write_model_file(data + "/model.bin", config, weights.data(), WeightType::FP32);
    fails_cleanly(ok + " --override -e " + data, {"-e (--model)", data, "is a directory, not a file"}, fresh);
    fails_cleanly("-i " + data + " -j " + data + "/val.bin" + base,
                  {"-i (--train-data)", "is a directory, not a file"}, fresh);
    fails_cleanly("-i " + data + "/train.bin -j " + data + base,
                  {"-j (--val-data)", "is a directory, not a file"}, fresh);
    fails_cleanly(ok + " --override -e " + data + "/train.bin",
                  {"-e (--model)", "train.bin: is a token shard, not a model file"}, fresh);
    fails_cleanly("-i " + data + "/model.bin -j " + data + "/val.bin" + base,
                  {"-i (--train-data)", "model.bin: is a model file, not a token shard"}, fresh);
    fails_cleanly(ok + " --override -s 1 --tokenizer " + data + "/train.bin",
                  {"--tokenizer", "is a token shard, not a tokenizer decode table"}, fresh);
    CHECK(!path_exists(fresh));
    const std::string file = data + "/a_file";
    write_all(file, {1});
    fails_cleanly("-i " + data + "/train.bin -j " + data + "/val.bin -e " + MODEL +
                      " -b 2 -t 8 -x 2 -v 0 -s 0 -o " + file + "/out",
                  {"-o (--output-dir)", "a_file/out"}, data);
    // A model far too big for this machine's memory: one error with the figures, before allocating.
    fails_cleanly(ok + " --override -e gpt3:c12288 -b 1 -t 8",
                  {"-e (--model)", "GiB of memory", "available", "smaller model"}, fresh);
    CHECK(!path_exists(fresh));
}

TEST(runs_from_another_working_directory_with_the_default_data) {
    const std::string repo_data = "data/janeausten/janeausten_train.bin";
    if (!path_exists(repo_data) || !path_exists("data/gpt2_tokenizer.bin"))
        SKIP("no built-in dataset here (data/prepare janeausten)");
    std::string absolute;
    tst::run_command("realpath " + trainer(), &absolute);
    absolute.erase(absolute.find_last_not_of("\n") + 1);
    const std::string elsewhere = tst::make_temp_dir();
    std::string out;
    int rc = tst::run_command("cd " + elsewhere + " && " + absolute +
                                  " -e custom:L1:C64:H2:T16 -b 1 -t 16 -x 1 -v 1 -m 1 -s 1 -g 2",
                              &out);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out.c_str());
    CHECK_MSG(has(out, "'data/janeausten/janeausten_train.bin' is not in the working directory; "
                       "using the repository's") &&
                  has(out, "sample: ") && has(out, "val loss "),
              "%s", out.c_str());
}

// The tokens of the loader's first batch (B = 2, T = 8): what -a 1 trains on.
static std::vector<uint16_t> first_batch_tokens(const std::string& shard) {
    std::vector<unsigned char> bytes = read_all(shard);
    std::vector<uint16_t> tokens(17);
    memcpy(tokens.data(), bytes.data() + 1024, tokens.size() * 2);
    return tokens;
}


TEST(hellaswag_picks_the_memorised_completions) {
    const std::string data = data_dir();
    // After overfitting the first batch, its continuations are the likely completions; the wrong
    // ones are other tokens. Contexts of 2 to 5 tokens from each of the batch's two rows.
    const std::vector<uint16_t> batch = first_batch_tokens(data + "/train.bin");
    std::vector<EvalExample> examples;
    Rng rng(9);
    for (int row = 0; row < 2; row++)
        for (int k = 2; k <= 5; k++) {
            EvalExample e;
            e.index = (int)examples.size();
            e.label = e.index % 4;
            e.context.assign(batch.begin() + row * 8, batch.begin() + row * 8 + k);
            for (int c = 0; c < 4; c++) {
                std::vector<uint16_t> completion(batch.begin() + row * 8 + k,
                                                 batch.begin() + row * 8 + 8);
                if (c != e.label)
                    for (uint16_t& t : completion) t = (uint16_t)((t + 1 + rng.below(62)) % 64);
                e.completions.push_back(completion);
            }
            examples.push_back(e);
        }
    write_eval_file(data + "/hellaswag.bin", examples);
    const int steps = 20;
    std::string out;
    int rc = run_trainer("-i " + data + "/train.bin -j " + data + "/val.bin -e " + MODEL +
                             " -b 2 -t 8 -a 1 -k constant -l 1e-2 -c 0 -s 0 -m 1 -h 1 -x " +
                             std::to_string(steps) + " -v " + std::to_string(steps) +
                             " --hellaswag-file " + data + "/hellaswag.bin -o " + data + "/hs_run",
                         &out);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out.c_str());
    CHECK_MSG(has(out, "hellaswag: 8 examples from") && has(out, "HellaSwag: 8/8 correct"), "%s",
              out.c_str());
    // The accuracy goes to metrics.jsonl: the untrained model's at step 0, then at each validation.
    const std::vector<unsigned char> log = read_all(metrics_log_path(data + "/hs_run"));
    const std::string metrics(log.begin(), log.end());
    CHECK_MSG(has(metrics, "{\"step\":0,\"val_loss\":") && has(metrics, ",\"hellaswag\":1.0000"),
              "%s", metrics.c_str());
    // Without the file: one line says it is skipped; a file of another kind is an error.
    CHECK_MSG(run_trainer("-i " + data + "/train.bin -e " + MODEL +
                              " -b 2 -t 8 -x 1 -s 0 -m 1 -h 1 --hellaswag-file " + data +
                              "/none.bin",
                          &out) == 0,
              "%s", out.c_str());
    CHECK_MSG(has(out, "HellaSwag is skipped: no eval file at"), "%s", out.c_str());
    fails_cleanly("-i " + data + "/train.bin -e " + MODEL + " -b 2 -t 8 -x 1 -s 0 -h 1 " +
                      "--hellaswag-file " + data + "/val.bin",
                  {"-h (--hellaswag)", "is a token shard, not an eval file"}, data + "/x");
}

TEST(llmc_command_lines_run_or_say_what_to_do) {
    const std::string data = data_dir(), out = tst::make_temp_dir() + "/out";
    const std::string run = "-i " + data + "/train.bin -j " + data + "/val.bin -e " + MODEL +
                            " -b 2 -t 8 -v 0 -s 0";
    std::string log;
    CHECK_MSG(run_trainer(run + " --override -x 12 -n 3 -nk 1 -nm 6 -ge 2 -lg 10 -pi mpi -pn 1 -pr 0 -pg 8 -o " +
                              out,
                          &log) == 0,
              "%s", log.c_str());
    CHECK_MSG(has(log, "note: -ge 2 has no effect") && has(log, "note: -pg has no effect"),
              "%s", log.c_str());
    // -nm 6: the major checkpoints (6, 12) survive -nk 1.
    CHECK(complete_checkpoints(out, 1) == (std::vector<long long>{6, 12}));
    fails_cleanly(run + " --override -x 2 -pi tcp -ps 10.0.0.1", {"-pi (--init-method)", "'tcp'", "mpirun"},
                  out);
    fails_cleanly(run + " --override -x 2 -pn 2", {"-pn (--num-processes)", "1 rank(s)", "mpirun -np 2"}, out);
}

TEST(help_examples_run_as_written) {
    if (trainer_is_emulated()) SKIP("the CPU trainer's defaults; the emulated GPU's are GPT-2 size");
    std::string help, out;
    CHECK(run_trainer("--help", &help) == 0);
    const size_t at = help.find("custom:");
    CHECK(at != std::string::npos);
    const std::string example = help.substr(at, help.find_first_of(" )", at) - at);
    const std::string data = data_dir();
    CHECK_MSG(run_trainer("-i " + data + "/train.bin -e " + example + " -x 1 -s 0 -v 0", &out) == 0,
              "%s: %s", example.c_str(), out.c_str());
}

TEST(cpu_gemm_kernels_come_from_the_cpu_not_the_environment) {
    if (has(trainer(), "emu")) SKIP("the GPU model does not use the CPU GEMM");
    const std::string data = data_dir();
    const std::string run = trainer() + " -i " + data + "/train.bin -e " + MODEL +
                            " -b 2 -t 8 -x 1 -v 0 -s 0";
    std::string out;
    CHECK_MSG(tst::run_command("OPENBLAS_CORETYPE=Prescott " + run, &out) == 0, "%s", out.c_str());
    if (has(out, "GEMM: plain loops")) SKIP("built without OpenBLAS");
    CHECK_MSG(has(out, "kernels, chosen from the CPU's") &&
                  has(out, "OPENBLAS_CORETYPE=Prescott from the environment ignored"),
              "%s", out.c_str());
    CHECK_MSG(tst::run_command("GPT_TRAINER_OPENBLAS_CORETYPE=Haswell " + run, &out) == 0, "%s",
              out.c_str());
    CHECK_MSG(has(out, "Haswell kernels, set by GPT_TRAINER_OPENBLAS_CORETYPE"), "%s", out.c_str());
}

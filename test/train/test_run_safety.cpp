// Unit tests of the safe-run modules: interrupts (a second signal exits at once and removes the
// temporary file being written), the output folder's inventory and run.json, the ETA clock, the
// memory check, the choice of validation data, llm.c's eval file reader, the messages that name
// a directory or a file of the wrong kind, the output folder's lock, what a snapshot removal takes,
// and flags given twice. The trainer end to end is test_train_cpu.cpp.
#include <csignal>
#include <sys/wait.h>
#include <unistd.h>

#include "base/file_io.h"
#include "base/model_descriptor.h"
#include "base/model_file.h"
#include "test/train/host_test_util.h"
#include "train/dataloader.h"
#include "train/folder_lock.h"
#include "train/hellaswag.h"
#include "train/interrupts.h"
#include "train/memory_check.h"
#include "train/run_folder.h"
#include "train/run_report.h"
#include "train/snapshots.h"
#include "train/train_flags.h"

TEST(first_signal_asks_to_stop_second_exits_at_once_without_temporary_files) {
    const std::string dir = tst::make_temp_dir();
    const pid_t child = fork();
    if (child == 0) {  // the child: a checkpoint half written when the signals come
        install_interrupt_handlers(false);
        AtomicFile file(dir + "/state.bin");
        file.write("abc", 3);
        raise(SIGTERM);
        if (!stop_requested() || stop_signal() != SIGTERM || interrupted_exit_status() != 143)
            _exit(1);
        raise(SIGTERM);  // ends the process here
        _exit(2);
    }
    int status = 0;
    waitpid(child, &status, 0);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM, "status %d", status);
    std::string listing;
    tst::run_command("ls -A " + dir, &listing);
    CHECK_MSG(listing.empty(), "left behind: %s", listing.c_str());
}

TEST(folder_inventory_names_checkpoints_logs_and_temporaries) {
    const std::string dir = tst::make_temp_dir();
    CHECK(!inspect_output_folder(dir).holds_a_run());
    CHECK(!inspect_output_folder(dir + "/missing").holds_a_run());
    for (const char* name : {"model_00000020.bin", "state_00000020_00000.bin", "DONE_00000020",
                             "model_00000600.bin", "metrics.jsonl", "notes.txt",
                             "model_00000700.bin.tmp.12345", "model_12.bin", "notes.tmp.12345"})
        write_all(dir + "/" + name, {1});
    FolderContents c = inspect_output_folder(dir);
    CHECK(c.holds_a_run() && c.metrics && !c.run_record);
    CHECK((c.checkpoint_steps == std::vector<long long>{20, 600}));
    CHECK(c.temporaries == std::vector<std::string>{"model_00000700.bin.tmp.12345"});
    CHECK_MSG(c.describe() == "checkpoint files of steps 20 and 600, metrics.jsonl, 1 temporary "
                              "file(s) of an interrupted write",
              "%s", c.describe().c_str());
}

TEST(run_record_settings_read_back_exactly) {
    RunRecord r;
    r.program = "train_gpt_cpu";
    r.command = {"./train_gpt_cpu", "-o", "out \"quoted\"\tand\\slash"};
    r.train_files = {"/a/b.bin"};
    TrainOptions opt;
    opt.output_dir = "out \"quoted\"\tand\\slash";
    opt.learning_rate = 6e-4;
    r.settings = train_flag_values(opt);
    const std::string path = tst::make_temp_dir() + "/run.json";
    const std::string json = run_record_json(r);
    write_all(path, std::vector<unsigned char>(json.begin(), json.end()));
    std::vector<FlagValue> back = read_run_settings(path);
    CHECK(back.size() == r.settings.size());
    for (size_t i = 0; i < back.size(); i++)
        CHECK_MSG(back[i].long_name == r.settings[i].long_name &&
                      back[i].value == r.settings[i].value,
                  "%s: '%s' vs '%s'", r.settings[i].long_name.c_str(), back[i].value.c_str(),
                  r.settings[i].value.c_str());
    // The learning rate reads back as the same double.
    for (const FlagValue& v : back)
        if (v.long_name == "--learning-rate") CHECK(atof(v.value.c_str()) == 6e-4);
    write_all(path, {'{', '}'});
    expect_input_error([&] { read_run_settings(path); }, {"run.json", "not a run record"});
    CHECK(setting_bends_the_run("--max-steps") && setting_bends_the_run("--learning-rate"));
    CHECK(!setting_bends_the_run("--val-every") && !setting_bends_the_run("--checkpoint-every"));
}

TEST(eta_counts_the_validations_samples_and_checkpoints_to_come) {
    TrainOptions opt;
    opt.val_every = 10;
    opt.sample_every = 25;
    opt.checkpoint_every = 0;
    opt.output_dir = "out";
    RunClock clock = make_run_clock(opt, /*max_steps=*/100, /*last_step=*/50);
    // Validation at 10..50 (5), samples at 25 and 50 (max_steps 100 is past the end), one
    // checkpoint at 50.
    CHECK(RunClock::occurrences(clock.validation, 1, 50) == 5);
    CHECK(RunClock::occurrences(clock.sampling, 1, 50) == 2);
    CHECK(RunClock::occurrences(clock.checkpoint, 1, 50) == 1);
    CHECK(RunClock::occurrences(clock.validation, 11, 10) == 0);
    clock.add_step(100);            // 100 ms a step
    clock.validation.add(1000);     // 1 s a validation
    clock.sampling.add(500);        // 0.5 s a sample
    // After step 40: 10 steps (1 s), validations at 40 and 50 (2 s), a sample at 50, a checkpoint
    // not yet measured (0).
    CHECK_NEAR(clock.eta_seconds(40), 1.0 + 2.0 + 0.5, 1e-9);
    CHECK(duration_text(3725) == "1h02m" && duration_text(200) == "3m20s");
}

TEST(step_lines_every_n_steps_and_always_the_first_last_and_validation) {
    TrainOptions opt;
    opt.log_every = 5;
    opt.val_every = 7;
    std::vector<int> logged;
    for (int step = 3; step <= 16; step++)
        if (step_is_logged(opt, step, 3, 16)) logged.push_back(step);
    CHECK((logged == std::vector<int>{3, 5, 7, 10, 14, 15, 16}));
}

TEST(memory_check_names_the_figures_and_what_to_lower) {
    const GPTConfig config = config_from_descriptor("gpt3:c12288");
    TrainOptions opt;
    opt.output_dir = "out";
    ModelMemory model;
    model.parameters = model.gradients = 1ull << 40;
    expect_input_error(
        [&] { check_host_memory(model, config, opt, false, false); },
        {"-e (--model)", "GiB of memory", "available", "use a smaller model"});
    ModelMemory small;
    small.activations = 1 << 20;
    const GPTConfig tiny = config_from_descriptor("custom:L1:C32:H1:V64:T16");
    check_host_memory(small, tiny, opt, false, false);  // fits
    // The loop's own copies: none beyond what a resume already holds.
    const uint64_t weights = param_layout(tiny).total * 4;
    CHECK(loop_host_bytes(tiny, opt, false, false) == 4 * weights);
    CHECK(loop_host_bytes(tiny, opt, true, false) == 0);
    opt.output_dir = "";
    CHECK(loop_host_bytes(tiny, opt, false, true) == 0);
    CHECK(available_host_memory().bytes > 0);
}

TEST(validation_data_matches_the_training_data) {
    const std::string dir = tst::make_temp_dir();
    write_shard(dir + "/mine_train_000.bin", {1, 2, 3});
    write_shard(dir + "/mine_val_000.bin", {1, 2, 3});
    const TrainOptions defaults;
    TrainOptions opt = defaults;
    opt.train_data = dir + "/mine_train_*.bin";
    DataChoice choice = choose_data_paths(&opt, defaults);
    CHECK(opt.val_data == dir + "/mine_val_*.bin");
    CHECK(choice.validation_note.find("found beside -i") != std::string::npos);
    opt = defaults;
    opt.train_data = dir + "/mine_train_000.bin";
    opt.val_data = dir + "/other.bin";  // given: used as it is
    choose_data_paths(&opt, defaults);
    CHECK(opt.val_data == dir + "/other.bin");
    opt = defaults;
    opt.train_data = dir + "/corpus.bin";  // no "train" in the name
    choice = choose_data_paths(&opt, defaults);
    CHECK(opt.val_data.empty() && choice.validation_note.find("no \"train\"") != std::string::npos);
}

TEST(directories_and_files_of_another_kind_are_named) {
    const std::string dir = tst::make_temp_dir();
    expect_input_error([&] { read_model_file(dir); }, {dir, "is a directory, not a file"});
    expect_input_error([&] { file_size(dir); }, {"is a directory"});
    write_shard(dir + "/shard.bin", std::vector<uint16_t>(100, 1));
    expect_input_error([&] { read_model_file(dir + "/shard.bin"); },
                       {"shard.bin: is a token shard, not a model file"});
    const GPTConfig c = config_from_descriptor("custom:L1:C32:H1:V64:T16");
    std::vector<float> weights(param_layout(c).total, 0.0f);
    write_model_file(dir + "/model.bin", c, weights.data(), WeightType::FP32);
    expect_input_error([&] { DataLoader(dir + "/model.bin", 1, 4, 0, 1, 64, false, 0); },
                       {"model.bin: is a model file, not a token shard"});
    expect_input_error([&] { read_eval_file(dir + "/model.bin", 64); },
                       {"is a model file, not an eval file"});
}

// An eval file from raw uint16 values after the header.
static std::string eval_file(const std::string& dir, int examples, std::vector<uint16_t> values) {
    int32_t header[256] = {20240522, 1, examples, 0};
    std::vector<unsigned char> bytes((unsigned char*)header, (unsigned char*)header + 1024);
    bytes.insert(bytes.end(), (unsigned char*)values.data(),
                 (unsigned char*)(values.data() + values.size()));
    const std::string path = dir + "/eval.bin";
    write_all(path, bytes);
    return path;
}

TEST(eval_file_reader_checks_every_field) {
    const std::string dir = tst::make_temp_dir();
    // One example: index 7, label 1, 2 completions, context {5, 6}, completions {9} and {10, 11}.
    std::vector<uint16_t> good = {65535, 0, 7, 1, 2, 2, 5, 6, 1, 9, 2, 10, 11};
    good[1] = (uint16_t)(good.size() * 2);
    std::vector<EvalExample> e = read_eval_file(eval_file(dir, 1, good), 64);
    CHECK(e.size() == 1 && e[0].index == 7 && e[0].label == 1);
    CHECK((e[0].context == std::vector<uint16_t>{5, 6}) && e[0].completions.size() == 2);
    CHECK((e[0].completions[1] == std::vector<uint16_t>{10, 11}));
    std::vector<uint16_t> bad = good;
    bad[0] = 1;
    expect_input_error([&] { read_eval_file(eval_file(dir, 1, bad), 64); }, {"65535 marker"});
    bad = good;
    bad[3] = 2;
    expect_input_error([&] { read_eval_file(eval_file(dir, 1, bad), 64); }, {"label 2 among 2"});
    bad = good;
    bad[1] = 4;
    expect_input_error([&] { read_eval_file(eval_file(dir, 1, bad), 64); }, {"says it has 4 bytes"});
    expect_input_error([&] { read_eval_file(eval_file(dir, 2, good), 64); }, {"example 1"});
    expect_input_error([&] { read_eval_file(eval_file(dir, 1, good), 10); },
                       {"token 10", "vocabulary of 10"});
    good.push_back(0);
    expect_input_error([&] { read_eval_file(eval_file(dir, 1, good), 64); }, {"data after"});
}

TEST(llmc_launch_flags_agree_with_the_launcher_or_are_refused) {
    TrainOptions o;
    check_llmc_launch_flags(o, 4);
    o.num_processes = 4;
    check_llmc_launch_flags(o, 4);
    expect_input_error([&] { check_llmc_launch_flags(o, 2); },
                       {"-pn (--num-processes)", "2 rank(s)", "mpirun -np 4"});
    o = TrainOptions();
    o.process_rank = 0;
    check_llmc_launch_flags(o, 1);
    expect_input_error([&] { check_llmc_launch_flags(o, 2); }, {"-pr (--process-rank)"});
    o = TrainOptions();
    o.init_method = "fs";
    expect_input_error([&] { check_llmc_launch_flags(o, 1); }, {"-pi (--init-method)", "'fs'"});
    o = TrainOptions();
    o.fs_path = "/shared";
    expect_input_error([&] { check_llmc_launch_flags(o, 1); }, {"-pf (--fs-path)"});
    o = TrainOptions();
    CHECK(llmc_flag_notes(o).empty());
    o.gelu_fusion = 1;
    o.log_gpu_every = 100;  // -lg reads the GPU: no note
    CHECK(llmc_flag_notes(o).size() == 1);
}

// ---- the output folder's lock (train/folder_lock.h)

static std::string text_of(const std::string& path) {
    const std::vector<unsigned char> bytes = read_all(path);
    return std::string(bytes.begin(), bytes.end());
}

static void write_text(const std::string& path, const std::string& text) {
    write_all(path, std::vector<unsigned char>(text.begin(), text.end()));
}

// A pid that no process has now: a child's, once it has been waited for.
static long pid_of_a_finished_process() {
    const pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, nullptr, 0);
    return (long)child;
}

TEST(folder_lock_refuses_a_second_holder_naming_it_and_is_released) {
    for (LockMethod method : {LockMethod::KERNEL, LockMethod::FILE_ONLY}) {
        const std::string dir = tst::make_temp_dir() + "/run";
        {
            FolderLock first;
            first.take(dir, method);
            CHECK(first.held() && first.note().empty());
            const LockHolder holder = parse_lock_holder(text_of(folder_lock_path(dir)));
            CHECK(holder.valid && holder.pid == (long)getpid() && holder.started > 0);
            FolderLock second;  // another open file: flock refuses it as it refuses another process
            expect_input_error([&] { second.take(dir, method); },
                               {"-o (--output-dir)", dir + " is in use by pid " + std::to_string(getpid()),
                                "on host " + holder.host, "since " + holder.since});
            CHECK(!second.held() && path_exists(folder_lock_path(dir)));
        }
        // Released: the lock file goes, and the folder it made, still empty, goes too.
        CHECK(!path_exists(dir));
        FolderLock again;
        again.take(dir, method);
        write_text(dir + "/kept.txt", "x");
        again.release();
        CHECK(path_exists(dir + "/kept.txt") && !path_exists(folder_lock_path(dir)));
    }
}

TEST(folder_lock_takes_over_a_dead_holders_file_but_not_a_live_or_remote_one) {
    const std::string dir = tst::make_temp_dir();
    LockHolder dead = this_process_as_holder();
    dead.pid = pid_of_a_finished_process();
    for (LockMethod method : {LockMethod::KERNEL, LockMethod::FILE_ONLY}) {
        write_text(folder_lock_path(dir), lock_holder_text(dead));
        FolderLock lock;
        lock.take(dir, method);
        CHECK_MSG(lock.note().find("was left by pid " + std::to_string(dead.pid)) != std::string::npos &&
                      lock.note().find("taken over") != std::string::npos,
                  "%s", lock.note().c_str());
        CHECK(parse_lock_holder(text_of(folder_lock_path(dir))).pid == (long)getpid());
    }
    // Without kernel locks the file is all there is: a live holder (this process, with its start time)
    // and one on another host, which cannot be checked, keep it.
    write_text(folder_lock_path(dir), lock_holder_text(this_process_as_holder()));
    FolderLock live;
    expect_input_error([&] { live.take(dir, LockMethod::FILE_ONLY); }, {"is in use by pid"});
    LockHolder remote = dead;
    remote.host = "another-host.example";
    write_text(folder_lock_path(dir), lock_holder_text(remote));
    FolderLock far;
    expect_input_error([&] { far.take(dir, LockMethod::FILE_ONLY); },
                       {"on host another-host.example", "cannot lock", "remove " + folder_lock_path(dir)});
    // A reused pid: alive, but a process started at another time.
    LockHolder reused = this_process_as_holder();
    reused.started += 12345;
    CHECK(lock_holder_is_gone(reused) && !lock_holder_is_gone(this_process_as_holder()));
    CHECK(lock_holder_is_gone(parse_lock_holder("garbage")) && !lock_holder_is_gone(remote));
}

TEST(lock_holder_text_reads_back_and_rejects_malformed_lines) {
    const LockHolder h = this_process_as_holder();
    const LockHolder back = parse_lock_holder(lock_holder_text(h));
    CHECK(back.valid && back.pid == h.pid && back.host == h.host && back.since == h.since && back.started == h.started);
    for (const char* text : {"", "pid 12\nhost a\n", "pid -3\nhost a\nsince b\n", "pid 12x\nhost a\nsince b\n",
                             "pid 12\nhost a b\nsince c\n"})
        CHECK_MSG(!parse_lock_holder(text).valid, "accepted: %s", text);
}

// ---- what a run removes of its snapshots (train/snapshots.h)

TEST(snapshot_tree_removal_takes_only_the_names_the_trainer_makes) {
    const std::string root = tst::make_temp_dir() + "/gpt_snapshots_0123456789abcdef";
    const std::string folder = root + "/held_by_00000/00000004_of_00001";
    tst::run_command("mkdir -p " + folder + " " + root + "/held_by_00001/00000002_of_00002 " + root + "/mine", nullptr);
    for (const char* name : {"model_00000004.bin", "state_00000004_00000.bin", "state_00000004_00000.bin.tmp.77"})
        write_text(folder + "/" + name, "x");
    write_text(root + "/held_by_00001/00000002_of_00002/notes.txt", "keep");
    write_text(root + "/mine/model_00000001.bin", "keep");
    write_text(folder + "/../model_00000009.bin", "keep");  // not in a snapshot folder
    remove_snapshot_tree(root);
    std::string left;
    tst::run_command("cd " + root + " && find . -type f | sort", &left);
    CHECK_MSG(left == "./held_by_00000/model_00000009.bin\n./held_by_00001/00000002_of_00002/notes.txt\n"
                      "./mine/model_00000001.bin\n",
              "left: %s", left.c_str());
    CHECK(!path_exists(folder));
}

TEST(trainer_flags_given_twice_are_refused_unless_after_override) {
    auto parse = [](std::vector<const char*> args, TrainOptions* opt) {
        args.insert(args.begin(), "train");
        parse_train_flags((int)args.size(), args.data(), opt);
    };
    TrainOptions opt;
    expect_input_error([&] { parse({"-x", "5", "-x", "6"}, &opt); }, {"-x (--max-steps): given twice", "--override"});
    expect_input_error([&] { parse({"--max-steps=5", "-b", "2", "-x", "6"}, &opt); }, {"given twice"});
    parse({"-x", "5", "-b", "4", "--override", "-x", "6", "--override", "-x", "7"}, &opt);
    CHECK(opt.max_steps == 7 && opt.batch_size == 4);
    const char* argv[] = {"train", "-x", "5", "--override", "--max-steps", "9"};
    CHECK(train_flag_value(6, argv, "--max-steps") == "9");
}

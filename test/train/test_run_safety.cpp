// Unit tests of the safe-run modules: interrupts (a second signal exits at once and removes the
// temporary file being written), the output folder's inventory and run.json, the ETA clock, the
// memory check, the choice of validation data, llm.c's eval file reader, and the messages that name
// a directory or a file of the wrong kind. The trainer end to end is test_train_cpu.cpp.
#include <csignal>
#include <sys/wait.h>
#include <unistd.h>

#include "base/file_io.h"
#include "base/model_descriptor.h"
#include "base/model_file.h"
#include "test/train/host_test_util.h"
#include "train/dataloader.h"
#include "train/hellaswag.h"
#include "train/interrupts.h"
#include "train/memory_check.h"
#include "train/run_folder.h"
#include "train/run_report.h"
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
                             "model_00000700.bin.tmp.12345", "model_12.bin"})
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

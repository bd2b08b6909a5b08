// Tests of flag parsing: every form of every flag sets its field; malformed numbers, values out of
// range, unknown flags, missing values and impossible combinations are rejected with one line that
// names the flag.
#include <cmath>

#include "base/model_descriptor.h"
#include "test/train/host_test_util.h"
#include "train/train_flags.h"

static TrainOptions parse(std::vector<std::string> args) {
    args.insert(args.begin(), "train");
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    TrainOptions o;
    FlagsResult r = parse_train_flags((int)argv.size(), argv.data(), &o);
    CHECK(r == FlagsResult::RUN);
    return o;
}

static void rejected(std::vector<std::string> args, std::vector<std::string> words) {
    expect_input_error([&] { parse(args); }, words);
}

TEST(every_flag_sets_its_field) {
    TrainOptions o = parse(
        {"-i",        "tr*.bin", "-j",        "va*.bin", "-e",          "d24",    "-o",     "out",
         "-n",        "100",     "-nk",       "3",       "-y",          "1",      "-b",     "8",
         "-t",        "256",     "-d",        "8192",    "-x",          "500",    "-k",     "wsd",
         "-l",        "6e-4",    "-u",        "50",      "-q",          "0.1",    "-c",     "0.05",
         "-sl",       "5",       "-sg",       "6",       "-v",          "25",     "-m",     "7",
         "-s",        "40",      "-g",        "128",     "-a",          "1",      "-z",     "1",
         "-r",        "2",       "-f",        "0",       "-w",          "1",      "--seed", "77",
         "--shuffle", "1",       "--stop-at", "100",     "--tokenizer", "tok.bin"});
    CHECK(o.train_data == "tr*.bin" && o.val_data == "va*.bin" && o.model == "d24" &&
          o.output_dir == "out");
    CHECK(o.checkpoint_every == 100 && o.checkpoints_keep == 3 && o.resume == 1);
    CHECK(o.batch_size == 8 && o.seq_len == 256 && o.total_batch == 8192 && o.max_steps == 500);
    CHECK(o.schedule == ScheduleKind::WSD && o.learning_rate == 6e-4 && o.warmup_steps == 50);
    CHECK(o.final_lr_fraction == 0.1 && o.weight_decay == 0.05 && o.skip_loss_z == 5 &&
          o.skip_norm_z == 6);
    CHECK(o.val_every == 25 && o.val_batches == 7 && o.sample_every == 40 && o.gen_tokens == 128);
    CHECK(o.overfit_single_batch == 1 && o.zero_stage == 1 && o.recompute == 2 && o.tf32 == 0 &&
          o.fp32_master == 1);
    CHECK(o.seed == 77 && o.shuffle == 1 && o.stop_at == 100 && o.tokenizer == "tok.bin");
}

TEST(long_names_and_equals_form) {
    TrainOptions o = parse({"--batch-size", "16", "--seq-len=128", "--lr-schedule", "linear",
                            "--learning-rate=1e-3", "--output-dir", "o", "--model=gpt2:d12"});
    CHECK(o.batch_size == 16 && o.seq_len == 128 && o.schedule == ScheduleKind::LINEAR);
    CHECK(o.learning_rate == 1e-3 && o.output_dir == "o" && o.model == "gpt2:d12");
    TrainOptions defaults = parse({});
    CHECK(defaults.batch_size == TrainOptions().batch_size && defaults.total_batch == -1);
}

TEST(malformed_and_out_of_range_values_are_rejected) {
    rejected({"-b", "abc"}, {"-b (--batch-size)", "'abc' is not an integer"});
    rejected({"-b", "4x"}, {"-b (--batch-size)", "'4x' is not an integer"});
    rejected({"-x", "1.5"}, {"-x (--max-steps)", "not an integer"});
    rejected({"-b", ""}, {"-b (--batch-size)", "not an integer"});
    rejected({"-b", "99999999999999999999"}, {"-b (--batch-size)", "not an integer"});
    rejected({"-l", "1e"}, {"-l (--learning-rate)", "'1e' is not a number"});
    rejected({"-l", "nan"}, {"-l (--learning-rate)", "not a number"});
    rejected({"-l", "-0.1"}, {"-l (--learning-rate)", "out of range"});
    rejected({"-b", "0"}, {"-b (--batch-size)", "0 is out of range"});
    rejected({"-y", "2"}, {"-y (--resume)", "out of range"});
    rejected({"-q", "1.5"}, {"-q (--final-lr-fraction)", "out of range"});
    rejected({"-r", "3"}, {"-r (--recompute)", "out of range"});
    rejected({"--seed", "-4"}, {"--seed", "not a non-negative integer"});
    rejected({"-k", "exponential"}, {"-k (--lr-schedule)", "unknown schedule 'exponential'"});
    rejected({"-e", ""}, {"-e (--model)", "empty value"});
    rejected({"--shard-ranks", "-1"}, {"--shard-ranks", "out of range"});
    rejected({"--node-ranks", "-2"}, {"--node-ranks", "out of range"});
}

TEST(unknown_flags_and_missing_values_are_rejected) {
    rejected({"-zz", "1"}, {"unknown flag '-zz'"});
    rejected({"--batch", "1"}, {"unknown flag '--batch'"});
    rejected({"stray"}, {"unknown flag 'stray'"});
    rejected({"-b", "4", "-t"}, {"-t (--seq-len)", "missing value"});
}

static void invalid_combination(std::vector<std::string> args, const char* model,
                                std::vector<std::string> words, int ranks = 1) {
    TrainOptions o = parse(args);
    GPTConfig c = config_from_descriptor(model);
    expect_input_error([&] { validate_train_options(&o, c, ranks); }, words);
}

TEST(impossible_combinations_are_rejected) {
    invalid_combination({"-b", "4", "-t", "64", "-d", "1000"}, "d12",
                        {"-d (--total-batch)", "1000", "multiple of B*T*ranks", "256"});
    invalid_combination({"-b", "4", "-t", "64", "-d", "256"}, "d12", {"-d (--total-batch)", "512"},
                        2);
    // An accumulation count beyond any real run (and past int's range) is refused, not wrapped.
    invalid_combination({"-b", "4", "-t", "6", "-d", "911291105160"}, "d12",
                        {"-d (--total-batch)", "12656820905 micro-steps"}, 3);
    // The mesh: -tp x -pp must divide the ranks, -tp the heads and the vocabulary, -sp the sequence;
    // -pp needs a layer per stage; -d counts data ranks only.
    invalid_combination({"-tp", "3"}, "d12", {"-tp (--tensor-parallel) 3", "does not divide the 4 ranks"}, 4);
    invalid_combination({"-tp", "5"}, "d12", {"-tp (--tensor-parallel)", "12 attention heads"}, 5);
    invalid_combination({"-tp", "2", "-t", "33"}, "custom:L2:C64:H2:V512:T64", {"-sp (--sequence-parallel)", "33"}, 2);
    invalid_combination({"-pp", "3"}, "custom:L2:C64:H2", {"-pp (--pipeline-parallel)", "3 stages for 2 layers"}, 3);
    invalid_combination({"--pp-schedule", "zigzag"}, "d12", {"--pp-schedule", "zigzag"});
    // --shard-ranks: groups of data ranks that divide them, and only with ZeRO to shard.
    invalid_combination({"-z", "1", "--shard-ranks", "3"}, "d12", {"--shard-ranks", "3", "does not divide the 4 data ranks"}, 4);
    invalid_combination({"-z", "3", "-tp", "2", "--shard-ranks", "4"}, "d12",
                        {"--shard-ranks", "4", "does not divide the 2 data ranks"}, 4);
    invalid_combination({"--shard-ranks", "2"}, "d12", {"--shard-ranks", "add -z 1, 2 or 3"}, 4);
    invalid_combination({"--grad-reduce", "fp16"}, "d12", {"--grad-reduce", "fp16", "fp32, bf16"});
    invalid_combination({"-tp", "2", "-b", "4", "-t", "64", "-d", "768"}, "d12",
                        {"-d (--total-batch)", "B*T*data ranks", "512"}, 4);
    {
        TrainOptions o = parse({"-tp", "2", "-b", "4", "-t", "64", "-d", "1024"});
        validate_train_options(&o, config_from_descriptor("d12"), 4);  // 2 data ranks: 2 micro-steps
        CHECK(o.sequence_parallel == 1 && data_ranks(o, 4) == 2 && grad_accum_steps(o, 4) == 2);
    }
    {
        TrainOptions o = parse({"-z", "2", "--shard-ranks", "2", "--node-ranks", "4"});
        validate_train_options(&o, config_from_descriptor("d12"), 8);
        CHECK(o.shard_ranks == 2 && o.node_ranks == 4);
    }
    invalid_combination({"-t", "2048"}, "d12", {"-t (--seq-len)", "2048", "1024"});
    invalid_combination({"-t", "65"}, "custom:L1:C8:H2:T64", {"-t (--seq-len)"});
    invalid_combination({"-y", "1"}, "d12", {"-y (--resume)", "-o"});
    invalid_combination({"-n", "10"}, "d12", {"-n (--checkpoint-every)", "-o"});
    invalid_combination({"-x", "10", "--stop-at", "11"}, "d12", {"--stop-at", "-x"});
    invalid_combination({"-x", "0"}, "d12", {"-x (--max-steps)"});
    // Heads that do not divide the channels are a model error (the trainer names -e with it).
    expect_input_error([] { config_from_descriptor("custom:L2:C64:H5"); },
                       {"5 heads do not divide 64 channels"});
}

TEST(valid_combinations_fill_in_derived_values) {
    TrainOptions o = parse({"-b", "4", "-t", "64"});
    validate_train_options(&o, config_from_descriptor("d12"), 2);
    CHECK(o.total_batch == 512 && grad_accum_steps(o, 2) == 1);
    TrainOptions p = parse({"-b", "4", "-t", "64", "-d", "2048"});
    validate_train_options(&p, config_from_descriptor("d12"), 2);
    CHECK(grad_accum_steps(p, 2) == 4);
}

TEST(help_lists_every_llmc_flag) {
    std::string help = train_flags_help("train", TrainOptions());
    for (const char* flag :
         {"-i ", "-j ", "-e ", "-o ",  "-n ",  "-nk ", "-y ", "-b ",   "-t ", "-d ",
          "-x ", "-k ", "-l ", "-u ",  "-q ",  "-c ",  "-v ", "-m ",   "-s ", "-g ",
          "-a ", "-z ", "-r ", "-sl ", "-sg ", "-f ",  "-w ", "-h ", "--help"})
        CHECK_MSG(help.find(std::string("  ") + flag) != std::string::npos, "help lacks %s", flag);
    std::string out;
    // The flag table's defaults appear: e.g. batch size 4.
    CHECK(help.find("micro-batch size B (sequences) (default 4)") != std::string::npos);
}

// llm.c's run scripts pass "-h 1" (HellaSwag): a flag with a value, not a request for help.
TEST(llmc_hellaswag_flag_takes_a_value) {
    TrainOptions o = parse({"-h", "1", "-b", "2"});
    CHECK(o.hellaswag == 1 && o.batch_size == 2);
    expect_input_error([] { parse({"-h", "2"}); }, {"-h (--hellaswag)", "out of range"});
}

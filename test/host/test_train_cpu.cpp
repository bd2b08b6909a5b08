// End-to-end tests of a trainer binary (train_gpt_cpu in $BIN, or the one $TRAINER names: the
// emulated CUDA trainer train_gpt_emu runs them too, test/trainer/test_train_gpt_emu.sh) on a tiny model and synthetic shards the
// test writes itself: a single batch overfits; 20 steps straight and 10 + resume + 10 give the same
// per-step losses and bitwise-identical checkpoints; old checkpoints are pruned; bad input (missing
// shard, bad flags, corrupted checkpoint, resume with another config) ends with one error line,
// a non-zero exit and no output file.
#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "host/checkpoint.h"
#include "host/decode_table.h"
#include "host/file_io.h"
#include "host/model_file.h"
#include "host/rng.h"
#include "test/host/host_test_util.h"

// Head size 32: the smallest the CUDA attention kernels support.
static const char* MODEL = "custom:L2:C64:H2:V64:T16";

static std::string trainer() {
    const char* bin = getenv("BIN");
    const char* name = getenv("TRAINER");
    return std::string(bin && *bin ? bin : ".") + "/" + (name && *name ? name : "train_gpt_cpu");
}

// A directory with train.bin and val.bin of pseudo-random tokens below 64.
static std::string data_dir() {
    const std::string dir = tst::make_temp_dir();
    Rng rng(3);
    for (const char* name : {"train", "val"}) {
        std::vector<uint16_t> tokens(name[0] == 't' ? 3000 : 600);
        for (uint16_t& t : tokens) t = (uint16_t)rng.below(64);
        write_shard(dir + "/" + name + ".bin", tokens);
    }
    // A decode table for samples: token i is the letter 'A' + i (EOT is the last token).
    DecodeTable table;
    for (int i = 0; i < 64; i++) table.token_bytes.push_back(std::string(1, (char)('A' + i)));
    table.eot_token = 63;
    write_decode_table(dir + "/tokenizer.bin", table);
    return dir;
}

static int run_trainer(const std::string& args, std::string* output) {
    return tst::run_command(trainer() + " " + args, output);
}

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

static double last_loss(const std::string& output) {
    size_t at = output.rfind("| loss ");
    return at == std::string::npos ? NAN : atof(output.c_str() + at + 7);
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
                             " -b 2 -t 16 -a 1 -x 120 -k constant -l 3e-3 -c 0 -v 0 -s 0",
                         &out);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out.c_str());
    // 32 random tokens memorised: cross-entropy from ln(64) = 4.16 to below 0.1.
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
    CHECK_MSG(run_trainer(common + " -o " + straight, &a) == 0, "%s", a.c_str());
    CHECK_MSG(run_trainer(common + " -o " + split + " --stop-at 10", &b1) == 0, "%s", b1.c_str());
    CHECK(complete_checkpoints(split, 1) == std::vector<long long>{10});
    // As if the first run had gone on past its checkpoint before dying: a step the resume redoes.
    tst::run_command("echo '{\"step\":11,\"loss\":99.0}' >> " + metrics_log_path(split));
    CHECK_MSG(run_trainer(common + " -o " + split + " -y 1", &b2) == 0, "%s", b2.c_str());
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
    CHECK_MSG(run_trainer(common + " -o " + odd + " --stop-at 7", &c1) == 0, "%s", c1.c_str());
    CHECK_MSG(run_trainer(common + " -o " + odd + " -y 1", &c2) == 0, "%s", c2.c_str());
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

// Runs the trainer expecting failure: non-zero exit, exactly one output line, starting "error:"
// and containing every word; and `out_dir` afterwards holds exactly what it held before.
static void fails_cleanly(const std::string& args, const std::vector<std::string>& words,
                          const std::string& out_dir) {
    std::string before, after, out;
    tst::run_command("ls -A " + out_dir + " 2>/dev/null", &before);
    int rc = run_trainer(args, &out);
    tst::run_command("ls -A " + out_dir + " 2>/dev/null", &after);
    CHECK_MSG(rc != 0, "exit 0 for: %s", args.c_str());
    CHECK_MSG(out.rfind("error: ", 0) == 0 && out.find('\n') == out.size() - 1,
              "not one error line: %s", out.c_str());
    for (const std::string& w : words)
        CHECK_MSG(out.find(w) != std::string::npos, "'%s' lacks '%s'", out.c_str(), w.c_str());
    CHECK_MSG(before == after, "output folder changed: '%s' → '%s'", before.c_str(), after.c_str());
}

TEST(bad_input_fails_cleanly) {
    const std::string data = data_dir(), fresh = tst::make_temp_dir() + "/out";
    const std::string base =
        "-j " + data + "/val.bin -e " + MODEL + " -b 2 -t 8 -x 4 -v 2 -s 0 -o " + fresh;
    const std::string ok = "-i " + data + "/train.bin " + base;
    fails_cleanly("-i " + data + "/missing_*.bin " + base,
                  {"-i (--train-data)", "missing_*.bin", "no file matches"}, fresh);
    fails_cleanly(ok + " -b x", {"-b (--batch-size)", "'x' is not an integer"}, fresh);
    fails_cleanly(ok + " --frobnicate 1", {"unknown flag '--frobnicate'"}, fresh);
    fails_cleanly(ok + " -t 17", {"-t (--seq-len)", "17", "16"}, fresh);
    fails_cleanly(ok + " -d 100", {"-d (--total-batch)", "16"}, fresh);
    fails_cleanly(ok + " -e custom:L2:C64:H3:V64:T16",
                  {"-e (--model)", "3 heads do not divide 64 channels"}, fresh);
    fails_cleanly(ok + " -e " + data + "/nothing.bin", {"-e (--model)", "nothing.bin"}, fresh);
    fails_cleanly(ok + " -e " + data + "/train.bin", {"train.bin", "not a model file"}, fresh);
    std::vector<uint16_t> big(200, 64);  // token 64 is outside the model's vocabulary of 64
    write_shard(data + "/bad_tokens.bin", big);
    fails_cleanly("-i " + data + "/bad_tokens.bin " + base,
                  {"bad_tokens.bin", "outside the vocabulary"}, fresh);
    CHECK(!path_exists(fresh));  // nothing was created by any of these

    // -y 1 with no checkpoint yet starts afresh; then resumes that must be refused.
    std::string log;
    CHECK_MSG(run_trainer(ok + " -y 1", &log) == 0, "%s", log.c_str());
    CHECK(log.find("training starts from step 0") != std::string::npos);
    CHECK(complete_checkpoints(fresh, 1) == std::vector<long long>{4});
    fails_cleanly(ok + " -y 1 -b 4", {"state_00000004_00000.bin", "-b (batch size) = 2", "4"},
                  fresh);
    fails_cleanly(ok + " -y 1 -e custom:L3:C64:H2:V64:T16",
                  {"state_00000004_00000.bin", "L=2", "L=3"}, fresh);
    const std::string state = checkpoint_state_path(fresh, 4, 0);
    std::vector<unsigned char> bytes = read_all(state);
    bytes[bytes.size() - 9] ^= 1;
    write_all(state, bytes);
    fails_cleanly(ok + " -y 1 -x 8", {"state_00000004_00000.bin", "checksum mismatch"}, fresh);
    bytes.resize(bytes.size() / 2);
    write_all(state, bytes);
    fails_cleanly(ok + " -y 1 -x 8", {"state_00000004_00000.bin", "does not match its header"},
                  fresh);
}

// Helpers for the tests that run a trainer binary (test/train/test_train_cpu.cpp,
// test/train/test_train_optimizers.cpp, test/train/test_train_muon.cpp): which trainer
// ($BIN/train_gpt_cpu, or the one $TRAINER names), synthetic shards of tokens below 64, a checkpointed
// run taken to a step, a run's output, and a run that must fail cleanly.
#pragma once
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/decode_table.h"
#include "base/rng.h"
#include "test/test.h"
#include "test/train/host_test_util.h"

inline std::string trainer() {
    const char* bin = getenv("BIN");
    const char* name = getenv("TRAINER");
    return std::string(bin && *bin ? bin : ".") + "/" + (name && *name ? name : "train_gpt_cpu");
}

// A directory with train.bin and val.bin of pseudo-random tokens below 64.
inline std::string data_dir() {
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

inline int run_trainer(const std::string& args, std::string* output) {
    return tst::run_command(trainer() + " " + args, output);
}

// A checkpointed run of 6 steps (-n 3), taken to step `steps` and resuming where `out` holds a
// checkpoint; `args` the run's other flags. Returns its output.
inline std::string run_to_step(const std::string& args, int steps, const std::string& out) {
    std::string output;
    const int rc = run_trainer(tst::format("%s -x 6 --stop-at %d -n 3 -y 1 -o %s", args.c_str(), steps, out.c_str()),
                               &output);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, output.c_str());
    return output;
}

inline double last_loss(const std::string& output) {
    size_t at = output.rfind("| loss ");
    return at == std::string::npos ? NAN : atof(output.c_str() + at + 7);
}

// Runs the trainer expecting failure: non-zero exit, exactly one output line, starting "error:"
// and containing every word; and `out_dir` afterwards holds exactly what it held before.
inline void fails_cleanly(const std::string& args, const std::vector<std::string>& words,
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

// What the multi-rank tests share: running the emulated CUDA trainer (the real kernels, the NCCL
// stand-in over MPI) on some number of MPI ranks, oversubscribed, and comparing a run with a one-rank
// run: per-step losses from metrics.jsonl and the final model file.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "base/file_io.h"
#include "base/model_file.h"
#include "base/model_part.h"
#include "base/rng.h"
#include "test/train/host_test_util.h"
#include "train/checkpoint.h"
#include "train/hellaswag.h"
#include "train/training_state.h"

namespace trainer_runs {

// The emulated CUDA trainer: the fp32 build (exact comparisons) or the bf16 one.
inline std::string trainer(bool bf16 = false) {
    const char* bin = getenv("BIN");
    return std::string(bin && *bin ? bin : ".") + (bf16 ? "/train_gpt_emu" : "/train_gpt_emu_fp32");
}
// The fp32 CPU reference trainer.
inline std::string cpu_trainer() {
    const char* bin = getenv("BIN");
    return std::string(bin && *bin ? bin : ".") + "/train_gpt_cpu";
}

// A token shard of `count` tokens below `vocab` (seeded), written once per (count, vocab).
inline std::string data_file(int vocab = 512, size_t count = 20000) {
    const std::string path = tst::make_temp_dir() + strprintf("/train_%d.bin", vocab);
    Rng rng(9);
    std::vector<uint16_t> tokens(count);
    for (uint16_t& t : tokens) t = (uint16_t)rng.below(vocab);
    write_shard(path, tokens);
    return path;
}

// The programs' common token shard (data_file's defaults), written once per program.
inline const std::string& default_data() {
    static const std::string path = data_file();
    return path;
}

// A HellaSwag-style eval file of `count` examples (4 completions each) with tokens below `vocab`.
inline std::string eval_file(int vocab, int count = 6) {
    const std::string path = tst::make_temp_dir() + "/eval.bin";
    Rng rng(11);
    std::vector<EvalExample> examples(count);
    for (int i = 0; i < count; i++) {
        examples[i].index = i, examples[i].label = (int)rng.below(4);
        examples[i].context.resize(4 + rng.below(6));
        for (uint16_t& t : examples[i].context) t = (uint16_t)rng.below(vocab);
        examples[i].completions.resize(4);
        for (auto& completion : examples[i].completions) {
            completion.resize(1 + rng.below(4));
            for (uint16_t& t : completion) t = (uint16_t)rng.below(vocab);
        }
    }
    write_eval_file(path, examples);
    return path;
}

// Runs `program` (a build of the trainer) on `ranks` MPI ranks (a plain process for 0) with the model,
// the data and `flags`, its environment preceded by `environment` ("NAME=value ..."); returns its
// output, after checking it succeeded.
inline std::string run_program(const std::string& program, const std::string& environment, int ranks,
                               const std::string& model, const std::string& data, const std::string& flags) {
    const std::string launcher = ranks == 0 ? "" : "mpirun --oversubscribe -np " + std::to_string(ranks) + " ";
    // One OpenMP thread per rank; OpenMPI's own leaks would fail a sanitized run (see test_nccl.sh).
    const std::string command = "OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0 OMPI_ALLOW_RUN_AS_ROOT=1 "
                                "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " + environment + " timeout 300 " + launcher +
                                program + " -e " + model + " -i " + data +
                                " -b 2 -t 32 -v 0 -s 0 -l 2e-4 -u 1 -c 0.1 --override " + flags;
    std::string out;
    const int status = tst::run_command(command, &out);
    CHECK_MSG(status == 0, "exit %d from: %s\n%s", status, command.c_str(), out.c_str());
    return out;
}
// The emulated trainer (fp32, or bf16) in the test's environment.
inline std::string run(int ranks, const std::string& model, const std::string& data, const std::string& flags,
                       bool bf16 = false) {
    return run_program(trainer(bf16), "", ranks, model, data, flags);
}

// A per-step value of a run's metrics log ("loss", "norm": the gradient norm before clipping), in order.
inline std::vector<double> logged(const std::string& dir, const std::string& key) {
    std::vector<unsigned char> bytes = read_all(metrics_log_path(dir));
    std::istringstream lines(std::string(bytes.begin(), bytes.end()));
    std::vector<double> out;
    std::string line;
    const std::string field = "\"" + key + "\":";
    while (std::getline(lines, line)) {
        const size_t at = line.find(field);
        if (at != std::string::npos && line.find("\"step\"") != std::string::npos)
            out.push_back(atof(line.c_str() + at + field.size()));
    }
    return out;
}
inline std::vector<double> losses(const std::string& dir) { return logged(dir, "loss"); }

// The run in `dir` against the one-rank run in `reference_dir`: every step's loss and gradient norm,
// and the model file of checkpoint `step`, within `tolerance` (relative). The norm is compared as well
// as the loss: a constant scale error in a gradient barely moves AdamW (it divides by the gradient's
// size) but changes the norm, hence the clipping.
inline void check_same_run(const std::string& dir, const std::string& reference_dir, int step, double tolerance,
                           const char* what) {
    for (const char* key : {"loss", "norm"}) {
        const std::vector<double> a = logged(dir, key), b = logged(reference_dir, key);
        CHECK_MSG(a.size() == b.size() && !a.empty(), "%s: %zu vs %zu logged %ss", what, a.size(), b.size(), key);
        for (size_t i = 0; i < a.size() && i < b.size(); i++)
            CHECK_MSG(std::fabs(a[i] - b[i]) <= tolerance * std::fabs(b[i]) + 1e-6,  // + the log's 6 decimals
                      "%s: step %zu %s %.6f vs %.6f with one rank", what, i + 1, key, a[i], b[i]);
    }
    const ModelFile x = read_model_file(checkpoint_model_path(dir, step));
    const ModelFile y = read_model_file(checkpoint_model_path(reference_dir, step));
    const double err = tst::rel_l2_error(x.params.data(), y.params.data(), y.params.size());
    printf("  %s: weights differ from one rank's by %.2g\n", what, err);
    CHECK_MSG(err <= tolerance, "%s: final weights differ from one rank's by %.3g (> %.3g)", what, err, tolerance);
}

// The fp32 master weights of checkpoint `step` in `dir`, in ParamLayout order, put together from the
// state files of its `ranks` ranks (each holds its ranges).
inline std::vector<float> master_weights(const std::string& dir, int step, int ranks) {
    std::vector<float> whole;
    for (int r = 0; r < ranks; r++) {
        const TrainingState s = read_training_state(checkpoint_state_path(dir, step, r));
        size_t end = 0;
        for (const LayoutRange& range : s.ranges) end = std::max(end, (size_t)(range.offset + range.length));
        if (whole.size() < end) whole.resize(end);
        scatter_part(s.ranges, s.params.data(), &whole);
    }
    return whole;
}

inline std::string out_dir() { return tst::make_temp_dir() + "/out"; }

// The trainer built with the tests' deliberately broken variants (Makefile: TEST_BROKEN_VARIANTS).
inline std::string broken_trainer() {
    const char* build = getenv("BUILD");
    return std::string(build && *build ? build : "build") + "/test/parallel/train_gpt_emu_fp32_broken";
}

// How far the weights of checkpoint `step` in `dir` are from those in `reference_dir` (relative L2).
inline double weight_difference(const std::string& dir, const std::string& reference_dir, int step) {
    const ModelFile x = read_model_file(checkpoint_model_path(dir, step));
    const ModelFile y = read_model_file(checkpoint_model_path(reference_dir, step));
    return tst::rel_l2_error(x.params.data(), y.params.data(), y.params.size());
}

// A mesh to compare with one rank: `ranks` MPI ranks with `flags`.
struct MeshCase {
    int ranks;
    const char* flags;
};
// Trains the model on the default data with `flags` + each case's own, 3 steps, each into its folder
// (`flags` ends with -o), checks that the log names the parallelism (`report`, a start-up line's
// text) and that losses and final weights match the one-rank run in `one` within `tolerance`;
// returns the cases' folders in order.
inline std::vector<std::string> check_meshes_match_one_rank(const std::string& model, const std::string& flags,
                                                            const std::string& one,
                                                            const std::vector<MeshCase>& cases,
                                                            const char* report, double tolerance) {
    std::vector<std::string> dirs;
    for (const MeshCase& c : cases) {
        const std::string dir = out_dir();
        const std::string log = run(c.ranks, model, default_data(), flags + dir + " " + c.flags);
        const std::string what = strprintf("mpirun -np %d %s", c.ranks, c.flags);
        CHECK_MSG(log.find(report) != std::string::npos, "%s:\n%s", what.c_str(), log.c_str());
        check_same_run(dir, one, 3, tolerance, what.c_str());
        dirs.push_back(dir);
    }
    return dirs;
}

// A checkpoint moved between meshes: saved at step 2 by `saved_ranks` ranks (0: a plain process) with
// `saved` flags, resumed by `ranks` with `resumed`.
struct MeshMove {
    int saved_ranks;
    const char* saved;
    int ranks;
    const char* resumed;
};
// Each move's continuation to step 4 matches the uninterrupted one-rank run within `tolerance`.
inline void check_moves(const std::string& model, const std::string& data, const std::vector<MeshMove>& moves,
                        double tolerance) {
    const std::string flags = "-d 256 -x 4 -n 2 -y 1 -o ";
    const std::string straight = out_dir();
    run(0, model, data, flags + straight);
    for (const MeshMove& c : moves) {
        const std::string dir = out_dir();
        run(c.saved_ranks, model, data, flags + dir + " --stop-at 2 " + c.saved);
        const std::string log = run(c.ranks, model, data, flags + dir + " " + c.resumed);
        CHECK_MSG(log.find("resumed from step 2") != std::string::npos, "%s", log.c_str());
        const std::string what = strprintf("saved with '%s' on %d rank(s), resumed with '%s' on %d", c.saved,
                                           std::max(1, c.saved_ranks), c.resumed, std::max(1, c.ranks));
        check_same_run(dir, straight, 4, tolerance, what.c_str());
    }
}

// The lines of `text` that start with `prefix`, and how many there are.
inline std::string lines_starting(const std::string& text, const std::string& prefix) {
    std::istringstream lines(text);
    std::string line, out;
    while (std::getline(lines, line))
        if (line.rfind(prefix, 0) == 0) out += line + "\n";
    return out;
}
inline int count_lines(const std::string& text, const std::string& prefix) {
    int n = 0;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) n += line.rfind(prefix, 0) == 0;
    return n;
}

// The number after `key` in the first line of `text` that starts with `prefix` (0 when absent).
inline double number_after(const std::string& text, const std::string& prefix, const std::string& key) {
    const std::string line = lines_starting(text, prefix);
    const size_t at = line.find(key);
    return at == std::string::npos ? 0 : atof(line.c_str() + at + key.size());
}

}  // namespace trainer_runs

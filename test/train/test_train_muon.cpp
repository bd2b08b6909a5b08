// The trainer binary (train_gpt_cpu, or $TRAINER) with --optimizer muon, on a tiny GPT-2 and synthetic
// shards: the first step's block matrices equal a double-precision Muon step (test/cpu/muon_reference.h)
// from the initial weights and the gradient read back from the saved momentum, with the flags' rate,
// momentum, Nesterov choice and weight decay, and the state file holds zeros in v at Muon's elements;
// the loss goes down; a run stopped and resumed gives the same losses and the same bytes as one run
// straight through; every bad value of Muon's flags, and Muon's flags with another optimizer, is a
// one-line error; --dry-run counts Muon's state (one buffer per Muon element, AdamW's two moments for
// the rest); the CUDA trainer (train_gpt_emu, where built) refuses Muon naming the flag. (A resume
// under another optimizer, to or from Muon: test_train_optimizers.cpp.)
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/gpt_config.h"
#include "base/gpt_init.h"
#include "base/model_descriptor.h"
#include "base/model_file.h"
#include "base/muon_layout.h"
#include "test/cpu/muon_reference.h"
#include "test/train/host_test_util.h"
#include "test/train/trainer_runs.h"
#include "train/checkpoint.h"
#include "train/training_state.h"

static const char* MODEL = "custom:L2:C32:H2:V64:T16";
static const uint64_t SEED = 5;

static std::string run_flags(const std::string& data, const std::string& extra) {
    return "-i " + data + "/train.bin -j " + data + "/val.bin -e " + MODEL + " -b 2 -t 16 -v 0 -s 0 --seed " +
           std::to_string(SEED) + " " + extra;
}

// One step from SEED's weights, constant rate: m = (1 − μ) g at Muon's elements, so g = m / (1 − μ)
// (g the clipped gradient), and each matrix moves as the reference's first step from a zero buffer.
static void check_first_step(bool nesterov) {
    muon_reference::Constants k;
    k.lr = 0.03, k.momentum = 0.9, k.decay = 0.2, k.grad_scale = 1.0, k.nesterov = nesterov, k.ns_steps = 4;
    const std::string data = data_dir(), out = tst::make_temp_dir() + "/out";
    std::string output;
    const int rc = run_trainer(
        run_flags(data, tst::format("-x 1 -k constant -u 0 -l 1e-3 -c %g --optimizer muon --muon-lr %g "
                                    "--muon-momentum %g --muon-nesterov %d --ns-steps %d -o %s",
                                    k.decay, k.lr, k.momentum, nesterov ? 1 : 0, k.ns_steps, out.c_str())),
        &output);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, output.c_str());
    CHECK_MSG(output.find("optimizer: muon") != std::string::npos, "start-up report: %s", output.c_str());
    const GPTConfig c = config_from_descriptor(MODEL);
    std::vector<float> before(param_layout(c).total);
    gpt_init_params(c, SEED, before.data());
    const std::vector<float> after = read_model_file(checkpoint_model_path(out, 1)).params;
    const TrainingState state = read_training_state(checkpoint_state_path(out, 1, 0));
    CHECK(state.optimizer == OptimizerKind::MUON && state.adam_m.size() == before.size());
    const MuonLayout layout = muon_layout(c);
    CHECK(layout.matrices.size() == 6u * c.num_layers);  // q, k, v, attention projection, fc, fc projection
    const double mu = (float)k.momentum;
    for (const MuonMatrix& w : layout.matrices) {
        std::vector<double> p(w.size()), buffer(w.size(), 0.0), g(w.size()), got(w.size());
        for (size_t i = 0; i < w.size(); i++) {
            const size_t at = w.offset + i;
            p[i] = before[at], g[i] = state.adam_m[at] / (1 - mu), got[i] = after[at];
            CHECK_MSG(state.adam_v[at] == 0.0f, "v at Muon's element %zu is %g", at, state.adam_v[at]);
        }
        muon_reference::reference_muon(p.data(), buffer.data(), g.data(), w.rows, w.cols, k);
        const double error = tst::rel_l2_error(got.data(), p.data(), w.size());
        CHECK_MSG(error < 1e-5, "matrix at %zu (%d, %d): %g off the reference", w.offset, w.rows, w.cols, error);
    }
    double v_sum = 0;
    for (const AdamWTensor& t : layout.adamw)
        for (size_t i = 0; i < t.size; i++) v_sum += state.adam_v[t.offset + i];
    CHECK_MSG(v_sum > 0, "AdamW's tensors keep no second moment");
}
TEST(muon_first_step_matches_reference) { check_first_step(true); }
TEST(muon_first_step_without_nesterov) { check_first_step(false); }

// One batch of 32 random tokens: cross-entropy starts at ln(64) = 4.16.
TEST(muon_lowers_the_loss) {
    const std::string data = data_dir();
    std::string out;
    const int rc = run_trainer(run_flags(data, "-a 1 -x 30 -k constant -u 0 --optimizer muon --muon-lr 0.05 -l 0.01"),
                               &out);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out.c_str());
    const double loss = last_loss(out);
    if (getenv("SHOW_LOSS")) printf("  final loss: muon %g\n", loss);
    CHECK_MSG(loss < 3.0, "Muon's final loss %g", loss);
}

// The step lines' losses, in order.
static std::vector<std::string> loss_fields(const std::string& output) {
    std::vector<std::string> losses;
    for (size_t at = output.find("| loss "); at != std::string::npos; at = output.find("| loss ", at + 1))
        losses.push_back(output.substr(at, output.find(" |", at + 2) - at));
    return losses;
}

static std::string run_to(const std::string& data, const std::string& out, int steps, const std::string& flags) {
    return run_to_step(run_flags(data, flags), steps, out);
}

TEST(muon_resumes_bit_for_bit) {
    const std::string data = data_dir();
    const std::string flags = "--optimizer muon --muon-lr 0.03 -l 3e-3 -c 0.1 -u 2";
    const std::string straight = tst::make_temp_dir() + "/out", split = tst::make_temp_dir() + "/out";
    const std::vector<std::string> all = loss_fields(run_to(data, straight, 6, flags));
    std::vector<std::string> halves = loss_fields(run_to(data, split, 3, flags));
    const std::string resumed = run_to(data, split, 6, flags);
    CHECK_MSG(resumed.find("resumed from step 3") != std::string::npos, "%s", resumed.c_str());
    for (const std::string& loss : loss_fields(resumed)) halves.push_back(loss);
    CHECK_MSG(all.size() == 6 && halves == all, "losses differ: %zu and %zu step lines", all.size(), halves.size());
    for (const std::string& file : {std::string("/model_00000006.bin"), std::string("/state_00000006_00000.bin")})
        CHECK_MSG(read_all(straight + file) == read_all(split + file), "%s differs", file.c_str());
}

TEST(bad_muon_flags_fail_cleanly) {
    const std::string data = data_dir(), out = tst::make_temp_dir() + "/out";
    const std::string ok = run_flags(data, "-x 1 -o " + out);
    const std::string muon = ok + " --optimizer muon";
    fails_cleanly(muon + " --muon-lr 0", {"--muon-lr", "positive"}, out);
    fails_cleanly(muon + " --muon-lr -0.5", {"--muon-lr", "-0.5", "positive"}, out);
    fails_cleanly(muon + " --muon-lr x", {"--muon-lr", "'x'", "not a number"}, out);
    fails_cleanly(muon + " --muon-momentum 1", {"--muon-momentum", "[0, 1)"}, out);
    fails_cleanly(muon + " --muon-momentum -0.1", {"--muon-momentum", "-0.1"}, out);
    fails_cleanly(muon + " --muon-nesterov 2", {"--muon-nesterov", "2"}, out);
    fails_cleanly(muon + " --ns-steps 0", {"--ns-steps", "1..20"}, out);
    fails_cleanly(muon + " --ns-steps 21", {"--ns-steps", "21", "1..20"}, out);
    fails_cleanly(muon + " --ns-steps 2.5", {"--ns-steps", "'2.5'"}, out);
    fails_cleanly(ok + " --muon-lr 0.02", {"--muon-lr", "--optimizer adamw", "--optimizer muon"}, out);
    fails_cleanly(ok + " --optimizer lamb --muon-momentum 0.9", {"--muon-momentum", "--optimizer lamb"}, out);
    fails_cleanly(ok + " --optimizer lars --muon-nesterov 0", {"--muon-nesterov", "--optimizer lars"}, out);
    fails_cleanly(ok + " --ns-steps 5", {"--ns-steps", "--optimizer adamw"}, out);
    fails_cleanly(ok + " --optimizer sgd", {"--optimizer", "'sgd'", "adamw, lamb, lars, muon"}, out);
}

// GPT-2 124M planned, not allocated: AdamW's 8 bytes per parameter against Muon's 4 per element of its
// matrices (the momentum) and 8 for the rest.
TEST(dry_run_counts_muon_state) {
    const GPTConfig c = config_from_descriptor("d12");
    const MuonLayout layout = muon_layout(c);
    const double MiB = 1024.0 * 1024.0;
    const double adamw = 8.0 * param_layout(c).total / MiB;
    const double muon = (4.0 * layout.muon_elements + 8.0 * layout.adamw_elements) / MiB;
    const std::string data = data_dir();
    for (const char* optimizer : {"adamw", "muon"}) {
        std::string out;
        const int rc = run_trainer("-i " + data + "/train.bin -j " + data + "/val.bin -e d12 -b 1 -t 64 --dry-run 1 " +
                                       "--optimizer " + optimizer,
                                   &out);
        CHECK_MSG(rc == 0, "exit %d: %s", rc, out.c_str());
        const std::string expected =
            tst::format("optimizer state %.1f MiB", std::string(optimizer) == "muon" ? muon : adamw);
        CHECK_MSG(out.find(expected) != std::string::npos, "%s: no '%s' in %s", optimizer, expected.c_str(),
                  out.c_str());
    }
}

TEST(cuda_trainer_refuses_muon) {
    const char* bin = getenv("BIN");
    const std::string emulated = std::string(bin && *bin ? bin : ".") + "/train_gpt_emu";
    if (!tst::file_exists(emulated)) SKIP("no emulated CUDA trainer in $BIN");
    const std::string data = data_dir(), out = tst::make_temp_dir() + "/out";
    std::string output;
    const int rc = tst::run_command(emulated + " " + run_flags(data, "-x 1 --optimizer muon -o " + out), &output);
    CHECK_MSG(rc != 0 && output.find("error: --optimizer muon") != std::string::npos &&
                  output.find("train_gpt_cpu") != std::string::npos,
              "exit %d: %s", rc, output.c_str());
    CHECK_MSG(!tst::file_exists(out), "the refused run made its output folder");
}

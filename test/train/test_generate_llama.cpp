// End-to-end tests of ./generate on Llama 3 model files (generate_llama.cpp), written here at tiny
// shapes with random weights: the key/value cache gives the tokens that recomputing the prefix
// gives; the tokens drawn are those this test draws itself from llama_cpu_forward's logits with the
// same coins (greedy, and sampled with temperature and top-k); --prompt-tokens; a run folder whose
// newest checkpoint is a Llama 3 model file; --eval's loss equals the mean of llama_cpu_forward's
// over the same batches of a uint32 shard; text prompts and printing with Llama 3's tokenizer
// (<|begin_of_text|> first), where its vocabulary is here; a corrupt Llama model file and other bad
// input as one-line errors. The device: ./generate's choice of it (one line, as for GPT-2), and the
// GPU path through the emulator (build/generate_emu and build/generate_emu_fp32): in fp32 the CPU's
// text token for token; in bf16 each token one that the fp32 CPU decoder, given the same prefix and
// coin, could draw once rounding moves a logit or the coin (test/train/rounding_judge.h). The tests
// that compare with the CPU model ask ./generate for --device cpu, so that they hold on a machine
// with a GPU too.
#include <algorithm>
#include <cstdlib>
#include <random>

#include "base/decode_table.h"
#include "base/file_io.h"
#include "base/formats.h"
#include "base/llama_model_file.h"
#include "base/rng.h"
#include "cpu/llama_cpu.h"
#include "cpu/llama_decode.h"
#include "data/llama3_tokenizer.h"
#include "data/pinned_vocab.h"
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

// A tiny grouped-query Llama: 2 layers, 32 channels in 4 query heads on 2 key/value heads, an MLP
// of 48, a vocabulary of 64, maxT 16.
static LlamaConfig tiny_config() {
    LlamaConfig c;
    c.num_layers = 2, c.channels = 32, c.num_heads = 4, c.num_kv_heads = 2;
    c.ffn_channels = 48, c.vocab_size = 64, c.max_seq_len = 16;
    return c;
}

// Matrices normal with σ 0.3, so that the next-token distributions are peaked (logits of a few
// units) and sampling decides something; RMSNorm weights near 1.
static std::vector<float> random_weights(const LlamaConfig& c, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.3f);
    std::vector<float> w(llama_param_count(c));
    for (float& v : w) v = normal(rng);
    for (const LlamaTensor& t : llama_tensors(c))
        if (!t.is_matrix())
            for (size_t i = 0; i < t.size(); i++) w[t.offset + i] = 1.0f + 0.3f * w[t.offset + i];
    return w;
}

// A folder with the tiny model (fp32), a decode table whose token i is 'A' + i and whose EOT slot
// (the token samples start from) is 63, and a Llama 3 token shard of tokens below 64.
struct LlamaFiles {
    std::string dir, model, table, shard;
    LlamaConfig config;
    std::vector<float> weights;
    std::vector<uint32_t> shard_tokens;
};

static void write_llama_shard(const std::string& path, const std::vector<uint32_t>& tokens) {
    int32_t header[FILE_HEADER_INTS] = {0};
    header[0] = LLAMA3_TOKEN_SHARD_MAGIC;
    header[1] = LLAMA3_TOKEN_SHARD_VERSION;
    header[2] = (int32_t)tokens.size();
    FILE* f = fopen(path.c_str(), "wb");
    CHECK_MSG(f != nullptr, "cannot write %s", path.c_str());
    fwrite(header, sizeof header, 1, f);
    fwrite(tokens.data(), 4, tokens.size(), f);
    fclose(f);
}

static const LlamaFiles& files() {
    static LlamaFiles f;
    if (!f.dir.empty()) return f;
    f.dir = tst::make_temp_dir();
    f.config = tiny_config();
    f.weights = random_weights(f.config, 7);
    f.model = f.dir + "/llama.bin";
    write_llama_model_file(f.model, f.config, f.weights.data(), WeightType::FP32);
    DecodeTable table;
    for (int i = 0; i < 64; i++) table.token_bytes.push_back(std::string(1, (char)('A' + i)));
    table.eot_token = 63;
    f.table = f.dir + "/tokenizer.bin";
    write_decode_table(f.table, table);
    Rng rng(3);
    f.shard_tokens.resize(16 * 6 + 5);  // six batches of 2x8, and a few tokens over
    for (uint32_t& t : f.shard_tokens) t = (uint32_t)rng.below(64);
    f.shard = f.dir + "/llama_val.bin";
    write_llama_shard(f.shard, f.shard_tokens);
    return f;
}

// ./generate on the CPU (--device cpu, unless args name a device) with the test's decode table.
static int generate(const std::string& args, std::string* out) {
    const std::string device = has(args, "--device") ? "" : " --device cpu";
    return tst::run_command(bin("generate") + " --tokenizer " + files().table + device + " " + args, out);
}

// The text of sample `n` (1-based) in generate's output.
static std::string sample_text(const std::string& out, int n) {
    const std::string marker = "--- sample " + std::to_string(n) + " of ";
    size_t at = out.find(marker);
    if (at == std::string::npos) return "";
    at = out.find('\n', at) + 1;
    return out.substr(at, out.find('\n', at) - at);
}

static std::string device_line(const std::string& out) {
    const size_t at = out.find("device: ");
    return at == std::string::npos ? "" : out.substr(at, out.find('\n', at) - at);
}

// The tokens of a sample printed through the test's decode table (token i is 'A' + i).
static std::vector<int> tokens_of(const std::string& text) {
    std::vector<int> tokens;
    for (char ch : text) tokens.push_back((unsigned char)ch - 'A');
    return tokens;
}

// What ./generate should draw: starting from `start` then the prompt, each token drawn with
// sample_token_top_k from the last row of llama_cpu_forward over the window (the last maxT tokens)
// with the coins of generate's Rng stream for that sample. Returns the prompt and the drawn tokens.
static std::vector<int> reference_draws(const LlamaConfig& c, const std::vector<float>& weights,
                                        int start, const std::vector<int>& prompt, int gen_tokens,
                                        uint64_t seed, int sample, double temperature, int top_k) {
    LlamaCpu* model = llama_cpu_create(c, 1, c.max_seq_len);
    llama_cpu_params(model) = weights;
    Rng rng(seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)sample));
    std::vector<int> tokens = {start};
    tokens.insert(tokens.end(), prompt.begin(), prompt.end());
    for (int i = 0; i < gen_tokens; i++) {
        const int from = std::max(0, (int)tokens.size() - c.max_seq_len);
        const int length = (int)tokens.size() - from;
        llama_cpu_forward(model, tokens.data() + from, nullptr, 1, length);
        const float* row = llama_cpu_logits(model) + (size_t)(length - 1) * c.vocab_size;
        tokens.push_back(sample_token_top_k(row, c.vocab_size, temperature, top_k, rng.uniform()));
    }
    llama_cpu_free(model);
    return std::vector<int>(tokens.begin() + 1, tokens.end());
}

// The key/value cache gives the tokens that recomputing the prefix gives: several seeds,
// temperatures and top-k, within the window (maxT 16) and beyond it (40 tokens: the cache restarts
// as the window slides), with and without a prompt.
TEST(generate_llama_kv_cache_gives_the_same_tokens) {
    const std::string model = files().model;
    int compared = 0;
    for (const char* settings :
         {"--seed 1 -g 1", "--seed 2 --temperature 0.7 -g 9", "--seed 3 --top-k 5 -g 15",
          "--seed 4 --temperature 0 -g 40 --prompt-tokens 5,6,7",
          "--seed 5 --temperature 1.5 --top-k 20 -g 40", "--seed 6 -g 14 --prompt-tokens 9"}) {
        const std::string args = "-e " + model + " --samples 2 " + settings;
        std::string cached, recomputed;
        CHECK_MSG(generate(args, &cached) == 0, "%s", cached.c_str());
        CHECK_MSG(generate(args + " --kv-cache 0", &recomputed) == 0, "%s", recomputed.c_str());
        CHECK_MSG(device_line(cached) == "device: CPU, fp32 weights, key/value cache (--device cpu)", "%s",
                  cached.c_str());
        CHECK_MSG(device_line(recomputed) == "device: CPU, fp32 weights, recomputing the prefix (--device cpu)",
                  "%s", recomputed.c_str());
        for (int s = 1; s <= 2; s++)
            CHECK_MSG(!sample_text(cached, s).empty() && sample_text(cached, s) == sample_text(recomputed, s),
                      "%s, sample %d: '%s' with the cache, '%s' without", args.c_str(), s,
                      sample_text(cached, s).c_str(), sample_text(recomputed, s).c_str());
        CHECK(sample_text(cached, 1) != sample_text(cached, 2) || has(settings, "temperature 0"));
        compared += 2;
    }
    printf("  %d samples identical with and without the cache\n", compared);
}

// Every token is the one this test draws from llama_cpu_forward with generate's coins, greedy and
// sampled, with a prompt and past the window; the samples start from the table's EOT slot (63).
TEST(generate_llama_draws_from_the_models_logits) {
    const LlamaFiles& f = files();
    struct Case {
        uint64_t seed;
        double temperature;
        int top_k, gen_tokens;
        std::vector<int> prompt;
    };
    const std::vector<Case> cases = {{1, 0.0, 0, 12, {1, 2}}, {2, 1.0, 0, 20, {}},
                                     {3, 0.8, 5, 30, {4, 5, 6}}};
    for (const Case& k : cases) {
        std::string args = tst::format("-e %s --samples 2 --seed %llu --temperature %g --top-k %d -g %d",
                                       f.model.c_str(), (unsigned long long)k.seed, k.temperature,
                                       k.top_k, k.gen_tokens);
        for (size_t i = 0; i < k.prompt.size(); i++)
            args += (i ? "," : " --prompt-tokens ") + std::to_string(k.prompt[i]);
        std::string out;
        CHECK_MSG(generate(args, &out) == 0, "%s", out.c_str());
        for (int s = 1; s <= 2; s++) {
            const std::vector<int> expected = reference_draws(
                f.config, f.weights, 63, k.prompt, k.gen_tokens, k.seed, s, k.temperature, k.top_k);
            CHECK_MSG(tokens_of(sample_text(out, s)) == expected, "%s, sample %d: '%s'", args.c_str(),
                      s, sample_text(out, s).c_str());
        }
    }
}

TEST(generate_llama_continues_prompt_tokens) {
    const LlamaFiles& f = files();
    std::string out;
    CHECK_MSG(generate("-e " + f.model + " --prompt-tokens 1,2,3 -g 5", &out) == 0, "%s", out.c_str());
    const std::string text = sample_text(out, 1);
    CHECK_MSG(text.size() == 8 && text.rfind("BCD", 0) == 0, "%s", out.c_str());
    CHECK_MSG(has(out, "model: " + f.model + " (Llama 3: L=2 C=32 H=4 KV=2 F=48 V=64 maxT=16, fp32 "
                                              "weights), " +
                           std::to_string(f.weights.size()) + " parameters"),
              "%s", out.c_str());
}

// A run folder means its newest complete checkpoint, a Llama 3 model file as well as a GPT-2 one.
TEST(generate_llama_from_a_run_folder) {
    const LlamaFiles& f = files();
    const std::string run = f.dir + "/run";
    make_directory(run);
    for (long long step : {5, 10}) {
        const std::vector<float> w = random_weights(f.config, (unsigned)step);
        write_llama_model_file(checkpoint_model_path(run, step), f.config, w.data(), WeightType::BF16);
        write_all(checkpoint_state_path(run, step, 0), {0});
        mark_checkpoint_done(run, step);
    }
    std::string from_folder, from_file;
    CHECK_MSG(generate("-e " + run + " -g 6 --seed 2", &from_folder) == 0, "%s", from_folder.c_str());
    CHECK_MSG(has(from_folder, "model: " + checkpoint_model_path(run, 10) + " (Llama 3: ") &&
                  has(from_folder, "bf16 weights"),
              "%s", from_folder.c_str());
    CHECK(generate("-e " + checkpoint_model_path(run, 10) + " -g 6 --seed 2", &from_file) == 0);
    CHECK(sample_text(from_folder, 1).size() == 6 && sample_text(from_folder, 1) == sample_text(from_file, 1));
}

// The mean over the batches of llama_cpu_forward's loss, the batches cut as the data loader cuts
// them: batch i's inputs are tokens [i·B·T, (i+1)·B·T), its targets the same shifted by one.
static double reference_loss(const LlamaFiles& f, int B, int T, int batches) {
    LlamaCpu* model = llama_cpu_create(f.config, B, T);
    llama_cpu_params(model) = f.weights;
    double sum = 0;
    for (int i = 0; i < batches; i++) {
        std::vector<int> inputs(B * T), targets(B * T);
        for (int j = 0; j < B * T; j++) {
            inputs[j] = (int)f.shard_tokens[(size_t)i * B * T + j];
            targets[j] = (int)f.shard_tokens[(size_t)i * B * T + j + 1];
        }
        sum += llama_cpu_forward(model, inputs.data(), targets.data(), B, T);
    }
    llama_cpu_free(model);
    return sum / batches;
}

TEST(generate_llama_eval_matches_llama_cpu_forward) {
    const LlamaFiles& f = files();
    for (const auto& [flags, B, T, batches] : std::vector<std::tuple<std::string, int, int, int>>{
             {"-b 2 -t 8 -m 3", 2, 8, 3}, {"-b 2 -t 8", 2, 8, 6}, {"-b 1 -t 16", 1, 16, 6}}) {
        std::string out;
        CHECK_MSG(generate("-e " + f.model + " --eval " + f.shard + " " + flags, &out) == 0, "%s",
                  out.c_str());
        CHECK_MSG(device_line(out) == "device: CPU, fp32 weights (--device cpu)", "%s", out.c_str());
        const double expected = reference_loss(f, B, T, batches);
        const std::string line = tst::format("val loss %.4f (%d batches of %dx%d tokens from 1 shard)",
                                             expected, batches, B, T);
        CHECK_MSG(has(out, line), "expected '%s' in %s", line.c_str(), out.c_str());
        CHECK(expected > 1.0 && expected < 20.0);
    }
}

// Text through Llama 3's tokenizer (its vocabulary where data/prepare finds it): -p is encoded after
// <|begin_of_text|>, and without -p samples start from it; tokens print as the vocabulary's bytes.
// Checked greedily against llama_cpu_forward on a model with Llama 3's whole vocabulary.
TEST(generate_llama_text_through_llama3_tokenizer) {
    const std::string vocab = std::string(DEFAULT_LLAMA3_VOCAB_DIR) + "/data-converted.js";
    if (!path_exists(vocab)) SKIP("Llama 3's vocabulary is not here (scripts/install_deps.sh fetches it)");
    LlamaConfig c;
    c.num_layers = 1, c.channels = 8, c.num_heads = 2, c.num_kv_heads = 1;
    c.ffn_channels = 16, c.vocab_size = LLAMA3_VOCAB_SIZE, c.max_seq_len = 32;
    const std::vector<float> w = random_weights(c, 11);
    const std::string model = files().dir + "/llama_vocab.bin";
    write_llama_model_file(model, c, w.data(), WeightType::FP32);
    const Llama3Tokenizer tokenizer(load_pinned_llama3_vocab(DEFAULT_LLAMA3_VOCAB_DIR));
    const std::string prompt_text = "It is a truth";
    std::vector<int> prompt;
    for (uint32_t t : tokenizer.encode(prompt_text)) prompt.push_back((int)t);
    for (const bool with_prompt : {true, false}) {
        std::string out;
        const std::string args = bin("generate") + " --device cpu -e " + model + " -g 6 --temperature 0" +
                                 (with_prompt ? " -p '" + prompt_text + "'" : "");
        CHECK_MSG(tst::run_command(args, &out) == 0, "%s", out.c_str());
        const std::vector<int> p = with_prompt ? prompt : std::vector<int>();
        const std::vector<int> tokens = reference_draws(c, w, LLAMA3_BOS_TOKEN, p, 6, 42, 1, 0.0, 0);
        std::string expected;
        for (int t : tokens) expected += tokenizer.token_bytes(t);
        const size_t at = out.find("---\n") + 4;
        CHECK_MSG(out.compare(at, expected.size() + 1, expected + "\n") == 0,
                  "expected '%s' in %s", expected.c_str(), out.c_str());
        CHECK(!with_prompt || out.compare(at, prompt_text.size(), prompt_text) == 0);
    }
}

static void fails(const std::string& args, const std::vector<std::string>& words) {
    std::string out;
    CHECK_MSG(tst::run_command(bin("generate") + " " + args, &out) == 1, "exit status not 1 for %s: %s",
              args.c_str(), out.c_str());
    const size_t error = out.find("error: ");
    CHECK_MSG(error != std::string::npos && out.find('\n', error) == out.size() - 1, "%s", out.c_str());
    for (const std::string& w : words) CHECK_MSG(has(out, w), "'%s' lacks '%s'", out.c_str(), w.c_str());
}

TEST(generate_llama_bad_input_fails_with_one_line) {
    const LlamaFiles& f = files();
    const std::string with_table = "--tokenizer " + f.table + " -e " + f.model;
    // A corrupt model file: cut short, a header whose heads do not divide, a header cut off.
    std::vector<unsigned char> bytes = read_all(f.model);
    write_all(f.dir + "/short.bin", std::vector<unsigned char>(bytes.begin(), bytes.end() - 4));
    fails("-e " + f.dir + "/short.bin -g 2", {"-e (--model)", "short.bin"});
    std::vector<unsigned char> heads = bytes;
    heads[6 * 4] = 3;  // KV = 3 of H = 4
    write_all(f.dir + "/heads.bin", heads);
    fails("-e " + f.dir + "/heads.bin -g 2", {"-e (--model)", "heads.bin"});
    write_all(f.dir + "/header.bin", std::vector<unsigned char>(bytes.begin(), bytes.begin() + 100));
    fails("-e " + f.dir + "/header.bin -g 2", {"-e (--model)", "header.bin"});
    fails(with_table + " --prompt-tokens 1,64", {"--prompt-tokens", "token 64", "vocabulary of 64"});
    fails(with_table + " --eval " + f.shard + " -t 17", {"-t (--seq-len)", "16"});
    fails(with_table + " --eval " + f.dir + "/none_*.bin -t 8", {"--eval", "no file matches"});
    fails("-e " + f.model + " --vocab " + f.dir + " -g 2", {"--vocab", "data-converted.js"});
    fails("-e " + f.model + " --tokenizer " + f.shard + " -g 2", {"--tokenizer", "Llama 3 token shard"});
    // A shard token the model's vocabulary does not have.
    write_llama_shard(f.dir + "/big.bin", std::vector<uint32_t>(40, 64));
    fails(with_table + " --eval " + f.dir + "/big.bin -b 1 -t 8", {"--eval", "big.bin", "64"});
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

// Runs an emulated build with the test's decode table. One OpenMP thread: a tiny model gains nothing
// from more, and the emulator's barriers would spin against whatever else shares the cores.
static int run_emulated(const std::string& program, const std::string& args, std::string* out) {
    return tst::run_command("OMP_NUM_THREADS=1 " + program + " --tokenizer " + files().table + " " + args, out);
}

// A model the GPU decoder does not take (an MLP width of 20, not a multiple of 8), which the CPU runs.
static std::string odd_shape_model() {
    const std::string path = files().dir + "/odd_shape.bin";
    if (path_exists(path)) return path;
    LlamaConfig c = tiny_config();
    c.ffn_channels = 20;
    const std::vector<float> w = random_weights(c, 5);
    write_llama_model_file(path, c, w.data(), WeightType::FP32);
    return path;
}

// auto: the GPU where this build has CUDA and the machine a device, else the CPU, saying why; --device
// gpu there gives the same line, and without a device it is an error of one line.
TEST(generate_llama_says_which_device_it_runs_on) {
    const std::string model = " -e " + files().model + " -g 4";
    std::string out, gpu;
    CHECK_MSG(generate(model + " --device auto", &out) == 0, "%s", out.c_str());
    const std::string line = device_line(out);
    const int rc = generate(model + " --device gpu", &gpu);
    if (has(line, "device: GPU (")) {
        CHECK_MSG(rc == 0 && device_line(gpu) == line, "%s", gpu.c_str());
    } else {
        CHECK_MSG(has(line, "device: CPU, fp32 weights, key/value cache (no CUDA device: ") ||
                      line == "device: CPU, fp32 weights, key/value cache (built without CUDA)",
                  "%s", out.c_str());
        CHECK_MSG(rc == 1 && has(gpu, "error: --device gpu: ") &&
                      gpu.find('\n', gpu.find("error: ")) == gpu.size() - 1,
                  "%s", gpu.c_str());
    }
    // With what only the CPU does: an error naming --device gpu (or, built without CUDA, that first).
    fails("-e " + files().model + " --device gpu --kv-cache 0", {"--device gpu"});
    fails("-e " + files().model + " --device gpu --eval " + files().shard, {"--device gpu"});
}

// The emulated GPU build: auto finds its device; the CPU where --kv-cache 0 or --eval ask for it or
// the GPU decoder does not take the model's shape, giving the CPU's text and loss; --device gpu with
// any of these is an error naming the reason.
TEST(generate_llama_emulated_gpu_device_and_flags) {
    const std::string program = emulated(false);
    if (program.empty()) SKIP("build/generate_emu was not built (no CUDA headers)");
    const std::string model = " -e " + files().model;
    std::string out, cpu;
    CHECK_MSG(run_emulated(program, model + " -g 6", &out) == 0, "%s", out.c_str());
    CHECK_MSG(has(device_line(out), "device: GPU (emulated CUDA device") &&
                  has(device_line(out), "), bf16 weights, key/value cache"),
              "%s", out.c_str());
    CHECK(sample_text(out, 1).size() == 6);
    CHECK_MSG(run_emulated(program, model + " -g 6 --kv-cache 0 --seed 9", &out) == 0, "%s", out.c_str());
    CHECK_MSG(device_line(out) == "device: CPU, fp32 weights, recomputing the prefix (--kv-cache 0 recomputes on "
                                  "the CPU)",
              "%s", out.c_str());
    CHECK(generate(model + " -g 6 --seed 9", &cpu) == 0);
    CHECK(sample_text(out, 1).size() == 6 && sample_text(out, 1) == sample_text(cpu, 1));
    const std::string eval = model + " --eval " + files().shard + " -b 2 -t 8 -m 2";
    CHECK_MSG(run_emulated(program, eval, &out) == 0, "%s", out.c_str());
    CHECK_MSG(device_line(out) == "device: CPU, fp32 weights (--eval runs on the CPU)", "%s", out.c_str());
    CHECK(generate(eval, &cpu) == 0);
    CHECK(has(out, "val loss ") && out.substr(out.find("val loss")) == cpu.substr(cpu.find("val loss")));
    const std::string odd = " -e " + odd_shape_model() + " -g 3";
    CHECK_MSG(run_emulated(program, odd, &out) == 0, "%s", out.c_str());
    CHECK_MSG(device_line(out) == "device: CPU, fp32 weights, key/value cache (the GPU decoder cannot run this "
                                  "Llama 3 shape: C, H*hs, (H+2*KV)*hs and F must be multiples of 8)",
              "%s", out.c_str());
    CHECK(sample_text(out, 1).size() == 3);
    for (const auto& [args, error] : std::vector<std::pair<std::string, std::string>>{
             {odd + " --device gpu", "error: --device gpu: the GPU decoder cannot run this Llama 3 shape"},
             {model + " --device gpu --kv-cache 0", "error: --device gpu with --kv-cache 0: "},
             {model + " --device gpu --eval " + files().shard, "error: --device gpu with --eval: "}})
        CHECK_MSG(run_emulated(program, args, &out) == 1 && has(out, error) &&
                      out.find('\n', out.find("error: ")) == out.size() - 1,
                  "%s: %s", args.c_str(), out.c_str());
}

// Settings the GPU and CPU paths are compared at: several seeds, temperatures and top-k; prompts;
// lengths within the window (maxT 16) and beyond it (the cache restarts as it slides).
static const std::vector<std::string>& compared_settings() {
    static const std::vector<std::string> settings = {
        "--seed 1 -g 15", "--seed 2 --temperature 0.7 -g 9", "--seed 3 --top-k 5 -g 40 --prompt-tokens 5,6,7",
        "--seed 4 --temperature 0 -g 40", "--seed 5 --temperature 1.5 --top-k 20 -g 15 --prompt-tokens 9"};
    return settings;
}

// fp32 through the emulator: the GPU's text is the CPU's, token for token (its logits are the CPU
// decoder's to 1e-5: test/gpu/test_gpu_llama_decode.cu).
TEST(generate_llama_emulated_gpu_fp32_gives_the_cpu_text) {
    const std::string program = emulated(true);
    if (program.empty()) SKIP("generate_emu_fp32 is not built here (no CUDA headers, or the sanitized build: bf16 only)");
    int compared = 0;
    for (const std::string& settings : compared_settings()) {
        const std::string args = "-e " + files().model + " --samples 2 " + settings;
        std::string gpu, cpu;
        CHECK_MSG(run_emulated(program, args + " --device gpu", &gpu) == 0, "%s", gpu.c_str());
        CHECK_MSG(has(device_line(gpu), "), fp32 weights, key/value cache"), "%s", gpu.c_str());
        CHECK_MSG(generate(args, &cpu) == 0, "%s", cpu.c_str());
        for (int s = 1; s <= 2; s++)
            CHECK_MSG(!sample_text(gpu, s).empty() && sample_text(gpu, s) == sample_text(cpu, s),
                      "%s: '%s' on the GPU, '%s' on the CPU", args.c_str(), sample_text(gpu, s).c_str(),
                      sample_text(cpu, s).c_str());
        compared += 2;
    }
    printf("  %d samples identical on the emulated GPU (fp32) and the CPU\n", compared);
}

// The fp32 CPU Llama decoder's logits after a window of tokens (a fresh cache for each).
static WindowLogits cpu_window_logits(const LlamaConfig& c, const std::vector<float>& weights) {
    return [&c, &weights](const std::vector<int>& window, float* logits) {
        LlamaDecoder* decoder = llama_decoder_create(c, (int)window.size());
        for (int token : window) llama_decoder_step(decoder, weights.data(), token, logits);
        llama_decoder_free(decoder);
    };
}

// bf16 through the emulator: each GPU token one the fp32 CPU decoder, on the GPU's own prefix and with
// the same coin, could draw once rounding moves a logit or the coin (test/train/rounding_judge.h);
// greedy decoding (temperature 0) among the cases. Such draws stay rare: at most one in ten
// (measured: 41 of 556). Both an fp32 model file (its weights rounded on upload) and a bf16 one (held exactly).
TEST(generate_llama_emulated_gpu_bf16_differs_only_where_rounding_decides) {
    const std::string program = emulated(false);
    if (program.empty()) SKIP("build/generate_emu was not built (no CUDA headers)");
    struct Case {
        uint64_t seed;
        double temperature;
        int top_k, gen_tokens;
        std::vector<int> prompt;
    };
    const std::vector<Case> cases = {{1, 1.0, 0, 15, {}}, {2, 0.7, 0, 9, {}},   {3, 1.0, 5, 40, {5, 6, 7}},
                                     {4, 0.0, 0, 40, {}}, {5, 1.5, 20, 15, {9}}, {6, 0.0, 0, 20, {1, 2}}};
    const std::string bf16_model = files().dir + "/llama_bf16.bin";
    write_llama_model_file(bf16_model, files().config, files().weights.data(), WeightType::BF16);
    Judged judged;
    int identical = 0, samples = 0;
    for (const std::string& path : {files().model, bf16_model}) {
        const LlamaModelFile model = read_llama_model_file(path);
        for (const Case& k : cases) {
            std::string args = tst::format("-e %s --samples 2 --seed %llu --temperature %g --top-k %d -g %d",
                                           path.c_str(), (unsigned long long)k.seed, k.temperature, k.top_k,
                                           k.gen_tokens);
            for (size_t i = 0; i < k.prompt.size(); i++)
                args += (i ? "," : " --prompt-tokens ") + std::to_string(k.prompt[i]);
            std::string gpu;
            CHECK_MSG(run_emulated(program, args + " --device gpu", &gpu) == 0, "%s", gpu.c_str());
            CHECK_MSG(has(device_line(gpu), "bf16 weights"), "%s", gpu.c_str());
            for (int s = 1; s <= 2; s++) {
                const int differed = judged.differ;
                judge_sample(args, cpu_window_logits(model.config, model.params), model.config.vocab_size,
                             model.config.max_seq_len, 63, sample_text(gpu, s), k.prompt, k.gen_tokens, k.seed,
                             s, k.temperature, k.top_k, &judged);
                identical += judged.differ == differed;
                samples++;
            }
        }
    }
    printf("  %d draws on the emulated GPU (bf16): %d differ from the fp32 CPU model's on the same prefix, "
           "%d of them not near a tie or a boundary; %d of %d samples identical to the CPU's\n",
           judged.draws, judged.differ, judged.unexplained, identical, samples);
    CHECK_MSG(judged.unexplained == 0, "%d draws not explained by rounding, the first %s", judged.unexplained,
              judged.first.c_str());
    CHECK_MSG(judged.differ * 10 <= judged.draws, "%d of %d draws differ", judged.differ, judged.draws);
}

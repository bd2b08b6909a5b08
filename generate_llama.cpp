// ./generate for Llama 3 model files (base/llama_model_file.h): samples through a key/value cache,
// on the GPU where ./generate finds one (--device auto, the default; gpu/llama_gpu_generate.h: the
// weights uploaded once in bf16, or fp32 in a build with -DENABLE_FP32, and LlamaGPUDecoder over
// them, reached through generate.h's llama_gpu_* from generate.cpp, which nvcc or the emulator
// builds) or on the fp32 CPU Llama model (cpu/llama_decode.h), with the same device choice and
// --device cpu|gpu as GPT-2 (generate.h's choose_device); or, with --kv-cache 0, by recomputing the
// window with the CPU model's full forward pass (cpu/llama_cpu.h) at every token, which gives the
// CPU cache's tokens; and --eval's validation loss with the full forward pass, on the CPU. On the
// GPU the text is the CPU's where bf16 rounding does not decide a draw (every token, in the fp32
// build). Prompts are encoded with Llama 3's tokenizer after <|begin_of_text|>, and tokens are printed
// with its vocabulary (or a decode table given by --tokenizer). The sampling and evaluation loops
// are GPT-2's (generate.h).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "base/decode_table.h"
#include "base/errors.h"
#include "base/formats.h"
#include "base/llama_descriptor.h"
#include "base/llama_model_file.h"
#include "base/repository.h"
#include "cpu/llama_cpu.h"
#include "cpu/llama_decode.h"
#include "data/llama3_tokenizer.h"
#include "data/pinned_vocab.h"
#include "generate.h"
#include "train/cached_sampling.h"
#include "train/memory_check.h"

// Fails with one line unless `bytes` fit in the memory the machine can give (MemAvailable, or the
// container's limit), as the GPT-2 path's check does.
// what: what the model needs memory for besides its weights; lower: what else to lower.
static void check_fits(uint64_t bytes, const char* what, const char* lower) {
    const AvailableMemory available = available_host_memory();
    if (available.bytes == 0 || bytes <= available.bytes) return;
    const double gib = 1024.0 * 1024 * 1024;
    fail("-e (--model): the model and %s need about %.1f GiB of memory but the machine has %.1f GiB "
         "available (%s): use a smaller model, or %s",
         what, bytes / gib, available.bytes / gib, available.source.c_str(), lower);
}

// About what llama_cpu_create(config, B, T) allocates (cpu/llama_model.h): the parameters, their
// gradients and AdamW's two moments, and for the N = B·T positions each layer's activations and
// attention probabilities (B, H, T, T), the logits and their gradient, and the backward's scratch.
static uint64_t llama_cpu_bytes(const LlamaConfig& c, int B, int T) {
    const uint64_t N = (uint64_t)B * T, C = c.channels, hs = c.head_size(), F = c.ffn_channels;
    const uint64_t Cq = c.num_heads * hs, Ckv = c.num_kv_heads * hs, V = c.vocab_size;
    const uint64_t layer = N * (4 * C + 2 + 2 * Cq + 2 * Ckv + 3 * F) + (uint64_t)B * c.num_heads * T * T;
    const uint64_t rest = N * (5 * C + 3 + 2 * V + 3 * Cq + 3 * Ckv + 3 * F);
    return sizeof(float) * (4 * llama_param_count(c) + c.num_layers * layer + rest);
}

// The CPU model for B x T with the file's weights, after checking that it fits beside them.
static std::shared_ptr<LlamaCpu> load_llama_model(const LlamaModelFile& file, int B, int T,
                                                  const char* what, const char* lower) {
    check_fits(file.params.size() * sizeof(float) + llama_cpu_bytes(file.config, B, T), what, lower);
    std::shared_ptr<LlamaCpu> model(llama_cpu_create(file.config, B, T), llama_cpu_free);
    llama_cpu_params(model.get()) = file.params;
    return model;
}

// Next-token logits through the key/value cache (on the GPU or the CPU), or by a full forward pass
// over the window (the last T tokens, positions from 0) with --kv-cache 0: on the CPU, the same
// logits to rounding, the same tokens.
static NextLogits llama_next_logits(const LlamaModelFile& file, int T, bool kv_cache, Device device) {
    const LlamaConfig& c = file.config;
    const float* params = file.params.data();
    if (device == Device::GPU) return llama_gpu_next_logits(file, T);
    if (kv_cache) {
        check_fits(file.params.size() * sizeof(float) + llama_decoder_bytes(c, T),
                   "its key/value cache", "generate fewer tokens (-g)");
        const std::shared_ptr<LlamaDecoder> decoder(llama_decoder_create(c, T), llama_decoder_free);
        const auto cached = std::make_shared<CachedSampler>(
            T, [decoder] { llama_decoder_truncate(decoder.get(), 0); },
            [decoder, params](int token, float* logits) {
                llama_decoder_step(decoder.get(), params, token, logits);
            });
        return [cached](const std::vector<int>& tokens, float* logits) {
            cached->next_logits(tokens, logits);
        };
    }
    const std::shared_ptr<LlamaCpu> model = load_llama_model(file, 1, T, "the recomputation of the prefix",
                                                             "generate fewer tokens (-g)");
    const int V = c.vocab_size;
    return [model, T, V](const std::vector<int>& tokens, float* logits) {
        const int start = std::max(0, (int)tokens.size() - T), length = (int)tokens.size() - start;
        llama_cpu_forward(model.get(), tokens.data() + start, nullptr, 1, length);
        const float* row = llama_cpu_logits(model.get()) + (size_t)(length - 1) * V;
        std::copy(row, row + V, logits);
    };
}

// Llama 3's text side: the tokenizer (its vocabulary from --vocab, by default where data/prepare
// finds it) for -p and for printing, or a decode table (--tokenizer) for printing. Samples start
// from <|begin_of_text|>, or from the table's EOT slot, the token that starts each document.
class LlamaText {
public:
    explicit LlamaText(const Options& o) {
        if (o.tokenizer_given)
            table_ = std::make_unique<DecodeTable>(with_flag("--tokenizer", [&] {
                return read_decode_table(locate_default_path(o.tokenizer));
            }));
        if (o.prompt.empty() && table_) return;  // the vocabulary is not needed
        const std::string dir = locate_default_path(o.vocab_given ? o.vocab : DEFAULT_LLAMA3_VOCAB_DIR);
        tokenizer_ = std::make_unique<Llama3Tokenizer>(
            with_flag("--vocab", [&] { return load_pinned_llama3_vocab(dir); }));
    }
    int start_token() const { return table_ ? table_->eot_token : LLAMA3_BOS_TOKEN; }
    std::vector<int> encode(const std::string& text) const {
        const std::vector<uint32_t> tokens = tokenizer_->encode(text);
        return std::vector<int>(tokens.begin(), tokens.end());
    }
    // A token's bytes; "" for one outside the table or the vocabulary.
    std::string decode(int token) const {
        if (table_) return table_->decode(token);
        return token >= 0 && token < tokenizer_->vocab_size() ? tokenizer_->token_bytes(token) : "";
    }

private:
    std::unique_ptr<DecodeTable> table_;
    std::unique_ptr<Llama3Tokenizer> tokenizer_;
};

static int sample_llama(const Options& o, const LlamaModelFile& file, Device device) {
    const LlamaConfig& c = file.config;
    const LlamaText text(o);
    std::vector<int> prompt = prompt_token_ids(o);
    if (!o.prompt.empty()) prompt = text.encode(o.prompt);
    check_prompt_tokens(o, prompt, c.vocab_size);
    // A model whose vocabulary lacks the start token (a small test model) starts from its last one.
    const int start = text.start_token() < c.vocab_size ? text.start_token() : c.vocab_size - 1;
    note_prompt_cut(prompt.size(), c.max_seq_len);
    const int T = (int)std::min<long>(c.max_seq_len, (long)prompt.size() + 1 + o.gen_tokens);
    print_samples(o, c.vocab_size, start, prompt, llama_next_logits(file, T, o.kv_cache, device),
                  [&](int token) { return text.decode(token); });
    return 0;
}

static int evaluate_llama(const Options& o, const LlamaModelFile& file) {
    EvalData data = open_eval_data(o, file.config.vocab_size, file.config.max_seq_len);
    const std::shared_ptr<LlamaCpu> model = load_llama_model(file, data.B, data.T, "a batch's activations",
                                                              "lower -b or -t");
    print_eval(data, [&](const int* inputs, const int* targets) {
        return llama_cpu_forward(model.get(), inputs, targets, data.B, data.T);
    });
    return 0;
}

int generate_llama(const Options& o, const std::string& path) {
    const LlamaModelFile file = with_flag("-e (--model)", [&] { return read_llama_model_file(path); });
    printf("model: %s (Llama 3: %s, %s weights), %zu parameters\n", path.c_str(),
           describe_llama_config(file.config).c_str(), file.type == WeightType::BF16 ? "bf16" : "fp32",
           file.params.size());
    const Device device = choose_device(o, llama_gpu_shape_error(file.config));
    fflush(stdout);
    return o.eval.empty() ? sample_llama(o, file, device) : evaluate_llama(o, file);
}

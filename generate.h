// What ./generate's two model families share: its options, the choice of device, and the loops that
// draw samples and measure the validation loss, given a model's next-token logits or a batch's loss as
// functions. generate.cpp runs GPT-2 model files and dispatches Llama 3 model files to
// generate_llama.cpp, both on the GPU or the CPU. generate_llama.cpp is built once, by the host
// compiler: what it needs of the GPU (llama_gpu_*) comes from generate.cpp, which is built by nvcc,
// through the emulator, or without CUDA.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "base/llama_config.h"
#include "data/pinned_vocab.h"
#include "train/dataloader.h"

struct Options {
    std::string model, prompt, prompt_tokens, tokenizer = "data/gpt2_tokenizer.bin";
    std::string vocab = DEFAULT_VOCAB_DIR, eval, device = "auto";
    long gen_tokens = 64, top_k = 0, samples = 1, batch_size = 4, seq_len = 64, val_batches = 0;
    double temperature = 1.0;
    unsigned long long seed = 42;
    bool prompt_given = false, kv_cache = true;
    bool tokenizer_given = false, vocab_given = false;  // --tokenizer, --vocab on the command line
};

// --prompt-tokens' ids as given (empty without the flag); fails on anything but whole numbers.
std::vector<int> prompt_token_ids(const Options& o);
// Fails (naming -p or --prompt-tokens) when a prompt token is not below the model's vocabulary.
void check_prompt_tokens(const Options& o, const std::vector<int>& tokens, int vocab_size);

// Where the model runs: the GPU for --device gpu (or a one-line error), and for auto when this build
// has CUDA, finds a device, the work is generation through the cache and the GPU decoder takes the
// model's shape (gpu_shape_error, why it cannot, is empty); else the CPU. Prints the one line that
// says which ("device: GPU (name), bf16 weights, key/value cache", or
// "device: CPU, fp32 weights[, how it generates] (why)").
enum class Device { CPU, GPU };
Device choose_device(const Options& o, const std::string& gpu_shape_error);

// The model's logits over its vocabulary for the token after tokens (non-empty).
using NextLogits = std::function<void(const std::vector<int>& tokens, float* logits)>;

// Llama 3 on the GPU (generate.cpp; gpu/llama_gpu_generate.h): why the GPU decoder cannot run this
// shape ("" when it can, or when this build has no CUDA), and the next-token logits through it, for
// windows of up to T tokens (only in a build with CUDA, after choose_device said GPU).
struct LlamaModelFile;
std::string llama_gpu_shape_error(const LlamaConfig& config);
NextLogits llama_gpu_next_logits(const LlamaModelFile& file, int T);

// Prints one note line when the start token and the prompt are more than the model's context of
// max_seq_len tokens: the model sees only the last max_seq_len of them, so the first are left out.
void note_prompt_cut(size_t prompt_tokens, int max_seq_len);

// Draws and prints o.samples samples of o.gen_tokens tokens each: every sample starts from
// start_token then the prompt, and draws each next token from next_logits with o's temperature and
// top-k, one Rng stream per sample (so sample 3 is the same whatever --samples says). decode gives
// a token's bytes; the prompt's are printed before the sample's.
void print_samples(const Options& o, int vocab_size, int start_token, const std::vector<int>& prompt,
                   const NextLogits& next_logits, const std::function<std::string(int)>& decode);

// --eval's token shards, read in B x T batches (-b, -t), after checking T against the model's maxT.
struct EvalData {
    int B, T;
    long batches;  // -m, or every batch of the shards
    DataLoader loader;
};
EvalData open_eval_data(const Options& o, int vocab_size, int max_seq_len);
// Prints "val loss X (N batches of BxT tokens from K shards)": the mean of batch_loss over the
// batches, batch_loss(inputs, targets) being the model's mean loss on one batch.
void print_eval(EvalData& data, const std::function<float(const int*, const int*)>& batch_loss);

// ./generate for a Llama 3 model file (generate_llama.cpp): samples (on the GPU or the CPU) or --eval
// (on the CPU model).
int generate_llama(const Options& o, const std::string& path);

// Command-line flags shared by every trainer (GUIDE §3): llm.c's short flags, a readable long name
// for each (--name VALUE or --name=VALUE), and --help (-h alone; -h VALUE is llm.c's HellaSwag flag). Every value is checked: a malformed
// number, a value out of range, an unknown flag or an impossible combination is an InputError whose
// one line names the flag and the problem.
#pragma once
#include <cstdint>
#include <string>

#include "host/gpt_config.h"
#include "host/lr_schedule.h"

struct TrainOptions {
    // data, model, output
    std::string train_data = "data/janeausten/janeausten_train.bin";  // -i glob
    std::string val_data = "data/janeausten/janeausten_val.bin";      // -j glob
    std::string model = "d12";                                        // -e descriptor or model file
    std::string output_dir;                                           // -o ("" = write nothing)
    std::string tokenizer = "data/gpt2_tokenizer.bin";                // decode table for samples
    int checkpoint_every = 0;  // -n (0 = only at the end of the run, when -o is given)
    int checkpoints_keep = 0;  // -nk (0 = keep all)
    int resume = 0;            // -y
    // batch
    int batch_size = 4;          // -b
    int seq_len = 64;            // -t
    long long total_batch = -1;  // -d tokens per step (-1 = B·T·ranks: no accumulation)
    int max_steps = -1;          // -x (-1 = one epoch of the training data)
    int stop_at = 0;             // --stop-at: end the run after this step (0 = run to -x)
    // optimisation
    ScheduleKind schedule = ScheduleKind::COSINE;  // -k
    double learning_rate = 3e-4;                   // -l
    int warmup_steps = 0;                          // -u
    double final_lr_fraction = 1.0;                // -q
    double weight_decay = 0.0;                     // -c
    double skip_loss_z = 0.0;                      // -sl (0 = off)
    double skip_norm_z = 0.0;                      // -sg (0 = off)
    // evaluation and sampling
    int val_every = 20;            // -v (0 = never)
    int val_batches = 20;          // -m
    int sample_every = 20;         // -s (0 = never)
    int gen_tokens = 64;           // -g
    int overfit_single_batch = 0;  // -a
    int hellaswag = 0;             // -h (llm.c's HellaSwag evaluation; --help shows the help)
    // data order and initialisation
    uint64_t seed = 42;  // --seed: weights, shuffling, sampling
    int shuffle = 0;     // --shuffle: shuffled (1) or sequential (0) data order
    // CUDA trainer only
    int zero_stage = 0;    // -z
    int recompute = 1;     // -r
    int tf32 = 1;          // -f
    int fp32_master = -1;  // -w (-1 = the trainer decides)
};

enum class FlagsResult { RUN, HELP_SHOWN };

// Parses argv over the defaults already in *options. Prints the help to stdout and returns
// HELP_SHOWN for -h/--help; throws InputError for anything invalid in a single flag.
FlagsResult parse_train_flags(int argc, const char* const* argv, TrainOptions* options);

// The help text (flags, long names, meaning, current defaults).
std::string train_flags_help(const char* program, const TrainOptions& defaults);

// Checks combinations once the model is known and fills in derived values (total_batch = B·T·ranks
// when -1). Throws InputError naming the flags, e.g. "-d 1000 is not a multiple of B·T·ranks =
// 256".
void validate_train_options(TrainOptions* options, const GPTConfig& config, int num_ranks);

// Gradient-accumulation micro-steps per step: total_batch / (B·T·ranks), after validation.
int grad_accum_steps(const TrainOptions& options, int num_ranks);

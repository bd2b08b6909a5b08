// Flag parsing and validation (see train_flags.h). One table lists every flag: its short and long
// names, where its value goes, its allowed range and its help line; parsing, checking and --help
// all read that table.
#include "train/train_flags.h"

#include "train/lr_schedule.h"
#include "train/optimizer_choice.h"
#include "parallel/plan/compression_cost.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include "base/errors.h"

namespace {

enum class Kind { INT, LONG, DOUBLE, STRING, U64, SCHEDULE };

struct Flag {
    const char* short_name;  // "-b"
    const char* long_name;   // "--batch-size"
    Kind kind;
    void* target;     // the TrainOptions field it sets
    double min, max;  // allowed range for numbers (inclusive)
    const char* help;
};

const double BIG = 1e18;

// The table, pointing into one TrainOptions.
std::vector<Flag> flag_table(TrainOptions& o) {
#define FIELD(name) (void*)&o.name
    return {
        {"-i", "--train-data", Kind::STRING, FIELD(train_data), 0, 0,
         "training token shards (glob)"},
        {"-j", "--val-data", Kind::STRING, FIELD(val_data), 0, 0, "validation token shards (glob)"},
        {"-e", "--model", Kind::STRING, FIELD(model), 0, 0,
         "model file (llm.c .bin) or descriptor: d12 d24 d36 d48, gpt2:dN, gpt3:cN, "
         "custom:L2:C128:H4 (L layers, C channels, H heads; optional :V vocab, :T max length)"},
        {"-o", "--output-dir", Kind::STRING, FIELD(output_dir), 0, 0,
         "output folder for checkpoints and metrics.jsonl (empty: write nothing)"},
        {"-n", "--checkpoint-every", Kind::INT, FIELD(checkpoint_every), 0, INT_MAX,
         "checkpoint every N steps (0: only at the end; needs -o)"},
        {"-nk", "--checkpoints-keep", Kind::INT, FIELD(checkpoints_keep), 0, INT_MAX,
         "keep only the newest N checkpoints (0: keep all)"},
        {"-nm", "--major-checkpoint-every", Kind::INT, FIELD(major_checkpoint_every), 0, INT_MAX,
         "checkpoints at multiples of N steps are never pruned by -nk (0: none)"},
        {"", "--checkpoint-async", Kind::INT, FIELD(checkpoint_async), 0, 1,
         "1: checkpoints are written by a background thread while training goes on; 0: the loop waits"},
        {"", "--snapshot-every", Kind::INT, FIELD(snapshot_every), 0, INT_MAX,
         "keep the training state in node memory every N steps, with a copy on the next rank, for a "
         "restart that loses at most N steps (0: none; needs -o)"},
        {"", "--snapshot-dir", Kind::STRING, FIELD(snapshot_dir), 0, 0,
         "the folder of node-local memory in which the run makes its snapshot folder, gpt_snapshots_<hash of -o> (empty: /dev/shm)"},
        {"-y", "--resume", Kind::INT, FIELD(resume), 0, 1,
         "1: resume from the newest complete checkpoint in -o (or start afresh if none); "
         "0: -o must not hold another run"},
        {"", "--accept-changes", Kind::INT, FIELD(accept_changes), 0, 1,
         "1: resume even though -x -l -k -u -q -c -sl -sg -i -a -f -w, the optimizer's constants or "
         "the learning rate's scaling differ from the saved run's (they bend it)"},
        {"-b", "--batch-size", Kind::INT, FIELD(batch_size), 1, 1 << 20,
         "micro-batch size B (sequences)"},
        {"-t", "--seq-len", Kind::INT, FIELD(seq_len), 1, 1 << 20, "sequence length T (tokens)"},
        {"-d", "--total-batch", Kind::LONG, FIELD(total_batch), -1, BIG,
         "tokens per step; a multiple of B*T*ranks sets gradient accumulation (-1: B*T*ranks)"},
        {"-x", "--max-steps", Kind::INT, FIELD(max_steps), -1, INT_MAX,
         "training steps (-1: one epoch of the training data)"},
        {"", "--stop-at", Kind::INT, FIELD(stop_at), 0, INT_MAX,
         "end the run after this step without changing the schedule (0: run all -x steps)"},
        {"-k", "--lr-schedule", Kind::SCHEDULE, FIELD(schedule), 0, 0,
         "learning-rate schedule: cosine, linear, constant, wsd"},
        {"-l", "--learning-rate", Kind::DOUBLE, FIELD(learning_rate), 0, 10, "peak learning rate"},
        {"-u", "--warmup-steps", Kind::INT, FIELD(warmup_steps), 0, INT_MAX, "linear warmup steps"},
        {"-q", "--final-lr-fraction", Kind::DOUBLE, FIELD(final_lr_fraction), 0, 1,
         "final learning rate as a fraction of the peak"},
        {"-c", "--weight-decay", Kind::DOUBLE, FIELD(weight_decay), 0, 10,
         "weight decay (2-D weights only): decoupled in AdamW and Muon; part of the step LAMB and LARS rescale"},
        {"", "--optimizer", Kind::STRING, FIELD(optimizer), 0, 0,
         "adamw; lamb or lars for large global batches: each tensor's update rescaled to its weights' "
         "norm; muon: the blocks' weight matrices by Muon (train_gpt_cpu only), the rest by AdamW"},
        {"", "--beta1", Kind::DOUBLE, FIELD(beta1), -1, 1,
         "AdamW and LAMB: the first moment's decay in [0, 1) (-1: 0.9)"},
        {"", "--beta2", Kind::DOUBLE, FIELD(beta2), -1, 1,
         "AdamW and LAMB: the second moment's decay in [0, 1) (-1: AdamW 0.95, LAMB 0.999)"},
        {"", "--eps", Kind::DOUBLE, FIELD(eps), -1, 1,
         "AdamW and LAMB: added to the root of the second moment, > 0 (-1: AdamW 1e-8, LAMB 1e-6)"},
        {"", "--momentum", Kind::DOUBLE, FIELD(momentum), 0, 1, "LARS: the momentum mu, in [0, 1)"},
        {"", "--trust-coefficient", Kind::DOUBLE, FIELD(trust_coefficient), 0, 1e6,
         "LARS: eta in its ratio eta * |p| / |g|, > 0"},
        {"", "--layer-adaptation", Kind::STRING, FIELD(layer_adaptation), 0, 0,
         "LAMB and LARS: all (every tensor's ratio) or matrices (biases and LayerNorms keep ratio 1)"},
        {"", "--muon-lr", Kind::DOUBLE, FIELD(muon_lr), -BIG, BIG,
         "Muon: the peak learning rate of the blocks' weight matrices, > 0, following -k's schedule (-l "
         "stays AdamW's, on the other tensors) (-1: 0.02)"},
        {"", "--muon-momentum", Kind::DOUBLE, FIELD(muon_momentum), -BIG, BIG,
         "Muon: the momentum mu, in [0, 1) (-1: 0.95)"},
        {"", "--muon-nesterov", Kind::INT, FIELD(muon_nesterov), INT_MIN, INT_MAX,
         "Muon: 1 Nesterov's lookahead (1 - mu) g + mu b, 0 the momentum buffer b alone (-1: 1)"},
        {"", "--ns-steps", Kind::INT, FIELD(ns_steps), INT_MIN, INT_MAX,
         "Muon: Newton-Schulz iterations that orthogonalize each matrix's update, in 1..20 (-1: 5)"},
        {"", "--lr-scaling", Kind::STRING, FIELD(lr_scaling), 0, 0,
         "peak learning rate from -l and the batch: none, linear (-l * tokens per step / --base-batch) "
         "or sqrt (-l * its square root)"},
        {"", "--base-batch", Kind::LONG, FIELD(base_batch), 0, BIG,
         "with --lr-scaling: the tokens per step that -l was tuned for (0: not given)"},
        {"-sl", "--skip-loss-z", Kind::DOUBLE, FIELD(skip_loss_z), 0, 1e6,
         "skip the update when the loss z-score exceeds this (0: off)"},
        {"-sg", "--skip-norm-z", Kind::DOUBLE, FIELD(skip_norm_z), 0, 1e6,
         "skip the update when the grad-norm z-score exceeds this (0: off)"},
        {"-v", "--val-every", Kind::INT, FIELD(val_every), 0, INT_MAX,
         "validation loss every N steps (0: never)"},
        {"-m", "--val-batches", Kind::INT, FIELD(val_batches), 1, INT_MAX,
         "batches per validation"},
        {"-s", "--sample-every", Kind::INT, FIELD(sample_every), 0, INT_MAX,
         "sample text every N steps (0: never)"},
        {"-g", "--gen-tokens", Kind::INT, FIELD(gen_tokens), 1, 1 << 20,
         "tokens to generate per sample (past -t the window of the last -t tokens slides on)"},
        {"", "--sample-seconds", Kind::DOUBLE, FIELD(sample_seconds), 0, 1e9,
         "a sample stops after this many seconds, or at SIGINT/SIGTERM, saying so (0: no time bound)"},
        {"-h", "--hellaswag", Kind::INT, FIELD(hellaswag), 0, 1,
         "1: HellaSwag accuracy at each validation, as llm.c's -h (skipped when its file is absent)"},
        {"", "--hellaswag-file", Kind::STRING, FIELD(hellaswag_file), 0, 0,
         "llm.c's HellaSwag eval file for -h 1 (llm.c's dev/data/hellaswag.py writes it)"},
        {"", "--log-every", Kind::INT, FIELD(log_every), 1, INT_MAX,
         "print the step line every N steps (and the first, the last and validation steps)"},
        {"", "--stop-timeout", Kind::INT, FIELD(stop_timeout), 0, INT_MAX,
         "seconds a stop signal waits for the step boundary (and its checkpoint) before the run ends "
         "without one, naming what it waited on (0: no bound)"},
        {"", "--timers", Kind::INT, FIELD(timers), 0, 2,
         "phase timers (data, forward, loss, backward, comm wait, optimizer, ...) on every rank, read on "
         "logged steps: 0 off, 1 the step line names the phase whose ranks differ most, 2 also a table of "
         "each phase's min and max across ranks; both in metrics.jsonl"},
        {"", "--straggler-threshold", Kind::DOUBLE, FIELD(straggler_threshold), 0.01, 100,
         "with --timers: name a rank whose compute is this much slower than its peers' median (0.2: 20%) "
         "on repeated logged steps"},
        {"", "--profile-steps", Kind::STRING, FIELD(profile_steps), 0, 0,
         "A:B: a timeline of steps A to B on every rank (phases, layers, collectives), written to the "
         "output folder as trace.json for Perfetto or chrome://tracing (needs -o)"},
        {"-a", "--overfit-single-batch", Kind::INT, FIELD(overfit_single_batch), 0, 1,
         "1: train on the first batch only (a debugging check)"},
        {"", "--seed", Kind::U64, FIELD(seed), 0, 0,
         "seed for initial weights, data shuffling and sampling"},
        {"", "--shuffle", Kind::INT, FIELD(shuffle), 0, 1,
         "1: seeded shuffled data order, 0: sequential"},
        {"", "--tokenizer", Kind::STRING, FIELD(tokenizer), 0, 0,
         "GPT-2 decode table used for samples"},
        {"-z", "--zero-stage", Kind::INT, FIELD(zero_stage), 0, 3,
         "ZeRO stage over the ranks (CUDA trainer): 0 all-reduce; shard 1 the optimizer state, "
         "2 also the gradients, 3 also the weights"},
        {"-tp", "--tensor-parallel", Kind::INT, FIELD(tensor_parallel), 1, 1024,
         "ranks per tensor-parallel group (CUDA trainer): each layer's heads, MLP and the vocabulary "
         "split across them; within a node"},
        {"-sp", "--sequence-parallel", Kind::INT, FIELD(sequence_parallel), -1, 1,
         "with -tp: 1 also split LayerNorms and the residual stream along the sequence, 0 not "
         "(-1: 1 when -tp > 1)"},
        {"-pp", "--pipeline-parallel", Kind::INT, FIELD(pipeline_parallel), 1, 1024,
         "pipeline stages (CUDA trainer): the layers split into consecutive stages on different ranks"},
        {"", "--shard-ranks", Kind::INT, FIELD(shard_ranks), 0, 1 << 20,
         "with -z 1/2/3: shard within groups of N consecutive data ranks (a node) and replicate across "
         "the groups (hybrid sharding); 0: shard over every data rank"},
        {"", "--node-ranks", Kind::INT, FIELD(node_ranks), 0, 1 << 20,
         "ranks per node for the report's within-node and across-node traffic (0: the ranks the launcher "
         "put on this machine; --dry-run: 8)"},
        {"", "--pp-schedule", Kind::STRING, FIELD(pp_schedule), 0, 0,
         "pipeline schedule: 1f1b (one forward, one backward) or gpipe (all forwards, then all "
         "backwards)"},
        {"", "--grad-reduce", Kind::STRING, FIELD(grad_reduce), 0, 0,
         "precision in which gradients are accumulated over micro-steps and reduced across ranks (CUDA "
         "trainer): fp32, or bf16 (half the bytes on the network and in memory; the fp32 build: fp32)"},
        {"", "--grad-compression", Kind::STRING, FIELD(grad_compression), 0, 0,
         "compress the data ranks' gradient exchange (CUDA trainer, -z 0/1): none, powersgd (low rank), "
         "int8 (8-bit blocks) or sign (1 bit a value), each with error feedback"},
        {"", "--powersgd-rank", Kind::INT, FIELD(powersgd_rank), 1, 32,
         "with --grad-compression powersgd: the rank r of each gradient matrix's approximation"},
        {"", "--compression-start", Kind::INT, FIELD(compression_start), 0, INT_MAX,
         "with --grad-compression: the first N steps send their gradients uncompressed"},
        {"", "--check-replicas", Kind::INT, FIELD(check_replicas), 0, 1,
         "1: after every step the data ranks compare a hash of their weights and stop with an error where they "
         "differ (a check of determinism; copies the weights to the host each step; -z 0/1/2, no -tp or -pp)"},
        {"-r", "--recompute", Kind::INT, FIELD(recompute), 0, 2,
         "recompute in backward: 0 none, 1 GELU, 2 GELU+LayerNorm (CUDA trainer)"},
        {"-f", "--tf32", Kind::INT, FIELD(tf32), 0, 1, "allow TF32 matmuls (CUDA trainer)"},
        {"", "--attention-kernel", Kind::STRING, FIELD(attention_kernel), 0, 0,
         "attention implementation: auto, hopper (TMA + wgmma, sm_90), mma (mma.sync), cuda-cores "
         "(CUDA trainer)"},
        {"-w", "--fp32-master", Kind::INT, FIELD(fp32_master), -1, 1,
         "keep fp32 master weights: 1 yes, 0 no, -1 trainer's choice (CUDA trainer)"},
        {"", "--cuda-graphs", Kind::INT, FIELD(cuda_graphs), 0, 1,
         "1: replay each micro-step's forward and backward and each update as CUDA graphs, where the run "
         "allows (not with -pp > 1 or -z 2/3); 0: launch every kernel from the host (CUDA trainer)"},
        {"", "--dry-run", Kind::INT, FIELD(dry_run), 0, 1,
         "1: print the start-up report (model, ranks, memory per rank, network per step, whether it "
         "fits) and exit without allocating or training"},
        {"", "--plan-ranks", Kind::INT, FIELD(plan_ranks), 0, 1 << 20,
         "with --dry-run: plan for this many ranks from one process (0: the ranks started)"},
        {"", "--device-memory", Kind::DOUBLE, FIELD(device_memory_gib), 0, 1e6,
         "with --dry-run: plan for a GPU with this many GiB (0: this machine's device)"},
        // llm.c's remaining flags, so its command lines run or say what to do instead.
        {"-lg", "--log-gpu-every", Kind::INT, FIELD(log_gpu_every), -1, INT_MAX,
         "every N steps, the GPU's SM clock, power, temperature and throttle reasons (NVML) at the end "
         "of the step line and in metrics.jsonl (-1 or 0: off)"},
        {"-ge", "--gelu-fusion", Kind::INT, FIELD(gelu_fusion), -1, 2,
         "llm.c's GELU fusion choice: fixed in this trainer, any value runs (-1: not given)"},
        {"-pn", "--num-processes", Kind::INT, FIELD(num_processes), 0, 1 << 20,
         "llm.c multi-node: number of ranks; must match what mpirun/srun started (0: not given)"},
        {"-pr", "--process-rank", Kind::INT, FIELD(process_rank), -1, 1 << 20,
         "llm.c multi-node: this rank's number; the launcher sets it (-1: not given)"},
        {"-pg", "--gpus-per-node", Kind::INT, FIELD(gpus_per_node), 0, 1 << 10,
         "llm.c multi-node: GPUs per node; each rank takes its local rank's GPU (0: not given)"},
        {"-pi", "--init-method", Kind::STRING, FIELD(init_method), 0, 0,
         "llm.c multi-node start-up: only mpi (start the ranks with mpirun or srun)"},
        {"-ps", "--server-ip", Kind::STRING, FIELD(server_ip), 0, 0,
         "llm.c's server for -pi tcp: not supported (use mpirun or srun)"},
        {"-pf", "--fs-path", Kind::STRING, FIELD(fs_path), 0, 0,
         "llm.c's shared folder for -pi fs: not supported (use mpirun or srun)"},
    };
#undef FIELD
}

// Display name: "-b (--batch-size)" or "--seed".
std::string flag_name(const Flag& f) {
    return *f.short_name ? strprintf("%s (%s)", f.short_name, f.long_name) : f.long_name;
}

// The field's value as text; numbers exactly as parsing would read them back.
std::string value_text(const Flag& f) {
    const char* base = (const char*)f.target;
    switch (f.kind) {
        case Kind::INT: return std::to_string(*(const int*)base);
        case Kind::LONG: return std::to_string(*(const long long*)base);
        case Kind::U64: return std::to_string(*(const uint64_t*)base);
        case Kind::DOUBLE: return strprintf("%.17g", *(const double*)base);
        case Kind::STRING: return *(const std::string*)base;
        case Kind::SCHEDULE: return schedule_name(*(const ScheduleKind*)base);
    }
    return "";
}

std::string default_text(const Flag& f) {
    if (f.kind == Kind::STRING) return "'" + value_text(f) + "'";
    if (f.kind == Kind::DOUBLE) return strprintf("%g", *(const double*)f.target);
    return value_text(f);
}

// Stores text into the flag's field after checking it is a well-formed value in range.
void set_value(const Flag& f, const std::string& text) {
    char* base = (char*)f.target;
    const std::string name = flag_name(f);
    const char* s = text.c_str();
    char* end = nullptr;
    errno = 0;
    switch (f.kind) {
        case Kind::STRING:
            if (text.empty()) fail("%s: empty value", name.c_str());
            *(std::string*)base = text;
            return;
        case Kind::SCHEDULE:
            if (!parse_schedule_kind(text, (ScheduleKind*)base))
                fail("%s: unknown schedule '%s' (expected cosine, linear, constant or wsd)",
                     name.c_str(), s);
            return;
        case Kind::U64: {
            unsigned long long v = strtoull(s, &end, 10);
            if (text.empty() || *end || errno || text[0] == '-')
                fail("%s: '%s' is not a non-negative integer", name.c_str(), s);
            *(uint64_t*)base = v;
            return;
        }
        case Kind::INT:
        case Kind::LONG: {
            long long v = strtoll(s, &end, 10);
            if (text.empty() || *end || errno) fail("%s: '%s' is not an integer", name.c_str(), s);
            if (v < f.min || v > f.max)
                fail("%s: %lld is out of range [%.0f, %.0f]", name.c_str(), v, f.min, f.max);
            if (f.kind == Kind::INT)
                *(int*)base = (int)v;
            else
                *(long long*)base = v;
            return;
        }
        case Kind::DOUBLE: {
            double v = strtod(s, &end);
            if (text.empty() || *end || errno || !std::isfinite(v))
                fail("%s: '%s' is not a number", name.c_str(), s);
            if (v < f.min || v > f.max)
                fail("%s: %g is out of range [%g, %g]", name.c_str(), v, f.min, f.max);
            *(double*)base = v;
            return;
        }
    }
}

}  // namespace

std::string train_flags_help(const char* program, const TrainOptions& defaults) {
    std::string text = strprintf(
        "usage: %s [flags]\n  flags take one value: -b 8, --batch-size 8 "
        "or --batch-size=8\n\n",
        program);
    TrainOptions shown = defaults;
    for (const Flag& f : flag_table(shown))
        text += strprintf("  %-4s %-24s %s (default %s)\n", f.short_name, f.long_name, f.help,
                          default_text(f).c_str());
    text += "       --help                   show this help (also -h with no value)\n";
    text += strprintf("       %-24s flags after it replace the same flags before it (a wrapper script's defaults)\n",
                      OVERRIDE_MARKER);
    return text;
}

std::vector<FlagValue> train_flag_values(const TrainOptions& options) {
    TrainOptions copy = options;
    std::vector<FlagValue> values;
    for (const Flag& f : flag_table(copy))
        values.push_back({f.short_name, f.long_name, value_text(f)});
    return values;
}

// Walks argv's flags in order: calls visit(flag, value) for each; returns false at --help (or a bare
// -h last), before visiting the rest. A flag given twice (in its short or long form) is an error,
// since one of the two values would be dropped without a word; a wrapper script that passes its
// defaults first puts OVERRIDE_MARKER between them and its caller's flags, which then replace them.
template <typename Visit>
static bool walk_flags(int argc, const char* const* argv, const std::vector<Flag>& flags, Visit&& visit) {
    std::set<std::string> given;  // long names, since the start or the last OVERRIDE_MARKER
    for (int i = 1; i < argc; i++) {
        std::string arg = argv[i];
        // llm.c's -h takes a value (HellaSwag); a bare -h as the last argument asks for help.
        if (arg == "--help" || (arg == "-h" && i + 1 == argc)) return false;
        if (arg == OVERRIDE_MARKER) {
            given.clear();
            continue;
        }
        std::string value;
        bool inline_value = false;
        if (arg.rfind("--", 0) == 0 && arg.find('=') != std::string::npos) {
            value = arg.substr(arg.find('=') + 1);
            arg = arg.substr(0, arg.find('='));
            inline_value = true;
        }
        const Flag* flag = nullptr;
        for (const Flag& f : flags)
            if ((*f.short_name && arg == f.short_name) || arg == f.long_name) flag = &f;
        if (!flag) fail("unknown flag '%s' (see --help)", argv[i]);
        if (!given.insert(flag->long_name).second)
            fail("%s: given twice; give each flag once (flags after %s replace those before it, as wrapper "
                 "scripts' defaults)", flag_name(*flag).c_str(), OVERRIDE_MARKER);
        if (!inline_value) {
            if (i + 1 >= argc) fail("%s: missing value", flag_name(*flag).c_str());
            value = argv[++i];
        }
        visit(*flag, value);
    }
    return true;
}

FlagsResult parse_train_flags(int argc, const char* const* argv, TrainOptions* options) {
    const TrainOptions defaults = *options;
    if (walk_flags(argc, argv, flag_table(*options), [](const Flag& flag, const std::string& value) {
            set_value(flag, value);
        }))
        return FlagsResult::RUN;
    fputs(train_flags_help(argv[0], defaults).c_str(), stdout);
    return FlagsResult::HELP_SHOWN;
}

bool train_flag_given(int argc, const char* const* argv, const std::string& long_name) {
    TrainOptions scratch;
    bool given = false;
    walk_flags(argc, argv, flag_table(scratch), [&](const Flag& flag, const std::string&) {
        given = given || long_name == flag.long_name;
    });
    return given;
}

std::string train_flag_value(int argc, const char* const* argv, const std::string& long_name) {
    TrainOptions scratch;
    std::string last;
    walk_flags(argc, argv, flag_table(scratch), [&](const Flag& flag, const std::string& value) {
        if (long_name == flag.long_name) last = value;
    });
    return last;
}

// -tp, -sp, -pp, --shard-ranks, --pp-schedule and --grad-reduce against the ranks and the model's shape.
static void check_model_parallel(TrainOptions* o, const ModelConfig& model, int num_ranks) {
    const int tp = o->tensor_parallel, pp = o->pipeline_parallel;
    if (num_ranks % (tp * pp) != 0)
        fail("-tp (--tensor-parallel) %d x -pp (--pipeline-parallel) %d = %d does not divide the %d "
             "ranks", tp, pp, tp * pp, num_ranks);
    if (o->sequence_parallel == -1) o->sequence_parallel = tp > 1 ? 1 : 0;
    const int data = num_ranks / (tp * pp);
    if (o->shard_ranks > 0 && o->zero_stage == 0)
        fail("--shard-ranks: %d shards ZeRO's state within groups of ranks; add -z 1, 2 or 3", o->shard_ranks);
    if (o->shard_ranks > 0 && data % o->shard_ranks != 0)
        fail("--shard-ranks: %d does not divide the %d data ranks", o->shard_ranks, data);
    if (o->pp_schedule != "1f1b" && o->pp_schedule != "gpipe")
        fail("--pp-schedule: unknown schedule '%s' (1f1b, gpipe)", o->pp_schedule.c_str());
    if (o->grad_reduce != "fp32" && o->grad_reduce != "bf16")
        fail("--grad-reduce: unknown precision '%s' (fp32, bf16)", o->grad_reduce.c_str());
    if (pp > model_layers(model))
        fail("-pp (--pipeline-parallel): %d stages for %d layers; each stage needs a layer", pp,
             model_layers(model));
    if (tp == 1) return;
    // Llama 3: each tensor rank takes whole query heads and whole key/value heads (parallel/plan/param_table.h).
    if (is_llama3(model) && model.llama.num_heads % tp != 0)
        fail("-tp (--tensor-parallel): %d does not divide the model's %d attention heads", tp,
             model.llama.num_heads);
    if (is_llama3(model) && model.llama.num_kv_heads % tp != 0)
        fail("-tp (--tensor-parallel): %d does not divide the model's %d key/value heads", tp,
             model.llama.num_kv_heads);
    const GPTConfig& c = model.gpt;
    if (is_gpt2(model) && c.num_heads % tp != 0)
        fail("-tp (--tensor-parallel): %d does not divide the model's %d attention heads", tp,
             c.num_heads);
    if (is_gpt2(model) && (c.channels % tp != 0 || c.channels / tp % 8 != 0))
        fail("-tp (--tensor-parallel): %d splits the %d channels into slices that are not multiples of 8",
             tp, c.channels);
    if (o->sequence_parallel == 1 && o->seq_len % tp != 0)
        fail("-sp (--sequence-parallel): the sequence length -t %d does not split into %d equal parts (-tp); "
             "change -t, or -sp 0", o->seq_len, tp);
}

// --grad-compression: a known method, on whole fp32 gradients of a plain data-parallel run (-z 0/1).
static void check_grad_compression(const TrainOptions& o) {
    GradCompression method;
    if (!parse_grad_compression(o.grad_compression.c_str(), &method))
        fail("--grad-compression: unknown method '%s' (none, powersgd, int8, sign)", o.grad_compression.c_str());
    const char* name = o.grad_compression.c_str();
    if (method == GradCompression::NONE) return;
    if (o.zero_stage >= 2)
        fail("--grad-compression %s: works with -z 0 and -z 1, whose ranks hold their whole gradients before the "
             "exchange (-z %d reduce-scatters each micro-step's)", name, o.zero_stage);
    if (o.grad_reduce != "fp32")
        fail("--grad-compression %s: compresses fp32 gradients; drop --grad-reduce %s", name, o.grad_reduce.c_str());
    if (o.tensor_parallel > 1 || o.pipeline_parallel > 1 || o.shard_ranks > 0)
        fail("--grad-compression %s: compresses a plain data-parallel run's exchange; drop -tp, -pp and "
             "--shard-ranks", name);
}

// --check-replicas compares whole replicas: every rank must hold the whole model.
static void check_replica_check(const TrainOptions& o) {
    if (o.check_replicas && (o.zero_stage >= 3 || o.tensor_parallel > 1 || o.pipeline_parallel > 1))
        fail("--check-replicas 1: compares the weights of whole replicas; -z 3, -tp and -pp split them over ranks");
}

// --lr-scaling needs the batch -l was tuned for (--base-batch), and --base-batch a rule to apply.
static void check_lr_scaling(const TrainOptions& o) {
    LRScaling rule;
    if (!parse_lr_scaling(o.lr_scaling, &rule))
        fail("--lr-scaling: unknown rule '%s' (none, linear, sqrt)", o.lr_scaling.c_str());
    if (rule != LRScaling::NONE && o.base_batch <= 0)
        fail("--lr-scaling %s: needs --base-batch N, the tokens per step that -l was tuned for",
             o.lr_scaling.c_str());
    if (rule == LRScaling::NONE && o.base_batch != 0)
        fail("--base-batch: %lld has no effect without --lr-scaling linear or sqrt", o.base_batch);
}

bool profile_step_range(const TrainOptions& o, int* first, int* last) {
    if (o.profile_steps.empty()) return false;
    const std::string& text = o.profile_steps;
    char* end = nullptr;
    const long a = strtol(text.c_str(), &end, 10);
    if (end == text.c_str() || *end != ':')
        fail("--profile-steps: '%s' is not A:B (the first and last step of the timeline)", text.c_str());
    const char* second = end + 1;
    const long b = strtol(second, &end, 10);
    if (end == second || *end || a < 1 || b > INT_MAX)
        fail("--profile-steps: '%s' is not A:B with steps from 1", text.c_str());
    if (b < a) fail("--profile-steps: %ld:%ld ends before it starts", a, b);
    *first = (int)a, *last = (int)b;
    return true;
}

// --profile-steps: a well-formed range within the run's steps, and a folder to write the trace to.
static void check_profile_steps(const TrainOptions& o) {
    int first = 0, last = 0;
    if (!profile_step_range(o, &first, &last)) return;
    if (o.max_steps > 0 && last > o.max_steps)
        fail("--profile-steps: step %d is past the last step %d (-x)", last, o.max_steps);
    if (o.output_dir.empty()) fail("--profile-steps: the timeline is written to the output folder: give -o");
    if (!o.timers) fail("--profile-steps: the timeline needs the timers: use --timers 1 or 2");
}

void validate_train_options(TrainOptions* o, const ModelConfig& config, int num_ranks) {
    if (o->seq_len > model_max_seq_len(config))
        fail("-t (--seq-len): %d exceeds the model's maximum sequence length %d", o->seq_len,
             model_max_seq_len(config));
    check_model_parallel(o, config, num_ranks);
    const int data = data_ranks(*o, num_ranks);
    const long long per_micro_step = (long long)o->batch_size * o->seq_len * data;
    if (o->total_batch == -1) o->total_batch = per_micro_step;
    if (o->total_batch <= 0 || o->total_batch % per_micro_step != 0)
        fail("-d (--total-batch): %lld is not a positive multiple of B*T*%s = %d*%d*%d = %lld",
             o->total_batch, data == num_ranks ? "ranks" : "data ranks", o->batch_size, o->seq_len, data,
             per_micro_step);
    if (o->total_batch / per_micro_step > 1000000)
        fail("-d (--total-batch): %lld tokens would take %lld micro-steps of B*T*ranks = %lld per "
             "optimizer step (at most 1000000)",
             o->total_batch, o->total_batch / per_micro_step, per_micro_step);
    if (o->max_steps == 0) fail("-x (--max-steps): 0 steps; use a positive number or -1");
    if (!o->dry_run && (o->plan_ranks > 0 || o->device_memory_gib > 0))
        fail("--plan-ranks and --device-memory plan a run: use them with --dry-run 1");
    if (o->stop_at > 0 && o->max_steps > 0 && o->stop_at > o->max_steps)
        fail("--stop-at: %d is past the last step %d (-x)", o->stop_at, o->max_steps);
    if (o->resume && o->output_dir.empty())
        fail("-y (--resume): resuming needs the output folder to resume from (-o)");
    if (o->checkpoint_every > 0 && o->output_dir.empty())
        fail("-n (--checkpoint-every): checkpoints need an output folder (-o)");
    if (o->snapshot_every > 0 && o->output_dir.empty())
        fail("--snapshot-every: snapshots belong to a run folder (-o)");
    if (o->attention_kernel != "auto" && o->attention_kernel != "hopper" && o->attention_kernel != "mma" &&
        o->attention_kernel != "cuda-cores")
        fail("--attention-kernel: unknown kernel '%s' (auto, hopper, mma, cuda-cores)",
             o->attention_kernel.c_str());
    check_optimizer_options(o);
    check_grad_compression(*o);
    check_replica_check(*o);
    check_lr_scaling(*o);
    check_profile_steps(*o);
    check_llmc_launch_flags(*o, num_ranks);
}

// llm.c can start its ranks itself (-pi tcp or fs, with -pn ranks, -pr this rank); here the MPI
// launcher starts them, so those flags may only repeat what the launcher did.
void check_llmc_launch_flags(const TrainOptions& o, int num_ranks) {
    const char* launch = "start the ranks with mpirun -np N or srun";
    if (o.init_method != "mpi")
        fail("-pi (--init-method): '%s' is not supported: %s, which this trainer reads, and drop "
             "-pi, -ps and -pf", o.init_method.c_str(), launch);
    if (!o.server_ip.empty())
        fail("-ps (--server-ip): only llm.c's -pi tcp uses it, which is not supported: %s and drop "
             "-ps", launch);
    if (!o.fs_path.empty())
        fail("-pf (--fs-path): only llm.c's -pi fs uses it, which is not supported: %s and drop "
             "-pf", launch);
    if (o.num_processes > 0 && o.num_processes != num_ranks)
        fail("-pn (--num-processes): %d, but %d rank(s) were started: the launcher decides; %s "
             "(mpirun -np %d ...) or drop -pn", o.num_processes, num_ranks, launch,
             o.num_processes);
    if (o.process_rank > 0 || (o.process_rank == 0 && num_ranks > 1))
        fail("-pr (--process-rank): each rank's number comes from the launcher (mpirun or srun); "
             "drop -pr");
}

std::vector<std::string> llmc_flag_notes(const TrainOptions& o) {
    std::vector<std::string> notes;
    if (o.gelu_fusion != -1)
        notes.push_back(strprintf("-ge %d has no effect: GELU's forward is always its own pass (so "
                                  "that -r recompute gives the same bits) and its backward is "
                                  "always fused into the GEMM epilogue", o.gelu_fusion));
    if (o.gpus_per_node > 0)
        notes.push_back("-pg has no effect: each rank takes the GPU of its local rank on its node");
    return notes;
}


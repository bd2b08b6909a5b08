// A run's settings, as the command line gives them (train/train_flags.h parses, checks and documents
// every flag; the comment beside each field names its flag). The models read them here, below the
// training loop: the trainers' compute takes its precision, parallelism and recomputation from them.
#pragma once
#include <cstdint>
#include <string>

// The learning-rate schedules of -k (train/lr_schedule.h computes them).
enum class ScheduleKind { COSINE, LINEAR, CONSTANT, WSD };

struct TrainOptions {
    // data, model, output
    std::string train_data = "data/janeausten/janeausten_train.bin";  // -i glob
    std::string val_data = "data/janeausten/janeausten_val.bin";      // -j glob
    std::string model = "d12";                                        // -e descriptor or model file
    std::string output_dir;                                           // -o ("" = write nothing)
    std::string tokenizer = "data/gpt2_tokenizer.bin";                // decode table for samples
    int checkpoint_every = 0;  // -n (0 = only at the end of the run, when -o is given)
    int checkpoints_keep = 0;  // -nk (0 = keep all)
    int checkpoint_async = 1;  // --checkpoint-async: 1 writes checkpoints in the background
    int snapshot_every = 0;    // --snapshot-every: training state in node memory every N steps (0: none)
    std::string snapshot_dir;  // --snapshot-dir: where the run makes gpt_snapshots_<hash of -o> ("": /dev/shm)
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
    // the optimizer (train/optimizer_choice.h turns these into OptimizerSettings)
    std::string optimizer = "adamw";         // --optimizer: adamw, lamb, lars, muon
    double beta1 = -1, beta2 = -1, eps = -1;  // --beta1 --beta2 --eps (-1 = the optimizer's default)
    double momentum = 0.9;                   // --momentum (LARS)
    double trust_coefficient = 0.001;        // --trust-coefficient (LARS's η)
    std::string layer_adaptation = "all";    // --layer-adaptation: all, matrices (LAMB, LARS)
    double muon_lr = -1;                     // --muon-lr: Muon's peak rate (-1 = 0.02)
    double muon_momentum = -1;               // --muon-momentum (-1 = 0.95)
    int muon_nesterov = -1;                  // --muon-nesterov: 1 Nesterov's lookahead, 0 not (-1 = 1)
    int ns_steps = -1;                       // --ns-steps: Newton–Schulz iterations (-1 = 5)
    std::string lr_scaling = "none";         // --lr-scaling: none, linear, sqrt (train/lr_schedule.h)
    long long base_batch = 0;                // --base-batch: tokens per step -l is tuned for (0 = none)
    // evaluation and sampling
    int val_every = 20;            // -v (0 = never)
    int val_batches = 20;          // -m
    int sample_every = 20;         // -s (0 = never)
    int gen_tokens = 64;           // -g (past the context -t, the window slides, as ./generate's does)
    double sample_seconds = 60;    // --sample-seconds: a sample ends after this long (0 = no bound)
    int overfit_single_batch = 0;  // -a
    int hellaswag = 0;             // -h (llm.c's HellaSwag evaluation; --help shows the help)
    std::string hellaswag_file = "dev/data/hellaswag/hellaswag_val.bin";  // where llm.c writes it
    int log_every = 1;             // --log-every: print the step line every N steps
    int stop_timeout = 120;        // --stop-timeout: seconds from SIGINT/SIGTERM to the step boundary
                                   // before the run ends without a checkpoint (0 = wait; train/interrupts.h)
    // where the time goes (train/step_profile.h)
    int timers = 1;                     // --timers: 0 off, 1 the slowest phase on the step line, 2 a table
    double straggler_threshold = 0.2;   // --straggler-threshold: a rank this much slower is named
    std::string profile_steps;          // --profile-steps A:B: a timeline of steps A..B (trace.json)
    // data order and initialisation
    uint64_t seed = 42;  // --seed: weights, shuffling, sampling
    int shuffle = 0;     // --shuffle: shuffled (1) or sequential (0) data order
    // CUDA trainer only
    int zero_stage = 0;    // -z
    int tensor_parallel = 1;     // -tp: ranks per tensor-parallel group
    int sequence_parallel = -1;  // -sp: 1 split LayerNorms and residuals along the sequence too
                                 // (-1: on with -tp > 1)
    int pipeline_parallel = 1;   // -pp: pipeline stages
    int shard_ranks = 0;         // --shard-ranks: ZeRO shards within groups of N data ranks (0 = all)
    int node_ranks = 0;          // --node-ranks: ranks per node for the traffic split (0 = the launcher's)
    std::string pp_schedule = "1f1b";  // --pp-schedule: 1f1b or gpipe
    std::string grad_reduce = "fp32";  // --grad-reduce: accumulate and reduce gradients in fp32 or bf16
    std::string grad_compression = "none";  // --grad-compression: none, powersgd, int8, sign (-z 0/1)
    int powersgd_rank = 4;                  // --powersgd-rank: PowerSGD's r
    int compression_start = 10;             // --compression-start: steps sent uncompressed first
    int check_replicas = 0;                 // --check-replicas: the data ranks compare their weights each step
    int recompute = 1;     // -r
    std::string attention_kernel = "auto";  // --attention-kernel: auto, hopper, mma, cuda-cores
    int tf32 = 1;          // -f
    int fp32_master = -1;  // -w (-1 = the trainer decides)
    int cuda_graphs = 1;   // --cuda-graphs: replay micro-steps and updates as CUDA graphs where possible
    // planning
    int dry_run = 0;              // --dry-run: print the start-up report and the memory plan, then exit
    int plan_ranks = 0;           // --plan-ranks: plan for this many ranks (0 = the ranks started)
    double device_memory_gib = 0;  // --device-memory: plan for a device of this size (0 = this one)
    // resuming
    int accept_changes = 0;  // --accept-changes: resume even where the settings bend the run
    int major_checkpoint_every = 0;  // -nm: checkpoints at multiples of N survive -nk pruning
    // llm.c flags accepted for its command lines (see --help): -lg reads the GPU every N steps, -ge
    // takes effect as a note, the multi-node ones must agree with how the ranks were launched.
    int log_gpu_every = -1;       // -lg (-1 or 0: off)
    int gelu_fusion = -1;         // -ge
    int num_processes = 0;        // -pn (0 = not given)
    int process_rank = -1;        // -pr (-1 = not given)
    int gpus_per_node = 0;        // -pg (0 = not given)
    std::string init_method = "mpi";  // -pi
    std::string server_ip;        // -ps
    std::string fs_path;          // -pf
};

// The data-parallel ranks among num_ranks: num_ranks / (tensor_parallel · pipeline_parallel).
int data_ranks(const TrainOptions& options, int num_ranks);

// The ranks per node a plan assumes without --node-ranks and without a launcher to ask (--dry-run):
// the GPUs of a common server.
constexpr int kDryRunNodeRanks = 8;

// Gradient-accumulation micro-steps per step: total_batch / (B·T·data ranks), after validation.
int grad_accum_steps(const TrainOptions& options, int num_ranks);
// Whether gradients are accumulated over micro-steps and reduced across ranks in fp32 (--grad-reduce).
inline bool fp32_gradient_reduction(const TrainOptions& options) { return options.grad_reduce == "fp32"; }

// The shared training loop (train/train_loop.h).
#include "train/train_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "base/decode_table.h"
#include "base/errors.h"
#include "base/file_io.h"
#include "base/llama_descriptor.h"
#include "base/model_descriptor.h"
#include "base/model_files.h"
#include "base/model_init.h"
#include "base/model_part.h"
#include "base/rng.h"
#include "parallel/plan/compression_cost.h"
#include "parallel/plan/mesh.h"
#include "train/algorithm_table.h"
#include "train/cached_sampling.h"
#include "train/checkpoint.h"
#include "train/checkpoint_keeper.h"
#include "train/dataloader.h"
#include "train/folder_lock.h"
#include "train/hellaswag.h"
#include "train/interrupts.h"
#include "train/lr_schedule.h"
#include "train/memory_check.h"
#include "train/metrics_log.h"
#include "train/optimizer_choice.h"
#include "train/resharding.h"
#include "train/run_folder.h"
#include "train/run_plan.h"
#include "train/run_report.h"
#include "train/sampling.h"
#include "train/snapshots.h"
#include "train/step_profile.h"
#include "train/training_state.h"

#ifdef __GLIBC__
#include <malloc.h>  // mallopt (reuse_freed_memory)
#endif

constexpr double GRAD_CLIP = 1.0;  // global gradient-norm clipping threshold

double training_flops_per_token(const ModelConfig& c, int T) {
    const double params = (double)parameter_count(c);
    return 6.0 * params + 6.0 * model_layers(c) * model_attention_width(c) * (double)T;
}

// "ETA 1h02m" / "ETA 3m20s".
static std::string eta_text(double seconds) {
    long s = (long)std::lround(seconds);
    if (s >= 3600) return strprintf("%ldh%02ldm", s / 3600, s / 60 % 60);
    return strprintf("%ldm%02lds", s / 60, s % 60);
}

// The model's next micro-batch: the loader's next one (with overfit set, always its first).
static TrainModel::NextBatch next_batch_of(DataLoader& loader, bool overfit) {
    return [&loader, overfit](int* inputs, int* targets) {
        if (overfit) loader.reset();
        loader.next_batch(inputs, targets);
    };
}

// Mean loss over `batches` validation batches, from the first one.
static double validation_loss(TrainModel& model, DataLoader& val, int batches, int B, int T,
                              std::vector<int>& inputs, std::vector<int>& targets) {
    val.reset();
    double sum = 0;
    for (int i = 0; i < batches; i++) {
        val.next_batch(inputs.data(), targets.data());
        sum += model.forward(inputs.data(), targets.data(), B, T);
    }
    return sum / batches;
}

// Generates `count` tokens after the table's end-of-text token, each from the logits of the last
// position (past T tokens the window of the last T slides on, as ./generate's does), and prints them
// through the decode table (if `print`). A sample ends early after `seconds` (0: no bound) or at a
// stop signal, with a note; where every rank generates alongside (`ranks_agree`: the model's
// forward is a collective) they decide that together every 16 tokens. The random stream advances
// by `count` draws either way, so that the samples after it do not depend on when one was cut.
static void print_sample(TrainModel& model, const DecodeTable& table, Rng& rng, int count, int T, double seconds,
                         bool print, RankGroup* ranks_agree) {
    const int V = model_vocab_size(model.model_config());
    std::vector<int> tokens = {table.eot_token < V ? table.eot_token : V - 1};
    std::vector<float> logits(V);
    std::string text;
    const auto start = std::chrono::steady_clock::now();
    auto cut_short = [&](int i) {
        const bool local = stop_requested() || (seconds > 0 && ms_since(start) > seconds * 1000.0);
        if (!ranks_agree) return local;
        return i % 16 == 0 && ranks_agree->mean(local ? 1.0 : 0.0) > 0;
    };
    // Through the model's key/value cache where it has one; the same tokens either way.
    CachedSampler cached(T, [&] { model.decode_reset(T); },
                         [&](int token, float* out) { model.decode_next(token, out); });
    int made = 0;
    for (; made < count && !(made > 0 && cut_short(made)); made++) {
        if (model.supports_decode()) {
            cached.next_logits(tokens, logits.data());
        } else {
            int start_at = std::max(0, (int)tokens.size() - T);
            int length = (int)tokens.size() - start_at;
            model.forward(tokens.data() + start_at, nullptr, 1, length);
            model.logits_at(length - 1, logits.data());
        }
        int next = sample_token(logits.data(), V, rng.uniform());
        tokens.push_back(next);
        text += table.decode(next);
    }
    for (int i = made; i < count; i++) rng.uniform();
    if (!print) return;
    printf("sample: %s\n---\n", text.c_str());
    if (made < count)
        printf("note: the sample stopped at %d of %d tokens (%s)\n", made, count,
               stop_requested() ? stop_signal_name()
                                : strprintf("--sample-seconds %g", seconds).c_str());
}

// A data loader over this rank's slices (the ranks of one data-parallel replica read the same ones);
// an error in its shards also names the flag.
static std::unique_ptr<DataLoader> open_loader(const char* flag, const std::string& pattern, int B,
                                               int T, const ModelConfig& config, bool shuffle,
                                               uint64_t seed, const Mesh& mesh) {
    try {
        return std::make_unique<DataLoader>(pattern, B, T, mesh.data_rank, mesh.data, model_vocab_size(config),
                                            shuffle, seed);
    } catch (const InputError& e) { fail("%s: %s", flag, e.what()); }
}

// A checkpoint's bytes on this rank, taken at a step boundary: its state file (the part of the
// optimizer state it is responsible for) and on rank 0 the model file, assembled from every rank's
// part of the weights (a collective).
static CheckpointPart take_checkpoint_part(TrainModel& model, const TrainingState& state, RankGroup& ranks) {
    CheckpointPart p;
    p.step = state.step, p.rank = ranks.rank, p.num_ranks = ranks.num_ranks;
    p.config = model.model_config(), p.weight_type = model.working_weight_type();
    p.state = state;
    OptimizerPart part = model.optimizer_part();
    p.state.ranges = std::move(part.ranges);
    p.state.params = std::move(part.master), p.state.adam_m = std::move(part.m), p.state.adam_v = std::move(part.v);
    p.state.compression = model.compression_state();
    ModelPart weights = model.working_weights_part();
    const size_t total = parameter_count(model.model_config());
    // One rank holding the whole model in order (one range) has the model file's weights as they are:
    // assembling them would copy them four times more, at the step boundary.
    const bool whole = ranks.num_ranks == 1 && weights.ranges.size() == 1 && weights.ranges[0].offset == 0 &&
                       weights.ranges[0].length == total && weights.values.size() == total;
    p.weights = whole ? std::move(weights.values) : assemble_on_rank0(weights, total, ranks);
    return p;
}

// A fingerprint of the command line, so that ranks started differently stop before training.
static uint64_t command_line_fingerprint(int argc, char** argv) {
    uint64_t hash = FNV_OFFSET;
    for (int i = 1; i < argc; i++) hash = fnv1a64(argv[i], strlen(argv[i]) + 1, hash);
    return hash;
}
// A fingerprint of the data files each rank found: names and sizes.
static uint64_t data_fingerprint(const DataLoader& loader) {
    uint64_t hash = FNV_OFFSET;
    for (const std::string& file : loader.files()) {
        const uint64_t size = file_size(file);
        hash = fnv1a64(file.c_str(), file.size() + 1, hash);
        hash = fnv1a64(&size, sizeof size, hash);
    }
    return hash;
}

// The loader position of a run saved on `saved_ranks` ranks, for this run's ranks: a chunk holds
// B·T tokens per rank, so the same token offset is a different chunk count.
// Where that offset falls inside a chunk of this run (-d changed with the ranks: --elastic-batch scale
// in scripts/supervise.sh), the run goes on from the next whole chunk, skipping fewer tokens than a
// chunk holds, and rank 0 says so.
static LoaderPosition position_for_ranks(LoaderPosition p, int saved_ranks, int ranks, const std::string& path,
                                         bool print) {
    if (saved_ranks == ranks) return p;
    const int64_t micro_batches = p.chunk_step * saved_ranks;  // B·T runs of tokens read in this shard
    p.chunk_step = (micro_batches + ranks - 1) / ranks;
    if (micro_batches % ranks != 0 && print)
        printf("notice: %s was saved on %d data ranks at a point inside a batch of %d; the data continues from the "
               "next whole batch, %lld micro-batches of tokens on\n",
               path.c_str(), saved_ranks, ranks, (long long)(p.chunk_step * ranks - micro_batches));
    return p;
}

// ---- the run: what train() sets up once, and what its steps and periodic work share ----
struct Run {
    Run(const TrainerSpec& spec_, RankGroup& ranks_)
        : spec(spec_), ranks(ranks_), main_rank(ranks_.rank == 0), keeper(ranks_) {}
    const TrainerSpec& spec;
    RankGroup& ranks;
    const bool main_rank;
    FolderLock folder_lock;  // rank 0's, on the output folder, for the whole run (train/folder_lock.h)
    TrainOptions opt;
    DataChoice data_choice;
    ModelConfig config;  // the family and its shape
    Mesh mesh;
    int B = 0, T = 0, accum_steps = 1, max_steps = 0, last_step = 0;
    OptimizerSettings optimizer{0.0f};  // every step's, but its learning rate and clipping factor
    double peak_lr = 0;                 // -l, scaled to the batch by --lr-scaling
    std::unique_ptr<DataLoader> train_loader, val_loader;
    TrainingState state;  // what a checkpoint saves; state.step = updates done so far
    bool resuming = false;
    Mesh resumed_mesh;    // the mesh that wrote the checkpoint resumed from
    std::string resume_report;  // what the ranks read of the checkpoint, and held (train/resharding.h)
    std::unique_ptr<TrainModel> model;
    std::unique_ptr<HellaSwagEval> hellaswag;
    DecodeTable decode_table;
    bool can_sample = false;
    std::unique_ptr<MetricsLog> metrics;
    Rng sample_rng{0};
    RunClock clock{0};
    std::vector<int> inputs, targets;  // one batch, for validation
    double step_flops = 0, total_ms = 0;
    int timed_steps = 0;
    std::unique_ptr<StepProfile> profile;  // --timers, --profile-steps (train/step_profile.h)
    AlgorithmTable loaded_algorithms;  // the run folder's table, where this run adopted it
    std::string algorithms_note;       // for the start-up report
    CheckpointKeeper keeper;  // checkpoints and snapshots (train/checkpoint_keeper.h)
};

// The model's family and shape, from -e's descriptor (GPT-2's or Llama 3's) or the model file (whose
// weights it returns too).
static ModelConfig model_shape(const TrainOptions& opt, AnyModelFile* model_file) {
    try {
        if (is_llama_descriptor(opt.model)) return llama3_model(llama_config_from_descriptor(opt.model));
        if (is_model_descriptor(opt.model)) return gpt2_model(config_from_descriptor(opt.model));
    } catch (const InputError& e) { fail("-e (--model): %s", e.what()); }
    if (!path_exists(opt.model))
        fail("-e (--model): '%s' is neither a model descriptor nor an existing file", opt.model.c_str());
    *model_file = with_flag("-e (--model)", [&] { return read_any_model_file(opt.model); });
    return model_file->config;
}

// The data loaders, checked to be the same files on every rank, and the number of steps.
static void open_data(Run& run) {
    const TrainOptions& opt = run.opt;
    if (is_llama3(run.config) && opt.train_data.find("janeausten_llama3_train.bin") != std::string::npos &&
        !path_exists(opt.train_data))
        fail("-i (--train-data): %s: the built-in dataset in Llama 3 tokens is not there yet; data/prepare janeausten "
             "--tokenizer llama3 builds it", opt.train_data.c_str());
    run.train_loader = open_loader("-i (--train-data)", opt.train_data, run.B, run.T, run.config, opt.shuffle,
                                   opt.seed, run.mesh);
    if (opt.val_every > 0 && !opt.val_data.empty())
        run.val_loader =
            open_loader("-j (--val-data)", opt.val_data, run.B, run.T, run.config, false, opt.seed, run.mesh);
    run.ranks.check_same(data_fingerprint(*run.train_loader), "the training data files (-i)");
    run.max_steps = opt.max_steps > 0
                        ? opt.max_steps
                        : (int)std::max<int64_t>(1, run.train_loader->chunks_per_epoch() / run.accum_steps);
    run.last_step = opt.stop_at > 0 ? std::min(opt.stop_at, run.max_steps) : run.max_steps;
}

// -y 1 resumes from the newest complete checkpoint, or starts afresh when there is none yet (as llm.c
// does), so a supervisor can restart a run with the same command line every time. A checkpoint is
// complete once its DONE marker exists: rank 0 writes it after every rank's state file is in place,
// whatever the mesh that wrote them. Every rank reads rank 0's file for the run's progress (the same on
// all ranks) and checks every rank's file (streaming its checksum) and that together they cover the
// model; the slices it keeps are read once the model exists (resume_model). Returns false when there
// is nothing to resume from.
struct Resumed {
    std::unique_ptr<ModelWeightsReader> weights;  // the checkpoint's model file, its header checked
    std::unique_ptr<CheckpointState> state;    // its state files, checked to cover the model
};
static bool read_resume_point(Run& run, Resumed* resumed) {
    const TrainOptions& opt = run.opt;
    const std::vector<long long> checkpoints =
        opt.resume ? complete_checkpoints(opt.output_dir, 1) : std::vector<long long>();
    if (checkpoints.empty()) return false;
    const std::string path = checkpoint_state_path(opt.output_dir, checkpoints.back(), 0);
    TrainingStateFile first = open_training_state(path);
    check_same_run(first.state().shape, run.state.shape, path);
    check_same_optimizer(first.state().optimizer, run.state.optimizer, path);
    resumed->weights = std::make_unique<ModelWeightsReader>(checkpoint_model_path(opt.output_dir, checkpoints.back()));
    resumed->state = std::make_unique<CheckpointState>(opt.output_dir, checkpoints.back(), std::move(first));
    const TrainingState& saved = resumed->state->first();
    run.train_loader->set_position(
        position_for_ranks(saved.loader, saved.data_ranks, run.mesh.data, path, run.main_rank));
    run.state.step = saved.step;
    run.state.sample_rng_state = saved.sample_rng_state;
    run.state.loss_detector = saved.loss_detector;
    run.state.norm_detector = saved.norm_detector;
    run.resumed_mesh = {saved.data_ranks, saved.pipeline_parallel, saved.tensor_parallel};
    return true;
}

// Gradient compression's residuals (and PowerSGD's factors) continue where this rank's file left them
// when the checkpoint was written by as many data ranks with the same settings; otherwise they start
// from zero, which rank 0 says in one line.
static void resume_compression(Run& run, CheckpointState& checkpoint) {
    const CompressionState saved = checkpoint.compression_of_rank(run.ranks.rank);
    const bool taken = run.model->set_compression_state(saved);
    const CompressionState& first = checkpoint.first().compression;
    if (run.main_rank && !taken && !first.empty() && run.opt.grad_compression != "none")
        printf("notice: the checkpoint's gradient compression state (--grad-compression %s on %d data ranks) "
               "does not fit this run (--grad-compression %s on %d data ranks): the error-feedback residuals "
               "start from zero\n",
               grad_compression_name((GradCompression)first.method), first.data_ranks,
               run.opt.grad_compression.c_str(), run.mesh.data);
}

// The resumed model's weights and optimizer state, each rank reading only the slices of the
// checkpoint it keeps (train/resharding.h), one array set at a time; what the ranks read and held,
// and how much their resident memory grew meanwhile, goes into the start-up report.
static void resume_model(Run& run, Resumed& resumed) {
    TrainModel& model = *run.model;
    ReshardingCounts counts;
    counts.resident_growth_known = reset_peak_resident();
    const uint64_t resident_before = resident_bytes();
    model.set_placed_working_weights(
        read_placed_weights(*resumed.weights, run.config, model.working_weights_placement(), &counts));
    {
        std::vector<float> master, m, v;
        resumed.state->read_placed(model.optimizer_state_placement(), &master, &m, &v, &counts);
        model.set_placed_optimizer_state(master, m, v);
    }
    resume_compression(run, *resumed.state);
    const uint64_t peak = peak_resident_bytes();
    counts.resident_growth = peak > resident_before ? peak - resident_before : 0;
    resumed = Resumed();
    run.resume_report = resharding_report(gather_counts(counts, run.ranks), parameter_count(run.config));
}

// The model, with its weights: the checkpoint's, the model file's, or fresh ones from the descriptor.
static void create_model(Run& run, AnyModelFile& model_file, Resumed& resumed) {
    run.model = run.spec.create_model(run.config, run.opt);
    if (run.resuming) {
        resume_model(run, resumed);
    } else if (model_file.params.empty()) {
        std::vector<float> weights(parameter_count(run.config));
        init_model_params(run.config, run.opt.seed, weights.data());
        run.model->set_working_weights(weights);
    } else {
        run.model->set_working_weights(model_file.params);
    }
}

// Rank 0 samples; where forward() is a collective (the model is spread over the ranks), every rank
// generates the same tokens alongside it, and rank 0 prints them.
static void prepare_sampling(Run& run) {
    const bool all_ranks_sample = run.model->forward_is_collective();
    run.can_sample = (run.main_rank || all_ranks_sample) && run.opt.sample_every > 0 && path_exists(run.opt.tokenizer);
    if (all_ranks_sample) run.ranks.check_same(run.can_sample, "whether the --tokenizer file exists");
    if (run.can_sample) run.decode_table = with_flag("--tokenizer", [&] { return read_decode_table(run.opt.tokenizer); });
    run.sample_rng = Rng(run.state.sample_rng_state);
}

// The timed choices (train/algorithm_table.h). Before the first step, on every rank: the run folder's
// table, where it holds one for this environment, adopted (what it lacks is still timed, and shared
// after the first step). Another environment's table is ignored with a note (and replaced after the
// first step); a damaged one stops the run with one line naming it.
static void load_algorithms(Run& run) {
    const std::string environment = run.model->algorithm_environment();
    if (environment.empty() || run.opt.output_dir.empty()) return;
    const std::string path = algorithm_table_path(run.opt.output_dir);
    if (!path_exists(path)) return;
    AlgorithmTable table = read_algorithm_table(path);
    if (table.environment != environment) {
        run.algorithms_note = strprintf("note: %s was written for %s, not for %s: ignored, the algorithms are "
                                        "timed afresh", path.c_str(), table.environment.c_str(), environment.c_str());
        return;
    }
    const int rejected = run.model->adopt_algorithms(table.choices, true);
    run.algorithms_note = strprintf("matmul algorithms: %zu loaded from %s, used by every rank without timing",
                                    table.choices.size(), path.c_str());
    if (rejected > 0) run.algorithms_note += strprintf(" (%d not offered here: the heuristic's first)", rejected);
    run.loaded_algorithms = std::move(table);
}

// After the first step of this process, on every rank: every rank's choices merged (rank 0's first) and
// adopted by all, nothing timed any more; rank 0 saves the table where it changed, and reports it.
static void share_algorithms(Run& run, int step) {
    if (run.model->algorithm_environment().empty()) return;
    const AlgorithmTable mine = run.model->algorithm_choices();
    const AlgorithmTable shared = share_algorithm_table(mine, run.ranks);
    const int rejected = run.model->adopt_algorithms(shared.choices, false);
    const long rejected_anywhere = std::lround(run.ranks.mean(rejected) * run.ranks.num_ranks);
    if (!run.main_rank) return;
    const bool loaded = !run.loaded_algorithms.choices.empty();
    if (loaded && shared.choices == run.loaded_algorithms.choices) return;  // the start-up report said it all
    std::string where;
    if (!run.opt.output_dir.empty()) {
        write_algorithm_table(algorithm_table_path(run.opt.output_dir), shared);
        where = "; saved in " + algorithm_table_path(run.opt.output_dir);
    }
    printf("matmul algorithms: %zu configurations (%d timed on rank 0, %zu met only on other ranks%s), every "
           "rank's from step %d on%s\n", shared.choices.size(), mine.timed, shared.choices.size() - mine.choices.size(),
           loaded ? ", the others loaded" : "", step + 1, where.c_str());
    if (rejected_anywhere > 0)
        printf("note: %ld of rank 0's algorithms are not offered on other ranks: their heuristic's first computes "
               "those products there\n", rejected_anywhere);
}

// The trainer's defaults for the model's family: a Llama 3 model reads Llama 3 tokens, so where -i, -j
// and --tokenizer were left at their defaults it reads the built-in dataset's Llama 3 shards and
// decodes samples with Llama 3's table (data/prepare janeausten --tokenizer llama3 writes them).
static TrainOptions family_defaults(TrainOptions defaults, const ModelConfig& config, TrainOptions* opt, int argc,
                                    char** argv) {
    if (!is_llama3(config)) return defaults;
    struct Default {
        std::string TrainOptions::*field;
        const char* flag;
        const char* llama3;
    };
    for (const Default d :
         {Default{&TrainOptions::train_data, "--train-data", "data/janeausten/janeausten_llama3_train.bin"},
          Default{&TrainOptions::val_data, "--val-data", "data/janeausten/janeausten_llama3_val.bin"},
          Default{&TrainOptions::tokenizer, "--tokenizer", "data/llama3_tokenizer.bin"}}) {
        if (!train_flag_given(argc, argv, d.flag)) opt->*d.field = d.llama3;  // (a path given is kept)
        defaults.*d.field = d.llama3;
    }
    return defaults;
}

// Everything before the first step: flags, model shape, data, resume point, all checked before
// anything is written; then the model, the output folder and the metrics log. Returns false when the
// run ends here (--help, --dry-run), with *status set.
static bool set_up(Run& run, int argc, char** argv, int* status) {
    const TrainerSpec& spec = run.spec;
    TrainOptions& opt = run.opt;
    opt = spec.defaults;
    *status = 0;
    if (parse_train_flags(argc, argv, &opt) == FlagsResult::HELP_SHOWN) return false;
    run.ranks.check_same(command_line_fingerprint(argc, argv), "the command line");
    install_interrupt_handlers(run.main_rank, opt.stop_timeout);
    AnyModelFile model_file;
    run.config = model_shape(opt, &model_file);
    run.data_choice = choose_data_paths(&opt, family_defaults(spec.defaults, run.config, &opt, argc, argv));
    const int planned = planned_ranks(opt, run.ranks);
    if ((opt.tensor_parallel > 1 || opt.pipeline_parallel > 1) && !spec.model_parallel)
        fail("-tp and -pp split the model across GPUs: they need the CUDA trainer (train_gpt)");
    validate_train_options(&opt, run.config, planned);
    run.optimizer = optimizer_settings(opt);
    if (opt.dry_run) {
        *status = print_run_plan(spec, opt, run.config, planned, run.main_rank);
        return false;
    }
    RankGroup& ranks = run.ranks;
    run.mesh = make_mesh(ranks.num_ranks, ranks.rank, opt.tensor_parallel, opt.pipeline_parallel, opt.shard_ranks);
    run.B = opt.batch_size, run.T = opt.seq_len;
    run.accum_steps = grad_accum_steps(opt, ranks.num_ranks);
    run.peak_lr = peak_learning_rate(opt);
    open_data(run);

    TrainingState& state = run.state;
    state.shape = {run.config, run.B, run.T, opt.total_batch, ranks.num_ranks, opt.shuffle, opt.seed};
    state.rank = ranks.rank;
    state.data_ranks = run.mesh.data, state.tensor_parallel = run.mesh.tensor;
    state.pipeline_parallel = run.mesh.pipeline;
    state.optimizer = run.optimizer.kind;
    state.sample_rng_state = opt.seed ^ 0x5A4D504C45ull;  // "SAMPLE": a stream apart from the others
    Resumed resumed;
    check_snapshot_dir(opt);
    if (run.main_rank && !opt.output_dir.empty()) run.folder_lock.take(opt.output_dir);  // before any write there
    recover_snapshot(opt, ranks);  // a snapshot newer than the newest checkpoint becomes one (-y 1)
    run.keeper.prepare(opt);  // -y 1: checkpoint leftovers gone, damaged ones set aside
    run.resuming = read_resume_point(run, &resumed);

    check_output_folder(opt, run.resuming, state.step, run.last_step, run_settings(opt, run.max_steps),
                        run.main_rank);
    if (!opt.resume) remove_snapshots(snapshot_root(opt), ranks);  // a fresh run: none of its own yet
    check_host_memory(spec.host_memory_needed ? spec.host_memory_needed(run.config, opt) : ModelMemory(),
                      run.config, opt, run.resuming, !model_file.params.empty());
    run.hellaswag.reset(new HellaSwagEval(opt, model_vocab_size(run.config), is_gpt2(run.config)));
    create_model(run, model_file, resumed);
    load_algorithms(run);
    prepare_sampling(run);

    if (!opt.output_dir.empty() && run.main_rank) {
        prepare_output_folder(
            opt, run.resuming,
            make_run_record(argc, argv, opt, run.max_steps, run.config, run.train_loader->files(),
                            run.val_loader ? run.val_loader->files() : std::vector<std::string>(),
                            ranks.num_ranks, run.resuming ? state.step : 0));
        if (run.resuming) truncate_metrics_log(metrics_log_path(opt.output_dir), state.step);
        run.keeper.record_snapshot_folder();  // (--snapshot-every) for a supervisor that abandons the run
        run.metrics.reset(new MetricsLog(metrics_log_path(opt.output_dir)));
    }
    run.inputs.resize((size_t)run.B * run.T), run.targets.resize((size_t)run.B * run.T);
    run.step_flops = training_flops_per_token(run.config, run.T) * (double)opt.total_batch;
    run.clock = make_run_clock(opt, run.max_steps, run.last_step);
    int first_profiled = 0, last_profiled = 0;
    if (profile_step_range(opt, &first_profiled, &last_profiled) && last_profiled > run.last_step)
        fail("--profile-steps: step %d is past the run's last step %d", last_profiled, run.last_step);
    std::vector<int> stage_of_rank;
    for (int r = 0; r < ranks.num_ranks; r++)
        stage_of_rank.push_back(
            make_mesh(ranks.num_ranks, r, opt.tensor_parallel, opt.pipeline_parallel, opt.shard_ranks).stage);
    run.profile = std::make_unique<StepProfile>(opt, ranks, *run.model, stage_of_rank);
    return true;
}

// The start-up report (rank 0).
static void print_report(const Run& run) {
    const TrainOptions& opt = run.opt;
    const Mesh& mesh = run.mesh;
    printf("model: %s (%s), %zu parameters\n", model_source_text(opt, run.resuming, run.state.step).c_str(),
           describe_model(run.config).c_str(), parameter_count(run.config));
    printf("compute: %s\n", run.model->description().c_str());
    if (run.ranks.num_ranks > 1) printf("ranks: %s\n", run.ranks.description().c_str());
    if (mesh.tensor > 1 || mesh.pipeline > 1)
        printf("mesh: %s (tensor groups of consecutive ranks, then data ranks, pipeline stages outermost)\n",
               mesh.shape().c_str());
    print_memory_report(run.model->memory());
    printf("batch: B=%d T=%d, %lld tokens per step (%d micro-steps x %d %s), %d steps, %s schedule, lr %.2e\n",
           run.B, run.T, opt.total_batch, run.accum_steps, mesh.data,
           mesh.data == run.ranks.num_ranks ? "ranks" : "data ranks", run.max_steps, schedule_name(opt.schedule),
           run.peak_lr);
    if (opt.lr_scaling != "none")
        printf("lr scaling: %s, %lld tokens per step / --base-batch %lld: peak lr %.3e (-l %.3e)\n",
               opt.lr_scaling.c_str(), opt.total_batch, opt.base_batch, run.peak_lr, opt.learning_rate);
    if (run.optimizer.kind != OptimizerKind::ADAMW)
        printf("optimizer: %s\n", describe_optimizer(run.optimizer).c_str());
    print_data_report(run.data_choice, opt, *run.train_loader, run.max_steps, run.accum_steps, mesh.data);
    run.keeper.print_plan(parameter_count(run.config), run.model->working_weight_type());
    printf("%s", run.keeper.tidy_report().c_str());
    if (run.resuming)
        printf("resumed from step %lld in %s%s\n", (long long)run.state.step, opt.output_dir.c_str(),
               run.resumed_mesh.shape() != mesh.shape()
                   ? strprintf(" (saved on %d ranks as %s, now %d as %s: optimizer state re-sharded)",
                               run.resumed_mesh.size(), run.resumed_mesh.shape().c_str(), run.ranks.num_ranks,
                               mesh.shape().c_str()).c_str()
                   : "");
    if (run.resuming) printf("%s\n", run.resume_report.c_str());
    if (!run.folder_lock.note().empty()) printf("%s\n", run.folder_lock.note().c_str());
    if (!run.algorithms_note.empty()) printf("%s\n", run.algorithms_note.c_str());
    if (opt.resume && !run.resuming)
        printf("note: no complete checkpoint in %s yet, so training starts from step 0\n", opt.output_dir.c_str());
    if (opt.sample_every > 0 && !run.can_sample)
        printf("note: no decode table at '%s', so no samples are printed\n", opt.tokenizer.c_str());
    if (!run.hellaswag->note().empty()) printf("%s\n", run.hellaswag->note().c_str());
    for (const std::string& note : llmc_flag_notes(opt)) printf("note: %s\n", note.c_str());
    if (run.spec.report_ignored_flags) run.spec.report_ignored_flags(opt);
    fflush(stdout);
}

// Validation loss and HellaSwag accuracy into m, where they run (all: the untrained model's).
static void evaluate(Run& run, StepMetrics* m, bool validation, bool hellaswag) {
    note_waiting_on("validation");
    if (validation && run.val_loader) {
        m->has_val = true;
        m->val_loss = run.ranks.mean(
            validation_loss(*run.model, *run.val_loader, run.opt.val_batches, run.B, run.T, run.inputs, run.targets));
        if (run.main_rank) printf("val loss %.4f\n", m->val_loss);
    }
    if (hellaswag && run.hellaswag->active()) {
        const EvalResult result = run.hellaswag->run(*run.model, run.T, run.ranks);
        m->has_hellaswag = true, m->hellaswag_accuracy = result.accuracy();
        if (run.main_rank) printf("%s\n", describe_eval_result(result).c_str());
    }
}

// Why a step's update was skipped, for its message.
static std::string skip_reason_text(UpdateVerdict verdict, double loss_z, double norm_z) {
    switch (verdict) {
        case UpdateVerdict::LOSS_NOT_FINITE: return "the loss is not finite";
        case UpdateVerdict::NORM_NOT_FINITE: return "the gradient norm is not finite";
        case UpdateVerdict::LOSS_OUTLIER: return strprintf("loss z-score %.2f", loss_z);
        case UpdateVerdict::NORM_OUTLIER: return strprintf("grad norm z-score %.2f", norm_z);
        case UpdateVerdict::APPLY: break;
    }
    return "";
}

// One optimizer step: the micro-batches' gradients (each scaled by 1/accum_steps, so the gradients are
// those of the step's mean loss), the norm, clipping, the optimizer's update (skipped when the loss or
// the norm is not finite, or an outlier: -sl, -sg), and the step line. The model takes the whole step at once
// (TrainModel::optimizer_step): a GPU model decides on the device whether to apply the update, from the
// loss and the norm it computed there, and reads them back once, after the update was issued; the
// detectors here then take the values it reports, as every rank's model reports the same.
static StepMetrics train_step(Run& run, int step, int first_step) {
    const TrainOptions& opt = run.opt;
    TrainModel& model = *run.model;
    const auto start = std::chrono::steady_clock::now();
    run.profile->step_begins(step);
    note_waiting_on("a training step (its reads and its exchanges with the other ranks)");
    StepUpdate update;
    update.optimizer = run.optimizer;
    update.optimizer.learning_rate = (float)learning_rate_at(
        {opt.schedule, run.peak_lr, opt.warmup_steps, run.max_steps, opt.final_lr_fraction}, step - 1);
    if (run.optimizer.kind == OptimizerKind::MUON)  // Muon's own peak, on the same schedule
        update.optimizer.muon_learning_rate = (float)learning_rate_at(
            {opt.schedule, opt.muon_lr, opt.warmup_steps, run.max_steps, opt.final_lr_fraction}, step - 1);
    update.step = step;
    update.clip_norm = GRAD_CLIP;
    update.skip_loss_z = opt.skip_loss_z, update.skip_norm_z = opt.skip_norm_z;
    update.loss_window = run.state.loss_detector, update.norm_window = run.state.norm_detector;
    const StepOutcome result =
        model.optimizer_step(run.accum_steps, run.B, run.T,
                             run.profile->timed_reads(next_batch_of(*run.train_loader, opt.overfit_single_batch)),
                             update, [&](double x) { return run.ranks.mean(x); });
    const double loss = result.loss, norm = result.norm;
    const double loss_z = run.state.loss_detector.update(loss), norm_z = run.state.norm_detector.update(norm);
    if (run.main_rank && result.verdict != UpdateVerdict::APPLY)
        printf("skipping the update of step %d: %s\n", step, skip_reason_text(result.verdict, loss_z, norm_z).c_str());
    const double ms = ms_since(start);
    run.total_ms += ms;
    run.timed_steps++;
    const bool logged = step_is_logged(opt, step, first_step, run.last_step);
    std::string timers_json;
    const std::string phases = run.profile->step_ends(step, ms, logged, &timers_json);

    StepMetrics m;
    m.step = step;
    m.has_train = true;
    m.loss = loss, m.lr = update.optimizer.learning_rate, m.norm = norm, m.ms = ms;
    m.tokens_per_s = opt.total_batch / (ms / 1000.0);
    m.timers_json = timers_json;
    m.sent_bytes = model.bytes_sent_last_step();
    if (opt.check_replicas) {
        const std::vector<float> weights = model.replica_weights();
        const std::string what = strprintf("--check-replicas: the weights after step %d", step);
        run.ranks.check_same(fnv1a64(weights.data(), weights.size() * sizeof(float), FNV_OFFSET), what.c_str());
    }
    run.clock.add_step(ms);
    const double peak = model.peak_flops() * run.ranks.num_ranks;
    const std::string mfu = peak > 0 ? strprintf("%.1f%%", 100.0 * run.step_flops / (ms / 1000.0) / peak) : "n/a";
    // -lg N: the GPU read every N steps (after the step's timing), at the end of its line.
    std::string gpu;
    if (opt.log_gpu_every > 0 && step % opt.log_gpu_every == 0) {
        m.has_gpu = true;
        m.gpu = model.device_telemetry();
        gpu = " | GPU " + (m.gpu.available ? gpu_telemetry_text(m.gpu) : "n/a (" + m.gpu.why_not + ")");
    }
    if (run.main_rank && logged)
        printf("step %d/%d | loss %.4f | lr %.2e | norm %.3f | %.1f ms | %.0f tok/s | MFU %s | ETA %s%s%s\n", step,
               run.max_steps, loss, m.lr, norm, ms, m.tokens_per_s, mfu.c_str(),
               eta_text(run.clock.eta_seconds(step)).c_str(), gpu.c_str(), phases.empty() ? "" : (" | " + phases).c_str());
    if (run.main_rank && logged) fflush(stdout);  // seen before the step's validation or sample
    return m;
}

// After a step: validation and HellaSwag, the metrics log, samples, and a checkpoint when one is due or
// the run stops (SIGINT / SIGTERM: every rank stops at the same step, as soon as any rank was asked
// to). Returns true when the run stops here.
static bool periodic_work(Run& run, int step, StepMetrics& m) {
    const TrainOptions& opt = run.opt;
    const auto eval_start = std::chrono::steady_clock::now();
    const bool validation = run.val_loader && (step % opt.val_every == 0 || step == run.last_step);
    const bool hellaswag = validates_at(opt, step, run.last_step);
    // Every rank decides alike whether weights are read here (only rank 0 may sample).
    const bool sample_step = opt.sample_every > 0 && (step % opt.sample_every == 0 || step == run.max_steps);
    const bool sampling = run.can_sample && sample_step;
    if (validation || hellaswag || sample_step) run.model->complete_weight_update();
    evaluate(run, &m, validation, hellaswag);
    if (hellaswag) run.clock.validation.add(ms_since(eval_start));
    note_waiting_on("the snapshot or checkpoint written since the step before");
    run.keeper.finish_earlier_writes();  // before the step is logged
    if (run.metrics) run.metrics->write(m);
    // Samples draw from sample_rng, which a checkpoint saves; they come at the same steps whether or
    // not a run stops early (--stop-at) and resumes, so continuations stay bitwise.
    if (sampling) {
        const auto sample_start = std::chrono::steady_clock::now();
        note_waiting_on("a sample");
        print_sample(*run.model, run.decode_table, run.sample_rng, opt.gen_tokens, run.T, opt.sample_seconds,
                     run.main_rank, run.model->forward_is_collective() ? &run.ranks : nullptr);
        run.clock.sampling.add(ms_since(sample_start));
    }
    fflush(stdout);

    run.state.step = step;
    // SIGINT, SIGTERM, or a file named STOP in the output folder (rank 0 looks; removed once obeyed).
    const std::string stop_file = opt.output_dir.empty() ? "" : opt.output_dir + "/STOP";
    const bool stop_file_found = run.main_rank && !stop_file.empty() && path_exists(stop_file);
    note_waiting_on("the other ranks' agreement at the step boundary");
    const bool stopping = run.ranks.mean(stop_requested() || stop_file_found ? 1.0 : 0.0) > 0 && step < run.last_step;
    stop_boundary_reached();  // (where a stop was asked: its clock ends here)
    if (stop_file_found && stopping) {
        note_stop_file();
        remove(stop_file.c_str());
    }
    const bool ending = step == run.last_step || stopping;
    if (run.keeper.due(step, ending)) {
        const auto save_start = std::chrono::steady_clock::now();
        const double save_start_us = clock_us();
        run.keeper.save(step, ending, [&] {
            run.state.loader = run.train_loader->position();
            run.state.sample_rng_state = run.sample_rng.state;
            return take_checkpoint_part(*run.model, run.state, run.ranks);
        });
        run.clock.checkpoint.add(ms_since(save_start));
        run.profile->checkpoint_written(step, save_start_us, ms_since(save_start));
    }
    if (ending) run.keeper.end_snapshots();  // a disk checkpoint of this step replaces the snapshots
    return stopping;
}

// A checkpoint's (or snapshot's) host copy is taken into fresh vectors at each step boundary (the
// model's optimizer_part, the gathered weights). glibc serves allocations that large with a fresh
// mmap and unmaps them when they are freed, so every copy first touches every page of its memory
// again: on a virtual machine, where a page fault costs some 10 us, that was 45 ms of a 100 ms step
// with a checkpoint after every step (dev/RESULTS.md), more than the copying. So allocations of up to
// 32 MiB (the most glibc allows) come from the heap, and the heap keeps up to 1 GiB of freed memory
// instead of handing it back: the next copy reuses pages already mapped. Larger arrays (more than 8M
// parameters on a rank) are mapped afresh by glibc; the host copy takes those from the arrays the
// checkpoint before handed back once written (base/host_arrays.h).
static void reuse_freed_memory() {
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

static int train(int argc, char** argv, const TrainerSpec& spec) {
    reuse_freed_memory();
    RankGroup single_rank;
    Run run(spec, spec.ranks ? *spec.ranks : single_rank);
    int status = 0;
    if (!set_up(run, argc, argv, &status)) return status;
    if (run.main_rank) print_report(run);

    if (!run.resuming) {  // the untrained model, as a baseline (step 0)
        const auto start = std::chrono::steady_clock::now();
        StepMetrics baseline;
        evaluate(run, &baseline, true, true);
        if (run.metrics && (baseline.has_val || baseline.has_hellaswag)) run.metrics->write(baseline);
        if (run.val_loader || run.hellaswag->active()) run.clock.validation.add(ms_since(start));
    }
    const int first_step = (int)run.state.step + 1;
    for (int step = first_step; step <= run.last_step; step++) {
        StepMetrics m = train_step(run, step, first_step);
        if (step == first_step) share_algorithms(run, step);
        if (periodic_work(run, step, m)) return finish_interrupted_run(step, run.opt.output_dir, run.main_rank);
    }

    if (run.main_rank) {
        if (run.timed_steps > 0)
            printf("done: %d steps, %.1f ms per step on average\n", run.timed_steps, run.total_ms / run.timed_steps);
        else
            printf("done: nothing to do, the run already reached step %d\n", run.last_step);
        printf("%s", run.model->end_of_run_report().c_str());
        printf("%s", run.profile->overhead_report().c_str());
    }
    return 0;
}

// An error ends the run. With several ranks it may be this rank's alone (a file missing on its node),
// and the others would wait for it in their next collective: end them all.
int run_training(int argc, char** argv, const TrainerSpec& spec) {
    try {
        return train(argc, argv, spec);
    } catch (const InputError& e) {
        fprintf(stderr, "error: %s\n", e.what());
    } catch (const std::bad_alloc&) {
        fprintf(stderr, "error: out of memory (try a smaller model, -b or -t)\n");
    }
    if (spec.ranks && spec.ranks->num_ranks > 1) spec.ranks->abort_all(1);
    return 1;
}

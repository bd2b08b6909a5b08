// The shared training loop (host/train_loop.h).
#include "host/train_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "host/cached_sampling.h"
#include "host/checkpoint.h"
#include "host/dataloader.h"
#include "host/decode_table.h"
#include "host/errors.h"
#include "host/file_io.h"
#include "host/gpt_init.h"
#include "host/hellaswag.h"
#include "host/interrupts.h"
#include "host/lr_schedule.h"
#include "host/memory_check.h"
#include "host/metrics_log.h"
#include "host/model_descriptor.h"
#include "host/model_file.h"
#include "host/rng.h"
#include "host/run_folder.h"
#include "host/run_plan.h"
#include "host/run_report.h"
#include "host/sampling.h"
#include "host/training_state.h"
#include "host/model_part.h"
#include "parallel/mesh.h"

constexpr double GRAD_CLIP = 1.0;  // global gradient-norm clipping threshold

double training_flops_per_token(const GPTConfig& c, int T) {
    const double params = (double)param_layout(c).total;
    return 6.0 * params + 6.0 * c.num_layers * c.channels * (double)T;
}

// "ETA 1h02m" / "ETA 3m20s".
static std::string eta_text(double seconds) {
    long s = (long)std::lround(seconds);
    if (s >= 3600) return strprintf("%ldh%02ldm", s / 3600, s / 60 % 60);
    return strprintf("%ldm%02lds", s / 60, s % 60);
}

// Forward and backward over `accum_steps` micro-batches, each gradient scaled by 1/accum_steps, so
// the gradients are those of the mean loss over the whole step; returns that mean loss. With
// overfit set, every micro-batch is the loader's first batch.
static double accumulate_gradients(TrainModel& model, DataLoader& loader, int accum_steps,
                                   bool overfit, int B, int T, std::vector<int>& inputs,
                                   std::vector<int>& targets) {
    model.zero_grad();
    double loss = 0;
    for (int micro = 0; micro < accum_steps; micro++) {
        if (overfit) loader.reset();
        loader.next_batch(inputs.data(), targets.data());
        loss += model.forward_backward(inputs.data(), targets.data(), B, T, 1.0f / accum_steps,
                                       micro == accum_steps - 1) /
                accum_steps;
    }
    return loss;
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
// position (a window of the last T tokens), and prints them through the decode table (if `print`).
static void print_sample(TrainModel& model, const DecodeTable& table, Rng& rng, int count, int T,
                         bool print) {
    const GPTConfig& c = model.config();
    std::vector<int> tokens = {table.eot_token < c.vocab_size ? table.eot_token : c.vocab_size - 1};
    std::vector<float> logits(c.vocab_size);
    std::string text;
    // Through the model's key/value cache where it has one; the same tokens either way.
    CachedSampler cached(T, [&] { model.decode_reset(T); },
                         [&](int token, float* out) { model.decode_next(token, out); });
    for (int i = 0; i < count; i++) {
        if (model.supports_decode()) {
            cached.next_logits(tokens, logits.data());
        } else {
            int start = std::max(0, (int)tokens.size() - T);
            int length = (int)tokens.size() - start;
            model.forward(tokens.data() + start, nullptr, 1, length);
            model.logits_at(length - 1, logits.data());
        }
        int next = sample_token(logits.data(), c.vocab_size, rng.uniform());
        tokens.push_back(next);
        text += table.decode(next);
    }
    if (print) printf("sample: %s\n---\n", text.c_str());
}

// A data loader over this rank's slices (the ranks of one data-parallel replica read the same ones);
// an error in its shards also names the flag.
static std::unique_ptr<DataLoader> open_loader(const char* flag, const std::string& pattern, int B,
                                               int T, const GPTConfig& config, bool shuffle,
                                               uint64_t seed, const Mesh& mesh) {
    try {
        return std::make_unique<DataLoader>(pattern, B, T, mesh.data_rank, mesh.data, config.vocab_size,
                                            shuffle, seed);
    } catch (const InputError& e) { fail("%s: %s", flag, e.what()); }
}

// Every rank writes its own state file (the part of the optimizer state it is responsible for); rank 0
// also writes the model file, assembled from every rank's part of the weights, and marks the
// checkpoint done once every rank has finished writing.
static void save_checkpoint(const std::string& dir, int keep, int major_every, TrainModel& model,
                            TrainingState state, RankGroup& ranks) {
    OptimizerPart part = model.optimizer_part();
    state.ranges = std::move(part.ranges);
    state.params = std::move(part.master), state.adam_m = std::move(part.m), state.adam_v = std::move(part.v);
    const std::vector<float> weights =
        assemble_on_rank0(model.working_weights_part(), param_layout(model.config()).total, ranks);
    if (ranks.rank == 0)
        write_model_file(checkpoint_model_path(dir, state.step), model.config(), weights.data(),
                         model.working_weight_type());
    write_training_state(checkpoint_state_path(dir, state.step, ranks.rank), state);
    ranks.barrier();
    if (ranks.rank == 0) {
        mark_checkpoint_done(dir, state.step);
        prune_checkpoints(dir, keep, ranks.num_ranks, major_every);
        announce_checkpoint(dir, state.step, ranks.num_ranks);
    }
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

// The optimizer state of checkpoint `step` as the whole model's (ParamLayout order), whatever mesh
// and ZeRO stage wrote it: each rank's file holds its part with its ranges, and together they cover
// the model once (checked). `first` is rank 0's state, already read.
static void read_whole_optimizer_state(const std::string& dir, long long step,
                                       const TrainingState& first, std::vector<float>* master,
                                       std::vector<float>* m, std::vector<float>* v) {
    const size_t total = param_layout(first.shape.config).total;
    const int saved_ranks = first.shape.num_ranks;
    master->assign(total, 0.0f), m->assign(total, 0.0f), v->assign(total, 0.0f);
    Coverage coverage(total);
    for (int r = 0; r < saved_ranks; r++) {
        const std::string path = checkpoint_state_path(dir, step, r);
        const TrainingState part = r == 0 ? first : read_training_state(path);
        if (part.rank != r || part.shape.num_ranks != saved_ranks)
            fail("%s: not rank %d of %d of this checkpoint", path.c_str(), r, saved_ranks);
        coverage.add(part.ranges, path);
        scatter_part(part.ranges, part.params.data(), master);
        scatter_part(part.ranges, part.adam_m.data(), m);
        scatter_part(part.ranges, part.adam_v.data(), v);
    }
    coverage.fail_if_incomplete(strprintf("the state files of step %lld in %s", step, dir.c_str()));
}

// The loader position of a run saved on `saved_ranks` ranks, for this run's ranks: a chunk holds
// B·T tokens per rank, so the same token offset is a different chunk count.
static LoaderPosition position_for_ranks(LoaderPosition p, int saved_ranks, int ranks,
                                         const std::string& path) {
    if (saved_ranks == ranks) return p;
    if (p.chunk_step * saved_ranks % ranks != 0)
        fail("%s: saved on %d ranks at a point that %d ranks cannot continue from; resume on %d "
             "ranks", path.c_str(), saved_ranks, ranks, saved_ranks);
    p.chunk_step = p.chunk_step * saved_ranks / ranks;
    return p;
}

static int train(int argc, char** argv, const TrainerSpec& spec) {
    RankGroup single_rank;
    RankGroup& ranks = spec.ranks ? *spec.ranks : single_rank;
    const bool main_rank = ranks.rank == 0;

    // ---- flags ----
    TrainOptions opt = spec.defaults;
    if (parse_train_flags(argc, argv, &opt) == FlagsResult::HELP_SHOWN) return 0;
    ranks.check_same(command_line_fingerprint(argc, argv), "the command line");
    install_interrupt_handlers(main_rank);
    const DataChoice data_choice = choose_data_paths(&opt, spec.defaults);

    // ---- setup: model shape, data, resume point; all checked before anything is written ----
    GPTConfig config;
    ModelFile model_file;
    const bool from_descriptor = is_model_descriptor(opt.model);
    try {
        if (from_descriptor) config = config_from_descriptor(opt.model);
    } catch (const InputError& e) { fail("-e (--model): %s", e.what()); }
    if (!from_descriptor) {
        if (!path_exists(opt.model))
            fail("-e (--model): '%s' is neither a model descriptor nor an existing file",
                 opt.model.c_str());
        model_file = with_flag("-e (--model)", [&] { return read_model_file(opt.model); });
        config = model_file.config;
    }
    const int planned = planned_ranks(opt, ranks);
    if ((opt.tensor_parallel > 1 || opt.pipeline_parallel > 1) && !spec.model_parallel)
        fail("-tp and -pp split the model across GPUs: they need the CUDA trainer (train_gpt)");
    validate_train_options(&opt, config, planned);
    if (opt.dry_run) return print_run_plan(spec, opt, config, planned, main_rank);
    const Mesh mesh = make_mesh(ranks.num_ranks, ranks.rank, opt.tensor_parallel, opt.pipeline_parallel);
    const int B = opt.batch_size, T = opt.seq_len;
    const int accum_steps = grad_accum_steps(opt, ranks.num_ranks);

    std::unique_ptr<DataLoader> train_loader = open_loader(
        "-i (--train-data)", opt.train_data, B, T, config, opt.shuffle, opt.seed, mesh);
    std::unique_ptr<DataLoader> val_loader;
    if (opt.val_every > 0 && !opt.val_data.empty())
        val_loader = open_loader("-j (--val-data)", opt.val_data, B, T, config, false, opt.seed, mesh);
    ranks.check_same(data_fingerprint(*train_loader), "the training data files (-i)");
    const int max_steps =
        opt.max_steps > 0
            ? opt.max_steps
            : (int)std::max<int64_t>(1, train_loader->chunks_per_epoch() / accum_steps);
    const int last_step = opt.stop_at > 0 ? std::min(opt.stop_at, max_steps) : max_steps;

    TrainingState state;  // what a checkpoint saves; state.step = updates done so far
    state.shape = {config, B, T, opt.total_batch, ranks.num_ranks, opt.shuffle, opt.seed};
    state.rank = ranks.rank;
    state.data_ranks = mesh.data, state.tensor_parallel = mesh.tensor;
    state.pipeline_parallel = mesh.pipeline;
    state.sample_rng_state =
        opt.seed ^ 0x5A4D504C45ull;  // "SAMPLE": a stream apart from the others
    // -y 1 resumes from the newest complete checkpoint, or starts afresh when there is none yet (as
    // llm.c does), so a supervisor can restart a run with the same command line every time.
    // A checkpoint is complete once its DONE marker exists: rank 0 writes it after every rank's
    // state file is in place, whatever the number of ranks that wrote them. Every rank reads rank 0's
    // file for the run's progress (the same on all ranks) and all shards for the optimizer state.
    TrainingState resumed;
    ModelFile resumed_weights;
    std::vector<float> resumed_master, resumed_m, resumed_v;
    const std::vector<long long> checkpoints =
        opt.resume ? complete_checkpoints(opt.output_dir, 1) : std::vector<long long>();
    const bool resuming = !checkpoints.empty();
    if (resuming) {
        const std::string path = checkpoint_state_path(opt.output_dir, checkpoints.back(), 0);
        resumed = read_training_state(path);
        check_same_run(resumed.shape, state.shape, path);
        resumed_weights = read_model_file(checkpoint_model_path(opt.output_dir, checkpoints.back()));
        read_whole_optimizer_state(opt.output_dir, checkpoints.back(), resumed, &resumed_master,
                                   &resumed_m, &resumed_v);
        train_loader->set_position(
            position_for_ranks(resumed.loader, resumed.data_ranks, mesh.data, path));
        state.step = resumed.step;
        state.sample_rng_state = resumed.sample_rng_state;
        state.loss_detector = resumed.loss_detector;
        state.norm_detector = resumed.norm_detector;
    }

    check_output_folder(opt, resuming, state.step, last_step, run_settings(opt, max_steps),
                        main_rank);
    check_host_memory(spec.host_memory_needed ? spec.host_memory_needed(config, opt) : ModelMemory(),
                      config, opt, resuming, !from_descriptor);
    const HellaSwagEval hellaswag(opt, config.vocab_size);
    std::unique_ptr<TrainModel> model = spec.create_model(config, opt);
    if (resuming) {
        model->set_working_weights(resumed_weights.params);
        model->set_optimizer_state(resumed_master, resumed_m, resumed_v);
    } else if (from_descriptor) {
        std::vector<float> weights(param_layout(config).total);
        gpt_init_params(config, opt.seed, weights.data());
        model->set_working_weights(weights);
    } else {
        model->set_working_weights(model_file.params);
    }
    model_file = ModelFile();
    resumed_weights = ModelFile();
    const Mesh resumed_mesh = {resumed.data_ranks, resumed.pipeline_parallel, resumed.tensor_parallel};
    resumed = TrainingState();
    resumed_master = resumed_m = resumed_v = std::vector<float>();

    // Rank 0 samples; where forward() is a collective (ZeRO-3 gathers the weights from every rank),
    // every rank generates the same tokens alongside it, and rank 0 prints them.
    DecodeTable decode_table;
    const bool all_ranks_sample = model->forward_is_collective();
    bool can_sample =
        (main_rank || all_ranks_sample) && opt.sample_every > 0 && path_exists(opt.tokenizer);
    if (all_ranks_sample) ranks.check_same(can_sample, "whether the --tokenizer file exists");
    if (can_sample)
        decode_table = with_flag("--tokenizer", [&] { return read_decode_table(opt.tokenizer); });

    std::unique_ptr<MetricsLog> metrics;
    if (!opt.output_dir.empty() && main_rank) {
        prepare_output_folder(
            opt, resuming,
            make_run_record(argc, argv, opt, max_steps, config, train_loader->files(),
                            val_loader ? val_loader->files() : std::vector<std::string>(),
                            ranks.num_ranks, resuming ? state.step : 0));
        if (resuming) truncate_metrics_log(metrics_log_path(opt.output_dir), state.step);
        metrics.reset(new MetricsLog(metrics_log_path(opt.output_dir)));
    }

    // ---- report ----
    if (main_rank) {
        printf("model: %s (%s), %zu parameters\n",
               model_source_text(opt, resuming, state.step).c_str(),
               describe_config(config).c_str(), param_layout(config).total);
        printf("compute: %s\n", model->description().c_str());
        if (ranks.num_ranks > 1) printf("ranks: %s\n", ranks.description().c_str());
        if (mesh.tensor > 1 || mesh.pipeline > 1)
            printf("mesh: %s (tensor groups of consecutive ranks, then pipeline stages)\n",
                   mesh.shape().c_str());
        print_memory_report(model->memory());
        printf("batch: B=%d T=%d, %lld tokens per step (%d micro-steps x %d %s), %d steps, %s "
               "schedule, lr %.2e\n",
               B, T, opt.total_batch, accum_steps, mesh.data,
               mesh.data == ranks.num_ranks ? "ranks" : "data ranks", max_steps, schedule_name(opt.schedule),
               opt.learning_rate);
        print_data_report(data_choice, opt, *train_loader, max_steps, accum_steps, mesh.data);
        if (resuming)
            printf("resumed from step %lld in %s%s\n", (long long)state.step, opt.output_dir.c_str(),
                   resumed_mesh.shape() != mesh.shape()
                       ? strprintf(" (saved on %d ranks as %s, now %d as %s: optimizer state re-sharded)",
                                   resumed_mesh.size(), resumed_mesh.shape().c_str(), ranks.num_ranks,
                                   mesh.shape().c_str()).c_str()
                       : "");
        if (opt.resume && !resuming)
            printf("note: no complete checkpoint in %s yet, so training starts from step 0\n",
                   opt.output_dir.c_str());
        if (opt.sample_every > 0 && !can_sample)
            printf("note: no decode table at '%s', so no samples are printed\n",
                   opt.tokenizer.c_str());
        if (!hellaswag.note().empty()) printf("%s\n", hellaswag.note().c_str());
        for (const std::string& note : llmc_flag_notes(opt)) printf("note: %s\n", note.c_str());
        if (spec.report_ignored_flags) spec.report_ignored_flags(opt);
        fflush(stdout);
    }

    // ---- training loop ----
    std::vector<int> inputs((size_t)B * T), targets((size_t)B * T);
    const LRSchedule schedule = {opt.schedule, opt.learning_rate, opt.warmup_steps, max_steps,
                                 opt.final_lr_fraction};
    Rng sample_rng(state.sample_rng_state);
    const double step_flops = training_flops_per_token(config, T) * (double)opt.total_batch;
    double total_ms = 0;
    int timed_steps = 0;
    RunClock clock = make_run_clock(opt, max_steps, last_step);
    const auto baseline_start = std::chrono::steady_clock::now();
    StepMetrics baseline;  // the untrained model's validation loss and HellaSwag accuracy (step 0)
    if (!resuming && val_loader) {
        baseline.has_val = true;
        baseline.val_loss =
            ranks.mean(validation_loss(*model, *val_loader, opt.val_batches, B, T, inputs, targets));
        if (main_rank) printf("val loss %.4f\n", baseline.val_loss);
    }
    if (!resuming && hellaswag.active()) {
        const EvalResult result = hellaswag.run(*model, T, ranks);
        baseline.has_hellaswag = true, baseline.hellaswag_accuracy = result.accuracy();
        if (main_rank) printf("%s\n", describe_eval_result(result).c_str());
    }
    if (metrics && (baseline.has_val || baseline.has_hellaswag)) metrics->write(baseline);
    if (!resuming && (val_loader || hellaswag.active())) clock.validation.add(ms_since(baseline_start));
    const int first_step = (int)state.step + 1;
    for (int step = first_step; step <= last_step; step++) {
        const auto start = std::chrono::steady_clock::now();
        const double loss = ranks.mean(accumulate_gradients(
            *model, *train_loader, accum_steps, opt.overfit_single_batch, B, T, inputs, targets));
        const double norm = model->grad_norm();
        AdamWSettings adamw;
        adamw.learning_rate = (float)learning_rate_at(schedule, step - 1);
        adamw.weight_decay = (float)opt.weight_decay;
        adamw.grad_scale = norm > GRAD_CLIP ? (float)(GRAD_CLIP / norm) : 1.0f;
        // Skip the update when the loss or the norm is not finite, or is an outlier (-sl, -sg;
        // 0 = never skip).
        const double loss_z = state.loss_detector.update(loss),
                     norm_z = state.norm_detector.update(norm);
        const bool skip_loss = opt.skip_loss_z > 0 && loss_z > opt.skip_loss_z;
        const bool skip_norm = opt.skip_norm_z > 0 && norm_z > opt.skip_norm_z;
        const bool not_finite = !std::isfinite(loss) || !std::isfinite(norm);
        if (not_finite) {
            if (main_rank)
                printf("skipping the update of step %d: %s is not finite\n", step,
                       !std::isfinite(loss) ? "the loss" : "the gradient norm");
        } else if (skip_loss || skip_norm) {
            if (main_rank)
                printf("skipping the update of step %d: %s z-score %.2f\n", step,
                       skip_loss ? "loss" : "grad norm", skip_loss ? loss_z : norm_z);
        } else {
            model->update(adamw, step);
        }
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count();
        total_ms += ms;
        timed_steps++;

        StepMetrics m;
        m.step = step;
        m.has_train = true;
        m.loss = loss;
        m.lr = adamw.learning_rate;
        m.norm = norm;
        m.ms = ms;
        m.tokens_per_s = opt.total_batch / (ms / 1000.0);
        clock.add_step(ms);
        const double eta_s = clock.eta_seconds(step);
        const double peak = model->peak_flops() * ranks.num_ranks;
        const std::string mfu =
            peak > 0 ? strprintf("%.1f%%", 100.0 * step_flops / (ms / 1000.0) / peak) : "n/a";
        if (main_rank && step_is_logged(opt, step, first_step, last_step))
            printf("step %d/%d | loss %.4f | lr %.2e | norm %.3f | %.1f ms | %.0f tok/s | MFU %s | "
                   "ETA %s\n",
                   step, max_steps, loss, m.lr, norm, ms, m.tokens_per_s, mfu.c_str(),
                   eta_text(eta_s).c_str());
        const auto eval_start = std::chrono::steady_clock::now();
        if (val_loader && (step % opt.val_every == 0 || step == last_step)) {
            m.has_val = true;
            m.val_loss =
                ranks.mean(validation_loss(*model, *val_loader, opt.val_batches, B, T, inputs, targets));
            if (main_rank) printf("val loss %.4f\n", m.val_loss);
        }
        if (hellaswag.active() && validates_at(opt, step, last_step)) {
            const EvalResult result = hellaswag.run(*model, T, ranks);
            m.has_hellaswag = true, m.hellaswag_accuracy = result.accuracy();
            if (main_rank) printf("%s\n", describe_eval_result(result).c_str());
        }
        if (validates_at(opt, step, last_step)) clock.validation.add(ms_since(eval_start));
        if (metrics) metrics->write(m);
        // Samples draw from sample_rng, which a checkpoint saves; they come at the same steps
        // whether or not a run stops early (--stop-at) and resumes, so continuations stay bitwise.
        if (can_sample && (step % opt.sample_every == 0 || step == max_steps)) {
            const auto sample_start = std::chrono::steady_clock::now();
            print_sample(*model, decode_table, sample_rng, opt.gen_tokens, T, main_rank);
            clock.sampling.add(ms_since(sample_start));
        }
        fflush(stdout);

        state.step = step;
        // SIGINT / SIGTERM: finish this step with a checkpoint, then stop (host/interrupts.h).
        // Every rank stops at the same step: as soon as any rank was asked to.
        const bool stopping = ranks.mean(stop_requested() ? 1.0 : 0.0) > 0 && step < last_step;
        if (!opt.output_dir.empty() &&
            ((opt.checkpoint_every > 0 && step % opt.checkpoint_every == 0) || step == last_step ||
             stopping)) {
            const auto save_start = std::chrono::steady_clock::now();
            state.loader = train_loader->position();
            state.sample_rng_state = sample_rng.state;
            save_checkpoint(opt.output_dir, opt.checkpoints_keep, opt.major_checkpoint_every,
                            *model, state, ranks);
            clock.checkpoint.add(ms_since(save_start));
        }
        if (stopping) return finish_interrupted_run(step, opt.output_dir, main_rank);
    }

    // ---- teardown ----
    if (main_rank) {
        if (timed_steps > 0)
            printf("done: %d steps, %.1f ms per step on average\n", timed_steps,
                   total_ms / timed_steps);
        else
            printf("done: nothing to do, the run already reached step %d\n", last_step);
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

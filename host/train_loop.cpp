// The shared training loop (host/train_loop.h).
#include "host/train_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <new>
#include <string>
#include <vector>

#include "host/checkpoint.h"
#include "host/dataloader.h"
#include "host/decode_table.h"
#include "host/errors.h"
#include "host/file_io.h"
#include "host/gpt_init.h"
#include "host/lr_schedule.h"
#include "host/metrics_log.h"
#include "host/model_descriptor.h"
#include "host/model_file.h"
#include "host/rng.h"
#include "host/sampling.h"
#include "host/training_state.h"

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
// position (a window of the last T tokens), and prints them through the decode table.
static void print_sample(TrainModel& model, const DecodeTable& table, Rng& rng, int count, int T) {
    const GPTConfig& c = model.config();
    std::vector<int> tokens = {table.eot_token < c.vocab_size ? table.eot_token : c.vocab_size - 1};
    std::vector<float> logits(c.vocab_size);
    std::string text;
    for (int i = 0; i < count; i++) {
        int start = std::max(0, (int)tokens.size() - T);
        int length = (int)tokens.size() - start;
        model.forward(tokens.data() + start, nullptr, 1, length);
        model.logits_at(length - 1, logits.data());
        int next = sample_token(logits.data(), c.vocab_size, rng.uniform());
        tokens.push_back(next);
        text += table.decode(next);
    }
    printf("sample: %s\n---\n", text.c_str());
}

// A data loader over this rank's slices; an error in its shards also names the flag.
static std::unique_ptr<DataLoader> open_loader(const char* flag, const std::string& pattern, int B,
                                               int T, const GPTConfig& config, bool shuffle,
                                               uint64_t seed, const RankInfo& ranks) {
    try {
        return std::make_unique<DataLoader>(pattern, B, T, ranks.rank, ranks.num_ranks,
                                            config.vocab_size, shuffle, seed);
    } catch (const InputError& e) { fail("%s: %s", flag, e.what()); }
}

static void save_checkpoint(const std::string& dir, int keep, TrainModel& model,
                            TrainingState state, const RankInfo& ranks) {
    model.optimizer_state(&state.params, &state.adam_m, &state.adam_v);
    if (ranks.rank == 0)
        write_model_file(checkpoint_model_path(dir, state.step), model.config(),
                         model.working_weights().data(), model.working_weight_type());
    write_training_state(checkpoint_state_path(dir, state.step, ranks.rank), state);
    if (ranks.rank == 0) {
        mark_checkpoint_done(dir, state.step);
        prune_checkpoints(dir, keep, ranks.num_ranks);
    }
}

static void print_memory_report(const ModelMemory& mem) {
    const double MiB = 1024.0 * 1024.0;
    printf("memory: parameters %.1f MiB | gradients %.1f MiB | master weights %.1f MiB | "
           "optimizer state %.1f MiB | activations %.1f MiB | total %.1f MiB\n",
           mem.parameters / MiB, mem.gradients / MiB, mem.master_weights / MiB,
           mem.optimizer_state / MiB, mem.activations / MiB, mem.total() / MiB);
}

static int train(int argc, char** argv, const TrainerSpec& spec) {
    const RankInfo& ranks = spec.ranks;
    const bool main_rank = ranks.rank == 0;

    // ---- flags ----
    TrainOptions opt = spec.defaults;
    if (parse_train_flags(argc, argv, &opt) == FlagsResult::HELP_SHOWN) return 0;

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
        model_file = read_model_file(opt.model);
        config = model_file.config;
    }
    validate_train_options(&opt, config, ranks.num_ranks);
    const int B = opt.batch_size, T = opt.seq_len;
    const int accum_steps = grad_accum_steps(opt, ranks.num_ranks);

    std::unique_ptr<DataLoader> train_loader = open_loader(
        "-i (--train-data)", opt.train_data, B, T, config, opt.shuffle, opt.seed, ranks);
    std::unique_ptr<DataLoader> val_loader;
    if (opt.val_every > 0)
        val_loader = open_loader("-j (--val-data)", opt.val_data, B, T, config, false, opt.seed,
                                 ranks);
    const int max_steps =
        opt.max_steps > 0
            ? opt.max_steps
            : (int)std::max<int64_t>(1, train_loader->chunks_per_epoch() / accum_steps);
    const int last_step = opt.stop_at > 0 ? std::min(opt.stop_at, max_steps) : max_steps;

    TrainingState state;  // what a checkpoint saves; state.step = updates done so far
    state.shape = {config, B, T, opt.total_batch, ranks.num_ranks, opt.shuffle, opt.seed};
    state.rank = ranks.rank;
    state.sample_rng_state =
        opt.seed ^ 0x5A4D504C45ull;  // "SAMPLE": a stream apart from the others
    // -y 1 resumes from the newest complete checkpoint, or starts afresh when there is none yet (as
    // llm.c does), so a supervisor can restart a run with the same command line every time.
    TrainingState resumed;
    ModelFile resumed_weights;
    const std::vector<long long> checkpoints =
        opt.resume ? complete_checkpoints(opt.output_dir, ranks.num_ranks)
                   : std::vector<long long>();
    const bool resuming = !checkpoints.empty();
    if (resuming) {
        const std::string path =
            checkpoint_state_path(opt.output_dir, checkpoints.back(), ranks.rank);
        resumed = read_training_state(path);
        check_same_run(resumed.shape, state.shape, path);
        resumed_weights = read_model_file(checkpoint_model_path(opt.output_dir, checkpoints.back()));
        train_loader->set_position(resumed.loader);
        state.step = resumed.step;
        state.sample_rng_state = resumed.sample_rng_state;
        state.loss_detector = resumed.loss_detector;
        state.norm_detector = resumed.norm_detector;
    }

    std::unique_ptr<TrainModel> model = spec.create_model(config, opt);
    if (resuming) {
        model->set_working_weights(resumed_weights.params);
        model->set_optimizer_state(resumed.params, resumed.adam_m, resumed.adam_v);
    } else if (from_descriptor) {
        std::vector<float> weights(param_layout(config).total);
        gpt_init_params(config, opt.seed, weights.data());
        model->set_working_weights(weights);
    } else {
        model->set_working_weights(model_file.params);
    }
    model_file = ModelFile();
    resumed_weights = ModelFile();
    resumed = TrainingState();

    DecodeTable decode_table;
    bool can_sample = main_rank && opt.sample_every > 0 && path_exists(opt.tokenizer);
    if (can_sample) decode_table = read_decode_table(opt.tokenizer);

    std::unique_ptr<MetricsLog> metrics;
    if (!opt.output_dir.empty() && main_rank) {
        make_directory(opt.output_dir);
        if (resuming) truncate_metrics_log(metrics_log_path(opt.output_dir), state.step);
        metrics.reset(new MetricsLog(metrics_log_path(opt.output_dir)));
    }

    // ---- report ----
    if (main_rank) {
        printf("model: %s (%s), %zu parameters\n", opt.model.c_str(),
               describe_config(config).c_str(), param_layout(config).total);
        printf("compute: %s\n", model->description().c_str());
        print_memory_report(model->memory());
        printf("batch: B=%d T=%d, %lld tokens per step (%d micro-steps x %d ranks), %d steps, %s "
               "schedule, lr %.2e\n",
               B, T, opt.total_batch, accum_steps, ranks.num_ranks, max_steps,
               schedule_name(opt.schedule), opt.learning_rate);
        printf("data: %zu training shard(s) from '%s'%s\n", train_loader->files().size(),
               opt.train_data.c_str(), opt.shuffle ? ", shuffled" : "");
        if (resuming)
            printf("resumed from step %lld in %s\n", (long long)state.step, opt.output_dir.c_str());
        if (opt.resume && !resuming)
            printf("note: no complete checkpoint in %s yet, so training starts from step 0\n",
                   opt.output_dir.c_str());
        if (opt.sample_every > 0 && !can_sample)
            printf("note: no decode table at '%s', so no samples are printed\n",
                   opt.tokenizer.c_str());
        if (opt.hellaswag)
            printf("note: -h 1 (HellaSwag evaluation) is skipped: this trainer has no HellaSwag "
                   "eval yet\n");
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
    if (!resuming && val_loader) {  // the untrained model's validation loss, as a baseline
        StepMetrics m;
        m.has_val = true;
        m.val_loss = validation_loss(*model, *val_loader, opt.val_batches, B, T, inputs, targets);
        if (main_rank) printf("val loss %.4f\n", m.val_loss);
        if (metrics) metrics->write(m);
    }
    for (int step = (int)state.step + 1; step <= last_step; step++) {
        const auto start = std::chrono::steady_clock::now();
        const double loss = accumulate_gradients(*model, *train_loader, accum_steps,
                                                 opt.overfit_single_batch, B, T, inputs, targets);
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
        const double eta_s = (max_steps - step) * total_ms / timed_steps / 1000.0;
        const double peak = model->peak_flops() * ranks.num_ranks;
        const std::string mfu =
            peak > 0 ? strprintf("%.1f%%", 100.0 * step_flops / (ms / 1000.0) / peak) : "n/a";
        if (main_rank)
            printf("step %d/%d | loss %.4f | lr %.2e | norm %.3f | %.1f ms | %.0f tok/s | MFU %s | "
                   "ETA %s\n",
                   step, max_steps, loss, m.lr, norm, ms, m.tokens_per_s, mfu.c_str(),
                   eta_text(eta_s).c_str());
        if (val_loader && (step % opt.val_every == 0 || step == last_step)) {
            m.has_val = true;
            m.val_loss =
                validation_loss(*model, *val_loader, opt.val_batches, B, T, inputs, targets);
            if (main_rank) printf("val loss %.4f\n", m.val_loss);
        }
        if (metrics) metrics->write(m);
        // Samples draw from sample_rng, which a checkpoint saves; they come at the same steps
        // whether or not a run stops early (--stop-at) and resumes, so continuations stay bitwise.
        if (can_sample && (step % opt.sample_every == 0 || step == max_steps))
            print_sample(*model, decode_table, sample_rng, opt.gen_tokens, T);
        fflush(stdout);

        state.step = step;
        if (!opt.output_dir.empty() &&
            ((opt.checkpoint_every > 0 && step % opt.checkpoint_every == 0) || step == last_step)) {
            state.loader = train_loader->position();
            state.sample_rng_state = sample_rng.state;
            save_checkpoint(opt.output_dir, opt.checkpoints_keep, *model, state, ranks);
        }
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

int run_training(int argc, char** argv, const TrainerSpec& spec) {
    try {
        return train(argc, argv, spec);
    } catch (const InputError& e) {
        fprintf(stderr, "error: %s\n", e.what());
    } catch (const std::bad_alloc&) {
        fprintf(stderr, "error: out of memory (try a smaller model, -b or -t)\n");
    }
    return 1;
}

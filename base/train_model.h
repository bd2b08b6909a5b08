// The interface between the shared training loop (train/train_loop.h) and a model's compute. Each
// trainer implements it once: train_gpt_cpu.cpp over the fp32 reference (cpu/cpu_train_model.h),
// train_gpt.cu over the CUDA kernels (gpu/gpu_model.h). The loop owns everything else: flags, data, schedule, checkpoints, metrics,
// sampling.
//
// Two kinds of weights: the working weights the forward pass reads (fp32 on the CPU, bf16 or fp32 on
// a GPU) and the fp32 master weights the optimizer updates. Without a separate master copy (the CPU model, or
// the CUDA one with -w 0) the master weights are the working weights. A checkpoint stores the working
// weights in the model file (model_NNNNNNNN.bin, in working_weight_type()) and the master weights and
// the optimizer's state in the state file, so a resumed run continues bit for bit: two arrays, m and v
// (AdamW's and LAMB's moments; LARS keeps its momentum buffer in m and leaves v at zero).
#pragma once
#include <cmath>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "base/compression_state.h"
#include "base/gpu_telemetry.h"
#include "base/model_config.h"
#include "base/model_file.h"
#include "base/model_part.h"
#include "base/optimizer_settings.h"
#include "base/outlier_detector.h"
#include "base/step_timeline.h"

// What an optimizer step does after its gradients, as the loop asks for it: the optimizer with these settings
// (grad_scale is decided by the step: clip_norm / norm when the global gradient norm exceeds
// clip_norm, else 1), unless the verdict (update_verdict) skips the update.
struct StepUpdate {
    OptimizerSettings optimizer{0.0f};
    int step = 1;                    // counts from 1 (Adam's bias correction)
    double clip_norm = 1.0;
    double skip_loss_z = 0, skip_norm_z = 0;  // -sl, -sg (0: off)
    OutlierDetector loss_window, norm_window;  // the detectors before this step (the step adds to copies)
};
// Whether a step's update is applied, and if not why: the first of these that holds, in this order.
enum class UpdateVerdict { APPLY = 0, LOSS_NOT_FINITE, NORM_NOT_FINITE, LOSS_OUTLIER, NORM_OUTLIER };
// The verdict on a step of this loss and norm: skipped when either is not finite, else when the loss's
// (norm's) z-score against its window, this step's value included, exceeds -sl (-sg). A model that
// decides on the device does the same arithmetic there (kernels/step_guard.h).
inline UpdateVerdict update_verdict(double loss, double norm, const StepUpdate& u) {
    OutlierDetector loss_window = u.loss_window, norm_window = u.norm_window;
    const double loss_z = loss_window.update(loss), norm_z = norm_window.update(norm);
    if (!std::isfinite(loss)) return UpdateVerdict::LOSS_NOT_FINITE;
    if (!std::isfinite(norm)) return UpdateVerdict::NORM_NOT_FINITE;
    if (u.skip_loss_z > 0 && loss_z > u.skip_loss_z) return UpdateVerdict::LOSS_OUTLIER;
    if (u.skip_norm_z > 0 && norm_z > u.skip_norm_z) return UpdateVerdict::NORM_OUTLIER;
    return UpdateVerdict::APPLY;
}
inline float clip_scale(double norm, double clip_norm) {
    return norm > clip_norm ? (float)(clip_norm / norm) : 1.0f;
}
// What an optimizer step reports: the step's mean loss over every rank's micro-batches, the global
// gradient norm (before clipping), and the verdict on its update.
struct StepOutcome {
    double loss = 0, norm = 0;
    UpdateVerdict verdict = UpdateVerdict::APPLY;
};

// Bytes a model holds, for the start-up report. activations counts everything sized by B and T;
// overhead what the device holds beside the model's own buffers (a GPU's context, NCCL's buffers,
// library workspaces: gpu/device_overhead.h), 0 where there is none, with its parts in one line.
struct ModelMemory {
    size_t parameters = 0, gradients = 0, master_weights = 0, optimizer_state = 0, activations = 0;
    size_t overhead = 0;
    std::string overhead_report;
    // What one rank sends per optimizer step (0 with one rank): in its data group (gradients, ZeRO's
    // gathers) and in its tensor group (tensor parallelism's activations).
    size_t network_bytes_per_step = 0;
    size_t tensor_bytes_per_step = 0;
    size_t pipeline_bytes_per_step = 0;  // activations and their gradients between stages
    // The same bytes split by where they travel: within a node (every rank of the collective's group
    // on one node) or across nodes (parallel/plan/traffic.h).
    size_t within_node_bytes_per_step = 0, across_node_bytes_per_step = 0;
    // With gradient compression (--grad-compression): all of a compressed step's bytes (the steps
    // before --compression-start send the ones above), and the method's name; else 0 and "".
    size_t compressed_bytes_per_step = 0;
    std::string compression;
    // With pipeline stages: lines on the stages' layers, schedule, bubble and memory (else empty).
    std::string pipeline_report;
    // The model's own buffers, and everything the device holds for the run.
    size_t buffers() const { return parameters + gradients + master_weights + optimizer_state + activations; }
    size_t total() const { return buffers() + overhead; }
};

// The choices a model makes by timing (on a GPU, a cuBLASLt algorithm for each product configuration:
// kernels/matmul.h), as text the loop saves in the run folder and shares between ranks
// (train/algorithm_table.h), so that every rank and every resume computes with the same ones. A key is
// one line without '=', a value one word.
struct AlgorithmChoice {
    std::string key, value;
    bool operator==(const AlgorithmChoice& o) const { return key == o.key && value == o.value; }
};
struct AlgorithmTable {
    std::string environment;  // what the choices hold for: the device, the library's version, the precision
    std::vector<AlgorithmChoice> choices;
    int timed = 0;            // how many of the choices this process timed (not saved)
};

class TrainModel {
public:
    virtual ~TrainModel() = default;

    // The family and shape (base/model_config.h).
    virtual const ModelConfig& model_config() const = 0;
    // One line for the start-up report: where it runs and in what precision.
    virtual std::string description() const = 0;
    // Dense peak FLOP/s of the device in the training precision, for MFU; 0 when unknown.
    virtual double peak_flops() const { return 0; }

    // Forward over inputs (B×T token ids). With targets, returns the mean cross-entropy over the B·T
    // positions; without (nullptr), returns NAN and only computes logits.
    virtual float forward(const int* inputs, const int* targets, int B, int T) = 0;
    // The first V logits at position t of sequence 0 of the last forward, widened to fp32.
    virtual void logits_at(int t, float* out) = 0;

    virtual void zero_grad() = 0;
    // Training micro-step: forward over inputs with targets, then adds loss_scale · d(mean loss)/
    // d(params) into the gradients (1/k for k micro-steps of accumulation); returns the mean loss.
    // One call, so a GPU model can write the loss gradient while it computes the loss. last_micro_step
    // marks the backward whose gradients are final for this step: the only one after which gradients
    // may be sent to other ranks.
    virtual float forward_backward(const int* inputs, const int* targets, int B, int T,
                                   float loss_scale, bool last_micro_step) = 0;
    // One optimizer step's forward and backward passes: zeroes the gradients, then `micro_steps`
    // micro-batches of B×T tokens, each read by next_batch(inputs, targets) in order and its gradient
    // scaled by 1/micro_steps, so that the gradients are those of the step's mean loss, which it
    // returns. This default runs forward_backward on each in turn; a model split into pipeline stages
    // runs them in its schedule's order.
    using NextBatch = std::function<void(int* inputs, int* targets)>;
    virtual double train_step(int micro_steps, int B, int T, const NextBatch& next_batch) {
        mark_phase(StepPhase::FORWARD);  // zeroing the gradients counts with the forward passes
        zero_grad();
        std::vector<int> inputs((size_t)B * T), targets((size_t)B * T);
        double loss = 0;
        for (int i = 0; i < micro_steps; i++) {
            next_batch(inputs.data(), targets.data());
            loss += forward_backward(inputs.data(), targets.data(), B, T, 1.0f / micro_steps,
                                     i == micro_steps - 1) / micro_steps;
        }
        return loss;
    }
    virtual double grad_norm() = 0;  // global L2 norm of the gradients
    // One step of settings.kind's optimizer; step counts from 1 (bias correction).
    virtual void update(const OptimizerSettings& settings, int step) = 0;
    // A whole optimizer step as the loop runs it: train_step's gradients, their norm, the verdict and
    // (unless skipped) the clipped update; returns the loss (mean_over_ranks gives the mean of every
    // rank's), the norm and the verdict. This default asks for each in turn, on the host; a GPU model
    // decides on the device and reads the loss and the norm back once, after the update was issued.
    virtual StepOutcome optimizer_step(int micro_steps, int B, int T, const NextBatch& next_batch,
                                      const StepUpdate& u, const std::function<double(double)>& mean_over_ranks) {
        StepOutcome r;
        const double loss = train_step(micro_steps, B, T, next_batch);
        mark_phase(StepPhase::COMM_WAIT);
        r.loss = mean_over_ranks(loss);
        mark_phase(StepPhase::OPTIMIZER);
        r.norm = grad_norm();
        r.verdict = update_verdict(r.loss, r.norm, u);
        if (r.verdict == UpdateVerdict::APPLY) {
            OptimizerSettings s = u.optimizer;
            s.grad_scale = clip_scale(r.norm, u.clip_norm);
            update(s, u.step);
        }
        return r;
    }
    // Timed choices (AlgorithmTable). The environment they hold for; empty: this model times nothing
    // (the loop then keeps no table).
    virtual std::string algorithm_environment() const { return ""; }
    // This rank's choices so far: what it computes with, or what it timed fastest and holds back until
    // a table is adopted (a GPU model computes with the untimed default meanwhile).
    virtual AlgorithmTable algorithm_choices() { return {}; }
    // From now on, `choices` wherever they apply, without timing; where they do not, as before
    // (time_the_rest: still timed and held back, else the untimed default). Returns how many of them
    // cannot run here (another device or library: the untimed default computes instead).
    virtual int adopt_algorithms(const std::vector<AlgorithmChoice>& choices, bool time_the_rest) {
        (void)choices, (void)time_the_rest;
        return 0;
    }
    // Phase timing (base/step_timeline.h): the loop's timeline for the steps to come (null: no timing),
    // set before the first step. During optimizer_step a model marks in it where its work changes
    // phase (a GPU model after the step's synchronisation, from events); the loop clears it before each
    // step and marks what it does itself (reading the batches).
    virtual void set_step_timeline(StepTimeline* timeline) { timeline_ = timeline; }
    // Lines for the end of a run (e.g. what a step cost the device); empty: nothing.
    virtual std::string end_of_run_report() { return ""; }
    // What this rank sent to the other ranks in its last optimizer step, in bytes (counted by the
    // operations that send); -1 for a model that never sends (one process).
    virtual double bytes_sent_last_step() const { return -1; }
    // Gradient compression's state on this rank (base/compression_state.h), for checkpoints; empty
    // where the run does not compress. set_compression_state takes a state that compression_state
    // gave on the same data ranks and settings (the same method, ranks and layout) and returns true;
    // any other state it leaves alone (the residuals start from zero) and returns false.
    virtual CompressionState compression_state() const { return CompressionState(); }
    virtual bool set_compression_state(const CompressionState& state) {
        (void)state;
        return false;
    }
    // The CUDA device this rank computes on (-1: none), for the reports that name a rank.
    virtual int device_index() const { return -1; }
    // The GPU's clocks, power, temperature and throttle reasons now (base/gpu_telemetry.h), for -lg;
    // a model without a GPU says why there are none.
    virtual GpuTelemetry device_telemetry() {
        GpuTelemetry t;
        t.why_not = "no GPU";
        return t;
    }

    // Parameters and optimizer state in: fp32 vectors of the whole model (parameter_count(config),
    // the family's buffer order); a model spread over ranks keeps its own part of them.
    virtual WeightType working_weight_type() const = 0;
    virtual void set_working_weights(const std::vector<float>& weights) = 0;  // also the master copy
    virtual void set_optimizer_state(const std::vector<float>& master, const std::vector<float>& m,
                                     const std::vector<float>& v) = 0;
    // Out: the whole model's working weights, where this rank holds all of them (tests, one rank).
    virtual std::vector<float> working_weights() = 0;
    // Every weight this rank holds, as it holds them (any order), where each data rank holds a whole
    // replica (no tensor, pipeline or ZeRO-3 split): --check-replicas compares them across the ranks.
    virtual std::vector<float> replica_weights() { return working_weights(); }
    // Out, for checkpoints (base/model_part.h): the part of the working weights this rank writes into
    // the model file, and the part of the master weights and moments its state file stores. The parts
    // of all ranks cover the model exactly once. Every rank calls working_weights_part at the same
    // point (under ZeRO-3 or a model split across ranks it gathers collectively).
    virtual ModelPart working_weights_part() {
        return {whole_model_ranges(parameter_count(model_config())), working_weights()};
    }
    virtual OptimizerPart optimizer_part() = 0;
    // In, where a resumed run reads only what each rank keeps (train/resharding.h): where this rank
    // keeps each element of the working weights and of the optimizer state (base/model_part.h), and
    // those arrays, filled from the checkpoint, to take. The master weights come with the optimizer
    // state here. These defaults keep the whole model in buffer order.
    virtual Placement working_weights_placement() const {
        return whole_model_placement(parameter_count(model_config()));
    }
    virtual Placement optimizer_state_placement() const {
        return whole_model_placement(parameter_count(model_config()));
    }
    virtual void set_placed_working_weights(const std::vector<float>& placed) { set_working_weights(placed); }
    virtual void set_placed_optimizer_state(const std::vector<float>& master, const std::vector<float>& m,
                                            const std::vector<float>& v) {
        set_optimizer_state(master, m, v);
    }
    // True when forward() is a collective (ZeRO-3 gathers each layer's weights from every rank; a model
    // split across ranks computes each layer together): then every rank must run the same forwards,
    // e.g. all ranks generate a sample, rank 0 prints it.
    virtual bool forward_is_collective() const { return false; }
    // Every rank, before weights are read outside training (evaluation, samples): the last update
    // completed where a model defers part of it into the next step (ZeRO-1/2 gathers the updated
    // weights during the next forward). A collective where the model is.
    virtual void complete_weight_update() {}

    virtual ModelMemory memory() const = 0;

    // Incremental decoding for the loop's samples (train/cached_sampling.h): a key/value cache for
    // one sequence of up to max_len tokens. decode_reset empties it; decode_next appends a token and
    // writes the next token's first V logits (fp32). A model without one keeps these defaults, and
    // its samples recompute the prefix with forward() at every token.
    virtual bool supports_decode() const { return false; }
    virtual void decode_reset(int max_len) { (void)max_len; }
    virtual void decode_next(int token, float* logits) {
        (void)token;
        (void)logits;
    }

protected:
    StepTimeline* timeline_ = nullptr;
    // A model that times on the host: its work is in `phase` from now on (set_step_timeline).
    void mark_phase(StepPhase phase, int layer = -1, bool backward = false) {
        if (timeline_) timeline_->mark(phase, clock_us(), layer, backward);
    }
};

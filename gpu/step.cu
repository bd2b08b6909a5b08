// GPUModel's steps (gpu_model.h): the micro-batches' tokens to the device, forward-only passes, one
// executor for the micro-steps of plain and pipelined steps (the schedule's actions, with the transfers
// between stages), the gradients finished, the global norm and AdamW; one host synchronisation per
// optimizer step.
#include "gpu/gpu_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/errors.h"
#include "gpu/device_overhead.h"
#include "kernels/global_norm.h"
#include "kernels/matmul.h"
#include "parallel/plan/pipeline_schedule.h"

// ---- tokens

void GPUModel::reserve_pinned_tokens(int micro_batches) {
    if (micro_batches <= pinned_) return;
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // nothing in flight reads the old areas
    int* tokens = nullptr;
    CUDA_CHECK(cudaMallocHost(&tokens, (size_t)micro_batches * 2 * max_N_ * sizeof(int)));
    if (pinned_tokens_) std::copy(pinned_tokens_, pinned_tokens_ + (size_t)pinned_ * 2 * max_N_, tokens);
    cudaFreeHost(pinned_tokens_);
    cudaFreeHost(encoder_host_scratch_);
    pinned_tokens_ = tokens;
    CUDA_CHECK(cudaMallocHost(&encoder_host_scratch_, (size_t)micro_batches * encoder_host_bytes_));
    pinned_ = micro_batches;
}

void GPUModel::pin_tokens(const int* inputs, const int* targets, int B, int T, int micro_batch) {
    if (B < 1 || B > max_B_ || T < 1 || T > max_T_)
        fail("forward: batch %dx%d exceeds the allocated %dx%d", B, T, max_B_, max_T_);
    const size_t N = (size_t)B * T;
    for (size_t i = 0; i < N; i++)
        if (inputs[i] < 0 || inputs[i] >= shape_.vocab_size ||
            (targets && (targets[i] < 0 || targets[i] >= shape_.vocab_size)))
            fail("forward: token id outside the vocabulary [0, %d) at position %zu",
                 shape_.vocab_size, i);
    B_ = B, T_ = T;
    reserve_pinned_tokens(micro_batch + 1);
    std::copy(inputs, inputs + N, pinned_inputs(micro_batch));
    if (targets) std::copy(targets, targets + N, pinned_targets(micro_batch));
}

void GPUModel::upload_tokens(int micro_batch, bool with_targets) {
    const size_t bytes = (size_t)B_ * T_ * sizeof(int);
    if (stage_.first)
        CUDA_CHECK(cudaMemcpyAsync(buf_.inputs, pinned_inputs(micro_batch), bytes, cudaMemcpyHostToDevice, stream_));
    if (with_targets && stage_.last)
        CUDA_CHECK(cudaMemcpyAsync(buf_.targets, pinned_targets(micro_batch), bytes, cudaMemcpyHostToDevice, stream_));
}

const StepTotals& GPUModel::read_totals() {
    CUDA_CHECK(cudaMemcpyAsync(&control_host_->totals, &buf_.control->totals, sizeof(StepTotals),
                               cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return control_host_->totals;
}

// ---- a micro-batch's passes on this stage: a stage other than the first receives its input from the
// stage before, one other than the last sends its output to the stage after; backward the other way,
// in two residual-gradient buffers taken in turns (one may still be on its way to the previous stage).
// Without a pipeline those transfers do nothing.

void GPUModel::forward_micro_batch(int slot, Pass pass, float loss_scale, int micro_steps, bool last_micro_step) {
    const size_t n = (size_t)tp_.local_positions(B_ * T_) * shape_.channels;
    if (!stage_.first) pipeline_.receive_activations(stage_input(slot), n, stream_);
    forward_stage(slot, pass, loss_scale, micro_steps, last_micro_step);
    if (!stage_.last) pipeline_.send_activations(stage_output(slot), n);
}

// The backward in two parts, the layers (inside a micro-step's CUDA graph) and then the embeddings,
// whose launches depend on the tokens on the host (kernels/encoder.h), and the gradients' finish.
void GPUModel::backward_micro_batch_layers(int slot, int micro_batch, bool last_micro_step) {
    const size_t n = (size_t)tp_.local_positions(B_ * T_) * shape_.channels;
    const int turn = residual_gradient_turn(micro_batch);
    pipeline_.before_overwriting(turn, stream_);
    if (!stage_.last) pipeline_.receive_gradients(act_.dresidual[turn], n, stream_);
    backward_layers(slot, micro_batch, last_micro_step);
}

void GPUModel::finish_micro_batch_backward(int micro_batch, bool last_micro_step) {
    const size_t n = (size_t)tp_.local_positions(B_ * T_) * shape_.channels;
    const int turn = residual_gradient_turn(micro_batch);
    backward_embeddings(micro_batch, last_micro_step);
    if (!stage_.first) pipeline_.send_gradients(act_.dresidual[turn], n, turn);
    params_.finish_backward();
}

// The micro-step executor: this stage's actions of a step in the schedule's order (parallel/plan/
// pipeline_schedule.h), micro-batch i in slot i mod slots, what an action sends going out with the next
// action's receive. A plain step is a pipeline of one stage, whose schedule is F0 B0 F1 B1 ...: there a
// micro-batch's forward and its layers' backward are one CUDA graph (issue_graphed) per shape and
// position in the step, the tokens copied into the fixed buffers it reads first. Under -z 1/2 the
// step's first forward also gathers the updated weights, each bucket waited for before its layer.
// `ends_step`: the last micro-batch ends the step's accumulation (its reductions are the step's).
void GPUModel::run_schedule(const std::vector<PipelineAction>& actions, int micro_steps, float loss_scale,
                            bool ends_step) {
    const bool plain = pipeline_.stages() == 1;
    for (size_t k = 0; k < actions.size(); k++) {
        const PipelineAction& a = actions[k];
        const int i = a.micro_batch, slot = i % stage_.slots;
        const bool last = ends_step && i == micro_steps - 1;
        if (a.forward) {
            upload_tokens(i, true);
            const bool gathers = i == 0 && params_.gathers_updated_weights();
            // While timing, each micro-step has a graph of its own (gpu/step_timer.h: a graph's events).
            const long long graph_of = timer_.enabled() ? i : -1;
            uint32_t scale_bits;  // forward_backward's scale may differ from 1/micro_steps
            memcpy(&scale_bits, &loss_scale, sizeof scale_bits);
            issue_graphed({0, B_, T_, micro_steps, last, gathers, graph_of, params_.compressing(), (long long)scale_bits}, [&] {
                if (gathers) params_.gather_updated_weights();
                forward_micro_batch(slot, Pass::TRAINING, loss_scale, micro_steps, last);
                if (!plain) return;
                params_.wait_for_all_weights();  // a capture joins the gathers it forked
                backward_micro_batch_layers(slot, i, last);
                if (stream_capturing()) params_.finish_backward();  // a capture joins the reductions it forked
            });
            if (plain) finish_micro_batch_backward(i, last);
        } else if (!plain) {
            backward_micro_batch_layers(slot, i, last);
            finish_micro_batch_backward(i, last);
        }
        const bool next_receives = k + 1 < actions.size() && (actions[k + 1].forward ? !stage_.first : !stage_.last);
        if (!plain && !next_receives) pipeline_.send_queued(stream_);
    }
}

// ---- forward only

// Under sequence parallelism a forward of a length the tensor ranks cannot split (a sample, a
// HellaSwag row: no targets) runs padded with token 0 at the end of each sequence: causal attention
// keeps the padding from changing the real positions, whose logits are then read as usual.
float GPUModel::forward(const int* inputs, const int* targets, int B, int T) {
    const int T_run = tp_.padded_length(T);
    std::vector<int> padded;
    if (T_run != T) {
        if (targets) fail("internal error: a forward with targets of %d positions, which -tp does not split", T);
        padded.assign((size_t)B * T_run, 0);
        for (int b = 0; b < B; b++)
            std::copy(inputs + (size_t)b * T, inputs + (size_t)(b + 1) * T, &padded[(size_t)b * T_run]);
        inputs = padded.data(), T = T_run;
    }
    pin_tokens(inputs, targets, B, T, 0);
    upload_tokens(0, targets != nullptr);
    forward_micro_batch(0, targets ? Pass::LOSS : Pass::LOGITS, 1.0f, 1, false);
    pipeline_.finish(stream_);
    if (!targets) {
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        return NAN;
    }
    pipeline_.broadcast_from_last(&buf_.control->totals.micro_loss, 1, stream_);  // the last stage's
    return read_totals().micro_loss;
}

// The last stage's row, gathered from its tensor ranks' slices and sent to the other stages (a
// collective where the model is split across ranks).
void GPUModel::logits_at(int t, float* out) {
    const int V = shape_.vocab_size, Vs = tp_.vocab_slice(shape_.padded_vocab_size);
    std::vector<floatX> host(V);
    if (stage_.last) {
        const floatX* row = act_.logits + (size_t)t * Vs;
        if (tp_.size() > 1) {
            tp_.gather(act_.logits_row, row, Vs, stream_);
            row = act_.logits_row;
        }
        CUDA_CHECK(cudaMemcpyAsync(host.data(), row, V * sizeof(floatX), cudaMemcpyDeviceToHost, stream_));
        CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    if (pipeline_.stages() > 1) {
        if (stage_.last)
            CUDA_CHECK(cudaMemcpyAsync(act_.logits_row, host.data(), V * sizeof(floatX), cudaMemcpyHostToDevice, stream_));
        pipeline_.broadcast_from_last(act_.logits_row, V, stream_);
        CUDA_CHECK(cudaMemcpyAsync(host.data(), act_.logits_row, V * sizeof(floatX), cudaMemcpyDeviceToHost, stream_));
        CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    for (int i = 0; i < V; i++) out[i] = (float)host[i];
}

// ---- training

void GPUModel::zero_grad() { params_.zero_gradients(); }

// One micro-step, forward then backward (for tests and benchmarks: the loss is read back at once).
float GPUModel::forward_backward(const int* inputs, const int* targets, int B, int T, float loss_scale,
                                 bool last_micro_step) {
    if (pipeline_.stages() > 1) fail("internal error: a pipelined model trains by whole steps (train_step)");
    pin_tokens(inputs, targets, B, T, 0);
    run_schedule({{true, 0}, {false, 0}}, 1, loss_scale, last_micro_step);
    return read_totals().micro_loss;
}

// Every micro-batch read and pinned first, then the step's schedule; the loss stays on the device
// (control->totals).
void GPUModel::accumulate(int micro_steps, int B, int T, const NextBatch& next_batch) {
    std::vector<int> inputs((size_t)B * T), targets((size_t)B * T);
    for (int i = 0; i < micro_steps; i++) {
        next_batch(inputs.data(), targets.data());
        pin_tokens(inputs.data(), targets.data(), B, T, i);
    }
    timer_.mark(StepPhase::FORWARD);
    zero_grad();
    CUDA_CHECK(cudaMemsetAsync(&buf_.control->totals, 0, sizeof(StepTotals), stream_));
    B_ = B, T_ = T;
    const bool plain = pipeline_.stages() == 1;  // one stage's schedule: F0 B0 F1 B1 ...
    run_schedule(pipeline_schedule(plain ? "1f1b" : schedule_, mesh_.pipeline, mesh_.stage, micro_steps), micro_steps,
                 1.0f / micro_steps, true);
    finish_gradients();
}

void GPUModel::finish_gradients() {
    pipeline_.finish(stream_);
    const int VOCABULARY = buckets_.vocabulary_bucket();
    if (pipeline_.stages() > 1 && VOCABULARY >= 0 && tied_classifier_) {
        params_.with_reduced_gradients(VOCABULARY, [&](auto* reduced, size_t count) {
            pipeline_.sum_tied_gradients(reduced, count, stream_);
        });
    }
}

// A whole optimizer step's forward and backward passes (every micro-batch read first); the last stage's
// mean loss, on every stage.
double GPUModel::train_step(int micro_steps, int B, int T, const NextBatch& next_batch) {
    accumulate(micro_steps, B, T, next_batch);
    pipeline_.broadcast_from_last(&buf_.control->totals.loss, 1, stream_);
    return read_totals().loss;
}

// The whole step, with one host synchronisation: the micro-batches are read and pinned first, the
// forward and backward passes issued, then the update (issue_update) decides on the device whether to
// apply itself; the loss, the norm and the verdict come back together at the end. The skip (-sl, -sg,
// a loss or norm not finite) is decided on the device because the update must not wait for the host:
// the host's detectors travel to the device with the step's values (control->guard) and the device
// applies the loop's own rule to them (kernels/step_guard.h); the loop then updates its detectors with
// the values read back, as before.
StepOutcome GPUModel::optimizer_step(int micro_steps, int B, int T, const NextBatch& next_batch, const StepUpdate& u,
                                    const std::function<double(double)>& /*mean_over_ranks: on the device*/) {
#ifdef EMU_CUDA
    const StepCounts before = StepCounts::now();
#endif
    reset_traffic();
    params_.set_compressing(u.step > compression_start_);  // --grad-compression, after the plain steps
    timer_.begin_step();
    accumulate(micro_steps, B, T, next_batch);

    StepControl& c = *control_host_;  // the previous step's copies are done: it ended synchronised
    const OptimizerSettings& o = u.optimizer;
    c.adamw = adamw_device_step(o.learning_rate, o.beta1, o.beta2, o.weight_decay, 1.0f, u.step, rounding_seed(u.step));
    c.guard.clip_norm = u.clip_norm;
    c.guard.skip_loss_z = u.skip_loss_z, c.guard.skip_norm_z = u.skip_norm_z;
    for (auto [to, from] : {std::make_pair(&c.guard.loss_window, &u.loss_window),
                            std::make_pair(&c.guard.norm_window, &u.norm_window)}) {
        std::copy(from->values, from->values + kOutlierWindow, to->values);
        to->count = from->count, to->next = from->next;
    }
    issue_graphed({1}, [&] {
        issue_update(u.optimizer);
        CUDA_CHECK(cudaMemcpyAsync(&control_host_->totals, &buf_.control->totals, sizeof(StepTotals),
                                   cudaMemcpyDeviceToHost, stream_));
    });
    timer_.end_step();
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // the step's one host synchronisation
    if (timeline_) timer_.read(timeline_, clock_us());
    // After the first step every product has been asked for once: the fused epilogues cuBLASLt refused
    // (their products ran in separate passes), with its status, for the start-up report; and what the
    // step sent, against the plan.
    if (steps_done_++ == 0 && world_.rank() == 0) printf("%s", matmul_refusal_report().c_str());
    last_step_traffic_ = traffic_sent();
    bytes_sent_ += (double)last_step_traffic_.total();
    bool& checked = params_.compressing() ? compressed_step_checked_ : plain_step_checked_;
    if (!checked) check_traffic_against_plan(params_.compressing() ? planned_compressed_traffic_ : planned_traffic_);
    checked = true;
    if (steps_done_ == (graphs_.enabled() ? 2 : 1)) report_measured_overhead();
    const StepTotals& t = control_host_->totals;
#ifdef EMU_CUDA
    last_step_counts_ = StepCounts::now() - before;
    steps_counted_++;
#endif
    StepOutcome r;
    r.loss = t.loss;
    r.norm = std::sqrt((double)t.norm_squared);
    r.verdict = (UpdateVerdict)t.verdict;
    // Gradients that were not finite left NaNs in the compression's residuals: start them afresh.
    if (params_.compressing() &&
        (r.verdict == UpdateVerdict::LOSS_NOT_FINITE || r.verdict == UpdateVerdict::NORM_NOT_FINITE))
        params_.compression().reset();
    return r;
}

// Once every part of the overhead exists (the CUDA graphs are made in the second step), each rank's
// device memory in use beyond the arena, gathered on rank 0, which prints the rank furthest over its
// plan (gpu/device_overhead.h). Not on the emulated device, which has no context or NCCL buffers.
void GPUModel::report_measured_overhead() {
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    MeasuredOverhead mine;
    const size_t in_use = total_bytes - free_bytes;
    mine.beside_arena = in_use > arena_.bytes() ? in_use - arena_.bytes() : 0;
    mine.planned = memory_.overhead;
    std::vector<MeasuredOverhead> ranks = {mine};
    if (world_.ranks) {
        const char* first = reinterpret_cast<const char*>(&mine);
        const std::vector<char> bytes(first, first + sizeof mine);
        ranks.clear();
        for (const std::vector<char>& rank_bytes : world_.ranks->gather_on_rank0(bytes)) {
            MeasuredOverhead m;
            memcpy(&m, rank_bytes.data(), sizeof m);
            ranks.push_back(m);
        }
    }
#ifndef EMU_CUDA
    const char* when = graphs_.enabled() ? "after the second step (the first with CUDA graphs)" : "after the first step";
    if (world_.rank() == 0) printf("%s", measured_overhead_report(ranks, when).c_str());
#endif
}

// The emulated device's counts over the last step: the kernels it ran (with one per cuBLASLt product),
// how many of them CUDA graphs ran, and the host's waits for the device; with the graphs, the host
// issued (kernels − graph kernels + graph launches) launches.
std::string GPUModel::end_of_run_report() {
    std::string report;
    if (world_.num_ranks() > 1 && steps_done_ > 0) {
        const double MiB = 1024.0 * 1024.0;
        report = strprintf("traffic: rank 0 sent %.2f MiB per step on average, as counted (the plan: %.2f MiB",
                           bytes_sent_ / steps_done_ / MiB, planned_traffic_.total() / MiB);
        if (params_.compression().active())
            report += strprintf(", compressed %.2f MiB", planned_compressed_traffic_.total() / MiB);
        report += ")\n";
    }
#ifdef EMU_CUDA
    const StepCounts& c = last_step_counts_;
    if (steps_counted_ > 0)
        return report + strprintf("emulated device, per step: %llu kernel launches, %llu host synchronisations (%llu of the "
                         "kernels in %llu CUDA graph launches: %llu launches from the host)%s\n",
                         c.kernels, c.syncs, c.graph_kernels, c.graph_launches, c.host_launches(),
                         steps_counted_ == 1 ? "; the first step, which runs without graphs" : "");
#endif
    return report;
}

// ---- the update

// The global gradient norm, of the averaged gradients wherever the sharding keeps them: each rank's
// part (its shard, its tensor slice, its stage's layers; the copies left out), its squares summed over
// the ranks that hold the other parts.
void GPUModel::issue_norm() {
    float* norm_squared = &buf_.control->totals.norm_squared;
    CUDA_CHECK(cudaMemsetAsync(norm_squared, 0, sizeof(float), stream_));
    for (const DeviceRun& run : params_.gradient_norm_runs()) {
        if (run.data_fp32)
            global_norm_squared(norm_squared, run.data_fp32, run.count, buf_.scratch, stream_);
        else
            global_norm_squared(norm_squared, run.data, run.count, buf_.scratch, stream_);
    }
    params_.sum_over_shards(norm_squared, 1);
    tp_.sum(norm_squared, 1, stream_);
    pipeline_.sum(norm_squared, 1, stream_);
}

double GPUModel::grad_norm() {
    issue_norm();
    return std::sqrt((double)read_totals().norm_squared);
}

void GPUModel::issue_update(const OptimizerSettings& constants) {
    timer_.mark(StepPhase::OPTIMIZER);
    StepControl* c = buf_.control;
    CUDA_CHECK(cudaMemcpyAsync(c, control_host_, kStepControlHostBytes, cudaMemcpyHostToDevice, stream_));
    pipeline_.broadcast_from_last(&c->totals.loss, 1, stream_);
    params_.average_over_data_ranks(&c->totals.loss, 1);
    issue_norm();
    step_guard(c, stream_);
    optimizer_.step(&c->adamw, constants);
    params_.share_updated_weights();
}

// The stochastic rounding of the bf16 weights draws from a stream that depends on the run's seed, the
// step and each parameter's index in the model, so runs, resumed runs and runs on other numbers of
// ranks or other ZeRO stages round alike.
uint32_t GPUModel::rounding_seed(int step) const {
    return (uint32_t)(seed_ * 0x9E3779B97F4A7C15ull >> 32) ^ (uint32_t)step * 0x85EBCA6Bu;
}

// The update with host-given settings (tests; the loop's steps go through optimizer_step).
void GPUModel::update(const OptimizerSettings& s, int step) {
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // no earlier copy still reads the pinned control block
    control_host_->adamw =
        adamw_device_step(s.learning_rate, s.beta1, s.beta2, s.weight_decay, s.grad_scale, step, rounding_seed(step));
    CUDA_CHECK(cudaMemcpyAsync(buf_.control, control_host_, kStepControlHostBytes, cudaMemcpyHostToDevice, stream_));
    optimizer_.step(&buf_.control->adamw, s);
    params_.share_updated_weights();
}

void GPUModel::set_step_timeline(StepTimeline* timeline) {
    TrainModel::set_step_timeline(timeline);
    timer_.set_enabled(timeline != nullptr, stream_);
    graphs_.clear();  // graphs captured with (or without) the timers' events
}

// ---- what the step sent

void GPUModel::reset_traffic() {
    params_.reset_bytes_sent();
    optimizer_.reset_bytes_sent();
    tp_.reset_bytes_sent();
    pipeline_.reset_bytes_sent();
    replayed_traffic_ = Traffic();
}

Traffic GPUModel::traffic_sent() const {
    Traffic t;
    t.data = params_.bytes_sent(), t.tensor = tp_.by_node(tp_.bytes_sent()), t.pipeline = pipeline_.bytes_sent();
    t.data += optimizer_.bytes_sent();
    t += replayed_traffic_;
    return t;
}

// The first optimizer step's bytes (and the first compressed step's), as the operations counted them,
// against the plan the start-up report printed (memory_plan.h): a difference is an error in one of them.
void GPUModel::check_traffic_against_plan(const Traffic& planned) {
    const Traffic& sent = last_step_traffic_;
    if (sent != planned)
        fail("internal error: a step sent %zu / %zu / %zu bytes in the data / tensor / pipeline group (%zu within "
             "nodes), the plan says %zu / %zu / %zu (%zu)", sent.data.total(), sent.tensor.total(),
             sent.pipeline.total(), sent.by_node().within_node, planned.data.total(), planned.tensor.total(),
             planned.pipeline.total(), planned.by_node().within_node);
}

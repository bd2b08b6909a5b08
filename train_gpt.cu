// train_gpt: trains GPT-2 on NVIDIA GPUs with the hand-written kernels of kernels/ and cuBLASLt.
// bf16 weights, activations and gradients (fp32 with -DENABLE_FP32), fp32 master weights and AdamW
// moments, activation recomputation (-r), gradient accumulation (-d). The training loop itself
// (flags, data, schedule, checkpoints, metrics, sampling) is the shared one of train/train_loop.h; this
// file is the GPU model behind its interface, read top to bottom:
//   1. the buffers: parameters, gradients, optimizer state, activations, scratch — all allocated once
//   2. forward: embeddings, the transformer blocks, final LayerNorm, logits, loss
//   3. backward: the same steps in reverse; each layer's gradients are averaged across the data
//      ranks (NCCL, on a stream of their own) while the layers below are still computed
//   4. a step: the micro-batches' forward and backward passes, in a pipeline schedule's order
//   5. update: gradient norm and AdamW on the parameters this rank owns
//   6. main(): ranks from MPI, the device (or the CPU when there is none), then the loop
// Several GPUs (`mpirun -np N ./train_gpt`), as a mesh of data × pipeline × tensor ranks
// (parallel/plan/mesh.h): data parallelism with ZeRO (-z, parallel/comm/zero.h), tensor parallelism (-tp,
// parallel/comm/tensor_parallel.h), pipeline parallelism (-pp, parallel/comm/pipeline_parallel.h). Where data
// crosses ranks the code below makes one named call (store_, tp_, pipeline_); the kernels compute on
// this rank's slice only.
// Built by nvcc it is ./train_gpt; built through the emulator (emu/) it is ./train_gpt_emu, which runs
// the same kernels on the CPU for the tests.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nccl.h>

#include "base/errors.h"
#include "cpu/cpu_train_model.h"
#include "gpu/cuda_graphs.h"
#include "gpu/device_info.h"
#include "gpu/gpt_decode.h"
#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/chunked_classifier.h"
#include "kernels/classifier.h"
#include "kernels/common.h"
#include "kernels/device_arena.h"
#include "kernels/elementwise.h"
#include "kernels/encoder.h"
#include "kernels/gelu.h"
#include "kernels/global_norm.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/step_guard.h"
#include "parallel/comm/mesh_communicators.h"
#include "parallel/comm/mpi_ranks.h"
#include "parallel/comm/nccl_check.h"
#include "parallel/comm/pipeline_parallel.h"
#include "parallel/comm/tensor_parallel.h"
#include "parallel/comm/zero.h"
#include "parallel/plan/mesh.h"
#include "parallel/plan/param_buckets.h"
#include "parallel/plan/pipeline_schedule.h"
#include "train/train_loop.h"

// ------------------------------------------------------------------------------------------------
// 1. Buffers

// The part of the model this rank's pipeline stage computes, and how many micro-batches' activations
// it keeps at once (its schedule's in-flight count; 1 without a pipeline).
struct Stage {
    int first_layer, end_layer, slots;
    bool first, last;
    int layers() const { return end_layer - first_layer; }
};
static Stage make_stage(const GPTConfig& config, const TrainOptions& opt, const Mesh& mesh, int micro_steps) {
    const std::vector<int> first = stage_layers(config, opt.seq_len, mesh.pipeline);
    return {first[mesh.stage], first[mesh.stage + 1],
            micro_batches_in_flight(opt.pp_schedule, mesh.pipeline, mesh.stage, micro_steps), mesh.first_stage(),
            mesh.last_stage()};
}

// What the forward pass keeps for the backward pass, for micro-batches of up to N = B·T positions.
// Per-layer tensors hold a slice per layer of the stage and per micro-batch in flight (slot). With
// tensor parallelism over T ranks (parallel/comm/tensor_parallel.h) the attention and MLP activations hold
// this rank's heads and hidden units (C/T, 3C/T, 4C/T wide), and with sequence parallelism the residual
// stream and the LayerNorms hold this rank's Nl = N/T positions (Nl = N otherwise). With
// recomputation, some tensors hold one slice that every layer and slot reuses, and backward recomputes
// its contents from what was kept:
//   -r 0  everything kept
//   -r 1  GELU outputs recomputed from the GELU inputs (fch)
//   -r 2  also the LayerNorm outputs, from their inputs and the saved mean and rstd
struct Activations {
    floatX* encoded;                   // (slots, Nl, C) the stage's input: the embeddings, or what the
                                       // previous stage sent
    floatX* ln1;                       // (layers·slots or 1, Nl, C)
    float *ln1_mean, *ln1_rstd;        // (layers·slots, Nl)
    floatX* qkv;                       // (layers·slots, N, 3C/T)
    floatX* atty;                      // (layers·slots, N, C/T) attention output
    float* att_lse;                    // (layers·slots, B, NH/T, T) log-sum-exp of each attention row
    floatX* residual2;                 // (layers·slots, Nl, C) residual stream after attention
    floatX* ln2;                       // (layers·slots or 1, Nl, C)
    float *ln2_mean, *ln2_rstd;        // (layers·slots, Nl)
    floatX* fch;                       // (layers·slots, N, 4C/T) GELU input
    floatX* fch_gelu;                  // (layers·slots or 1, N, 4C/T) GELU output
    floatX* residual3;                 // (layers·slots, Nl, C) residual stream after the MLP: the layer's output
    // The last stage: the final LayerNorm and the classifier.
    floatX* lnf;                       // (Nl, C)
    float *lnf_mean, *lnf_rstd;        // (slots, Nl)
    floatX* dlnf;                      // (slots, Nl, C) d(loss)/d(lnf), from the classifier's backward
    floatX* logits;                    // (R, Vs) this rank's vocabulary slice (Vs = Vp with one rank) of
                                       // R rows (classifier_rows); the classifier overwrites it with
                                       // d(loss)/d(logits)
    float* losses;                     // (N)
    // Working buffers reused by every layer.
    floatX* branch;                    // (Nl, C) an attention or MLP branch's output, before the add
    floatX* dresidual[2];              // (Nl, C) d(loss)/d(residual stream); with a pipeline two, taken in
                                       // turns by micro-batches (one may still be on its way to the
                                       // previous stage)
    floatX* dln;                       // (Nl, C)
    floatX* datty;                     // (N, C/T)
    floatX* dqkv;                      // (N, 3C/T)
    floatX* dfch;                      // (N, 4C/T)
    // Sequence parallelism only: the whole (N, C) input of a column-parallel product (gathered), a
    // LayerNorm output gathered in backward while another product computes, and a row-parallel
    // product's partial sums before they are reduce-scattered.
    floatX *whole, *whole_ln, *partial;
    // Tensor parallelism only: the classifier's per-row statistics, this rank's (N, 3) and every rank's
    // (T, N, 3), and the rows' log-sum-exp (N). With tensor or pipeline parallelism: one row of logits
    // gathered whole or sent from the last stage (T·Vs ≥ Vp).
    float *class_stats, *class_stats_all, *class_lse;
    floatX* logits_row;
};

// This process among the ranks of the run: the host group (MPI) and the world's NCCL communicator (null
// without an MPI launcher: then there is nothing to communicate). The model places itself in the mesh
// of -tp and -pp (parallel/plan/mesh.h) and splits the communicator into its groups'.
struct WorldRanks {
    RankGroup* ranks;
    ncclComm_t nccl = nullptr;
    int rank() const { return ranks ? ranks->rank : 0; }
    int num_ranks() const { return ranks ? ranks->num_ranks : 1; }
};

// The rows of logits the classifier holds at once (the LM head and its loss run over chunks of them,
// kernels/chunked_classifier.h, so that the (N, Vp) logits never exist whole): whole sequences, as
// few chunks as keep a chunk within classifier_chunk_bytes (one chunk, the unchunked computation, for
// small batches; GPT-2 124M at B=64, T=1024: 6.6 GB of logits become 7 chunks of 0.94 GB). Under
// tensor parallelism every row of this rank's vocabulary slice (already 1/T of the vocabulary): the
// slices' statistics are gathered once per call, where chunks would gather once per chunk.
static size_t classifier_chunk_bytes = (size_t)1 << 30;
static int classifier_rows(const TensorParallel& tp, int B, int T, int Vp) {
    if (tp.size() > 1) return B * T;
    const size_t bytes = (size_t)B * T * Vp * sizeof(floatX);
    const int chunks = (int)std::max<size_t>(1, (bytes + classifier_chunk_bytes - 1) / classifier_chunk_bytes);
    return (B + chunks - 1) / chunks * T;
}
// For tests: chunks of at most this many bytes from now on (models made later use it).
void set_classifier_chunk_bytes(size_t bytes) { classifier_chunk_bytes = bytes; }

// Everything sized by the micro-batch: activations, token ids, kernel scratch.
struct StepBuffers {
    Activations act{};
    int* inputs = nullptr;   // (N) token ids of the current micro-batch
    int* targets = nullptr;
    void* scratch = nullptr;   // kernel scratch, the largest any kernel asks for
    StepControl* control = nullptr;  // the step's values in and its loss, norm and verdict out
                                     // (kernels/step_guard.h)
};
// Requests them in the arena, for micro-batches of up to opt.batch_size × opt.seq_len tokens on a rank
// of a tensor group of `tp` ranks and of pipeline stage `stage` (see struct Activations for what -r,
// -tp, -sp and -pp change).
static void request_step_buffers(DeviceArena* arena, StepBuffers* buffers, const GPTConfig& config,
                                 const TrainOptions& opt, const TensorParallel& tp, const Stage& stage) {
    const size_t C = config.channels, NH = config.num_heads;
    const size_t Vp = config.padded_vocab_size, HS = C / NH, T_ranks = tp.size();
    const int B = opt.batch_size, T = opt.seq_len;
    const size_t N = (size_t)B * T, Nl = tp.local_positions((int)N);
    const size_t Ct = C / T_ranks, NHt = NH / T_ranks, Vs = tp.vocab_slice((int)Vp);
    const size_t K = stage.slots, slices = (size_t)stage.layers() * K;
    const size_t ln_slices = opt.recompute >= 2 ? 1 : slices, gelu_slices = opt.recompute >= 1 ? 1 : slices;
    Activations& a = buffers->act;
    auto request = [&](auto** pointer, size_t count) {
        arena->request(pointer, count, MemoryKind::ACTIVATIONS);
    };
    request(&a.encoded, K * Nl * C);
    request(&a.ln1, ln_slices * Nl * C);
    request(&a.ln1_mean, slices * Nl);
    request(&a.ln1_rstd, slices * Nl);
    request(&a.qkv, slices * N * 3 * Ct);
    request(&a.atty, slices * N * Ct);
    request(&a.att_lse, slices * N * NHt);
    request(&a.residual2, slices * Nl * C);
    request(&a.ln2, ln_slices * Nl * C);
    request(&a.ln2_mean, slices * Nl);
    request(&a.ln2_rstd, slices * Nl);
    request(&a.fch, slices * N * 4 * Ct);
    request(&a.fch_gelu, gelu_slices * N * 4 * Ct);
    request(&a.residual3, slices * Nl * C);
    if (stage.last) {
        request(&a.lnf, Nl * C);
        request(&a.lnf_mean, K * Nl);
        request(&a.lnf_rstd, K * Nl);
        request(&a.dlnf, K * Nl * C);
        request(&a.logits, (size_t)classifier_rows(tp, B, T, (int)Vp) * Vs);
        request(&a.losses, N);
    }
    request(&a.branch, Nl * C);
    request(&a.dresidual[0], Nl * C);
    if (!(stage.first && stage.last)) request(&a.dresidual[1], Nl * C);
    request(&a.dln, Nl * C);
    request(&a.datty, N * Ct);
    request(&a.dqkv, N * 3 * Ct);
    request(&a.dfch, N * 4 * Ct);
    if (tp.sequence_parallel()) {
        request(&a.whole, N * C);
        request(&a.whole_ln, N * C);
        request(&a.partial, N * C);
    }
    if (tp.size() > 1 && stage.last) {
        request(&a.class_stats, N * 3);
        request(&a.class_stats_all, T_ranks * N * 3);
        request(&a.class_lse, N);
    }
    if (tp.size() > 1 || !(stage.first && stage.last)) request(&a.logits_row, T_ranks * Vs);
    request(&buffers->inputs, N);
    request(&buffers->targets, N);
    const size_t scratch_bytes = std::max(
        {encoder_backward_scratch_bytes(B, T), layernorm_backward_scratch_bytes((int)Nl, (int)C),
         matmul_backward_scratch_bytes((int)N, 4 * (int)C), matmul_backward_scratch_bytes((int)N, (int)Vp),
         attention_backward_scratch_bytes(B, T, (int)NHt, (int)HS), global_norm_scratch_bytes()});
    request(reinterpret_cast<char**>(&buffers->scratch), scratch_bytes);
    request(&buffers->control, 1);
}

// The ZeRO stage a run uses: what -z asks for, when there is a communicator (several ranks, or one
// started by an MPI launcher).
static int zero_stage_in_effect(const TrainOptions& opt, bool communicates) {
    return communicates ? opt.zero_stage : 0;
}

// Sequence parallelism: -sp, on by default with -tp > 1.
static bool sequence_parallel(const TrainOptions& opt) {
    return opt.tensor_parallel > 1 && opt.sequence_parallel != 0;
}

// fp32 master weights beside the working weights: with bf16 storage unless -w 0.
static bool fp32_master_weights(const TrainOptions& opt) {
#ifdef ENABLE_FP32
    (void)opt;
    return false;  // the working weights are fp32 already
#else
    return opt.fp32_master != 0;
#endif
}

// The slice of the model a rank holds: its tensor rank's slice of its stage's layers.
static ModelSlice model_slice(const Mesh& mesh, const Stage& stage) {
    return {mesh.tensor_rank, mesh.tensor, stage.first_layer, stage.end_layer, stage.first, stage.last};
}

// Bytes one rank sends in its tensor group per optimizer step of `micro_steps` micro-steps: the
// collectives of forward_stage, run_classifier and backward_stage (parallel/comm/tensor_parallel.h),
// counted here without running them (GPUModel checks its first micro-step against this). Per
// micro-step, with n = N·C elements of one (N, C) activation and Ls the stage's layers:
//   sequence parallel   forward: the embeddings' reduce-scatter (first stage); per layer 2 gathers and
//                       2 reduce-scatters; lnf's gather, again for the classifier's backward, and the
//                       reduce-scatter of lnf's gradient (last stage). backward: per layer 4 gathers
//                       and 2 reduce-scatters; the embeddings' gather (first stage): 10 Ls + 2 + 3
//                       gathers' worth with both ends.
//                       The LayerNorm gradients' sums (4C per layer, 2C final) wherever the gradients
//                       are reduced.
//   otherwise           forward: the embeddings' (first stage), per layer 2, and the classifier's
//                       backward's (last stage) all-reduces; backward: per layer 2.
// The last stage also gathers the classifier's row statistics (N × 3 fp32); the squared norm is summed
// once per step.
struct TensorTraffic {
    size_t per_micro_step = 0, per_reduction = 0, per_step = 0;
};
static TensorTraffic tensor_traffic(const GPTConfig& c, int B, int T_len, const TensorParallel& tp,
                                    const Stage& stage) {
    TensorTraffic t;
    const int T = tp.size();
    if (T == 1) return t;
    const size_t N = (size_t)B * T_len, C = c.channels, L = stage.layers(), e = sizeof(floatX);
    const size_t first = stage.first ? 1 : 0, last = stage.last ? 1 : 0;
    if (stage.last) t.per_micro_step = TensorParallel::gather_bytes(N * 3, T, sizeof(float));
    if (tp.sequence_parallel()) {
        t.per_micro_step += (10 * L + 2 * first + 3 * last) * TensorParallel::gather_bytes(N / T * C, T, e);
        t.per_reduction = L * TensorParallel::all_reduce_bytes(4 * C, T, e) +
                          (stage.last ? TensorParallel::all_reduce_bytes(2 * C, T, e) : 0);
    } else {
        t.per_micro_step += (4 * L + first + last) * TensorParallel::all_reduce_bytes(N * C, T, e);
    }
    t.per_step = TensorParallel::all_reduce_bytes(1, T, sizeof(float));
    return t;
}
static size_t tensor_bytes_per_step(const TensorTraffic& t, int micro_steps, int zero_stage) {
    const size_t reductions = zero_stage >= 2 ? micro_steps : 1;  // as ParameterStore::reduces_gradients
    return micro_steps * t.per_micro_step + reductions * t.per_reduction + t.per_step;
}
// Bytes one rank sends along its pipeline per step: each micro-batch's activations to the next stage
// and their gradients to the previous one, (Nl, C) each; the tied embedding's gradient between the
// first and the last stage; the loss, from the last stage.
static size_t pipeline_bytes_per_step(const GPTConfig& c, const TrainOptions& opt, const TensorParallel& tp,
                                      const Stage& stage, int stages, int micro_steps) {
    if (stages == 1) return 0;
    const size_t Nl = tp.local_positions(opt.batch_size * opt.seq_len), C = c.channels;
    const size_t boundaries = (stage.first ? 0 : 1) + (stage.last ? 0 : 1);
    const size_t tied = stage.first || stage.last ? tp.vocab_slice(c.padded_vocab_size) * C : 0;
    return (micro_steps * boundaries * Nl * C + tied) * sizeof(floatX);
}

// One line per pipeline stage for the start-up report: its layers, micro-batches in flight and memory.
static std::string stage_report(const GPTConfig& config, const TrainOptions& opt, int num_ranks, bool communicates);

// The device memory and network traffic of rank 0 of a run of num_ranks ranks (stage 0; the others'
// in memory.pipeline_report), computed from the same buffer requests the model makes, without
// allocating anything (for --dry-run; no device needed).
static ModelMemory plan_stage_memory(const GPTConfig& config, const TrainOptions& opt, int num_ranks,
                                     bool communicates, int stage_index) {
    Mesh mesh = make_mesh(num_ranks, 0, opt.tensor_parallel, opt.pipeline_parallel);
    mesh.stage = stage_index;
    const int micro_steps = grad_accum_steps(opt, num_ranks);
    const Stage stage = make_stage(config, opt, mesh, micro_steps);
    const TensorParallel tp(nullptr, nullptr, 0, mesh.tensor, sequence_parallel(opt));
    const int zero_stage = zero_stage_in_effect(opt, communicates);
    DeviceArena arena;
    ParameterStore store(make_param_buckets(config, mesh.data, model_slice(mesh, stage)), zero_stage, 0,
                         fp32_master_weights(opt));
    store.request_memory(&arena);
    StepBuffers buffers;
    request_step_buffers(&arena, &buffers, config, opt, tp, stage);
    ModelMemory memory = arena.memory();
    memory.network_bytes_per_step = store.bytes_sent_per_step(micro_steps);
    memory.tensor_bytes_per_step =
        tensor_bytes_per_step(tensor_traffic(config, opt.batch_size, opt.seq_len, tp, stage), micro_steps, zero_stage);
    memory.pipeline_bytes_per_step = pipeline_bytes_per_step(config, opt, tp, stage, mesh.pipeline, micro_steps);
    return memory;
}
ModelMemory plan_gpu_memory(const GPTConfig& config, const TrainOptions& opt, int num_ranks, bool communicates) {
    ModelMemory memory = plan_stage_memory(config, opt, num_ranks, communicates, 0);
    memory.pipeline_report = stage_report(config, opt, num_ranks, communicates);
    return memory;
}
static std::string stage_report(const GPTConfig& config, const TrainOptions& opt, int num_ranks, bool communicates) {
    const int P = opt.pipeline_parallel, m = grad_accum_steps(opt, num_ranks);
    if (P == 1) return "";
    const std::vector<int> first = stage_layers(config, opt.seq_len, P);
    std::string report = strprintf("pipeline: %d stages, %s; %s schedule, %d micro-batches, bubble %.1f%%\n", P,
                                   describe_stage_layers(first).c_str(), opt.pp_schedule.c_str(), m,
                                   100.0 * pipeline_bubble(P, m));
    const double MiB = 1024.0 * 1024.0;
    for (int s = 0; s < P; s++) {
        const ModelMemory mem = plan_stage_memory(config, opt, num_ranks, communicates, s);
        const int kept = micro_batches_in_flight(opt.pp_schedule, P, s, m);
        const std::string layers = first[s + 1] - first[s] == 1 ? strprintf("layer %d", first[s])
                                                                 : strprintf("layers %d-%d", first[s], first[s + 1] - 1);
        report += strprintf("stage %d: %s, %d micro-batch%s in flight, activations %.1f MiB, total %.1f MiB\n", s,
                            layers.c_str(), kept, kept == 1 ? "" : "es", mem.activations / MiB, mem.total() / MiB);
    }
    return report;
}

class GPUModel : public TrainModel {
public:
    GPUModel(const GPTConfig& config, const TrainOptions& opt, WorldRanks world = {nullptr});
    ~GPUModel() override;

    const GPTConfig& config() const override { return config_; }
    std::string description() const override;
    double peak_flops() const override { return peak_flops_; }
    GpuTelemetry device_telemetry() override { return read_cuda_device_telemetry(device_); }

    float forward(const int* inputs, const int* targets, int B, int T) override;
    void logits_at(int t, float* out) override;
    void zero_grad() override;
    float forward_backward(const int* inputs, const int* targets, int B, int T, float loss_scale,
                           bool last_micro_step) override;
    double train_step(int micro_steps, int B, int T, const NextBatch& next_batch) override;
    double grad_norm() override;
    void update(const AdamWSettings& settings, int step) override;
    StepOutcome optimizer_step(int micro_steps, int B, int T, const NextBatch& next_batch, const StepUpdate& u,
                              const std::function<double(double)>& mean_over_ranks) override;
    std::string end_of_run_report() override;

    WeightType working_weight_type() const override;
    void set_working_weights(const std::vector<float>& weights) override;
    std::vector<float> working_weights() override { return store_.weights_in_layout_order(); }
    ModelPart working_weights_part() override { return store_.weights_part(); }
    bool forward_is_collective() const override {
        return store_.stage() >= 3 || tp_.size() > 1 || pipeline_.stages() > 1;
    }
    void set_optimizer_state(const std::vector<float>& master, const std::vector<float>& m,
                             const std::vector<float>& v) override;
    OptimizerPart optimizer_part() override { return store_.optimizer_part(); }
    ModelMemory memory() const override { return memory_; }
    // Samples through a key/value cache (gpu/gpt_decode.h) where this rank holds every weight; where
    // forward() is a collective (the model spread over the ranks), the samples recompute the prefix.
    bool supports_decode() const override { return !forward_is_collective(); }
    void decode_reset(int max_len) override {
        if (!decoder_ || decoder_->capacity() < max_len)
            decoder_ = std::make_unique<GPUDecoder>(config_, max_len, stream_);
        decoder_->truncate(0);
    }
    void decode_next(int token, float* logits) override {
        decoder_->step(token, [this](int t, int l) -> const floatX* { return p(t, l); }, logits);
    }
    // The gradients, widened to fp32 (for tests and debugging; one rank of a whole model, -z 0 and 1).
    std::vector<float> gradients() { return store_.gradients_in_layout_order(); }
    // Device bytes the model allocated (its arena), for tests of the memory report.
    size_t allocated_bytes() const { return arena_.bytes(); }

private:
    // Parameter tensor t of layer l (l ignored for wte, wpe, lnfw, lnfb): this rank's slice of its
    // weights and of its gradients, wherever the ZeRO stage keeps its bucket now (parallel/comm/zero.h).
    floatX* p(int t, int l = 0) const {
        return store_.weights(buckets_.bucket_of(t, l)) + buckets_.offset_in_bucket(t, l);
    }
    floatX* g(int t, int l = 0) const {
        return store_.gradients(buckets_.bucket_of(t, l)) + buckets_.offset_in_bucket(t, l);
    }
    // Layer l's (a layer of this stage) slices of every per-layer activation of the micro-batch in
    // `slot` (slice 0 of those -r does not keep per layer).
    struct LayerSlices {
        const floatX* x;  // the layer's input: the stage's input, or the previous layer's residual3
        floatX *ln1, *qkv, *atty, *residual2, *ln2, *fch, *fch_gelu, *residual3;
        float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *att_lse;
    };
    LayerSlices layer_slices(int l, int slot) const;
    // The stage's input and output activations of the micro-batch in `slot`.
    floatX* stage_input(int slot) const { return act_.encoded + (size_t)slot * max_Nl_ * config_.channels; }
    const floatX* stage_output(int slot) const { return layer_slices(stage_.end_layer - 1, slot).residual3; }
    // A row-parallel product's partial sums go here before tp_.reduce_positions into `mine`.
    floatX* partial_for(floatX* mine) const { return tp_.partial_buffer(act_.partial, mine); }
    // Reduces the gradients of `bucket` across the data ranks; under sequence parallelism the
    // LayerNorm parameters' gradients are summed over the tensor group first.
    void reduce_gradients(int bucket, bool last_micro_step);

    // Pinned host memory for micro-batches 0 .. micro_batches-1 of a step (grown when a step has more):
    // copies from it are asynchronous, so the host never waits for the device to take a micro-batch.
    void reserve_staging(int micro_batches);
    int* staged_inputs(int micro_batch) const { return staged_tokens_ + (size_t)micro_batch * 2 * max_N_; }
    int* staged_targets(int micro_batch) const { return staged_inputs(micro_batch) + max_N_; }
    // Checks micro-batch `micro_batch`'s tokens and copies them into its staging area (targets may be
    // null: a forward without loss).
    void stage_tokens(const int* inputs, const int* targets, int B, int T, int micro_batch);
    // The staged tokens of `micro_batch` to the device buffers the next forward reads.
    void upload_tokens(int micro_batch, bool with_targets);
    // How far a forward pass goes on the last stage: the logits, the loss too, or also the
    // classifier's backward (training).
    enum class Pass { LOGITS, LOSS, TRAINING };
    // The stage's forward pass of the micro-batch in `slot` (tokens already uploaded); on the last
    // stage the mean loss goes into control->totals (micro_loss; in training also the step's running
    // loss, as 1/micro_steps of it), where the step reads it back once.
    void forward_stage(int slot, Pass pass, float loss_scale, int micro_steps, bool last_micro_step);
    void run_classifier(int slot, bool training, float loss_scale, int micro_steps, bool last_micro_step);
    // The stage's backward pass of micro-batch `micro_batch`, in `slot`: the layers (everything the
    // device can do alone), then the embeddings (whose backward groups the tokens on the host).
    void backward_layers(int slot, int micro_batch, bool last_micro_step);
    void backward_embeddings(int slot, int micro_batch, bool last_micro_step);
    // One optimizer step's forward and backward passes over `micro_steps` micro-batches (read and
    // staged first), from zeroed gradients and loss: one after the other, or in the pipeline
    // schedule's order.
    void accumulate(int micro_steps, int B, int T, const NextBatch& next_batch);
    // Micro-step i of micro_steps without a pipeline: forward, then backward.
    void micro_step(int i, int micro_steps, bool last_micro_step);
    // The squared global gradient norm into control->totals.norm_squared, summed over the ranks.
    void issue_norm();
    // The end of a step on the device: the loss from the last stage averaged over the data ranks, the
    // norm, the verdict and the clipped update (kernels/step_guard.h), and the totals copied out.
    void issue_update(const AdamWSettings& constants);
    // The stochastic rounding's seed of step `step`.
    uint32_t rounding_seed(int step) const;
    // Copies control->totals to the host (waits for the device: a host synchronisation).
    const StepTotals& read_totals();
    // Issues `issue`'s work on the compute stream: as a CUDA graph captured under `key` once graphs are
    // on and the first optimizer step is done (it runs eagerly: cuBLASLt's algorithm choices, lazily
    // made streams and the tensor traffic check happen outside any capture), else directly.
    template <typename Issue>
    void issue_graphed(const std::vector<long long>& key, Issue&& issue) {
        if (steps_done_ == 0 || !graphs_.enabled()) return issue();
        graphs_.run(key, stream_, issue);
    }
    bool stream_capturing() const {
        cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
        CUDA_CHECK(cudaStreamIsCapturing(stream_, &status));
        return status != cudaStreamCaptureStatusNone;
    }

    GPTConfig config_;
    WorldRanks world_;
    Mesh mesh_;                       // this rank's place among the ranks (-tp, -pp, data)
    MeshCommunicators comms_;         // its groups' NCCL communicators
    TensorParallel tp_;               // the collectives of its tensor group
    PipelineParallel pipeline_;       // the transfers along its pipeline
    int accum_steps_;
    std::string schedule_;            // --pp-schedule
    Stage stage_;                     // the layers it computes, the micro-batches it keeps
    ParamBuckets buckets_;            // device order of parameters and gradients (this rank's slice)
    ParameterStore store_;            // weights, gradients, optimizer state under the ZeRO stage
    GraphCache graphs_;               // micro-steps and updates as CUDA graphs (--cuda-graphs)
    std::string graphs_text_;         // for the description: on, or why not
    int steps_done_ = 0;              // optimizer steps so far (the first runs without graphs)
    int max_B_, max_T_;
    size_t max_N_, max_Nl_;           // positions of a micro-batch, and those this rank keeps (-sp)
    int classifier_rows_;             // rows of logits held at once (classifier_rows)
    int recompute_;
    bool use_master_;
    double peak_flops_ = 0;           // dense bf16 tensor-core peak, for MFU (0: unknown)
    int device_ = 0;                  // the CUDA device
    std::string device_name_, peak_text_;
    uint64_t seed_;
    cudaStream_t stream_ = nullptr;
    DeviceArena arena_;
    ModelMemory memory_;
    bool traffic_checked_ = false;    // the first micro-step's tensor traffic was compared with the plan

    StepBuffers buf_;
    Activations& act_ = buf_.act;

    // Pinned host memory (cudaMallocHost): each micro-batch's tokens (inputs then targets, max_N_ each)
    // and the encoder backward's grouping of them, for staged_ micro-batches; the step's control block.
    int* staged_tokens_ = nullptr;
    char* encoder_host_scratch_ = nullptr;
    size_t encoder_host_bytes_ = 0;  // per micro-batch
    int staged_ = 0;
    StepControl* control_host_ = nullptr;

    int B_ = 0, T_ = 0;                // shape of the micro-batches
    std::unique_ptr<GPUDecoder> decoder_;  // the samples' key/value cache, made by the first sample
    // The emulated device's counts over the last optimizer step (end_of_run_report, tests).
public:
    struct StepCounts {
        unsigned long long kernels = 0, syncs = 0, graph_kernels = 0, graph_launches = 0;
#ifdef EMU_CUDA
        static StepCounts now() {
            return {emu::launch_count(), emu::host_sync_count(), emu::graph_kernel_count(), emu::graph_launch_count()};
        }
#endif
        StepCounts operator-(const StepCounts& o) const {
            return {kernels - o.kernels, syncs - o.syncs, graph_kernels - o.graph_kernels,
                    graph_launches - o.graph_launches};
        }
        unsigned long long host_launches() const { return kernels - graph_kernels + graph_launches; }
    };
    const StepCounts& last_step_counts() const { return last_step_counts_; }

private:
    StepCounts last_step_counts_;
    int steps_counted_ = 0;
};

GPUModel::GPUModel(const GPTConfig& config, const TrainOptions& opt, WorldRanks world)
    : config_(config), world_(world),
      mesh_(make_mesh(world.num_ranks(), world.rank(), opt.tensor_parallel, opt.pipeline_parallel)),
      comms_(split_mesh_communicators(world.nccl, mesh_)),
      tp_(comms_.tensor, comms_.tensor_overlap, mesh_.tensor_rank, mesh_.tensor, sequence_parallel(opt)),
      pipeline_(comms_.pipeline, comms_.tied_embedding, mesh_.stage, mesh_.pipeline),
      accum_steps_(std::max(1, grad_accum_steps(opt, world.num_ranks()))), schedule_(opt.pp_schedule),
      stage_(make_stage(config, opt, mesh_, accum_steps_)),
      buckets_(make_param_buckets(config, mesh_.data, model_slice(mesh_, stage_))),
      store_(buckets_, zero_stage_in_effect(opt, comms_.data != nullptr), mesh_.data_rank, fp32_master_weights(opt)),
      graphs_(opt.cuda_graphs != 0 && mesh_.pipeline == 1 && store_.stage() <= 1),
      max_B_(opt.batch_size), max_T_(opt.seq_len), max_N_((size_t)opt.batch_size * opt.seq_len),
      max_Nl_(tp_.local_positions((int)max_N_)),
      classifier_rows_(classifier_rows(tp_, opt.batch_size, opt.seq_len, config.padded_vocab_size)),
      recompute_(opt.recompute), use_master_(fp32_master_weights(opt)), seed_(opt.seed) {
    const int C = config.channels, NH = config.num_heads;
    const int Vp = config.padded_vocab_size, HS = C / NH;
    if (C % NH != 0 || C % 8 != 0 || Vp % 8 != 0)
        fail("-e (--model): channels %d must be a multiple of 8 and of the head count %d", C, NH);
    if (!attention_supports_head_size(HS))
        fail("-e (--model): head size %d (channels %d / heads %d) is not supported by the attention "
             "kernels (supported: 32, 64, 128)", HS, C, NH);

    // CUDA graphs replay what a step issues the same way every time. A pipeline's schedule interleaves
    // micro-batches with point-to-point transfers, and ZeRO-2/3 change what a micro-step issues with
    // host-side state (which slot holds a bucket, whether a shard already holds this step's gradients)
    // and order it by events across micro-steps: those run without graphs.
    graphs_text_ = graphs_.enabled()      ? "CUDA graphs for micro-steps and updates"
                   : opt.cuda_graphs == 0 ? "CUDA graphs off (--cuda-graphs 0)"
                   : mesh_.pipeline > 1   ? "CUDA graphs off (pipeline schedules run without them)"
                                          : "CUDA graphs off (ZeRO-2/3 run without them)";
    CUDA_CHECK(cudaGetDevice(&device_));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    device_name_ = prop.name;
    // MFU's denominator for any GPU: its SM count × its peak SM clock × the dense bf16 tensor-core
    // FLOPs per clock of an SM of its compute capability (base/gpu_telemetry.h); 0 (MFU n/a) where
    // the capability's rate is not known, and on the emulated device.
    peak_flops_ = cuda_device_peak_bf16_flops(device_);
    if (peak_flops_ > 0) {
        int clock_khz = 0;
        CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device_));
        peak_text_ = strprintf(", MFU against %.0f TFLOP/s (dense bf16: %d SMs at %d MHz)", peak_flops_ / 1e12,
                               prop.multiProcessorCount, clock_khz / 1000);
    }
    CUDA_CHECK(cudaStreamCreate(&stream_));
    matmul_setup(opt.tf32 != 0);
    set_attention_kernel(opt.attention_kernel.c_str());

    // Parameters, gradients and optimizer state as the ZeRO stage keeps them, then everything sized
    // by the micro-batch (see struct Activations for what -r, -tp, -sp and -pp change).
    store_.request_memory(&arena_);
    request_step_buffers(&arena_, &buf_, config, opt, tp_, stage_);
    memory_ = arena_.memory();
    memory_.network_bytes_per_step = store_.bytes_sent_per_step(accum_steps_);
    memory_.tensor_bytes_per_step = tensor_bytes_per_step(
        tensor_traffic(config, opt.batch_size, opt.seq_len, tp_, stage_), accum_steps_, store_.stage());
    memory_.pipeline_bytes_per_step =
        pipeline_bytes_per_step(config, opt, tp_, stage_, mesh_.pipeline, accum_steps_);
    memory_.pipeline_report = stage_report(config, opt, world.num_ranks(), comms_.data != nullptr);

    // Will it fit? Say so before allocating anything, with what to lower.
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (arena_.bytes() > free_bytes)
        fail("the model needs %.2f GiB of GPU memory (weights, gradients and optimizer %.2f GiB, "
             "activations %.2f GiB) but %s has %.2f GiB free: lower -b (batch size) or -t (sequence "
             "length), recompute more with -r 2, or shard more with a higher -z over more ranks",
             arena_.bytes() / 1073741824.0, (memory_.total() - memory_.activations) / 1073741824.0,
             memory_.activations / 1073741824.0, prop.name, free_bytes / 1073741824.0);
    arena_.allocate("the model");
    encoder_host_bytes_ = (encoder_backward_host_scratch_bytes(max_B_, max_T_) + 255) / 256 * 256;
    CUDA_CHECK(cudaMallocHost(&control_host_, sizeof(StepControl)));
    reserve_staging(accum_steps_);
    store_.start(stream_, comms_.data);
    // The padded vocabulary rows' logits gradient is zero, but the classifier only writes rows it
    // sees; start every buffer defined.
    if (stage_.last)
        CUDA_CHECK(cudaMemsetAsync(act_.logits, 0, (size_t)classifier_rows_ * tp_.vocab_slice(Vp) * sizeof(floatX),
                                   stream_));
}

GPUModel::~GPUModel() {
    cudaFreeHost(staged_tokens_);
    cudaFreeHost(encoder_host_scratch_);
    cudaFreeHost(control_host_);
    matmul_teardown();
    if (stream_) cudaStreamDestroy(stream_);
    destroy_mesh_communicators(&comms_);
}

std::string GPUModel::description() const {
    std::string parallel = store_.description();
    auto append = [&](const std::string& what) { parallel = parallel.empty() ? what : what + ", " + parallel; };
    if (tp_.size() > 1)
        append(strprintf("tensor parallel over %d ranks%s", tp_.size(),
                         tp_.sequence_parallel() ? " (sequence parallel)" : ""));
    if (pipeline_.stages() > 1)
        append(strprintf("pipeline stage %d of %d (layers %d-%d, %s)", mesh_.stage, mesh_.pipeline,
                         stage_.first_layer, stage_.end_layer - 1, schedule_.c_str()));
    return strprintf("CUDA on %s%s, %s storage%s, fp32 AdamW state, recompute -r %d%s; %s", device_name_.c_str(),
                     peak_text_.c_str(), PRECISION_NAME, use_master_ ? " with fp32 master weights" : "", recompute_,
                     parallel.empty() ? "" : (", " + parallel).c_str(), graphs_text_.c_str());
}

// ------------------------------------------------------------------------------------------------
// 2. Forward

void GPUModel::reserve_staging(int micro_batches) {
    if (micro_batches <= staged_) return;
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // nothing in flight reads the old areas
    int* tokens = nullptr;
    CUDA_CHECK(cudaMallocHost(&tokens, (size_t)micro_batches * 2 * max_N_ * sizeof(int)));
    if (staged_tokens_) std::copy(staged_tokens_, staged_tokens_ + (size_t)staged_ * 2 * max_N_, tokens);
    cudaFreeHost(staged_tokens_);
    cudaFreeHost(encoder_host_scratch_);
    staged_tokens_ = tokens;
    CUDA_CHECK(cudaMallocHost(&encoder_host_scratch_, (size_t)micro_batches * encoder_host_bytes_));
    staged_ = micro_batches;
}

void GPUModel::stage_tokens(const int* inputs, const int* targets, int B, int T, int micro_batch) {
    if (B < 1 || B > max_B_ || T < 1 || T > max_T_)
        fail("forward: batch %dx%d exceeds the allocated %dx%d", B, T, max_B_, max_T_);
    const size_t N = (size_t)B * T;
    for (size_t i = 0; i < N; i++)
        if (inputs[i] < 0 || inputs[i] >= config_.vocab_size ||
            (targets && (targets[i] < 0 || targets[i] >= config_.vocab_size)))
            fail("forward: token id outside the vocabulary [0, %d) at position %zu",
                 config_.vocab_size, i);
    B_ = B, T_ = T;
    reserve_staging(micro_batch + 1);
    std::copy(inputs, inputs + N, staged_inputs(micro_batch));
    if (targets) std::copy(targets, targets + N, staged_targets(micro_batch));
}

void GPUModel::upload_tokens(int micro_batch, bool with_targets) {
    const size_t bytes = (size_t)B_ * T_ * sizeof(int);
    if (stage_.first)
        CUDA_CHECK(cudaMemcpyAsync(buf_.inputs, staged_inputs(micro_batch), bytes, cudaMemcpyHostToDevice, stream_));
    if (with_targets && stage_.last)
        CUDA_CHECK(cudaMemcpyAsync(buf_.targets, staged_targets(micro_batch), bytes, cudaMemcpyHostToDevice, stream_));
}

GPUModel::LayerSlices GPUModel::layer_slices(int l, int slot) const {
    const Activations& a = act_;
    const size_t C = config_.channels, Ct = C / tp_.size(), N = max_N_, Nl = max_Nl_;
    const size_t i = (size_t)slot * stage_.layers() + (l - stage_.first_layer);  // this slice
    const size_t ln = recompute_ < 2 ? i : 0, gelu = recompute_ < 1 ? i : 0;
    return {l == stage_.first_layer ? stage_input(slot) : a.residual3 + (i - 1) * Nl * C,
            a.ln1 + ln * Nl * C,
            a.qkv + i * N * 3 * Ct,
            a.atty + i * N * Ct,
            a.residual2 + i * Nl * C,
            a.ln2 + ln * Nl * C,
            a.fch + i * N * 4 * Ct,
            a.fch_gelu + gelu * N * 4 * Ct,
            a.residual3 + i * Nl * C,
            a.ln1_mean + i * Nl,
            a.ln1_rstd + i * Nl,
            a.ln2_mean + i * Nl,
            a.ln2_rstd + i * Nl,
            a.att_lse + i * N * config_.num_heads / tp_.size()};
}

// The stage's part of: x = wte[tokens] + wpe; each layer: x += attproj(attention(qkv(ln1(x))));
// x += fcproj(gelu(fc(ln2(x)))); logits = lnf(x) · wteᵀ. Each residual add is fused with the LayerNorm
// that follows it.
// Pipeline (pipeline_): a stage other than the first receives x from the previous stage; one other
// than the last sends its output to the next.
// ZeRO-3 (store_): each bucket's weights are gathered just before use, each layer's while the one
// before it computes, and released once its last kernel is issued.
// Tensor parallelism (tp_): each rank computes its heads, its hidden units and its vocabulary slice:
// before a column-parallel product (qkv, fc, the classifier) its input is gathered whole, after a
// row-parallel one (attproj, fcproj, the embeddings' lookup) the partial sums are reduced to the
// positions this rank keeps (all of them without sequence parallelism).
void GPUModel::forward_stage(int slot, Pass pass, float loss_scale, int micro_steps, bool last_micro_step) {
    const int B = B_, T = T_, N = B * T, Nl = tp_.local_positions(N), C = config_.channels;
    const int NHt = config_.num_heads / tp_.size(), HS = C / config_.num_heads, Ct = C / tp_.size();
    const int Vp = config_.padded_vocab_size, Vs = tp_.vocab_slice(Vp);
    const int POSITIONS = buckets_.position_bucket(), VOCABULARY = buckets_.vocabulary_bucket();
    const int FINAL_NORM = buckets_.final_norm_bucket();
    Activations& a = act_;
    cudaStream_t s = stream_;

    if (stage_.first) {  // the embeddings: each tensor rank looks up the tokens of its vocabulary slice
        store_.gather_weights(POSITIONS);
        store_.gather_weights(VOCABULARY);
        store_.wait_for_weights(POSITIONS);
        store_.wait_for_weights(VOCABULARY);
        encoder_forward_vocab_slice(partial_for(stage_input(slot)), buf_.inputs, p(WTE), tp_.vocab_begin(Vp), Vs,
                                    tp_.added_once(p(WPE)), B, T, C, s);
        tp_.reduce_positions(stage_input(slot), partial_for(stage_input(slot)), N, C, s);
        store_.release_weights(POSITIONS);
        if (!stage_.last) store_.release_weights(VOCABULARY);
    } else {
        pipeline_.receive_activations(stage_input(slot), (size_t)Nl * C, s);
    }
    store_.gather_weights(buckets_.layer_bucket(stage_.first_layer));
    store_.wait_for_weights(buckets_.layer_bucket(stage_.first_layer));
    const LayerSlices first = layer_slices(stage_.first_layer, slot);
    layernorm_forward(first.ln1, first.ln1_mean, first.ln1_rstd, first.x, p(LN1W, stage_.first_layer),
                      p(LN1B, stage_.first_layer), Nl, C, s);
    for (int l = stage_.first_layer; l < stage_.end_layer; l++) {
        const bool last_layer = l + 1 == stage_.end_layer;
        const int next_bucket = !last_layer ? buckets_.layer_bucket(l + 1) : FINAL_NORM;
        if (next_bucket >= 0) store_.gather_weights(next_bucket);  // prefetch: overlaps this layer's compute
        const LayerSlices y = layer_slices(l, slot);
        // Attention branch: residual2 = x + attproj(attention(qkv(ln1))), then ln2 of it.
        const floatX* ln1 = tp_.gather_positions(a.whole, y.ln1, N, C, s);
        matmul_forward(y.qkv, ln1, p(QKVW, l), p(QKVB, l), N, C, 3 * Ct, s);
        attention_forward(y.atty, y.att_lse, y.qkv, B, T, NHt, HS, s);
        matmul_forward(partial_for(a.branch), y.atty, p(ATTPROJW, l), tp_.added_once(p(ATTPROJB, l)), N, Ct, C, s);
        tp_.reduce_positions(a.branch, partial_for(a.branch), N, C, s);
        residual_layernorm_forward(y.residual2, y.ln2, y.ln2_mean, y.ln2_rstd, y.x, a.branch,
                                   p(LN2W, l), p(LN2B, l), Nl, C, s);
        // MLP branch: residual3 = residual2 + fcproj(gelu(fc(ln2))), then the next LayerNorm: the
        // next layer's ln1, or the final lnf. GELU is its own pass (not the GEMM's epilogue) so that
        // recomputing it in backward gives the very same bits.
        const floatX* ln2 = tp_.gather_positions(a.whole, y.ln2, N, C, s);
        matmul_forward(y.fch, ln2, p(FCW, l), p(FCB, l), N, C, 4 * Ct, s);
        gelu_forward(y.fch_gelu, y.fch, (size_t)N * 4 * Ct, s);
        matmul_forward(partial_for(a.branch), y.fch_gelu, p(FCPROJW, l), tp_.added_once(p(FCPROJB, l)), N,
                       4 * Ct, C, s);
        tp_.reduce_positions(a.branch, partial_for(a.branch), N, C, s);
        if (next_bucket >= 0) store_.wait_for_weights(next_bucket);
        if (!last_layer) {
            const LayerSlices next = layer_slices(l + 1, slot);
            residual_layernorm_forward(y.residual3, next.ln1, next.ln1_mean, next.ln1_rstd,
                                       y.residual2, a.branch, p(LN1W, l + 1), p(LN1B, l + 1), Nl, C, s);
        } else if (stage_.last) {
            residual_layernorm_forward(y.residual3, a.lnf, a.lnf_mean + (size_t)slot * max_Nl_,
                                       a.lnf_rstd + (size_t)slot * max_Nl_, y.residual2, a.branch, p(LNFW),
                                       p(LNFB), Nl, C, s);
        } else {
            residual_forward(y.residual3, y.residual2, a.branch, (size_t)Nl * C, s);
        }
        store_.release_weights(buckets_.layer_bucket(l));
    }
    if (!stage_.last) {
        pipeline_.send_activations(stage_output(slot), (size_t)Nl * C);
        return;
    }
    store_.release_weights(FINAL_NORM);
    if (!stage_.first) {
        store_.gather_weights(VOCABULARY);
        store_.wait_for_weights(VOCABULARY);
    }
    if (pass != Pass::LOGITS) return run_classifier(slot, pass == Pass::TRAINING, loss_scale, micro_steps, last_micro_step);
    // Logits only for what logits_at reads, the rows of sequence 0: the first chunk (this rank's slice).
    const floatX* lnf = tp_.gather_positions(a.whole, a.lnf, N, C, s);
    matmul_forward(a.logits, lnf, p(WTE), nullptr, std::min(N, classifier_rows_), C, Vs, s);
    store_.release_weights(VOCABULARY);
}

// The LM head (logits = lnf · wteᵀ), the losses per position and their mean (in control->totals:
// kernels/classifier.h's loss_mean, summed in double in a fixed order on the device, read back once per
// step); with `training` the logits replaced by the loss gradient (scaled by loss_scale / N), the mean
// added into the step's running loss as 1/micro_steps of it, and the head's backward: d(loss)/d(lnf)
// into dlnf (of the slot) and wte's gradient. With one tensor rank all of it runs a chunk of rows at a
// time (classifier_rows). Under tensor parallelism each rank holds a slice of every row's logits: the
// slices' statistics (maximum, sum of exponentials, the target's logit) are gathered and combined into
// each row's log-sum-exp, so that the whole rows are never gathered.
void GPUModel::run_classifier(int slot, bool training, float loss_scale, int micro_steps, bool last_micro_step) {
    const int N = B_ * T_, V = config_.vocab_size, Vp = config_.padded_vocab_size, C = config_.channels;
    const int VOCABULARY = buckets_.vocabulary_bucket();
    Activations& a = act_;
    cudaStream_t s = stream_;
    StepTotals& totals = buf_.control->totals;
    floatX* dlnf = a.dlnf + (size_t)slot * max_Nl_ * C;
    if (tp_.size() == 1) {  // the product, the loss and its backward, a chunk of rows at a time
        if (training) store_.prepare_gradients(VOCABULARY);
        chunked_classifier(a.losses, dlnf, training ? g(WTE) : nullptr, a.logits, a.lnf, p(WTE), buf_.targets, N, C,
                           V, Vp, classifier_rows_, loss_scale / N, training, s);
        loss_mean(&totals.micro_loss, training ? &totals.loss_sum : nullptr, &totals.loss, a.losses, N, micro_steps, s);
        if (training && !stage_.first) reduce_gradients(VOCABULARY, last_micro_step);  // the classifier's copy is done
        store_.release_weights(VOCABULARY);
        return;
    }
    const int Vs = tp_.vocab_slice(Vp), begin = tp_.vocab_begin(Vp);
    const int valid = std::max(0, std::min(V - begin, Vs));  // real tokens in this slice
    matmul_forward(a.logits, tp_.gather_positions(a.whole, a.lnf, N, C, s), p(WTE), nullptr, N, C, Vs, s);
    classifier_slice_stats(a.class_stats, a.logits, buf_.targets, N, begin, valid, Vs, s);
    tp_.gather(a.class_stats_all, a.class_stats, (size_t)N * 3, s);
    classifier_combine_stats(a.class_lse, a.losses, a.class_stats_all, tp_.size(), N, s);
    if (training) classifier_slice_gradient(a.logits, a.class_lse, buf_.targets, loss_scale / N, N, begin, valid, Vs, s);
    loss_mean(&totals.micro_loss, training ? &totals.loss_sum : nullptr, &totals.loss, a.losses, N, micro_steps, s);
    if (training) {  // logits = lnf · wteᵀ backward: d(lnf) and wte's gradient (this vocabulary slice)
        store_.prepare_gradients(VOCABULARY);
        const floatX* lnf = tp_.gather_positions(a.whole, a.lnf, N, C, s);
        matmul_backward(partial_for(dlnf), g(WTE), nullptr, buf_.scratch, a.logits, lnf, p(WTE), N, C,
                        tp_.vocab_slice(Vp), s);
        tp_.reduce_positions(dlnf, partial_for(dlnf), N, C, s);
        if (!stage_.first) reduce_gradients(VOCABULARY, last_micro_step);  // the classifier's copy is done
    }
    store_.release_weights(VOCABULARY);
}

const StepTotals& GPUModel::read_totals() {
    CUDA_CHECK(cudaMemcpyAsync(&control_host_->totals, &buf_.control->totals, sizeof(StepTotals),
                               cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return control_host_->totals;
}

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
    stage_tokens(inputs, targets, B, T, 0);
    upload_tokens(0, targets != nullptr);
    forward_stage(0, targets ? Pass::LOSS : Pass::LOGITS, 1.0f, 1, false);
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
    const int V = config_.vocab_size, Vs = tp_.vocab_slice(config_.padded_vocab_size);
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

// ------------------------------------------------------------------------------------------------
// 3. Backward

void GPUModel::zero_grad() { store_.zero_gradients(); }

void GPUModel::reduce_gradients(int bucket, bool last_micro_step) {
    const size_t summed = buckets_.buckets[bucket].sequence_summed;
    if (store_.reduces_gradients(last_micro_step) && summed > 0)
        tp_.sum_sequence_gradients(store_.gradients(bucket), summed, stream_);
    store_.reduce_gradients(bucket, last_micro_step);
}

// Gradients flow back through the same steps. dresidual holds d(loss)/d(residual stream) at this
// rank's positions: from the final LayerNorm's backward on the last stage, from the next stage
// otherwise; each branch reads it and its first LayerNorm adds the branch's contribution back into
// it; a stage other than the first sends what is left, the gradient of its input, to the previous
// one. Matmul and attention backward overwrite their input gradients; every parameter gradient is
// added into, so micro-steps accumulate. As soon as a bucket's gradients are final for this
// micro-step, they are reduced across the data ranks (parallel/comm/zero.h says when and how for each ZeRO
// stage): the final LayerNorm's first, then each layer's, the embeddings' last. Under ZeRO-3 each
// layer's weights are gathered again, the next layer down while this one computes. Under tensor
// parallelism the column-parallel products' input gradients are partial sums, reduced like the
// forward's row-parallel outputs, and the row-parallel products read the whole output gradient,
// gathered.
// The residual projections' bias gradients (attproj's, fcproj's: column sums of the residual
// gradient where their output was added) are summed by the LayerNorm backward that finishes that
// gradient anyway (ln2's, and ln1's of the layer above or lnf's), saving a pass over it, where this
// rank holds every position and that LayerNorm is on this stage; elsewhere (sequence parallelism,
// the top layer of a stage that sends to another) by the projection's own backward. A layer's
// gradients are therefore prepared before the LayerNorm above it runs.
void GPUModel::backward_layers(int slot, int micro_batch, bool last_micro_step) {
    const int B = B_, T = T_, N = B * T, Nl = tp_.local_positions(N);
    const int C = config_.channels, Ct = C / tp_.size(), NHt = config_.num_heads / tp_.size();
    const int HS = C / config_.num_heads;
    const int FINAL_NORM = buckets_.final_norm_bucket();
    const bool keep_ln = recompute_ < 2, keep_gelu = recompute_ < 1;
    const bool norms_sum_biases = Nl == N;
    auto fcproj_bias_in_norm = [&](int l) { return norms_sum_biases && (l + 1 < stage_.end_layer || stage_.last); };
    Activations& a = act_;
    cudaStream_t s = stream_;
    const int turn = pipeline_.stages() > 1 ? micro_batch % 2 : 0;
    floatX* dresidual = a.dresidual[turn];
    pipeline_.before_overwriting(turn, s);

    store_.gather_weights(buckets_.layer_bucket(stage_.end_layer - 1));
    if (stage_.last) {  // the final LayerNorm, from the classifier's d(lnf)
        store_.gather_weights(FINAL_NORM);
        store_.wait_for_weights(FINAL_NORM);
        store_.prepare_gradients(FINAL_NORM);
        const int top = stage_.end_layer - 1;
        if (fcproj_bias_in_norm(top)) store_.prepare_gradients(buckets_.layer_bucket(top));
        CUDA_CHECK(cudaMemsetAsync(dresidual, 0, (size_t)Nl * C * sizeof(floatX), s));
        layernorm_backward(dresidual, g(LNFW), g(LNFB), buf_.scratch, a.dlnf + (size_t)slot * max_Nl_ * C,
                           stage_output(slot), p(LNFW), a.lnf_mean + (size_t)slot * max_Nl_,
                           a.lnf_rstd + (size_t)slot * max_Nl_, Nl, C, s,
                           fcproj_bias_in_norm(top) ? g(FCPROJB, top) : nullptr);
        store_.release_weights(FINAL_NORM);
        reduce_gradients(FINAL_NORM, last_micro_step);
    } else {
        pipeline_.receive_gradients(dresidual, (size_t)Nl * C, s);
    }

    for (int l = stage_.end_layer - 1; l >= stage_.first_layer; l--) {
        const int bucket = buckets_.layer_bucket(l);
        if (l > stage_.first_layer) store_.gather_weights(buckets_.layer_bucket(l - 1));  // prefetch
        store_.wait_for_weights(bucket);
        if (!fcproj_bias_in_norm(l)) store_.prepare_gradients(bucket);  // else before the norm above
        const LayerSlices y = layer_slices(l, slot);

        // Recompute what -r did not keep, bit for bit as forward computed it.
        if (!keep_gelu) gelu_forward(y.fch_gelu, y.fch, (size_t)N * 4 * Ct, s);
        if (!keep_ln)
            layernorm_recompute(y.ln2, y.residual2, y.ln2_mean, y.ln2_rstd, p(LN2W, l), p(LN2B, l), Nl,
                                C, s);

        // MLP branch. fcproj's input gradient goes through GELU's derivative in the GEMM epilogue.
        // (fc's weight gradient needs ln2 whole: gathered while fcproj's backward computes.)
        const floatX* dbranch = tp_.gather_positions(a.whole, dresidual, N, C, s);
        tp_.start_gather(a.whole_ln, y.ln2, N, C, s);
        matmul_backward(a.dfch, g(FCPROJW, l), fcproj_bias_in_norm(l) ? nullptr : g(FCPROJB, l), buf_.scratch,
                        dbranch, y.fch_gelu, p(FCPROJW, l), N, 4 * Ct, C, s, y.fch);
        const floatX* ln2 = tp_.finish_gather(s);
        matmul_backward(partial_for(a.dln), g(FCW, l), g(FCB, l), buf_.scratch, a.dfch, ln2, p(FCW, l), N, C,
                        4 * Ct, s);
        tp_.reduce_positions(a.dln, partial_for(a.dln), N, C, s);
        layernorm_backward(dresidual, g(LN2W, l), g(LN2B, l), buf_.scratch, a.dln, y.residual2,
                           p(LN2W, l), y.ln2_mean, y.ln2_rstd, Nl, C, s,
                           norms_sum_biases ? g(ATTPROJB, l) : nullptr);

        // Attention branch (qkv's weight gradient needs ln1 whole: gathered while attproj's and the
        // attention's backward compute).
        dbranch = tp_.gather_positions(a.whole, dresidual, N, C, s);
        if (!keep_ln)
            layernorm_recompute(y.ln1, y.x, y.ln1_mean, y.ln1_rstd, p(LN1W, l), p(LN1B, l), Nl, C, s);
        tp_.start_gather(a.whole_ln, y.ln1, N, C, s);
        matmul_backward(a.datty, g(ATTPROJW, l), norms_sum_biases ? nullptr : g(ATTPROJB, l), buf_.scratch,
                        dbranch, y.atty, p(ATTPROJW, l), N, Ct, C, s);
        attention_backward(a.dqkv, buf_.scratch, a.datty, y.atty, y.att_lse, y.qkv, B, T, NHt, HS, s);
        const floatX* ln1 = tp_.finish_gather(s);
        matmul_backward(partial_for(a.dln), g(QKVW, l), g(QKVB, l), buf_.scratch, a.dqkv, ln1, p(QKVW, l), N,
                        C, 3 * Ct, s);
        tp_.reduce_positions(a.dln, partial_for(a.dln), N, C, s);
        const bool below = l > stage_.first_layer;  // the layer whose fcproj output this norm's input holds
        if (below && fcproj_bias_in_norm(l - 1)) store_.prepare_gradients(buckets_.layer_bucket(l - 1));
        layernorm_backward(dresidual, g(LN1W, l), g(LN1B, l), buf_.scratch, a.dln, y.x, p(LN1W, l),
                           y.ln1_mean, y.ln1_rstd, Nl, C, s,
                           below && fcproj_bias_in_norm(l - 1) ? g(FCPROJB, l - 1) : nullptr);
        store_.release_weights(bucket);
        reduce_gradients(bucket, last_micro_step);
    }
}

// The embeddings: each tensor rank adds the gradients of its vocabulary slice's rows (and every rank
// the same wpe gradient, from every position). Without a pipeline wte's bucket already holds the
// classifier's gradient of this micro-batch. The encoder's backward groups the micro-batch's tokens
// on the host (kernels/encoder.h), into the micro-batch's own pinned area, so that the upload of the
// grouping is asynchronous.
void GPUModel::backward_embeddings(int slot, int micro_batch, bool last_micro_step) {
    (void)slot;
    const int B = B_, T = T_, N = B * T, Nl = tp_.local_positions(N), C = config_.channels;
    const int Vp = config_.padded_vocab_size, Vs = tp_.vocab_slice(Vp);
    const int POSITIONS = buckets_.position_bucket(), VOCABULARY = buckets_.vocabulary_bucket();
    floatX* dresidual = act_.dresidual[pipeline_.stages() > 1 ? micro_batch % 2 : 0];
    cudaStream_t s = stream_;
    if (stage_.first) {
        const floatX* dencoded = tp_.gather_positions(act_.whole, dresidual, N, C, s);
        store_.prepare_gradients(POSITIONS);
        if (!stage_.last) store_.prepare_gradients(VOCABULARY);
        encoder_backward_vocab_slice(g(WTE), tp_.vocab_begin(Vp), Vs, g(WPE), dencoded, staged_inputs(micro_batch),
                                     B, T, C, buf_.scratch, encoder_host_scratch_ + micro_batch * encoder_host_bytes_, s);
        reduce_gradients(POSITIONS, last_micro_step);
        reduce_gradients(VOCABULARY, last_micro_step);
    } else {
        pipeline_.send_gradients(dresidual, (size_t)Nl * C, pipeline_.stages() > 1 ? micro_batch % 2 : 0);
    }
    store_.finish_backward();
}

// ------------------------------------------------------------------------------------------------
// 4. A step

// One micro-step, forward then backward (for tests and benchmarks: the loss is read back at once).
float GPUModel::forward_backward(const int* inputs, const int* targets, int B, int T, float loss_scale,
                                 bool last_micro_step) {
    if (pipeline_.stages() > 1) fail("internal error: a pipelined model trains by whole steps (train_step)");
    tp_.reset_bytes_sent();
    stage_tokens(inputs, targets, B, T, 0);
    upload_tokens(0, true);
    forward_stage(0, Pass::TRAINING, loss_scale, 1, last_micro_step);
    backward_layers(0, 0, last_micro_step);
    backward_embeddings(0, 0, last_micro_step);
    // The tensor group's traffic of one micro-step against the start-up report's plan (once).
    if (!traffic_checked_ && tp_.size() > 1) {
        const TensorTraffic t = tensor_traffic(config_, B, T, tp_, stage_);
        const size_t planned = t.per_micro_step + (store_.reduces_gradients(last_micro_step) ? t.per_reduction : 0);
        if (tp_.bytes_sent() != planned)
            fail("internal error: the tensor group sent %zu bytes in a micro-step, the plan says %zu",
                 tp_.bytes_sent(), planned);
        traffic_checked_ = true;
    }
    return read_totals().micro_loss;
}

// The forward pass and the layers' backward pass are one CUDA graph (issue_graphed) per shape and
// position in the step: the tokens are copied into the fixed device buffers it reads first, and the
// embeddings' backward, whose launches depend on the tokens (kernels/encoder.h groups them on the
// host), runs after it, outside the graph.
void GPUModel::micro_step(int i, int micro_steps, bool last_micro_step) {
    upload_tokens(i, true);
    issue_graphed({0, B_, T_, micro_steps, last_micro_step}, [&] {
        forward_stage(0, Pass::TRAINING, 1.0f / micro_steps, micro_steps, last_micro_step);
        backward_layers(0, i, last_micro_step);
        if (stream_capturing()) store_.finish_backward();  // a capture joins the reductions it forked
    });
    backward_embeddings(0, i, last_micro_step);
}

// Every micro-batch read and staged first; then, without a pipeline, the micro-steps one after the
// other; with one, this stage's actions in the schedule's order (parallel/plan/pipeline_schedule.h),
// micro-batch i in slot i mod slots; the first and last stage then sum the tied embedding's gradients.
// The loss stays on the device (control->totals).
void GPUModel::accumulate(int micro_steps, int B, int T, const NextBatch& next_batch) {
    std::vector<int> inputs((size_t)B * T), targets((size_t)B * T);
    for (int i = 0; i < micro_steps; i++) {
        next_batch(inputs.data(), targets.data());
        stage_tokens(inputs.data(), targets.data(), B, T, i);
    }
    zero_grad();
    CUDA_CHECK(cudaMemsetAsync(&buf_.control->totals, 0, sizeof(StepTotals), stream_));
    tp_.reset_bytes_sent();
    B_ = B, T_ = T;
    if (pipeline_.stages() == 1) {
        for (int i = 0; i < micro_steps; i++) micro_step(i, micro_steps, i == micro_steps - 1);
    } else {
        const std::vector<PipelineAction> actions = pipeline_schedule(schedule_, mesh_.pipeline, mesh_.stage, micro_steps);
        for (size_t k = 0; k < actions.size(); k++) {
            const int i = actions[k].micro_batch, slot = i % stage_.slots;
            const bool last = i == micro_steps - 1;
            if (actions[k].forward) {
                upload_tokens(i, true);
                forward_stage(slot, Pass::TRAINING, 1.0f / micro_steps, micro_steps, last);
            } else {
                backward_layers(slot, i, last);
                backward_embeddings(slot, i, last);
            }
            // What this action sends goes with the next action's receive, or now if that receives nothing.
            const bool next_receives = k + 1 < actions.size() && (actions[k + 1].forward ? !stage_.first : !stage_.last);
            if (!next_receives) pipeline_.send_queued(stream_);
        }
        pipeline_.finish(stream_);
        const int VOCABULARY = buckets_.vocabulary_bucket();
        if (VOCABULARY >= 0) {
            size_t count = 0;
            floatX* reduced = store_.reduced_gradients(VOCABULARY, &count);
            pipeline_.sum_tied_gradients(reduced, count, stream_);
        }
    }
    if (!traffic_checked_ && tp_.size() > 1) {  // the tensor group's traffic against the plan (once)
        const TensorTraffic t = tensor_traffic(config_, B, T, tp_, stage_);
        const size_t planned = tensor_bytes_per_step(t, micro_steps, store_.stage()) - t.per_step;
        if (tp_.bytes_sent() != planned)
            fail("internal error: the tensor group sent %zu bytes in a step, the plan says %zu", tp_.bytes_sent(),
                 planned);
        traffic_checked_ = true;
    }
}

// A whole optimizer step's forward and backward passes (every micro-batch read first); the last stage's
// mean loss, on every stage.
double GPUModel::train_step(int micro_steps, int B, int T, const NextBatch& next_batch) {
    accumulate(micro_steps, B, T, next_batch);
    pipeline_.broadcast_from_last(&buf_.control->totals.loss, 1, stream_);
    return read_totals().loss;
}

// The whole step, with one host synchronisation: the micro-batches are read and staged first, the
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
    accumulate(micro_steps, B, T, next_batch);

    StepControl& c = *control_host_;  // the previous step's copies are done: it ended synchronised
    c.adamw = adamw_device_step(u.adamw.learning_rate, u.adamw.beta1, u.adamw.beta2, u.adamw.weight_decay, 1.0f,
                                u.step, rounding_seed(u.step));
    c.guard.clip_norm = u.clip_norm;
    c.guard.skip_loss_z = u.skip_loss_z, c.guard.skip_norm_z = u.skip_norm_z;
    for (auto [to, from] : {std::make_pair(&c.guard.loss_window, &u.loss_window),
                            std::make_pair(&c.guard.norm_window, &u.norm_window)}) {
        std::copy(from->values, from->values + kOutlierWindow, to->values);
        to->count = from->count, to->next = from->next;
    }
    issue_graphed({1}, [&] {
        issue_update(u.adamw);
        CUDA_CHECK(cudaMemcpyAsync(&control_host_->totals, &buf_.control->totals, sizeof(StepTotals),
                                   cudaMemcpyDeviceToHost, stream_));
    });
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // the step's one host synchronisation
    // After the first step every product has been asked for once: the fused epilogues cuBLASLt refused
    // (their products ran in separate passes), with its status, for the start-up report.
    if (steps_done_++ == 0 && world_.rank() == 0) printf("%s", matmul_refusal_report().c_str());
    const StepTotals& t = control_host_->totals;
#ifdef EMU_CUDA
    last_step_counts_ = StepCounts::now() - before;
    steps_counted_++;
#endif
    StepOutcome r;
    r.loss = t.loss;
    r.norm = std::sqrt((double)t.norm_squared);
    r.verdict = (UpdateVerdict)t.verdict;
    return r;
}

// The emulated device's counts over the last step: the kernels it ran (with one per cuBLASLt product),
// how many of them CUDA graphs ran, and the host's waits for the device; with the graphs, the host
// issued (kernels − graph kernels + graph launches) launches.
std::string GPUModel::end_of_run_report() {
#ifdef EMU_CUDA
    const StepCounts& c = last_step_counts_;
    if (steps_counted_ > 0)
        return strprintf("emulated device, per step: %llu kernel launches, %llu host synchronisations (%llu of the "
                         "kernels in %llu CUDA graph launches: %llu launches from the host)%s\n",
                         c.kernels, c.syncs, c.graph_kernels, c.graph_launches, c.host_launches(),
                         steps_counted_ == 1 ? "; the first step, which runs without graphs" : "");
#endif
    return "";
}

// ------------------------------------------------------------------------------------------------
// 5. Update

// The global gradient norm, of the averaged gradients wherever the stage keeps them: each rank's part
// (its shard, its tensor slice, its stage's layers), the copies left out, summed over the ranks.
void GPUModel::issue_norm() {
    float* norm_squared = &buf_.control->totals.norm_squared;
    CUDA_CHECK(cudaMemsetAsync(norm_squared, 0, sizeof(float), stream_));
    store_.add_gradient_norm_squared(norm_squared, buf_.scratch);
    tp_.sum(norm_squared, 1, stream_);
    pipeline_.sum(norm_squared, 1, stream_);
}

double GPUModel::grad_norm() {
    issue_norm();
    return std::sqrt((double)read_totals().norm_squared);
}

void GPUModel::issue_update(const AdamWSettings& constants) {
    StepControl* c = buf_.control;
    CUDA_CHECK(cudaMemcpyAsync(c, control_host_, kStepControlHostBytes, cudaMemcpyHostToDevice, stream_));
    pipeline_.broadcast_from_last(&c->totals.loss, 1, stream_);
    store_.average_over_data_ranks(&c->totals.loss, 1);
    issue_norm();
    step_guard(c, stream_);
    store_.adamw(&c->adamw, constants);
}

// AdamW on the parameters this rank owns (parallel/comm/zero.h). The stochastic rounding of the bf16
// weights draws from a stream that depends on the run's seed, the step and each parameter's index in
// the model, so runs, resumed runs and runs on other numbers of ranks or other ZeRO stages round alike.
uint32_t GPUModel::rounding_seed(int step) const {
    return (uint32_t)(seed_ * 0x9E3779B97F4A7C15ull >> 32) ^ (uint32_t)step * 0x85EBCA6Bu;
}

// The update with host-given settings (tests; the loop's steps go through optimizer_step).
void GPUModel::update(const AdamWSettings& s, int step) {
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // no earlier copy still reads the pinned control block
    control_host_->adamw =
        adamw_device_step(s.learning_rate, s.beta1, s.beta2, s.weight_decay, s.grad_scale, step, rounding_seed(step));
    CUDA_CHECK(cudaMemcpyAsync(buf_.control, control_host_, kStepControlHostBytes, cudaMemcpyHostToDevice, stream_));
    store_.adamw(&buf_.control->adamw, s);
}

// ------------------------------------------------------------------------------------------------
// Parameters and optimizer state in and out (fp32 on the host, ParamLayout order; parallel/comm/zero.h
// converts to and from where the stage keeps them).

WeightType GPUModel::working_weight_type() const {
#ifdef ENABLE_FP32
    return WeightType::FP32;
#else
    return WeightType::BF16;
#endif
}

void GPUModel::set_working_weights(const std::vector<float>& weights) { store_.set_weights(weights); }

void GPUModel::set_optimizer_state(const std::vector<float>& master, const std::vector<float>& m,
                                   const std::vector<float>& v) {
    store_.set_optimizer_state(master, m, v);
}

// ------------------------------------------------------------------------------------------------
// 6. main()

// Defaults for a GPU: GPT-2 124M on the built-in dataset.
static TrainOptions gpu_defaults() {
    TrainOptions o;
    o.model = "d12";
    o.batch_size = 16;
    o.seq_len = 1024;
    o.max_steps = 200;
    o.learning_rate = 6e-4;
    o.warmup_steps = 20;
    o.final_lr_fraction = 0.1;
    o.weight_decay = 0.1;
    o.val_every = 50;
    o.val_batches = 10;
    o.sample_every = 100;
    o.gen_tokens = 64;
    return o;
}

#ifndef TRAIN_GPT_NO_MAIN  // the model tests include this file for GPUModel
// Ranks from the MPI launcher (one without), one GPU per rank on each node, an NCCL communicator when
// there are several; then the shared training loop. Without a CUDA device a single rank trains on the
// CPU instead.
int main(int argc, char** argv) {
    TrainerSpec spec;
    std::unique_ptr<RankGroup> ranks;
    WorldRanks world{nullptr};
    try {
        if (launched_by_mpi()) ranks = make_mpi_rank_group();
        spec.ranks = ranks.get();
        world.ranks = ranks.get();
        int devices = 0;
        const cudaError_t err = cudaGetDeviceCount(&devices);
        if (err != cudaSuccess || devices == 0) {
            if (world.num_ranks() > 1)
                fail("rank %d: no CUDA device (%s); a run of %d ranks needs one GPU per rank",
                     world.rank(), err != cudaSuccess ? cudaGetErrorName(err) : "none found",
                     world.num_ranks());
            printf("train_gpt: no CUDA device (%s), so training runs on the CPU with the fp32 "
                   "reference model\n",
                   err != cudaSuccess ? cudaGetErrorName(err) : "cudaGetDeviceCount found 0");
            spec.defaults = cpu_trainer_defaults();
            spec.create_model = create_cpu_train_model;
            spec.host_memory_needed = cpu_train_model_memory;
            spec.plan_memory = plan_gpu_memory;  // --dry-run still plans a GPU run (--device-memory)
            return run_training(argc, argv, spec);
        }
        CUDA_CHECK(cudaSetDevice(ranks ? ranks->local_rank % devices : 0));
        // Under an MPI launcher NCCL is used even by a single rank (mpirun -np 1 exercises the
        // communication path on one GPU).
        if (ranks) world.nccl = make_nccl_communicator(*ranks);
    } catch (const InputError& e) {
        fprintf(stderr, "error: %s\n", e.what());
        if (ranks && ranks->num_ranks > 1) ranks->abort_all(1);
        return 1;
    }
    spec.defaults = gpu_defaults();
    spec.create_model = [world](const GPTConfig& config, const TrainOptions& opt) {
        return std::unique_ptr<TrainModel>(new GPUModel(config, opt, world));
    };
    spec.model_parallel = true;
    spec.report_ignored_flags = [world](const TrainOptions& opt) {
        if (opt.zero_stage && !world.nccl)
            printf("note: -z (ZeRO) shards across ranks; with one rank it has no effect\n");
    };
    spec.plan_memory = plan_gpu_memory;
    spec.device_memory = [] {
        size_t free_bytes = 0, total_bytes = 0;
        CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
        return (double)free_bytes;
    };
    const int status = run_training(argc, argv, spec);
    if (world.nccl) ncclCommDestroy(world.nccl);
    return status;
}
#endif

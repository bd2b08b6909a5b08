// train_gpt: trains GPT-2 on an NVIDIA GPU with the hand-written kernels of kernels/ and cuBLASLt.
// bf16 weights, activations and gradients (fp32 with -DENABLE_FP32), fp32 master weights and AdamW
// moments, activation recomputation (-r), gradient accumulation (-d). The training loop itself
// (flags, data, schedule, checkpoints, metrics, sampling) is the shared one of host/train_loop.h; this
// file is the GPU model behind its interface, read top to bottom:
//   1. the buffers: parameters, gradients, optimizer state, activations, scratch — all allocated once
//   2. forward: embeddings, L transformer blocks, final LayerNorm, logits, loss
//   3. backward: the same steps in reverse; with several ranks, each layer's gradients are averaged
//      across ranks (NCCL, on a stream of their own) while the layers below are still computed
//   4. update: gradient norm and AdamW; under ZeRO-1 (-z 1) each rank updates its shard and the
//      ranks all-gather the new weights
//   5. main(): ranks from MPI, the device (or the CPU when there is none), then the loop
// Data parallelism: `mpirun -np N ./train_gpt` runs N ranks, one GPU each; see parallel/param_buckets.h for
// how parameters are grouped into buckets and sharded.
// Built by nvcc it is ./train_gpt; built through the emulator (emu/) it is ./train_gpt_emu, which runs
// the same kernels on the CPU for the tests.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <nccl.h>

#include "cpu/cpu_train_model.h"
#include "host/errors.h"
#include "host/train_loop.h"
#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/classifier.h"
#include "kernels/common.h"
#include "kernels/device_arena.h"
#include "kernels/elementwise.h"
#include "kernels/encoder.h"
#include "kernels/gelu.h"
#include "kernels/global_norm.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "parallel/mpi_ranks.h"
#include "parallel/nccl_check.h"
#include "parallel/param_buckets.h"
#include "parallel/zero.h"

// ------------------------------------------------------------------------------------------------
// 1. Buffers

// What the forward pass keeps for the backward pass, for micro-batches of up to N = B·T positions.
// Per-layer tensors hold L slices of N rows. With recomputation, some of them hold one slice that
// every layer reuses, and backward recomputes its contents from what was kept:
//   -r 0  everything kept
//   -r 1  GELU outputs recomputed from the GELU inputs (fch)
//   -r 2  also the LayerNorm outputs, from their inputs and the saved mean and rstd
struct Activations {
    floatX* encoded;                   // (N, C) token + position embedding
    floatX* ln1;                       // (L or 1, N, C)
    float *ln1_mean, *ln1_rstd;        // (L, N)
    floatX* qkv;                       // (L, N, 3C)
    floatX* atty;                      // (L, N, C) attention output
    float* att_lse;                    // (L, B, NH, T) log-sum-exp of each attention row
    floatX* residual2;                 // (L, N, C) residual stream after attention
    floatX* ln2;                       // (L or 1, N, C)
    float *ln2_mean, *ln2_rstd;        // (L, N)
    floatX* fch;                       // (L, N, 4C) GELU input
    floatX* fch_gelu;                  // (L or 1, N, 4C) GELU output
    floatX* residual3;                 // (L, N, C) residual stream after the MLP: the layer's output
    floatX* lnf;                       // (N, C)
    float *lnf_mean, *lnf_rstd;        // (N)
    floatX* logits;                    // (N, Vp); the classifier overwrites it with d(loss)/d(logits)
    float* losses;                     // (N)
    // Working buffers reused by every layer.
    floatX* branch;                    // (N, C) an attention or MLP branch's output, before the add
    floatX *dresidual, *dln, *datty;   // (N, C) gradients
    floatX* dqkv;                      // (N, 3C)
    floatX* dfch;                      // (N, 4C)
};

// Dense bf16 tensor-core peak of known devices (FLOP/s), for MFU; 0 = unknown (MFU shows n/a).
static double device_peak_flops(const cudaDeviceProp& prop) {
    const std::string name = prop.name;
    if (name.find("H100") != std::string::npos)
        return name.find("PCIe") != std::string::npos ? 756e12 : 989e12;
    if (name.find("H200") != std::string::npos || name.find("GH200") != std::string::npos) return 989e12;
    if (name.find("A100") != std::string::npos) return 312e12;
    if (name.find("L40S") != std::string::npos) return 362e12;
    if (name.find("A10G") != std::string::npos) return 70e12;
    if (name.find("RTX 4090") != std::string::npos) return 165e12;
    if (name.find("RTX 3090") != std::string::npos) return 71e12;
    return 0;
}

// This rank among the data-parallel ranks: the host group (MPI) and the NCCL communicator (null
// without an MPI launcher: then there is nothing to communicate).
struct DataParallel {
    RankGroup* ranks;
    ncclComm_t nccl = nullptr;
    int rank() const { return ranks ? ranks->rank : 0; }
    int num_ranks() const { return ranks ? ranks->num_ranks : 1; }
};

// Everything sized by the micro-batch: activations, token ids, kernel scratch.
struct StepBuffers {
    Activations act{};
    int* inputs = nullptr;   // (N) token ids of the current micro-batch
    int* targets = nullptr;
    void* scratch = nullptr;   // kernel scratch, the largest any kernel asks for
    float* norm = nullptr;     // the squared gradient norm
};
// Requests them in the arena, for micro-batches of up to opt.batch_size × opt.seq_len tokens (see
// struct Activations for what -r changes).
static void request_step_buffers(DeviceArena* arena, StepBuffers* buffers, const GPTConfig& config,
                                 const TrainOptions& opt) {
    const size_t L = config.num_layers, C = config.channels, NH = config.num_heads;
    const size_t Vp = config.padded_vocab_size, HS = C / NH;
    const int B = opt.batch_size, T = opt.seq_len;
    const size_t N = (size_t)B * T;
    const size_t ln_layers = opt.recompute >= 2 ? 1 : L, gelu_layers = opt.recompute >= 1 ? 1 : L;
    Activations& a = buffers->act;
    auto request = [&](auto** pointer, size_t count) {
        arena->request(pointer, count, MemoryKind::ACTIVATIONS);
    };
    request(&a.encoded, N * C);
    request(&a.ln1, ln_layers * N * C);
    request(&a.ln1_mean, L * N);
    request(&a.ln1_rstd, L * N);
    request(&a.qkv, L * N * 3 * C);
    request(&a.atty, L * N * C);
    request(&a.att_lse, L * N * NH);
    request(&a.residual2, L * N * C);
    request(&a.ln2, ln_layers * N * C);
    request(&a.ln2_mean, L * N);
    request(&a.ln2_rstd, L * N);
    request(&a.fch, L * N * 4 * C);
    request(&a.fch_gelu, gelu_layers * N * 4 * C);
    request(&a.residual3, L * N * C);
    request(&a.lnf, N * C);
    request(&a.lnf_mean, N);
    request(&a.lnf_rstd, N);
    request(&a.logits, N * Vp);
    request(&a.losses, N);
    request(&a.branch, N * C);
    request(&a.dresidual, N * C);
    request(&a.dln, N * C);
    request(&a.datty, N * C);
    request(&a.dqkv, N * 3 * C);
    request(&a.dfch, N * 4 * C);
    request(&buffers->inputs, N);
    request(&buffers->targets, N);
    const size_t scratch_bytes = std::max(
        {encoder_backward_scratch_bytes(B, T), layernorm_backward_scratch_bytes((int)N, (int)C),
         matmul_backward_scratch_bytes((int)N, 4 * (int)C), matmul_backward_scratch_bytes((int)N, (int)Vp),
         attention_backward_scratch_bytes(B, T, (int)NH, (int)HS), global_norm_scratch_bytes()});
    request(reinterpret_cast<char**>(&buffers->scratch), scratch_bytes);
    request(&buffers->norm, 1);
}

// The ZeRO stage a run uses: what -z asks for, when there is a communicator (several ranks, or one
// started by an MPI launcher).
static int zero_stage_in_effect(const TrainOptions& opt, bool communicates) {
    return communicates ? opt.zero_stage : 0;
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

// The device memory and network traffic of one rank of a run, computed from the same buffer requests
// the model makes, without allocating anything (for --dry-run; no device needed).
ModelMemory plan_gpu_memory(const GPTConfig& config, const TrainOptions& opt, int num_ranks,
                            bool communicates) {
    DeviceArena arena;
    ParameterStore store(make_param_buckets(config, num_ranks), zero_stage_in_effect(opt, communicates), 0,
                         fp32_master_weights(opt));
    store.request_memory(&arena);
    StepBuffers buffers;
    request_step_buffers(&arena, &buffers, config, opt);
    ModelMemory memory = arena.memory();
    memory.network_bytes_per_step = store.bytes_sent_per_step(grad_accum_steps(opt, num_ranks));
    return memory;
}

class GPUModel : public TrainModel {
public:
    GPUModel(const GPTConfig& config, const TrainOptions& opt, DataParallel dp = {nullptr});
    ~GPUModel() override;

    const GPTConfig& config() const override { return config_; }
    std::string description() const override;
    double peak_flops() const override { return peak_flops_; }

    float forward(const int* inputs, const int* targets, int B, int T) override;
    void logits_at(int t, float* out) override;
    void zero_grad() override;
    float forward_backward(const int* inputs, const int* targets, int B, int T, float loss_scale,
                           bool last_micro_step) override;
    double grad_norm() override;
    void update(const AdamWSettings& settings, int step) override;

    WeightType working_weight_type() const override;
    void set_working_weights(const std::vector<float>& weights) override;
    std::vector<float> working_weights() override { return store_.weights_in_layout_order(); }
    ModelPart working_weights_part() override { return store_.weights_part(); }
    bool forward_is_collective() const override { return store_.stage() >= 3; }
    void set_optimizer_state(const std::vector<float>& master, const std::vector<float>& m,
                             const std::vector<float>& v) override;
    OptimizerPart optimizer_part() override { return store_.optimizer_part(); }
    ModelMemory memory() const override { return memory_; }
    // The gradients, widened to fp32 (for tests and debugging; -z 0 and 1).
    std::vector<float> gradients() { return store_.gradients_in_layout_order(); }
    // Device bytes the model allocated (its arena), for tests of the memory report.
    size_t allocated_bytes() const { return arena_.bytes(); }

private:
    // Parameter tensor t of layer l (l ignored for wte, wpe, lnfw, lnfb): its weights and its
    // gradients, wherever the ZeRO stage keeps its bucket now (parallel/zero.h).
    floatX* p(int t, int l = 0) const {
        return store_.weights(buckets_.bucket_of(t, l)) + buckets_.offset_in_bucket(t, l);
    }
    floatX* g(int t, int l = 0) const {
        return store_.gradients(buckets_.bucket_of(t, l)) + buckets_.offset_in_bucket(t, l);
    }
    // Slice l of a per-layer activation of `width` values per position (slice 0 when not kept per layer).
    floatX* layer(floatX* base, int l, size_t width, bool per_layer = true) const {
        return base + (per_layer ? (size_t)l * max_N_ * width : 0);
    }
    float* layer(float* base, int l) const { return base + (size_t)l * max_N_; }
    // Layer l's slices of every per-layer activation (slice 0 of those -r does not keep per layer).
    struct LayerSlices {
        const floatX* x;  // the layer's input: the embeddings, or the previous layer's residual3
        floatX *ln1, *qkv, *atty, *residual2, *ln2, *fch, *fch_gelu, *residual3;
        float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *att_lse;
    };
    LayerSlices layer_slices(int l) const;

    void upload_tokens(const int* inputs, const int* targets, int B, int T);
    void run_forward(int B, int T);
    float run_classifier(bool write_dlogits, float loss_scale);
    void run_backward(bool last_micro_step);

    GPTConfig config_;
    DataParallel dp_;
    ParamBuckets buckets_;            // device order of parameters and gradients
    ParameterStore store_;            // weights, gradients, optimizer state under the ZeRO stage
    int accum_steps_;
    int max_B_, max_T_;
    size_t max_N_;
    int recompute_;
    bool use_master_;
    double peak_flops_ = 0;
    std::string device_name_;
    uint64_t seed_;
    cudaStream_t stream_ = nullptr;
    DeviceArena arena_;
    ModelMemory memory_;

    StepBuffers buf_;
    Activations& act_ = buf_.act;
    void* encoder_host_scratch_ = nullptr;

    int B_ = 0, T_ = 0;                // shape of the last forward
    bool have_targets_ = false;
    std::vector<int> inputs_host_;     // the last forward's tokens (the encoder's backward groups them)
    std::vector<float> losses_host_;
};

GPUModel::GPUModel(const GPTConfig& config, const TrainOptions& opt, DataParallel dp)
    : config_(config), dp_(dp),
      buckets_(make_param_buckets(config, dp.num_ranks())),
      store_(buckets_, zero_stage_in_effect(opt, dp.nccl != nullptr), dp.rank(), fp32_master_weights(opt)),
      accum_steps_(std::max(1, grad_accum_steps(opt, dp.num_ranks()))),
      max_B_(opt.batch_size), max_T_(opt.seq_len), max_N_((size_t)opt.batch_size * opt.seq_len),
      recompute_(opt.recompute), use_master_(fp32_master_weights(opt)), seed_(opt.seed) {
    const int C = config.channels, NH = config.num_heads;
    const int Vp = config.padded_vocab_size, HS = C / NH;
    if (C % NH != 0 || C % 8 != 0 || Vp % 8 != 0)
        fail("-e (--model): channels %d must be a multiple of 8 and of the head count %d", C, NH);
    if (!attention_supports_head_size(HS))
        fail("-e (--model): head size %d (channels %d / heads %d) is not supported by the attention "
             "kernels (supported: 32, 64, 128)", HS, C, NH);

    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    device_name_ = prop.name;
    peak_flops_ = device_peak_flops(prop);
    CUDA_CHECK(cudaStreamCreate(&stream_));
    matmul_setup(opt.tf32 != 0);
    set_attention_kernel(opt.attention_kernel.c_str());

    // Parameters, gradients and optimizer state as the ZeRO stage keeps them, then everything sized
    // by the micro-batch (see struct Activations for what -r changes).
    store_.request_memory(&arena_);
    request_step_buffers(&arena_, &buf_, config, opt);
    memory_ = arena_.memory();
    memory_.network_bytes_per_step = store_.bytes_sent_per_step(accum_steps_);

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
    encoder_host_scratch_ = malloc(encoder_backward_host_scratch_bytes(max_B_, max_T_));
    store_.start(stream_, dp.nccl);
    // The padded vocabulary rows' logits gradient is zero, but the classifier only writes rows it
    // sees; start every buffer defined.
    CUDA_CHECK(cudaMemsetAsync(act_.logits, 0, max_N_ * Vp * sizeof(floatX), stream_));
}

GPUModel::~GPUModel() {
    free(encoder_host_scratch_);
    matmul_teardown();
    if (stream_) cudaStreamDestroy(stream_);
}

std::string GPUModel::description() const {
    const std::string parallel = store_.description();
    return strprintf("CUDA on %s, %s storage%s, fp32 AdamW state, recompute -r %d%s",
                     device_name_.c_str(), PRECISION_NAME,
                     use_master_ ? " with fp32 master weights" : "", recompute_,
                     parallel.empty() ? "" : (", " + parallel).c_str());
}

// ------------------------------------------------------------------------------------------------
// 2. Forward

void GPUModel::upload_tokens(const int* inputs, const int* targets, int B, int T) {
    if (B < 1 || B > max_B_ || T < 1 || T > max_T_)
        fail("forward: batch %dx%d exceeds the allocated %dx%d", B, T, max_B_, max_T_);
    const size_t N = (size_t)B * T;
    for (size_t i = 0; i < N; i++)
        if (inputs[i] < 0 || inputs[i] >= config_.vocab_size ||
            (targets && (targets[i] < 0 || targets[i] >= config_.vocab_size)))
            fail("forward: token id outside the vocabulary [0, %d) at position %zu",
                 config_.vocab_size, i);
    B_ = B, T_ = T;
    have_targets_ = targets != nullptr;
    inputs_host_.assign(inputs, inputs + N);
    CUDA_CHECK(cudaMemcpyAsync(buf_.inputs, inputs, N * sizeof(int), cudaMemcpyHostToDevice, stream_));
    if (targets)
        CUDA_CHECK(cudaMemcpyAsync(buf_.targets, targets, N * sizeof(int), cudaMemcpyHostToDevice,
                                   stream_));
}

GPUModel::LayerSlices GPUModel::layer_slices(int l) const {
    const Activations& a = act_;
    const size_t C = config_.channels;
    const bool keep_ln = recompute_ < 2, keep_gelu = recompute_ < 1;
    return {l == 0 ? a.encoded : layer(a.residual3, l - 1, C),
            layer(a.ln1, l, C, keep_ln),
            layer(a.qkv, l, 3 * C),
            layer(a.atty, l, C),
            layer(a.residual2, l, C),
            layer(a.ln2, l, C, keep_ln),
            layer(a.fch, l, 4 * C),
            layer(a.fch_gelu, l, 4 * C, keep_gelu),
            layer(a.residual3, l, C),
            layer(a.ln1_mean, l),
            layer(a.ln1_rstd, l),
            layer(a.ln2_mean, l),
            layer(a.ln2_rstd, l),
            a.att_lse + (size_t)l * max_N_ * config_.num_heads};
}

// x = wte[tokens] + wpe; each layer: x += attproj(attention(qkv(ln1(x)))); x += fcproj(gelu(fc(ln2(x))));
// logits = lnf(x) · wteᵀ. Each residual add is fused with the LayerNorm that follows it.
// Under ZeRO-3 each bucket's weights are gathered just before use: the embeddings and the final
// LayerNorm first (kept until the classifier and its backward are done), each layer's while the one
// before it computes; a layer's weights are released once its last kernel is issued.
void GPUModel::run_forward(int B, int T) {
    const int N = B * T, L = config_.num_layers, C = config_.channels, NH = config_.num_heads;
    const int HS = C / NH, Vp = config_.padded_vocab_size;
    const int EMBEDDINGS = buckets_.embedding_bucket(), FINAL_NORM = buckets_.final_norm_bucket();
    Activations& a = act_;
    cudaStream_t s = stream_;

    store_.gather_weights(EMBEDDINGS);
    store_.gather_weights(FINAL_NORM);
    store_.gather_weights(buckets_.layer_bucket(0));
    store_.wait_for_weights(EMBEDDINGS);
    encoder_forward(a.encoded, buf_.inputs, p(WTE), p(WPE), B, T, C, s);
    store_.wait_for_weights(buckets_.layer_bucket(0));
    const LayerSlices first = layer_slices(0);
    layernorm_forward(first.ln1, first.ln1_mean, first.ln1_rstd, a.encoded, p(LN1W, 0), p(LN1B, 0),
                      N, C, s);
    for (int l = 0; l < L; l++) {
        const int next_bucket = l + 1 < L ? buckets_.layer_bucket(l + 1) : FINAL_NORM;
        if (l + 1 < L) store_.gather_weights(next_bucket);  // prefetch: overlaps this layer's compute
        const LayerSlices y = layer_slices(l);
        // Attention branch: residual2 = x + attproj(attention(qkv(ln1))), then ln2 of it.
        matmul_forward(y.qkv, y.ln1, p(QKVW, l), p(QKVB, l), N, C, 3 * C, s);
        attention_forward(y.atty, y.att_lse, y.qkv, B, T, NH, HS, s);
        matmul_forward(a.branch, y.atty, p(ATTPROJW, l), p(ATTPROJB, l), N, C, C, s);
        residual_layernorm_forward(y.residual2, y.ln2, y.ln2_mean, y.ln2_rstd, y.x, a.branch,
                                   p(LN2W, l), p(LN2B, l), N, C, s);
        // MLP branch: residual3 = residual2 + fcproj(gelu(fc(ln2))), then the next LayerNorm: the
        // next layer's ln1, or the final lnf. GELU is its own pass (not the GEMM's epilogue) so that
        // recomputing it in backward gives the very same bits.
        matmul_forward(y.fch, y.ln2, p(FCW, l), p(FCB, l), N, C, 4 * C, s);
        gelu_forward(y.fch_gelu, y.fch, (size_t)N * 4 * C, s);
        matmul_forward(a.branch, y.fch_gelu, p(FCPROJW, l), p(FCPROJB, l), N, 4 * C, C, s);
        store_.wait_for_weights(next_bucket);
        if (l + 1 < L) {
            const LayerSlices next = layer_slices(l + 1);
            residual_layernorm_forward(y.residual3, next.ln1, next.ln1_mean, next.ln1_rstd,
                                       y.residual2, a.branch, p(LN1W, l + 1), p(LN1B, l + 1), N, C, s);
        } else {
            residual_layernorm_forward(y.residual3, a.lnf, a.lnf_mean, a.lnf_rstd, y.residual2,
                                       a.branch, p(LNFW), p(LNFB), N, C, s);
        }
        store_.release_weights(buckets_.layer_bucket(l));
    }
    matmul_forward(a.logits, a.lnf, p(WTE), nullptr, N, C, Vp, s);
}

// Losses per position, and with write_dlogits the logits replaced by the loss gradient (scaled by
// loss_scale / N). Returns the mean loss (summed on the host in double, in a fixed order).
float GPUModel::run_classifier(bool write_dlogits, float loss_scale) {
    const int N = B_ * T_;
    fused_classifier(act_.logits, act_.losses, loss_scale / N, buf_.targets, N, config_.vocab_size,
                     config_.padded_vocab_size, write_dlogits, stream_);
    losses_host_.resize(N);
    CUDA_CHECK(cudaMemcpyAsync(losses_host_.data(), act_.losses, N * sizeof(float),
                               cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    double sum = 0;
    for (float loss : losses_host_) sum += loss;
    return (float)(sum / N);
}

float GPUModel::forward(const int* inputs, const int* targets, int B, int T) {
    upload_tokens(inputs, targets, B, T);
    run_forward(B, T);
    store_.release_weights(buckets_.embedding_bucket());
    store_.release_weights(buckets_.final_norm_bucket());
    if (!targets) {
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        return NAN;
    }
    return run_classifier(false, 1.0f);
}

void GPUModel::logits_at(int t, float* out) {
    const int V = config_.vocab_size;
    std::vector<floatX> row(V);
    CUDA_CHECK(cudaMemcpy(row.data(), act_.logits + (size_t)t * config_.padded_vocab_size,
                          V * sizeof(floatX), cudaMemcpyDeviceToHost));
    for (int i = 0; i < V; i++) out[i] = (float)row[i];
}

// ------------------------------------------------------------------------------------------------
// 3. Backward

void GPUModel::zero_grad() { store_.zero_gradients(); }

float GPUModel::forward_backward(const int* inputs, const int* targets, int B, int T,
                                 float loss_scale, bool last_micro_step) {
    upload_tokens(inputs, targets, B, T);
    run_forward(B, T);
    const float loss = run_classifier(true, loss_scale);
    run_backward(last_micro_step);
    return loss;
}

// Gradients flow back through the same steps. dresidual holds d(loss)/d(residual stream); each
// branch reads it and its first LayerNorm adds the branch's contribution back into it. Matmul and
// attention backward overwrite their input gradients; every parameter gradient is added into, so
// micro-steps accumulate. As soon as a bucket's gradients are final for this micro-step, they are
// reduced across ranks (parallel/zero.h says when and how for each ZeRO stage): the final
// LayerNorm's first, then each layer's, the embeddings' last. Under ZeRO-3 each layer's weights are
// gathered again, the next layer down while this one computes.
void GPUModel::run_backward(bool last_micro_step) {
    const int B = B_, T = T_, N = B * T, L = config_.num_layers, C = config_.channels;
    const int NH = config_.num_heads, HS = C / NH, Vp = config_.padded_vocab_size;
    const int EMBEDDINGS = buckets_.embedding_bucket(), FINAL_NORM = buckets_.final_norm_bucket();
    const bool keep_ln = recompute_ < 2, keep_gelu = recompute_ < 1;
    Activations& a = act_;
    cudaStream_t s = stream_;

    // logits = lnf · wteᵀ (the classifier left d(loss)/d(logits) in a.logits), then lnf.
    store_.gather_weights(buckets_.layer_bucket(L - 1));
    store_.prepare_gradients(EMBEDDINGS);
    matmul_backward(a.dln, g(WTE), nullptr, buf_.scratch, a.logits, a.lnf, p(WTE), N, C, Vp, s);
    store_.release_weights(EMBEDDINGS);
    CUDA_CHECK(cudaMemsetAsync(a.dresidual, 0, (size_t)N * C * sizeof(floatX), s));
    store_.prepare_gradients(FINAL_NORM);
    layernorm_backward(a.dresidual, g(LNFW), g(LNFB), buf_.scratch, a.dln,
                       layer(a.residual3, L - 1, C), p(LNFW), a.lnf_mean, a.lnf_rstd, N, C, s);
    store_.release_weights(FINAL_NORM);
    store_.reduce_gradients(FINAL_NORM, last_micro_step);

    for (int l = L - 1; l >= 0; l--) {
        const int bucket = buckets_.layer_bucket(l);
        if (l > 0) store_.gather_weights(buckets_.layer_bucket(l - 1));  // prefetch the next one down
        store_.wait_for_weights(bucket);
        store_.prepare_gradients(bucket);
        const LayerSlices y = layer_slices(l);

        // Recompute what -r did not keep, bit for bit as forward computed it.
        if (!keep_gelu) gelu_forward(y.fch_gelu, y.fch, (size_t)N * 4 * C, s);
        if (!keep_ln)
            layernorm_recompute(y.ln2, y.residual2, y.ln2_mean, y.ln2_rstd, p(LN2W, l), p(LN2B, l), N,
                                C, s);

        // MLP branch. fcproj's input gradient goes through GELU's derivative in the GEMM epilogue.
        matmul_backward(a.dfch, g(FCPROJW, l), g(FCPROJB, l), buf_.scratch, a.dresidual, y.fch_gelu,
                        p(FCPROJW, l), N, 4 * C, C, s, y.fch);
        matmul_backward(a.dln, g(FCW, l), g(FCB, l), buf_.scratch, a.dfch, y.ln2, p(FCW, l), N, C,
                        4 * C, s);
        layernorm_backward(a.dresidual, g(LN2W, l), g(LN2B, l), buf_.scratch, a.dln, y.residual2,
                           p(LN2W, l), y.ln2_mean, y.ln2_rstd, N, C, s);

        // Attention branch.
        matmul_backward(a.datty, g(ATTPROJW, l), g(ATTPROJB, l), buf_.scratch, a.dresidual, y.atty,
                        p(ATTPROJW, l), N, C, C, s);
        attention_backward(a.dqkv, buf_.scratch, a.datty, y.atty, y.att_lse, y.qkv, B, T, NH, HS, s);
        if (!keep_ln)
            layernorm_recompute(y.ln1, y.x, y.ln1_mean, y.ln1_rstd, p(LN1W, l), p(LN1B, l), N, C, s);
        matmul_backward(a.dln, g(QKVW, l), g(QKVB, l), buf_.scratch, a.dqkv, y.ln1, p(QKVW, l), N, C,
                        3 * C, s);
        layernorm_backward(a.dresidual, g(LN1W, l), g(LN1B, l), buf_.scratch, a.dln, y.x, p(LN1W, l),
                           y.ln1_mean, y.ln1_rstd, N, C, s);
        store_.release_weights(bucket);
        store_.reduce_gradients(bucket, last_micro_step);
    }
    encoder_backward(g(WTE), g(WPE), a.dresidual, inputs_host_.data(), B, T, C, buf_.scratch,
                     encoder_host_scratch_, s);
    store_.reduce_gradients(EMBEDDINGS, last_micro_step);
    store_.finish_backward();
}

// ------------------------------------------------------------------------------------------------
// 4. Update

// The global gradient norm, of the averaged gradients wherever the stage keeps them.
double GPUModel::grad_norm() {
    CUDA_CHECK(cudaMemsetAsync(buf_.norm, 0, sizeof(float), stream_));
    store_.add_gradient_norm_squared(buf_.norm, buf_.scratch);
    float norm_squared = 0;
    CUDA_CHECK(cudaMemcpyAsync(&norm_squared, buf_.norm, sizeof(float), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return std::sqrt((double)norm_squared);
}

// AdamW on the parameters this rank owns (parallel/zero.h). The stochastic rounding of the bf16
// weights draws from a stream that depends on the run's seed, the step and each parameter's index in
// the model, so runs, resumed runs and runs on other numbers of ranks or other ZeRO stages round alike.
void GPUModel::update(const AdamWSettings& s, int step) {
    const uint32_t seed = (uint32_t)(seed_ * 0x9E3779B97F4A7C15ull >> 32) ^ (uint32_t)step * 0x85EBCA6Bu;
    store_.adamw(s, step, seed);
}

// ------------------------------------------------------------------------------------------------
// Parameters and optimizer state in and out (fp32 on the host, ParamLayout order; parallel/zero.h
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
// 5. main()

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
    DataParallel dp{nullptr};
    try {
        if (launched_by_mpi()) ranks = make_mpi_rank_group();
        spec.ranks = ranks.get();
        dp.ranks = ranks.get();
        int devices = 0;
        const cudaError_t err = cudaGetDeviceCount(&devices);
        if (err != cudaSuccess || devices == 0) {
            if (dp.num_ranks() > 1)
                fail("rank %d: no CUDA device (%s); a run of %d ranks needs one GPU per rank",
                     dp.rank(), err != cudaSuccess ? cudaGetErrorName(err) : "none found",
                     dp.num_ranks());
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
        if (ranks) dp.nccl = make_nccl_communicator(*ranks);
    } catch (const InputError& e) {
        fprintf(stderr, "error: %s\n", e.what());
        if (ranks && ranks->num_ranks > 1) ranks->abort_all(1);
        return 1;
    }
    spec.defaults = gpu_defaults();
    spec.create_model = [dp](const GPTConfig& config, const TrainOptions& opt) {
        return std::unique_ptr<TrainModel>(new GPUModel(config, opt, dp));
    };
    spec.report_ignored_flags = [dp](const TrainOptions& opt) {
        if (opt.zero_stage && !dp.nccl)
            printf("note: -z (ZeRO) shards across ranks; with one rank it has no effect\n");
    };
    spec.plan_memory = plan_gpu_memory;
    spec.device_memory = [] {
        size_t free_bytes = 0, total_bytes = 0;
        CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
        return (double)free_bytes;
    };
    const int status = run_training(argc, argv, spec);
    if (dp.nccl) ncclCommDestroy(dp.nccl);
    return status;
}
#endif

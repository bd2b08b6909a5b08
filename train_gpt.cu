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
// Data parallelism: `mpirun -np N ./train_gpt` runs N ranks, one GPU each; see host/param_buckets.h for
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
#include "dist/mpi_ranks.h"
#include "host/errors.h"
#include "host/param_buckets.h"
#include "host/train_loop.h"
#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/classifier.h"
#include "kernels/common.h"
#include "kernels/elementwise.h"
#include "kernels/encoder.h"
#include "kernels/gelu.h"
#include "kernels/global_norm.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"

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

// Device memory in one allocation: a list of (pointer, bytes) requests laid out 256-byte aligned, so
// the start-up report and the out-of-memory check see the exact figure before anything is allocated.
class DeviceArena {
public:
    template <typename T>
    void request(T** pointer, size_t count) {
        requests_.push_back({reinterpret_cast<void**>(pointer), count * sizeof(T)});
    }
    size_t bytes() const {
        size_t total = 0;
        for (const Request& r : requests_) total += round_up(r.bytes);
        return total;
    }
    // Allocates everything requested since the last call, or fails naming the figure.
    void allocate(const char* what) {
        const size_t total = bytes();
        if (total == 0) return;
        char* base = nullptr;
        if (cudaMalloc(&base, total) != cudaSuccess) {
            cudaGetLastError();
            fail("out of GPU memory allocating %.1f MiB for %s (try a smaller -b, -t, or -r 2)",
                 total / 1048576.0, what);
        }
        blocks_.push_back(base);
        for (const Request& r : requests_) {
            *r.pointer = base;
            base += round_up(r.bytes);
        }
        requests_.clear();
    }
    ~DeviceArena() {
        for (void* block : blocks_) cudaFree(block);
    }

private:
    struct Request {
        void** pointer;
        size_t bytes;
    };
    static size_t round_up(size_t bytes) { return (bytes + 255) / 256 * 256; }
    std::vector<Request> requests_;
    std::vector<void*> blocks_;
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

// The NCCL type of floatX.
#ifdef ENABLE_FP32
constexpr ncclDataType_t NCCL_FLOATX = ncclFloat32;
#else
constexpr ncclDataType_t NCCL_FLOATX = ncclBfloat16;
#endif
#define NCCL_CHECK(call) nccl_check((call), #call, __FILE__, __LINE__)
inline void nccl_check(ncclResult_t result, const char* what, const char* file, int line) {
    if (result == ncclSuccess) return;
    fprintf(stderr, "NCCL error %s at %s:%d: %s\n", ncclGetErrorString(result), file, line, what);
    exit(2);
}

// This rank among the data-parallel ranks: the host group (MPI) and the NCCL communicator (null
// without an MPI launcher: then there is nothing to communicate).
struct DataParallel {
    RankGroup* ranks;
    ncclComm_t nccl = nullptr;
    int rank() const { return ranks ? ranks->rank : 0; }
    int num_ranks() const { return ranks ? ranks->num_ranks : 1; }
};

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
    std::vector<float> working_weights() override;
    void set_optimizer_state(const std::vector<float>& master, const std::vector<float>& m,
                             const std::vector<float>& v) override;
    void optimizer_state(std::vector<float>* master, std::vector<float>* m,
                         std::vector<float>* v) override;
    bool optimizer_sharded() const override { return sharded_; }
    ModelMemory memory() const override { return memory_; }
    // The gradients, widened to fp32 (for tests and debugging).
    std::vector<float> gradients();

private:
    // Parameter tensor t of layer l (l ignored for wte, wpe, lnfw, lnfb) in params or grads, which
    // are in bucket order (host/param_buckets.h).
    floatX* p(int t, int l = 0) const { return params_ + buckets_.device_offset(t, l); }
    floatX* g(int t, int l = 0) const { return grads_ + buckets_.device_offset(t, l); }
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
    void run_backward(bool communicate);
    void average_gradients(int bucket);
    void finish_gradient_communication();

    GPTConfig config_;
    DataParallel dp_;
    ParamBuckets buckets_;            // device order of parameters and gradients
    bool sharded_;                    // ZeRO-1: this rank keeps optimizer state for its shard only
    std::vector<OwnedRun> owned_;     // the parameters this rank updates
    cudaStream_t comm_stream_ = nullptr;
    cudaEvent_t gradients_ready_ = nullptr, communication_done_ = nullptr;
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

    floatX* params_ = nullptr;   // working weights, param_layout order
    floatX* grads_ = nullptr;
    float* master_ = nullptr;    // fp32 master weights (null with -w 0 or in the fp32 build)
    float *adam_m_ = nullptr, *adam_v_ = nullptr;  // state order: this rank's shard, or all
    Activations act_{};
    int* inputs_dev_ = nullptr;  // (N) token ids of the current micro-batch
    int* targets_dev_ = nullptr;
    void* scratch_ = nullptr;    // kernel scratch, the largest any kernel asks for
    float* norm_dev_ = nullptr;  // the squared gradient norm
    void* encoder_host_scratch_ = nullptr;

    int B_ = 0, T_ = 0;                // shape of the last forward
    bool have_targets_ = false;
    std::vector<int> inputs_host_;     // the last forward's tokens (the encoder's backward groups them)
    std::vector<float> losses_host_;
};

GPUModel::GPUModel(const GPTConfig& config, const TrainOptions& opt, DataParallel dp)
    : config_(config), dp_(dp),
      buckets_(make_param_buckets(config, dp.num_ranks())),
      sharded_(opt.zero_stage == 1 && dp.nccl != nullptr),
      owned_(owned_runs(buckets_, dp.rank(), sharded_)), max_B_(opt.batch_size),
      max_T_(opt.seq_len), max_N_((size_t)opt.batch_size * opt.seq_len), recompute_(opt.recompute),
      seed_(opt.seed) {
    if (opt.zero_stage > 1)
        fail("-z (--zero-stage): stage %d is not implemented; use 0 (all-reduce) or 1 (sharded "
             "optimizer state)", opt.zero_stage);
#ifdef ENABLE_FP32
    use_master_ = false;  // the working weights are fp32 already
#else
    use_master_ = opt.fp32_master != 0;
#endif
    const int L = config.num_layers, C = config.channels, NH = config.num_heads;
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
    CUDA_CHECK(cudaStreamCreate(&comm_stream_));
    CUDA_CHECK(cudaEventCreateWithFlags(&gradients_ready_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&communication_done_, cudaEventDisableTiming));
    matmul_setup(opt.tf32 != 0);

    // Parameters and gradients (bucket order, padded), and this rank's master weights and AdamW
    // moments: 12 bytes per parameter, divided by the ranks under ZeRO-1.
    const size_t P = buckets_.total, S = sharded_ ? buckets_.shard_size() : P, N = max_N_;
    arena_.request(&params_, P);
    arena_.request(&grads_, P);
    memory_.parameters = P * sizeof(floatX);
    memory_.gradients = P * sizeof(floatX);
    if (use_master_) {
        arena_.request(&master_, S);
        memory_.master_weights = S * sizeof(float);
    }
    arena_.request(&adam_m_, S);
    arena_.request(&adam_v_, S);
    memory_.optimizer_state = 2 * S * sizeof(float);
    // A ring all-reduce, or a reduce-scatter plus an all-gather, sends 2·(R−1)/R of the buffer.
    const int R = dp_.num_ranks();
    memory_.network_bytes_per_step = 2 * (R - 1) * (P / R) * sizeof(floatX);
    const size_t before_activations = arena_.bytes();

    // Activations (see struct Activations for what -r changes).
    const size_t ln_layers = recompute_ >= 2 ? 1 : L, gelu_layers = recompute_ >= 1 ? 1 : L;
    Activations& a = act_;
    arena_.request(&a.encoded, N * C);
    arena_.request(&a.ln1, ln_layers * N * C);
    arena_.request(&a.ln1_mean, L * N);
    arena_.request(&a.ln1_rstd, L * N);
    arena_.request(&a.qkv, L * N * 3 * C);
    arena_.request(&a.atty, L * N * C);
    arena_.request(&a.att_lse, L * N * NH);
    arena_.request(&a.residual2, L * N * C);
    arena_.request(&a.ln2, ln_layers * N * C);
    arena_.request(&a.ln2_mean, L * N);
    arena_.request(&a.ln2_rstd, L * N);
    arena_.request(&a.fch, L * N * 4 * C);
    arena_.request(&a.fch_gelu, gelu_layers * N * 4 * C);
    arena_.request(&a.residual3, L * N * C);
    arena_.request(&a.lnf, N * C);
    arena_.request(&a.lnf_mean, N);
    arena_.request(&a.lnf_rstd, N);
    arena_.request(&a.logits, N * Vp);
    arena_.request(&a.losses, N);
    arena_.request(&a.branch, N * C);
    arena_.request(&a.dresidual, N * C);
    arena_.request(&a.dln, N * C);
    arena_.request(&a.datty, N * C);
    arena_.request(&a.dqkv, N * 3 * C);
    arena_.request(&a.dfch, N * 4 * C);
    arena_.request(&inputs_dev_, N);
    arena_.request(&targets_dev_, N);
    const size_t scratch_bytes = std::max(
        {encoder_backward_scratch_bytes(max_B_, max_T_), layernorm_backward_scratch_bytes((int)N, C),
         matmul_backward_scratch_bytes((int)N, 4 * C), matmul_backward_scratch_bytes((int)N, Vp),
         attention_backward_scratch_bytes(max_B_, max_T_, NH, HS), global_norm_scratch_bytes()});
    arena_.request(reinterpret_cast<char**>(&scratch_), scratch_bytes);
    arena_.request(&norm_dev_, 1);
    memory_.activations = arena_.bytes() - before_activations;

    // Will it fit? Say so before allocating anything, with what to lower.
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (arena_.bytes() > free_bytes)
        fail("the model needs %.2f GiB of GPU memory (weights and optimizer %.2f GiB, activations "
             "%.2f GiB) but %s has %.2f GiB free: lower -b (batch size) or -t (sequence length), "
             "or recompute more with -r 2",
             arena_.bytes() / 1073741824.0, before_activations / 1073741824.0,
             memory_.activations / 1073741824.0, prop.name, free_bytes / 1073741824.0);
    arena_.allocate("the model");
    encoder_host_scratch_ = malloc(encoder_backward_host_scratch_bytes(max_B_, max_T_));
    CUDA_CHECK(cudaMemsetAsync(params_, 0, P * sizeof(floatX), stream_));  // padding stays zero
    CUDA_CHECK(cudaMemsetAsync(grads_, 0, P * sizeof(floatX), stream_));
    CUDA_CHECK(cudaMemsetAsync(adam_m_, 0, S * sizeof(float), stream_));
    CUDA_CHECK(cudaMemsetAsync(adam_v_, 0, S * sizeof(float), stream_));
    // The padded vocabulary rows' logits gradient is zero, but the classifier only writes rows it
    // sees; start every buffer defined.
    CUDA_CHECK(cudaMemsetAsync(act_.logits, 0, N * Vp * sizeof(floatX), stream_));
}

GPUModel::~GPUModel() {
    free(encoder_host_scratch_);
    matmul_teardown();
    if (gradients_ready_) cudaEventDestroy(gradients_ready_);
    if (communication_done_) cudaEventDestroy(communication_done_);
    if (comm_stream_) cudaStreamDestroy(comm_stream_);
    if (stream_) cudaStreamDestroy(stream_);
}

std::string GPUModel::description() const {
    const std::string parallel =
        !dp_.nccl ? ""
        : sharded_           ? strprintf(", ZeRO-1 over %d ranks (AdamW state sharded)", dp_.num_ranks())
                             : strprintf(", gradients all-reduced over %d ranks", dp_.num_ranks());
    return strprintf("CUDA on %s, %s storage%s, fp32 AdamW state, recompute -r %d%s",
                     device_name_.c_str(), PRECISION_NAME,
                     use_master_ ? " with fp32 master weights" : "", recompute_, parallel.c_str());
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
    CUDA_CHECK(cudaMemcpyAsync(inputs_dev_, inputs, N * sizeof(int), cudaMemcpyHostToDevice, stream_));
    if (targets)
        CUDA_CHECK(cudaMemcpyAsync(targets_dev_, targets, N * sizeof(int), cudaMemcpyHostToDevice,
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
void GPUModel::run_forward(int B, int T) {
    const int N = B * T, L = config_.num_layers, C = config_.channels, NH = config_.num_heads;
    const int HS = C / NH, Vp = config_.padded_vocab_size;
    Activations& a = act_;
    cudaStream_t s = stream_;

    encoder_forward(a.encoded, inputs_dev_, p(WTE), p(WPE), B, T, C, s);
    const LayerSlices first = layer_slices(0);
    layernorm_forward(first.ln1, first.ln1_mean, first.ln1_rstd, a.encoded, p(LN1W, 0), p(LN1B, 0),
                      N, C, s);
    for (int l = 0; l < L; l++) {
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
        if (l + 1 < L) {
            const LayerSlices next = layer_slices(l + 1);
            residual_layernorm_forward(y.residual3, next.ln1, next.ln1_mean, next.ln1_rstd,
                                       y.residual2, a.branch, p(LN1W, l + 1), p(LN1B, l + 1), N, C, s);
        } else {
            residual_layernorm_forward(y.residual3, a.lnf, a.lnf_mean, a.lnf_rstd, y.residual2,
                                       a.branch, p(LNFW), p(LNFB), N, C, s);
        }
    }
    matmul_forward(a.logits, a.lnf, p(WTE), nullptr, N, C, Vp, s);
}

// Losses per position, and with write_dlogits the logits replaced by the loss gradient (scaled by
// loss_scale / N). Returns the mean loss (summed on the host in double, in a fixed order).
float GPUModel::run_classifier(bool write_dlogits, float loss_scale) {
    const int N = B_ * T_;
    fused_classifier(act_.logits, act_.losses, loss_scale / N, targets_dev_, N, config_.vocab_size,
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

void GPUModel::zero_grad() {
    CUDA_CHECK(cudaMemsetAsync(grads_, 0, buckets_.total * sizeof(floatX), stream_));
}

float GPUModel::forward_backward(const int* inputs, const int* targets, int B, int T,
                                 float loss_scale, bool last_micro_step) {
    upload_tokens(inputs, targets, B, T);
    run_forward(B, T);
    const float loss = run_classifier(true, loss_scale);
    // Only the last micro-step's gradients are final, and only they are averaged across ranks;
    // earlier micro-steps accumulate locally.
    const bool communicate = last_micro_step && dp_.nccl != nullptr;
    run_backward(communicate);
    if (communicate) finish_gradient_communication();
    return loss;
}

// Averages one bucket's gradients across ranks on the communication stream, once the main stream
// has computed them: all of them (-z 0), or under ZeRO-1 only this rank's chunk (a reduce-scatter,
// in place: the chunk's place in the bucket receives the average).
void GPUModel::average_gradients(int bucket) {
    const ParamBucket& b = buckets_.buckets[bucket];
    CUDA_CHECK(cudaEventRecord(gradients_ready_, stream_));
    CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, gradients_ready_, 0));
    floatX* grads = grads_ + b.offset;
    if (sharded_) {
        const size_t chunk = buckets_.chunk(bucket);
        NCCL_CHECK(ncclReduceScatter(grads, grads + dp_.rank() * chunk, chunk, NCCL_FLOATX, ncclAvg,
                                     dp_.nccl, comm_stream_));
    } else {
        NCCL_CHECK(ncclAllReduce(grads, grads, b.length, NCCL_FLOATX, ncclAvg, dp_.nccl, comm_stream_));
    }
}

// The main stream goes on only once every bucket has been averaged.
void GPUModel::finish_gradient_communication() {
    CUDA_CHECK(cudaEventRecord(communication_done_, comm_stream_));
    CUDA_CHECK(cudaStreamWaitEvent(stream_, communication_done_, 0));
}

// Gradients flow back through the same steps. dresidual holds d(loss)/d(residual stream); each
// branch reads it and its first LayerNorm adds the branch's contribution back into it. Matmul and
// attention backward overwrite their input gradients; every parameter gradient is added into, so
// micro-steps accumulate. With `communicate`, each bucket is averaged across ranks as soon as its
// gradients are final: the final LayerNorm's first, then each layer's, the embeddings' last.
void GPUModel::run_backward(bool communicate) {
    const int B = B_, T = T_, N = B * T, L = config_.num_layers, C = config_.channels;
    const int NH = config_.num_heads, HS = C / NH, Vp = config_.padded_vocab_size;
    const bool keep_ln = recompute_ < 2, keep_gelu = recompute_ < 1;
    Activations& a = act_;
    cudaStream_t s = stream_;

    // logits = lnf · wteᵀ (the classifier left d(loss)/d(logits) in a.logits), then lnf.
    matmul_backward(a.dln, g(WTE), nullptr, scratch_, a.logits, a.lnf, p(WTE), N, C, Vp, s);
    CUDA_CHECK(cudaMemsetAsync(a.dresidual, 0, (size_t)N * C * sizeof(floatX), s));
    layernorm_backward(a.dresidual, g(LNFW), g(LNFB), scratch_, a.dln,
                       layer(a.residual3, L - 1, C), p(LNFW), a.lnf_mean, a.lnf_rstd, N, C, s);
    if (communicate) average_gradients(buckets_.final_norm_bucket());

    for (int l = L - 1; l >= 0; l--) {
        const LayerSlices y = layer_slices(l);

        // Recompute what -r did not keep, bit for bit as forward computed it.
        if (!keep_gelu) gelu_forward(y.fch_gelu, y.fch, (size_t)N * 4 * C, s);
        if (!keep_ln)
            layernorm_recompute(y.ln2, y.residual2, y.ln2_mean, y.ln2_rstd, p(LN2W, l), p(LN2B, l), N,
                                C, s);

        // MLP branch. fcproj's input gradient goes through GELU's derivative in the GEMM epilogue.
        matmul_backward(a.dfch, g(FCPROJW, l), g(FCPROJB, l), scratch_, a.dresidual, y.fch_gelu,
                        p(FCPROJW, l), N, 4 * C, C, s, y.fch);
        matmul_backward(a.dln, g(FCW, l), g(FCB, l), scratch_, a.dfch, y.ln2, p(FCW, l), N, C, 4 * C,
                        s);
        layernorm_backward(a.dresidual, g(LN2W, l), g(LN2B, l), scratch_, a.dln, y.residual2,
                           p(LN2W, l), y.ln2_mean, y.ln2_rstd, N, C, s);

        // Attention branch.
        matmul_backward(a.datty, g(ATTPROJW, l), g(ATTPROJB, l), scratch_, a.dresidual, y.atty,
                        p(ATTPROJW, l), N, C, C, s);
        attention_backward(a.dqkv, scratch_, a.datty, y.atty, y.att_lse, y.qkv, B, T, NH, HS, s);
        if (!keep_ln)
            layernorm_recompute(y.ln1, y.x, y.ln1_mean, y.ln1_rstd, p(LN1W, l), p(LN1B, l), N, C, s);
        matmul_backward(a.dln, g(QKVW, l), g(QKVB, l), scratch_, a.dqkv, y.ln1, p(QKVW, l), N, C,
                        3 * C, s);
        layernorm_backward(a.dresidual, g(LN1W, l), g(LN1B, l), scratch_, a.dln, y.x, p(LN1W, l),
                           y.ln1_mean, y.ln1_rstd, N, C, s);
        if (communicate) average_gradients(buckets_.layer_bucket(l));
    }
    encoder_backward(g(WTE), g(WPE), a.dresidual, inputs_host_.data(), B, T, C, scratch_,
                     encoder_host_scratch_, s);
    if (communicate) average_gradients(buckets_.embedding_bucket());
}

// ------------------------------------------------------------------------------------------------
// 4. Update

// Under ZeRO-1 each rank holds the averaged gradients of its chunks only: the squared norms of the
// chunks, summed over ranks. Otherwise every rank has all of them. (Padding holds zeros.)
double GPUModel::grad_norm() {
    CUDA_CHECK(cudaMemsetAsync(norm_dev_, 0, sizeof(float), stream_));
    if (sharded_) {
        for (int b = 0; b < (int)buckets_.buckets.size(); b++) {
            const size_t chunk = buckets_.chunk(b);
            global_norm_squared(norm_dev_, grads_ + buckets_.buckets[b].offset + dp_.rank() * chunk,
                                chunk, scratch_, stream_);
        }
        NCCL_CHECK(ncclAllReduce(norm_dev_, norm_dev_, 1, ncclFloat32, ncclSum, dp_.nccl, stream_));
    } else {
        global_norm_squared(norm_dev_, grads_, buckets_.total, scratch_, stream_);
    }
    float norm_squared = 0;
    CUDA_CHECK(cudaMemcpyAsync(&norm_squared, norm_dev_, sizeof(float), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return std::sqrt((double)norm_squared);
}

// AdamW on the parameters this rank owns, run by run (each inside one tensor: weight decay only on
// the weight matrices). The stochastic rounding of the bf16 weights draws from a stream that depends
// on the run's seed, the step and each parameter's index in the model, so runs, resumed runs and
// runs on other numbers of ranks round alike. Under ZeRO-1 the ranks then all-gather the weights.
void GPUModel::update(const AdamWSettings& s, int step) {
    const uint32_t seed = (uint32_t)(seed_ * 0x9E3779B97F4A7C15ull >> 32) ^ (uint32_t)step * 0x85EBCA6Bu;
    for (const OwnedRun& run : owned_)
        adamw_update(params_ + run.device_offset, master_ ? master_ + run.state_offset : nullptr,
                     adam_m_ + run.state_offset, adam_v_ + run.state_offset,
                     grads_ + run.device_offset, run.length, run.layout_offset, s.learning_rate,
                     s.beta1, s.beta2, s.eps, is_weight_matrix(run.tensor) ? s.weight_decay : 0.0f,
                     s.grad_scale, step, seed, stream_);
    if (sharded_) {
        NCCL_CHECK(ncclGroupStart());
        for (int b = 0; b < (int)buckets_.buckets.size(); b++) {
            floatX* bucket = params_ + buckets_.buckets[b].offset;
            const size_t chunk = buckets_.chunk(b);
            NCCL_CHECK(ncclAllGather(bucket + dp_.rank() * chunk, bucket, chunk, NCCL_FLOATX, dp_.nccl,
                                     stream_));
        }
        NCCL_CHECK(ncclGroupEnd());
    }
    CUDA_CHECK(cudaGetLastError());
}

// ------------------------------------------------------------------------------------------------
// Parameters and optimizer state in and out (fp32 on the host).

WeightType GPUModel::working_weight_type() const {
#ifdef ENABLE_FP32
    return WeightType::FP32;
#else
    return WeightType::BF16;
#endif
}

// Host fp32 <-> device floatX or float, through a host staging vector.
template <typename T>
static void upload(T* device, const std::vector<float>& host, cudaStream_t stream) {
    std::vector<T> staged(host.size());
    for (size_t i = 0; i < host.size(); i++) staged[i] = (T)host[i];
    CUDA_CHECK(cudaMemcpyAsync(device, staged.data(), staged.size() * sizeof(T),
                               cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
}
template <typename T>
static std::vector<float> download(const T* device, size_t n, cudaStream_t stream) {
    std::vector<T> staged(n);
    CUDA_CHECK(cudaMemcpyAsync(staged.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return std::vector<float>(staged.begin(), staged.end());
}

// Host vectors are in ParamLayout order; the device's are in bucket order (weights, gradients) or
// in this rank's state order (master weights, moments: host/param_buckets.h).
void GPUModel::set_working_weights(const std::vector<float>& weights) {
    upload(params_, to_device_order(buckets_, weights), stream_);
    if (master_) upload(master_, gather_shard(buckets_, dp_.rank(), sharded_, weights), stream_);
}
std::vector<float> GPUModel::working_weights() {
    return to_layout_order(buckets_, download(params_, buckets_.total, stream_));
}
std::vector<float> GPUModel::gradients() {
    return to_layout_order(buckets_, download(grads_, buckets_.total, stream_));
}

void GPUModel::set_optimizer_state(const std::vector<float>& master, const std::vector<float>& m,
                                   const std::vector<float>& v) {
    if (master_) upload(master_, gather_shard(buckets_, dp_.rank(), sharded_, master), stream_);
    upload(adam_m_, gather_shard(buckets_, dp_.rank(), sharded_, m), stream_);
    upload(adam_v_, gather_shard(buckets_, dp_.rank(), sharded_, v), stream_);
}
// What this rank's state file stores: its shard (state order) under ZeRO-1, else the whole model's
// state in ParamLayout order.
void GPUModel::optimizer_state(std::vector<float>* master, std::vector<float>* m,
                               std::vector<float>* v) {
    const size_t S = sharded_ ? buckets_.shard_size() : buckets_.total;
    auto in_file_order = [&](std::vector<float> state) {
        return sharded_ ? state : to_layout_order(buckets_, state);
    };
    *master = master_ ? in_file_order(download(master_, S, stream_))
                      : in_file_order(gather_shard(buckets_, dp_.rank(), sharded_, working_weights()));
    *m = in_file_order(download(adam_m_, S, stream_));
    *v = in_file_order(download(adam_v_, S, stream_));
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
        if (opt.zero_stage && dp.num_ranks() == 1)
            printf("note: -z (ZeRO) shards across ranks; with one rank it has no effect\n");
    };
    const int status = run_training(argc, argv, spec);
    if (dp.nccl) ncclCommDestroy(dp.nccl);
    return status;
}
#endif

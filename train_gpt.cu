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
#include "parallel/mesh.h"
#include "parallel/mesh_communicators.h"
#include "parallel/mpi_ranks.h"
#include "parallel/nccl_check.h"
#include "parallel/param_buckets.h"
#include "parallel/tensor_parallel.h"
#include "parallel/zero.h"

// ------------------------------------------------------------------------------------------------
// 1. Buffers

// What the forward pass keeps for the backward pass, for micro-batches of up to N = B·T positions.
// Per-layer tensors hold L slices. With tensor parallelism over T ranks (parallel/tensor_parallel.h)
// the attention and MLP activations hold this rank's heads and hidden units (C/T, 3C/T, 4C/T wide), and
// with sequence parallelism the residual stream and the LayerNorms hold this rank's Nl = N/T positions
// (Nl = N otherwise). With recomputation, some tensors hold one slice that every layer reuses, and
// backward recomputes its contents from what was kept:
//   -r 0  everything kept
//   -r 1  GELU outputs recomputed from the GELU inputs (fch)
//   -r 2  also the LayerNorm outputs, from their inputs and the saved mean and rstd
struct Activations {
    floatX* encoded;                   // (Nl, C) token + position embedding
    floatX* ln1;                       // (L or 1, Nl, C)
    float *ln1_mean, *ln1_rstd;        // (L, Nl)
    floatX* qkv;                       // (L, N, 3C/T)
    floatX* atty;                      // (L, N, C/T) attention output
    float* att_lse;                    // (L, B, NH/T, T) log-sum-exp of each attention row
    floatX* residual2;                 // (L, Nl, C) residual stream after attention
    floatX* ln2;                       // (L or 1, Nl, C)
    float *ln2_mean, *ln2_rstd;        // (L, Nl)
    floatX* fch;                       // (L, N, 4C/T) GELU input
    floatX* fch_gelu;                  // (L or 1, N, 4C/T) GELU output
    floatX* residual3;                 // (L, Nl, C) residual stream after the MLP: the layer's output
    floatX* lnf;                       // (Nl, C)
    float *lnf_mean, *lnf_rstd;        // (Nl)
    floatX* logits;                    // (N, Vs) this rank's vocabulary slice (Vs = Vp with one rank);
                                       // the classifier overwrites it with d(loss)/d(logits)
    float* losses;                     // (N)
    // Working buffers reused by every layer.
    floatX* branch;                    // (Nl, C) an attention or MLP branch's output, before the add
    floatX *dresidual, *dln;           // (Nl, C) gradients
    floatX* datty;                     // (N, C/T)
    floatX* dqkv;                      // (N, 3C/T)
    floatX* dfch;                      // (N, 4C/T)
    // Sequence parallelism only: the whole (N, C) input of a column-parallel product (gathered), a
    // LayerNorm output gathered in backward while another product computes, and a row-parallel
    // product's partial sums before they are reduce-scattered.
    floatX *whole, *whole_ln, *partial;
    // Tensor parallelism only: the classifier's per-row statistics, this rank's (N, 3) and every rank's
    // (T, N, 3), the rows' log-sum-exp (N), and one row of logits gathered whole (T·Vs ≥ Vp).
    float *class_stats, *class_stats_all, *class_lse;
    floatX* logits_row;
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

// This process among the ranks of the run: the host group (MPI) and the world's NCCL communicator (null
// without an MPI launcher: then there is nothing to communicate). The model places itself in the mesh
// of -tp and -pp (parallel/mesh.h) and splits the communicator into its groups'.
struct WorldRanks {
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
// Requests them in the arena, for micro-batches of up to opt.batch_size × opt.seq_len tokens on a rank
// of a tensor group of `tp` ranks (see struct Activations for what -r, -tp and -sp change).
static void request_step_buffers(DeviceArena* arena, StepBuffers* buffers, const GPTConfig& config,
                                 const TrainOptions& opt, const TensorParallel& tp) {
    const size_t L = config.num_layers, C = config.channels, NH = config.num_heads;
    const size_t Vp = config.padded_vocab_size, HS = C / NH, T_ranks = tp.size();
    const int B = opt.batch_size, T = opt.seq_len;
    const size_t N = (size_t)B * T, Nl = tp.local_positions((int)N);
    const size_t Ct = C / T_ranks, NHt = NH / T_ranks, Vs = tp.vocab_slice((int)Vp);
    const size_t ln_layers = opt.recompute >= 2 ? 1 : L, gelu_layers = opt.recompute >= 1 ? 1 : L;
    Activations& a = buffers->act;
    auto request = [&](auto** pointer, size_t count) {
        arena->request(pointer, count, MemoryKind::ACTIVATIONS);
    };
    request(&a.encoded, Nl * C);
    request(&a.ln1, ln_layers * Nl * C);
    request(&a.ln1_mean, L * Nl);
    request(&a.ln1_rstd, L * Nl);
    request(&a.qkv, L * N * 3 * Ct);
    request(&a.atty, L * N * Ct);
    request(&a.att_lse, L * N * NHt);
    request(&a.residual2, L * Nl * C);
    request(&a.ln2, ln_layers * Nl * C);
    request(&a.ln2_mean, L * Nl);
    request(&a.ln2_rstd, L * Nl);
    request(&a.fch, L * N * 4 * Ct);
    request(&a.fch_gelu, gelu_layers * N * 4 * Ct);
    request(&a.residual3, L * Nl * C);
    request(&a.lnf, Nl * C);
    request(&a.lnf_mean, Nl);
    request(&a.lnf_rstd, Nl);
    request(&a.logits, N * Vs);
    request(&a.losses, N);
    request(&a.branch, Nl * C);
    request(&a.dresidual, Nl * C);
    request(&a.dln, Nl * C);
    request(&a.datty, N * Ct);
    request(&a.dqkv, N * 3 * Ct);
    request(&a.dfch, N * 4 * Ct);
    if (tp.sequence_parallel()) {
        request(&a.whole, N * C);
        request(&a.whole_ln, N * C);
        request(&a.partial, N * C);
    }
    if (tp.size() > 1) {
        request(&a.class_stats, N * 3);
        request(&a.class_stats_all, T_ranks * N * 3);
        request(&a.class_lse, N);
        request(&a.logits_row, T_ranks * Vs);
    }
    request(&buffers->inputs, N);
    request(&buffers->targets, N);
    const size_t scratch_bytes = std::max(
        {encoder_backward_scratch_bytes(B, T), layernorm_backward_scratch_bytes((int)Nl, (int)C),
         matmul_backward_scratch_bytes((int)N, 4 * (int)C), matmul_backward_scratch_bytes((int)N, (int)Vp),
         attention_backward_scratch_bytes(B, T, (int)NHt, (int)HS), global_norm_scratch_bytes()});
    request(reinterpret_cast<char**>(&buffers->scratch), scratch_bytes);
    request(&buffers->norm, 1);
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

// Bytes one rank sends in its tensor group per optimizer step of `micro_steps` micro-steps: the
// collectives of run_forward, run_classifier and run_backward (parallel/tensor_parallel.h), counted
// here without running them (GPUModel checks its first micro-step against this). Per micro-step, with
// n = N·C elements of one (N, C) activation:
//   sequence parallel   forward: the embeddings' reduce-scatter; per layer 2 gathers and 2
//                       reduce-scatters; lnf's gather. backward: lnf's gather and its gradient's
//                       reduce-scatter; per layer 4 gathers and 2 reduce-scatters; the embeddings'
//                       gather: 10 L + 5 gathers' worth. The LayerNorm gradients' sums (4C per layer,
//                       2C final) wherever the gradients are reduced.
//   otherwise           forward: the embeddings' and per layer 2 all-reduces; backward: the
//                       classifier's and per layer 2 all-reduces: 4 L + 2 all-reduces.
// Both: the classifier's row statistics (N × 3 fp32) gathered, and the squared norm summed per step.
struct TensorTraffic {
    size_t per_micro_step = 0;  // the activations' collectives and the classifier's statistics
    size_t per_reduction = 0;   // the LayerNorm gradients' sums, wherever the gradients are reduced
    size_t per_step = 0;        // the squared norm's sum
};
static TensorTraffic tensor_traffic(const GPTConfig& c, int B, int T_len, const TensorParallel& tp) {
    TensorTraffic t;
    const int T = tp.size();
    if (T == 1) return t;
    const size_t N = (size_t)B * T_len, C = c.channels, L = c.num_layers, e = sizeof(floatX);
    t.per_micro_step = TensorParallel::gather_bytes(N * 3, T, sizeof(float));
    if (tp.sequence_parallel()) {
        t.per_micro_step += (10 * L + 5) * TensorParallel::gather_bytes(N / T * C, T, e);
        t.per_reduction = L * TensorParallel::all_reduce_bytes(4 * C, T, e) + TensorParallel::all_reduce_bytes(2 * C, T, e);
    } else {
        t.per_micro_step += (4 * L + 2) * TensorParallel::all_reduce_bytes(N * C, T, e);
    }
    t.per_step = TensorParallel::all_reduce_bytes(1, T, sizeof(float));
    return t;
}
static size_t tensor_bytes_per_step(const GPTConfig& c, const TrainOptions& opt, const TensorParallel& tp,
                                    int micro_steps, int zero_stage) {
    const TensorTraffic t = tensor_traffic(c, opt.batch_size, opt.seq_len, tp);
    const size_t reductions = zero_stage >= 2 ? micro_steps : 1;  // as ParameterStore::reduces_gradients
    return micro_steps * t.per_micro_step + reductions * t.per_reduction + t.per_step;
}

// The device memory and network traffic of rank 0 of a run of num_ranks ranks, computed from the same
// buffer requests the model makes, without allocating anything (for --dry-run; no device needed).
ModelMemory plan_gpu_memory(const GPTConfig& config, const TrainOptions& opt, int num_ranks, bool communicates) {
    const Mesh mesh = make_mesh(num_ranks, 0, opt.tensor_parallel, opt.pipeline_parallel);
    const TensorParallel tp(nullptr, nullptr, 0, mesh.tensor, sequence_parallel(opt));
    const int zero_stage = zero_stage_in_effect(opt, communicates);
    DeviceArena arena;
    ParameterStore store(make_param_buckets(config, mesh.data, 0, mesh.tensor), zero_stage, 0, fp32_master_weights(opt));
    store.request_memory(&arena);
    StepBuffers buffers;
    request_step_buffers(&arena, &buffers, config, opt, tp);
    ModelMemory memory = arena.memory();
    const int micro_steps = grad_accum_steps(opt, num_ranks);
    memory.network_bytes_per_step = store.bytes_sent_per_step(micro_steps);
    memory.tensor_bytes_per_step = tensor_bytes_per_step(config, opt, tp, micro_steps, zero_stage);
    return memory;
}

class GPUModel : public TrainModel {
public:
    GPUModel(const GPTConfig& config, const TrainOptions& opt, WorldRanks world = {nullptr});
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
    bool forward_is_collective() const override { return store_.stage() >= 3 || tp_.size() > 1; }
    void set_optimizer_state(const std::vector<float>& master, const std::vector<float>& m,
                             const std::vector<float>& v) override;
    OptimizerPart optimizer_part() override { return store_.optimizer_part(); }
    ModelMemory memory() const override { return memory_; }
    // The gradients, widened to fp32 (for tests and debugging; one tensor rank, -z 0 and 1).
    std::vector<float> gradients() { return store_.gradients_in_layout_order(); }
    // Device bytes the model allocated (its arena), for tests of the memory report.
    size_t allocated_bytes() const { return arena_.bytes(); }

private:
    // Parameter tensor t of layer l (l ignored for wte, wpe, lnfw, lnfb): this rank's slice of its
    // weights and of its gradients, wherever the ZeRO stage keeps its bucket now (parallel/zero.h).
    floatX* p(int t, int l = 0) const {
        return store_.weights(buckets_.bucket_of(t, l)) + buckets_.offset_in_bucket(t, l);
    }
    floatX* g(int t, int l = 0) const {
        return store_.gradients(buckets_.bucket_of(t, l)) + buckets_.offset_in_bucket(t, l);
    }
    // Slice l of a per-layer activation of `rows` × `width` values (slice 0 when not kept per layer).
    floatX* layer(floatX* base, int l, size_t rows, size_t width, bool per_layer = true) const {
        return base + (per_layer ? (size_t)l * rows * width : 0);
    }
    float* layer(float* base, int l, size_t rows) const { return base + (size_t)l * rows; }
    // Layer l's slices of every per-layer activation (slice 0 of those -r does not keep per layer).
    struct LayerSlices {
        const floatX* x;  // the layer's input: the embeddings, or the previous layer's residual3
        floatX *ln1, *qkv, *atty, *residual2, *ln2, *fch, *fch_gelu, *residual3;
        float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *att_lse;
    };
    LayerSlices layer_slices(int l) const;
    // A row-parallel product's partial sums go here before tp_.reduce_positions into `mine`.
    floatX* partial_for(floatX* mine) const { return tp_.partial_buffer(act_.partial, mine); }
    // Before the gradients of bucket `bucket` are reduced across the data ranks: under sequence
    // parallelism the LayerNorm parameters' gradients are summed over the tensor group first.
    void reduce_gradients(int bucket, bool last_micro_step);

    void upload_tokens(const int* inputs, const int* targets, int B, int T);
    void run_forward(int B, int T);
    float run_classifier(bool write_dlogits, float loss_scale);
    void run_backward(bool last_micro_step);

    GPTConfig config_;
    WorldRanks world_;
    Mesh mesh_;                       // this rank's place among the ranks (-tp, -pp, data)
    MeshCommunicators comms_;         // its groups' NCCL communicators
    TensorParallel tp_;               // the collectives of its tensor group
    ParamBuckets buckets_;            // device order of parameters and gradients (this rank's slice)
    ParameterStore store_;            // weights, gradients, optimizer state under the ZeRO stage
    int accum_steps_;
    int max_B_, max_T_;
    size_t max_N_, max_Nl_;           // positions of a micro-batch, and those this rank keeps (-sp)
    int recompute_;
    bool use_master_;
    double peak_flops_ = 0;
    std::string device_name_;
    uint64_t seed_;
    cudaStream_t stream_ = nullptr;
    DeviceArena arena_;
    ModelMemory memory_;
    bool traffic_checked_ = false;    // the first micro-step's tensor traffic was compared with the plan

    StepBuffers buf_;
    Activations& act_ = buf_.act;
    void* encoder_host_scratch_ = nullptr;

    int B_ = 0, T_ = 0;                // shape of the last forward
    bool have_targets_ = false;
    std::vector<int> inputs_host_;     // the last forward's tokens (the encoder's backward groups them)
    std::vector<float> losses_host_;
};

GPUModel::GPUModel(const GPTConfig& config, const TrainOptions& opt, WorldRanks world)
    : config_(config), world_(world),
      mesh_(make_mesh(world.num_ranks(), world.rank(), opt.tensor_parallel, opt.pipeline_parallel)),
      comms_(split_mesh_communicators(world.nccl, mesh_)),
      tp_(comms_.tensor, comms_.tensor_overlap, mesh_.tensor_rank, mesh_.tensor, sequence_parallel(opt)),
      buckets_(make_param_buckets(config, mesh_.data, mesh_.tensor_rank, mesh_.tensor)),
      store_(buckets_, zero_stage_in_effect(opt, comms_.data != nullptr), mesh_.data_rank, fp32_master_weights(opt)),
      accum_steps_(std::max(1, grad_accum_steps(opt, world.num_ranks()))),
      max_B_(opt.batch_size), max_T_(opt.seq_len), max_N_((size_t)opt.batch_size * opt.seq_len),
      max_Nl_(tp_.local_positions((int)max_N_)),
      recompute_(opt.recompute), use_master_(fp32_master_weights(opt)), seed_(opt.seed) {
    const int C = config.channels, NH = config.num_heads;
    const int Vp = config.padded_vocab_size, HS = C / NH;
    if (C % NH != 0 || C % 8 != 0 || Vp % 8 != 0)
        fail("-e (--model): channels %d must be a multiple of 8 and of the head count %d", C, NH);
    if (!attention_supports_head_size(HS))
        fail("-e (--model): head size %d (channels %d / heads %d) is not supported by the attention "
             "kernels (supported: 32, 64, 128)", HS, C, NH);
    if (mesh_.pipeline > 1) fail("-pp (--pipeline-parallel): pipeline stages are not built into this trainer yet");

    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    device_name_ = prop.name;
    peak_flops_ = device_peak_flops(prop);
    CUDA_CHECK(cudaStreamCreate(&stream_));
    matmul_setup(opt.tf32 != 0);
    set_attention_kernel(opt.attention_kernel.c_str());

    // Parameters, gradients and optimizer state as the ZeRO stage keeps them, then everything sized
    // by the micro-batch (see struct Activations for what -r, -tp and -sp change).
    store_.request_memory(&arena_);
    request_step_buffers(&arena_, &buf_, config, opt, tp_);
    memory_ = arena_.memory();
    memory_.network_bytes_per_step = store_.bytes_sent_per_step(accum_steps_);
    memory_.tensor_bytes_per_step = tensor_bytes_per_step(config, opt, tp_, accum_steps_, store_.stage());

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
    store_.start(stream_, comms_.data);
    // The padded vocabulary rows' logits gradient is zero, but the classifier only writes rows it
    // sees; start every buffer defined.
    CUDA_CHECK(cudaMemsetAsync(act_.logits, 0, max_N_ * tp_.vocab_slice(Vp) * sizeof(floatX), stream_));
}

GPUModel::~GPUModel() {
    free(encoder_host_scratch_);
    matmul_teardown();
    if (stream_) cudaStreamDestroy(stream_);
    destroy_mesh_communicators(&comms_);
}

std::string GPUModel::description() const {
    std::string parallel = store_.description();
    if (tp_.size() > 1)
        parallel = strprintf("tensor parallel over %d ranks%s%s%s", tp_.size(),
                             tp_.sequence_parallel() ? " (sequence parallel)" : "", parallel.empty() ? "" : ", ",
                             parallel.c_str());
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
    const size_t C = config_.channels, Ct = C / tp_.size(), N = max_N_, Nl = max_Nl_;
    const bool keep_ln = recompute_ < 2, keep_gelu = recompute_ < 1;
    return {l == 0 ? a.encoded : layer(a.residual3, l - 1, Nl, C),
            layer(a.ln1, l, Nl, C, keep_ln),
            layer(a.qkv, l, N, 3 * Ct),
            layer(a.atty, l, N, Ct),
            layer(a.residual2, l, Nl, C),
            layer(a.ln2, l, Nl, C, keep_ln),
            layer(a.fch, l, N, 4 * Ct),
            layer(a.fch_gelu, l, N, 4 * Ct, keep_gelu),
            layer(a.residual3, l, Nl, C),
            layer(a.ln1_mean, l, Nl),
            layer(a.ln1_rstd, l, Nl),
            layer(a.ln2_mean, l, Nl),
            layer(a.ln2_rstd, l, Nl),
            layer(a.att_lse, l, N * config_.num_heads / tp_.size())};
}

// x = wte[tokens] + wpe; each layer: x += attproj(attention(qkv(ln1(x)))); x += fcproj(gelu(fc(ln2(x))));
// logits = lnf(x) · wteᵀ. Each residual add is fused with the LayerNorm that follows it.
// Under ZeRO-3 each bucket's weights are gathered just before use: the embeddings and the final
// LayerNorm first (kept until the classifier and its backward are done), each layer's while the one
// before it computes; a layer's weights are released once its last kernel is issued.
// Under tensor parallelism (tp_) each rank computes its heads, its hidden units and its vocabulary
// slice: before a column-parallel product (qkv, fc, the classifier) its input is gathered whole, after
// a row-parallel one (attproj, fcproj, the embeddings' lookup) the partial sums are reduced to the
// positions this rank keeps (all of them without sequence parallelism).
void GPUModel::run_forward(int B, int T) {
    const int N = B * T, Nl = tp_.local_positions(N), L = config_.num_layers, C = config_.channels;
    const int NHt = config_.num_heads / tp_.size(), HS = C / config_.num_heads, Ct = C / tp_.size();
    const int Vp = config_.padded_vocab_size, Vs = tp_.vocab_slice(Vp), vocab_begin = tp_.vocab_begin(Vp);
    const int EMBEDDINGS = buckets_.embedding_bucket(), FINAL_NORM = buckets_.final_norm_bucket();
    Activations& a = act_;
    cudaStream_t s = stream_;

    store_.gather_weights(EMBEDDINGS);
    store_.gather_weights(FINAL_NORM);
    store_.gather_weights(buckets_.layer_bucket(0));
    store_.wait_for_weights(EMBEDDINGS);
    // The embeddings: each tensor rank looks up the tokens of its vocabulary slice (rank 0 adds wpe).
    encoder_forward_vocab_slice(partial_for(a.encoded), buf_.inputs, p(WTE), vocab_begin, Vs,
                                tp_.added_once(p(WPE)), B, T, C, s);
    tp_.reduce_positions(a.encoded, partial_for(a.encoded), N, C, s);
    store_.wait_for_weights(buckets_.layer_bucket(0));
    const LayerSlices first = layer_slices(0);
    layernorm_forward(first.ln1, first.ln1_mean, first.ln1_rstd, a.encoded, p(LN1W, 0), p(LN1B, 0),
                      Nl, C, s);
    for (int l = 0; l < L; l++) {
        const int next_bucket = l + 1 < L ? buckets_.layer_bucket(l + 1) : FINAL_NORM;
        if (l + 1 < L) store_.gather_weights(next_bucket);  // prefetch: overlaps this layer's compute
        const LayerSlices y = layer_slices(l);
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
        store_.wait_for_weights(next_bucket);
        if (l + 1 < L) {
            const LayerSlices next = layer_slices(l + 1);
            residual_layernorm_forward(y.residual3, next.ln1, next.ln1_mean, next.ln1_rstd,
                                       y.residual2, a.branch, p(LN1W, l + 1), p(LN1B, l + 1), Nl, C, s);
        } else {
            residual_layernorm_forward(y.residual3, a.lnf, a.lnf_mean, a.lnf_rstd, y.residual2,
                                       a.branch, p(LNFW), p(LNFB), Nl, C, s);
        }
        store_.release_weights(buckets_.layer_bucket(l));
    }
    const floatX* lnf = tp_.gather_positions(a.whole, a.lnf, N, C, s);
    matmul_forward(a.logits, lnf, p(WTE), nullptr, N, C, Vs, s);  // this rank's vocabulary slice
}

// Losses per position, and with write_dlogits the logits replaced by the loss gradient (scaled by
// loss_scale / N). Returns the mean loss (summed on the host in double, in a fixed order). Under
// tensor parallelism each rank holds a slice of every row's logits: the slices' statistics (maximum,
// sum of exponentials, the target's logit) are gathered and combined into each row's log-sum-exp, so
// that the whole rows are never gathered.
float GPUModel::run_classifier(bool write_dlogits, float loss_scale) {
    const int N = B_ * T_, V = config_.vocab_size, Vp = config_.padded_vocab_size;
    Activations& a = act_;
    if (tp_.size() == 1) {
        fused_classifier(a.logits, a.losses, loss_scale / N, buf_.targets, N, V, Vp, write_dlogits, stream_);
    } else {
        const int Vs = tp_.vocab_slice(Vp), begin = tp_.vocab_begin(Vp);
        const int valid = std::max(0, std::min(V - begin, Vs));  // real tokens in this slice
        classifier_slice_stats(a.class_stats, a.logits, buf_.targets, N, begin, valid, Vs, stream_);
        tp_.gather(a.class_stats_all, a.class_stats, (size_t)N * 3, stream_);
        classifier_combine_stats(a.class_lse, a.losses, a.class_stats_all, tp_.size(), N, stream_);
        if (write_dlogits)
            classifier_slice_gradient(a.logits, a.class_lse, buf_.targets, loss_scale / N, N, begin, valid, Vs,
                                      stream_);
    }
    losses_host_.resize(N);
    CUDA_CHECK(cudaMemcpyAsync(losses_host_.data(), a.losses, N * sizeof(float), cudaMemcpyDeviceToHost,
                               stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    double sum = 0;
    for (float loss : losses_host_) sum += loss;
    return (float)(sum / N);
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
        for (int b = 0; b < B; b++) std::copy(inputs + (size_t)b * T, inputs + (size_t)(b + 1) * T, &padded[(size_t)b * T_run]);
        inputs = padded.data(), T = T_run;
    }
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

// Under tensor parallelism a collective: the row's slices are gathered from every rank.
void GPUModel::logits_at(int t, float* out) {
    const int V = config_.vocab_size, Vs = tp_.vocab_slice(config_.padded_vocab_size);
    const floatX* row = act_.logits + (size_t)t * Vs;
    if (tp_.size() > 1) {
        tp_.gather(act_.logits_row, row, Vs, stream_);
        row = act_.logits_row;
    }
    std::vector<floatX> host(V);
    CUDA_CHECK(cudaMemcpyAsync(host.data(), row, V * sizeof(floatX), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    for (int i = 0; i < V; i++) out[i] = (float)host[i];
}

// ------------------------------------------------------------------------------------------------
// 3. Backward

void GPUModel::zero_grad() { store_.zero_gradients(); }

float GPUModel::forward_backward(const int* inputs, const int* targets, int B, int T,
                                 float loss_scale, bool last_micro_step) {
    tp_.reset_bytes_sent();
    upload_tokens(inputs, targets, B, T);
    run_forward(B, T);
    const float loss = run_classifier(true, loss_scale);
    run_backward(last_micro_step);
    // The tensor group's traffic of one micro-step against the start-up report's plan (once, on a
    // micro-batch of the planned size).
    if (!traffic_checked_ && tp_.size() > 1) {
        const TensorTraffic t = tensor_traffic(config_, B, T, tp_);
        const size_t planned = t.per_micro_step + (store_.reduces_gradients(last_micro_step) ? t.per_reduction : 0);
        if (tp_.bytes_sent() != planned)
            fail("internal error: the tensor group sent %zu bytes in a micro-step, the plan says %zu",
                 tp_.bytes_sent(), planned);
        traffic_checked_ = true;
    }
    return loss;
}

void GPUModel::reduce_gradients(int bucket, bool last_micro_step) {
    const size_t summed = buckets_.buckets[bucket].sequence_summed;
    if (store_.reduces_gradients(last_micro_step) && summed > 0)
        tp_.sum_sequence_gradients(store_.gradients(bucket), summed, stream_);
    store_.reduce_gradients(bucket, last_micro_step);
}

// Gradients flow back through the same steps. dresidual holds d(loss)/d(residual stream) at this
// rank's positions; each branch reads it and its first LayerNorm adds the branch's contribution back
// into it. Matmul and attention backward overwrite their input gradients; every parameter gradient is
// added into, so micro-steps accumulate. As soon as a bucket's gradients are final for this micro-step,
// they are reduced across ranks (parallel/zero.h says when and how for each ZeRO stage): the final
// LayerNorm's first, then each layer's, the embeddings' last. Under ZeRO-3 each layer's weights are
// gathered again, the next layer down while this one computes. Under tensor parallelism the
// column-parallel products' input gradients are partial sums, reduced like the forward's row-parallel
// outputs, and the row-parallel products read the whole output gradient, gathered.
void GPUModel::run_backward(bool last_micro_step) {
    const int B = B_, T = T_, N = B * T, Nl = tp_.local_positions(N), L = config_.num_layers;
    const int C = config_.channels, Ct = C / tp_.size(), NHt = config_.num_heads / tp_.size();
    const int HS = C / config_.num_heads, Vp = config_.padded_vocab_size, Vs = tp_.vocab_slice(Vp);
    const int EMBEDDINGS = buckets_.embedding_bucket(), FINAL_NORM = buckets_.final_norm_bucket();
    const bool keep_ln = recompute_ < 2, keep_gelu = recompute_ < 1;
    Activations& a = act_;
    cudaStream_t s = stream_;

    // logits = lnf · wteᵀ (the classifier left d(loss)/d(logits) in a.logits), then lnf.
    store_.gather_weights(buckets_.layer_bucket(L - 1));
    store_.prepare_gradients(EMBEDDINGS);
    const floatX* lnf = tp_.gather_positions(a.whole, a.lnf, N, C, s);
    matmul_backward(partial_for(a.dln), g(WTE), nullptr, buf_.scratch, a.logits, lnf, p(WTE), N, C, Vs, s);
    tp_.reduce_positions(a.dln, partial_for(a.dln), N, C, s);
    store_.release_weights(EMBEDDINGS);
    CUDA_CHECK(cudaMemsetAsync(a.dresidual, 0, (size_t)Nl * C * sizeof(floatX), s));
    store_.prepare_gradients(FINAL_NORM);
    layernorm_backward(a.dresidual, g(LNFW), g(LNFB), buf_.scratch, a.dln,
                       layer(a.residual3, L - 1, max_Nl_, C), p(LNFW), a.lnf_mean, a.lnf_rstd, Nl, C, s);
    store_.release_weights(FINAL_NORM);
    reduce_gradients(FINAL_NORM, last_micro_step);

    for (int l = L - 1; l >= 0; l--) {
        const int bucket = buckets_.layer_bucket(l);
        if (l > 0) store_.gather_weights(buckets_.layer_bucket(l - 1));  // prefetch the next one down
        store_.wait_for_weights(bucket);
        store_.prepare_gradients(bucket);
        const LayerSlices y = layer_slices(l);

        // Recompute what -r did not keep, bit for bit as forward computed it.
        if (!keep_gelu) gelu_forward(y.fch_gelu, y.fch, (size_t)N * 4 * Ct, s);
        if (!keep_ln)
            layernorm_recompute(y.ln2, y.residual2, y.ln2_mean, y.ln2_rstd, p(LN2W, l), p(LN2B, l), Nl,
                                C, s);

        // MLP branch. fcproj's input gradient goes through GELU's derivative in the GEMM epilogue.
        // (fc's weight gradient needs ln2 whole: gathered while fcproj's backward computes.)
        const floatX* dbranch = tp_.gather_positions(a.whole, a.dresidual, N, C, s);
        tp_.start_gather(a.whole_ln, y.ln2, N, C, s);
        matmul_backward(a.dfch, g(FCPROJW, l), g(FCPROJB, l), buf_.scratch, dbranch, y.fch_gelu,
                        p(FCPROJW, l), N, 4 * Ct, C, s, y.fch);
        const floatX* ln2 = tp_.finish_gather(s);
        matmul_backward(partial_for(a.dln), g(FCW, l), g(FCB, l), buf_.scratch, a.dfch, ln2, p(FCW, l), N, C,
                        4 * Ct, s);
        tp_.reduce_positions(a.dln, partial_for(a.dln), N, C, s);
        layernorm_backward(a.dresidual, g(LN2W, l), g(LN2B, l), buf_.scratch, a.dln, y.residual2,
                           p(LN2W, l), y.ln2_mean, y.ln2_rstd, Nl, C, s);

        // Attention branch (qkv's weight gradient needs ln1 whole: gathered while attproj's and the
        // attention's backward compute).
        dbranch = tp_.gather_positions(a.whole, a.dresidual, N, C, s);
        if (!keep_ln)
            layernorm_recompute(y.ln1, y.x, y.ln1_mean, y.ln1_rstd, p(LN1W, l), p(LN1B, l), Nl, C, s);
        tp_.start_gather(a.whole_ln, y.ln1, N, C, s);
        matmul_backward(a.datty, g(ATTPROJW, l), g(ATTPROJB, l), buf_.scratch, dbranch, y.atty,
                        p(ATTPROJW, l), N, Ct, C, s);
        attention_backward(a.dqkv, buf_.scratch, a.datty, y.atty, y.att_lse, y.qkv, B, T, NHt, HS, s);
        const floatX* ln1 = tp_.finish_gather(s);
        matmul_backward(partial_for(a.dln), g(QKVW, l), g(QKVB, l), buf_.scratch, a.dqkv, ln1, p(QKVW, l), N,
                        C, 3 * Ct, s);
        tp_.reduce_positions(a.dln, partial_for(a.dln), N, C, s);
        layernorm_backward(a.dresidual, g(LN1W, l), g(LN1B, l), buf_.scratch, a.dln, y.x, p(LN1W, l),
                           y.ln1_mean, y.ln1_rstd, Nl, C, s);
        store_.release_weights(bucket);
        reduce_gradients(bucket, last_micro_step);
    }
    // The embeddings: each tensor rank adds the gradients of its vocabulary slice's rows (and every
    // rank the same wpe gradient, from every position).
    const floatX* dencoded = tp_.gather_positions(a.whole, a.dresidual, N, C, s);
    encoder_backward_vocab_slice(g(WTE), tp_.vocab_begin(Vp), Vs, g(WPE), dencoded, inputs_host_.data(), B, T, C,
                                 buf_.scratch, encoder_host_scratch_, s);
    reduce_gradients(EMBEDDINGS, last_micro_step);
    store_.finish_backward();
}

// ------------------------------------------------------------------------------------------------
// 4. Update

// The global gradient norm, of the averaged gradients wherever the stage keeps them.
double GPUModel::grad_norm() {
    CUDA_CHECK(cudaMemsetAsync(buf_.norm, 0, sizeof(float), stream_));
    store_.add_gradient_norm_squared(buf_.norm, buf_.scratch);
    tp_.sum(buf_.norm, 1, stream_);  // each tensor rank's slice (the replicated tensors counted once)
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

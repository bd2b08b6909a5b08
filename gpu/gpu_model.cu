// GPUModel (gpu_model.h): construction (where this rank sits, what it keeps, the device arena), the
// description, weights and optimizer state in and out.
#include "gpu/gpu_model.h"
#include "gpu/matmul_table_text.h"

#include <algorithm>

#include "base/errors.h"
#include "gpu/memory_plan.h"
#include "kernels/attention.h"
#include "kernels/encoder.h"
#include "kernels/matmul.h"
#include "parallel/comm/launch_order.h"

// --grad-compression's method (train/train_flags.cpp checked the name and where it applies).
static GradCompression grad_compression(const TrainOptions& opt) {
    GradCompression method = GradCompression::NONE;
    parse_grad_compression(opt.grad_compression.c_str(), &method);
    return method;
}

GPUModel::GPUModel(const ModelConfig& model, const TrainOptions& opt, WorldRanks world)
    : GPUModel(model_family(model, opt), opt, world) {}

GPUModel::GPUModel(const FamilyShape& family, const TrainOptions& opt, WorldRanks world)
    : shape_(family.core), model_config_(family.model), family_(family_of(family.model)),
      tied_classifier_(family.table.tied_classifier),
      world_(world),
      mesh_(make_mesh(world.num_ranks(), world.rank(), opt.tensor_parallel, opt.pipeline_parallel, opt.shard_ranks,
                      planned_node_ranks(opt, world.ranks))),
      comms_(split_mesh_communicators(world.nccl, mesh_, zero_sharding(opt, world.nccl != nullptr).weights,
                                      communicators_may_overlap())),
      tp_(comms_.tensor, comms_.tensor_overlap, mesh_.tensor_rank, mesh_.tensor, sequence_parallel(opt),
          within_one_node(mesh_.tensor_group(), mesh_.node_ranks)),
      pipeline_(comms_.pipeline, comms_.tied_embedding, mesh_.stage, mesh_.pipeline, pipeline_links(mesh_)),
      accum_steps_(std::max(1, grad_accum_steps(opt, world.num_ranks()))), schedule_(opt.pp_schedule),
      stage_(make_pipeline_stage(shape_, opt, mesh_, accum_steps_)),
      buckets_(make_param_buckets(family.table, mesh_.shard, model_slice(mesh_, stage_))),
      params_(buckets_, zero_sharding(opt, comms_.data != nullptr), mesh_.shard_rank(), shard_groups(mesh_),
              fp32_gradient_reduction(opt), grad_compression(opt), opt.powersgd_rank),
      optimizer_(params_, fp32_master_weights(opt), optimizer_kind(opt), layer_adaptation(opt)),
      graphs_(uses_cuda_graphs(opt, mesh_, params_.sharding())),
      max_B_(opt.batch_size), max_T_(opt.seq_len), max_N_((size_t)opt.batch_size * opt.seq_len),
      max_Nl_(tp_.local_positions((int)max_N_)),
      classifier_rows_(classifier_rows(tp_, opt.batch_size, opt.seq_len, shape_.padded_vocab_size)),
      recompute_(opt.recompute), seed_(opt.seed), compression_start_(opt.compression_start),
      widths_(family.widths),
      context_{buckets_, scope_, tp_, stage_, buf_, widths_, stream_, B_, T_, max_N_, max_Nl_, recompute_,
               classifier_rows_, pinned_tokens_, encoder_host_scratch_, encoder_host_bytes_} {
    const int C = shape_.channels, NH = (int)widths_.heads, HS = (int)widths_.head_size;
    if (C % 8 != 0 || shape_.padded_vocab_size % 8 != 0)
        fail("-e (--model): channels %d must be a multiple of 8 and of the head count %d", C, NH);
    if (!attention_supports_head_size(HS))
        fail("-e (--model): head size %d (channels %d / heads %d) is not supported by the attention "
             "kernels (supported: 32, 64, 128)", HS, C, NH);

    // CUDA graphs replay what a step issues the same way every time. A pipeline's schedule interleaves
    // micro-batches with point-to-point transfers, and sharded gradients (ZeRO-2/3) change what a
    // micro-step issues with host-side state (which slot holds a bucket, whether a shard already holds
    // this step's gradients) and order it by events across micro-steps: those run without graphs.
    graphs_text_ = graphs_.enabled()      ? "CUDA graphs for micro-steps and updates"
                   : opt.cuda_graphs == 0 ? "CUDA graphs off (--cuda-graphs 0)"
                   : mesh_.pipeline > 1   ? "CUDA graphs off (pipeline schedules run without them)"
                                          : "CUDA graphs off (ZeRO-2/3 run without them)";
    read_device(opt);
    allocate(opt, world.num_ranks());
    layers_ = family_.layers(family, max_T_, context_);
    training_units_ = plan_micro_step(true), forward_units_ = plan_micro_step(false);
    // Every collective and every wait for one tells the phase timers (they record nothing while off).
    params_.set_hook(&timer_), tp_.set_hook(&timer_), pipeline_.set_hook(&timer_), optimizer_.set_hook(&timer_);
}

// The device: its name, its peak for MFU, the compute stream, cuBLASLt and the attention kernel.
void GPUModel::read_device(const TrainOptions& opt) {
    CUDA_CHECK(cudaGetDevice(&device_));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    device_name_ = prop.name;
    sm_count_ = prop.multiProcessorCount;
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
    matmul_hold_timed_choices(true);  // the loop shares one table between the ranks (algorithm_choices)
    set_attention_kernel(opt.attention_kernel.c_str());
}

// Parameters and gradients as ZeRO keeps them, the optimizer's state, then everything sized by the
// micro-batch (see struct Activations for what -r, -tp, -sp and -pp change): planned, checked against
// the device's free memory, allocated once.
void GPUModel::allocate(const TrainOptions& opt, int num_ranks) {
    params_.request_memory(&arena_);
    optimizer_.request_memory(&arena_);
    request_step_buffers(&arena_, &buf_, widths_, shape_.padded_vocab_size, opt, tp_, stage_);
    memory_ = arena_.memory();
    const SentBytes optimizer_bytes =
        optimizer_.planned_bytes(comms_.data ? mesh_.size() : 1, world_within_one_node(mesh_));
    planned_traffic_ = plan_traffic(shape_, opt, tp_, stage_, params_, pipeline_, accum_steps_, optimizer_bytes);
    planned_compressed_traffic_ =
        plan_traffic(shape_, opt, tp_, stage_, params_, pipeline_, accum_steps_, optimizer_bytes, true);
    set_planned_traffic(&memory_, planned_traffic_);
    if (params_.compression().active())
        set_planned_compressed_traffic(&memory_, planned_compressed_traffic_, params_.compression().method());
    memory_.pipeline_report = stage_report(model_config_, opt, num_ranks, comms_.data != nullptr);
    const std::vector<int> communicators = mesh_communicator_sizes(
        mesh_, comms_.data != nullptr, params_.sharding().weights, communicators_may_overlap());
    set_planned_overhead(&memory_,
                         plan_device_overhead(widths_, shape_.padded_vocab_size, mesh_, communicators, stage_,
                                              micro_step_graphs(graphs_.enabled(), params_, accum_steps_)));

    // Will it fit? Say so before allocating anything, with what to lower.
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (arena_.bytes() > free_bytes)
        fail("the model needs %.2f GiB of GPU memory (weights, gradients and optimizer %.2f GiB, "
             "activations %.2f GiB) but %s has %.2f GiB free: lower -b (batch size) or -t (sequence "
             "length), recompute more with -r 2, or shard more with a higher -z over more ranks",
             arena_.bytes() / 1073741824.0, (memory_.buffers() - memory_.activations) / 1073741824.0,
             memory_.activations / 1073741824.0, device_name_.c_str(), free_bytes / 1073741824.0);
    arena_.allocate("the model");
    tp_.use_buffers(act_.whole, act_.whole_ln, act_.partial);
    encoder_host_bytes_ = (encoder_backward_host_scratch_bytes(max_B_, max_T_) + 255) / 256 * 256;
    CUDA_CHECK(cudaMallocHost(&control_host_, sizeof(StepControl)));
    reserve_pinned_tokens(accum_steps_);
    params_.start(stream_, comms_.data, comms_.shard, comms_.replicas, comms_.weight_gathers);
    optimizer_.start(stream_, world_.nccl, world_within_one_node(mesh_));
    // The padded vocabulary rows' logits gradient is zero, but the classifier only writes rows it
    // sees; start every buffer defined.
    if (stage_.last)
        CUDA_CHECK(cudaMemsetAsync(act_.logits, 0,
                                   (size_t)classifier_rows_ * tp_.vocab_slice(shape_.padded_vocab_size) * sizeof(floatX),
                                   stream_));
}

GPUModel::~GPUModel() {
    cudaFreeHost(pinned_tokens_);
    cudaFreeHost(encoder_host_scratch_);
    cudaFreeHost(control_host_);
    matmul_teardown();
    if (stream_) cudaStreamDestroy(stream_);
    destroy_mesh_communicators(&comms_);
}

std::string GPUModel::description() const {
    std::string parallel = params_.description();
    auto append = [&](const std::string& what) { parallel = parallel.empty() ? what : what + ", " + parallel; };
    if (tp_.size() > 1)
        append(strprintf("tensor parallel over %d ranks%s", tp_.size(),
                         tp_.sequence_parallel() ? " (sequence parallel)" : ""));
    if (pipeline_.stages() > 1)
        append(strprintf("pipeline stage %d of %d (layers %d-%d, %s)", mesh_.stage, mesh_.pipeline,
                         stage_.first_layer, stage_.end_layer - 1, schedule_.c_str()));
    return strprintf("CUDA on %s%s, %s storage%s, fp32 %s state, recompute -r %d%s; %s", device_name_.c_str(),
                     peak_text_.c_str(), PRECISION_NAME,
                     optimizer_.keeps_master_weights() ? " with fp32 master weights" : "",
                     optimizer_title(optimizer_.kind()), recompute_,
                     parallel.empty() ? "" : (", " + parallel).c_str(), graphs_text_.c_str());
}

// ---- parameters and optimizer state in and out (fp32 on the host, ParamLayout order; the parameter
// store and the optimizer convert to and from where the sharding keeps them)

WeightType GPUModel::working_weight_type() const {
#ifdef ENABLE_FP32
    return WeightType::FP32;
#else
    return WeightType::BF16;
#endif
}

void GPUModel::set_working_weights(const std::vector<float>& weights) {
    params_.set_weights(weights);
    optimizer_.set_master_weights(weights);
}

void GPUModel::set_optimizer_state(const std::vector<float>& master, const std::vector<float>& m,
                                   const std::vector<float>& v) {
    optimizer_.set_state(master, m, v);
}

// ---- the samples' key/value cache: the family's decoder over the weights where the parameter
// store keeps them (every weight on this rank: supports_decode)

void GPUModel::decode_reset(int max_len) {
    params_.wait_for_all_weights();
    if (!decoder_ || decoder_->capacity() < max_len) decoder_ = family_.decoder(model_config_, max_len, stream_);
    decoder_->truncate(0);
}

void GPUModel::decode_next(int token, float* logits) {
    decoder_->step(token, [this](int t, int l) -> const floatX* { return weight(t, l); }, logits);
}

// ---- the cuBLASLt algorithms as a table the loop shares and saves (train/algorithm_table.h)

// cuBLAS promises the same bits run to run for one algorithm on the same architecture, SM count and
// library version: a table holds for those (and the storage type, which changes every configuration).
std::string GPUModel::algorithm_environment() const {
    return strprintf("%s (%d SMs), cuBLASLt %zu, %s storage", device_name_.c_str(), sm_count_,
                     (size_t)cublasLtGetVersion(), PRECISION_NAME);
}

AlgorithmTable GPUModel::algorithm_choices() {
    AlgorithmTable table;
    table.environment = algorithm_environment();
    for (const MatmulAlgoEntry& e : matmul_algorithm_table()) table.choices.push_back(matmul_choice_text(e));
    table.timed = matmul_configurations_from(MatmulAlgoSource::held) +
                  matmul_configurations_from(MatmulAlgoSource::timed);
    return table;
}

int GPUModel::adopt_algorithms(const std::vector<AlgorithmChoice>& choices, bool time_the_rest) {
    std::vector<MatmulAlgoEntry> table;
    for (const AlgorithmChoice& c : choices) {
        if (c.key.compare(0, 7, "matmul ") != 0) continue;  // another kind of choice: not this model's
        MatmulAlgoEntry e{};
        if (!matmul_entry_from_text(c, &e)) fail("table of algorithms: '%s' is not a matmul configuration's choice", c.key.c_str());
        table.push_back(e);
    }
    matmul_adopt_algorithms(table);
    matmul_set_autotune(time_the_rest && matmul_context().autotune);
    return matmul_algorithms_rejected();
}

// ---- gradient compression's state, for checkpoints

// The state's method, ranks and layout, without its values.
CompressionState GPUModel::compression_state_shape() const {
    CompressionState state;
    const CompressedReduction& compression = params_.compression();
    if (!compression.active()) return state;
    state.method = (int32_t)compression.method();
    state.data_ranks = buckets_.num_ranks;
    state.layout = compression.layout_fingerprint();
    return state;
}

CompressionState GPUModel::compression_state() const {
    CompressionState state = compression_state_shape();
    if (!state.empty()) state.values = params_.compression().state();
    return state;
}

bool GPUModel::set_compression_state(const CompressionState& state) {
    const CompressionState mine = compression_state_shape();
    if (state.empty() || mine.empty() || state.method != mine.method || state.data_ranks != mine.data_ranks ||
        state.layout != mine.layout || state.values.size() != params_.compression().state_size())
        return false;
    params_.compression().set_state(state.values);
    return true;
}

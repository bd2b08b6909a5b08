// GPUModel: a decoder-only transformer on an NVIDIA GPU, the model behind the shared training loop's
// interface (base/train_model.h), on one rank of a data × pipeline × tensor mesh. The model is a
// family-neutral core (passes, step, ZeRO, pipeline, optimizer, CUDA graphs, memory) driving one
// family's layer maths through ModelLayers. The order to read its files in: docs/ARCHITECTURE.md.
#pragma once
#include <nccl.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/gpt_config.h"
#include "base/model_config.h"
#include "parallel/plan/param_table.h"
#include "base/train_model.h"
#include "base/train_options.h"
#include "gpu/activations.h"
#include "gpu/cuda_graphs.h"
#include "gpu/device_info.h"
#include "gpu/decode_weights.h"
#include "gpu/model_family.h"
#include "gpu/model_layers.h"
#include "gpu/optimizer.h"
#include "gpu/parameter_scope.h"
#include "gpu/placement.h"
#include "gpu/step_timer.h"
#include "kernels/device_arena.h"
#include "kernels/step_guard.h"
#include "parallel/comm/mesh_communicators.h"
#include "parallel/comm/parameter_store.h"
#include "parallel/comm/pipeline_parallel.h"
#include "parallel/comm/tensor_parallel.h"
#include "parallel/plan/mesh.h"
#include "parallel/plan/param_buckets.h"
#include "parallel/plan/pipeline_schedule.h"
#include "parallel/plan/traffic.h"

class GPUModel : public TrainModel {
public:
    // The model of any registered family (gpu/model_family.h), on this rank's place in the mesh.
    GPUModel(const ModelConfig& model, const TrainOptions& opt, WorldRanks world = {nullptr});
    ~GPUModel() override;

    // The core's shape (base/model_shape.h: depth, width, vocabulary, longest sequence, a layer's
    // cost); model_config() holds the family's own.
    const ModelShape& shape() const { return shape_; }
    const ModelConfig& model_config() const override { return model_config_; }
    std::string description() const override;
    double peak_flops() const override { return peak_flops_; }
    GpuTelemetry device_telemetry() override { return read_cuda_device_telemetry(device_); }
    int device_index() const override { return device_; }

    float forward(const int* inputs, const int* targets, int B, int T) override;
    void logits_at(int t, float* out) override;
    void zero_grad() override;
    float forward_backward(const int* inputs, const int* targets, int B, int T, float loss_scale,
                           bool last_micro_step) override;
    double train_step(int micro_steps, int B, int T, const NextBatch& next_batch) override;
    double grad_norm() override;
    void update(const OptimizerSettings& settings, int step) override;
    StepOutcome optimizer_step(int micro_steps, int B, int T, const NextBatch& next_batch, const StepUpdate& u,
                              const std::function<double(double)>& mean_over_ranks) override;
    std::string end_of_run_report() override;
    // Phase timing with CUDA events (gpu/step_timer.h), read after each step's synchronisation.
    void set_step_timeline(StepTimeline* timeline) override;
    // The cuBLASLt algorithms (kernels/matmul.h), timed at each configuration's first call and held
    // back (the heuristic's first computes) until the loop adopts the ranks' shared table.
    std::string algorithm_environment() const override;
    AlgorithmTable algorithm_choices() override;
    int adopt_algorithms(const std::vector<AlgorithmChoice>& choices, bool time_the_rest) override;

    WeightType working_weight_type() const override;
    void set_working_weights(const std::vector<float>& weights) override;
    std::vector<float> working_weights() override { return params_.weights_in_layout_order(); }
    ModelPart working_weights_part() override { return params_.weights_part(); }
    std::vector<float> replica_weights() override { return params_.weights_as_held(); }
    bool forward_is_collective() const override {
        return params_.sharding().weights || tp_.size() > 1 || pipeline_.stages() > 1;
    }
    void set_optimizer_state(const std::vector<float>& master, const std::vector<float>& m,
                             const std::vector<float>& v) override;
    OptimizerPart optimizer_part() override { return optimizer_.state_part(); }
    Placement working_weights_placement() const override { return params_.weights_placement(); }
    Placement optimizer_state_placement() const override { return optimizer_.state_placement(); }
    void set_placed_working_weights(const std::vector<float>& placed) override {
        params_.set_placed_weights(placed);
    }
    void set_placed_optimizer_state(const std::vector<float>& master, const std::vector<float>& m,
                                    const std::vector<float>& v) override {
        optimizer_.set_placed_state(master, m, v);
    }
    ModelMemory memory() const override { return memory_; }
    // Samples through the family's key/value cache (its FamilyDecoder) where this rank holds every weight; where forward() is a collective (the model spread over the
    // ranks), the samples recompute the prefix.
    bool supports_decode() const override { return !forward_is_collective(); }
    void complete_weight_update() override { params_.gather_updated_weights_now(); }
    void decode_reset(int max_len) override;
    void decode_next(int token, float* logits) override;
    // The gradients, widened to fp32 (for tests and debugging; one rank of a whole model, -z 0 and 1).
    std::vector<float> gradients() { return params_.gradients_in_layout_order(); }
    // Device bytes the model allocated (its arena), for tests of the memory report.
    size_t allocated_bytes() const { return arena_.bytes(); }
    // What this rank sent in each group during the last optimizer step (counted by the operations).
    Traffic last_step_traffic() const { return last_step_traffic_; }
    double bytes_sent_last_step() const override { return (double)last_step_traffic_.total(); }
    // Gradient compression's state for checkpoints (parallel/comm/compressed_reduction.h).
    CompressionState compression_state() const override;
    bool set_compression_state(const CompressionState& state) override;

private:
    GPUModel(const FamilyShape& family, const TrainOptions& opt, WorldRanks world);

    // ---- parameters: tensor t of layer l (l ignored for wte, wpe, lnfw, lnfb), this rank's slice,
    // wherever the parameter store keeps its bucket now
    floatX* weight(int t, int l = 0) const {
        return params_.weights(buckets_.bucket_of(t, l)) + buckets_.offset_in_bucket(t, l);
    }
    floatX* gradient(int t, int l = 0) const {
        return params_.gradients(buckets_.bucket_of(t, l)) + buckets_.offset_in_bucket(t, l);
    }
    // The stage's input and output activations of the micro-batch in `slot`, and the gradient of the
    // residual stream a backward pass works in (two, taken in turns by micro-batches, with a pipeline).
    floatX* stage_input(int slot) const { return context_.stage_input(slot); }
    const floatX* stage_output(int slot) const { return context_.stage_output(slot); }
    int residual_gradient_turn(int micro_batch) const { return pipeline_.stages() > 1 ? micro_batch % 2 : 0; }

    // ---- the passes of this rank's stage (passes.cu): the family's units, each inside the
    // parameters' scope (gpu/parameter_scope.h)
    enum class Pass { LOGITS, LOSS, TRAINING };  // how far a forward pass goes on the last stage
    // A micro-step's units on this stage, planned (once, when the layers are made: plan_units); one
    // of them run inside the scope.
    std::vector<PassUnit> plan_micro_step(bool training) const;
    const std::vector<PassUnit>& micro_step_units(Pass pass) const {
        return pass == Pass::TRAINING ? training_units_ : forward_units_;
    }
    template <typename Maths>
    void run_unit(const PassUnit& unit, bool last_micro_step, Maths&& maths);
    // The stage's forward pass of the micro-batch in `slot` (tokens uploaded, input received); on the
    // last stage the mean loss goes into control->totals (micro_loss; in training also the step's
    // running loss, as 1/micro_steps of it), where the step reads it back once.
    void forward_stage(int slot, Pass pass, float loss_scale, int micro_steps, bool last_micro_step);
    // The stage's backward pass of micro-batch `micro_batch`, in `slot`, from the gradient of its
    // output (received, or from the classifier): the layers, then (first stage) the embeddings, whose
    // backward depends on the tokens on the host (so it runs outside a micro-step's CUDA graph).
    void backward_layers(int slot, int micro_batch, bool last_micro_step);
    void backward_embeddings(int micro_batch, bool last_micro_step);
    // Reduces the gradients of `bucket` across the data ranks; under sequence parallelism the
    // LayerNorm parameters' gradients are summed over the tensor group first.
    void reduce_gradients(int bucket, bool last_micro_step);

    // ---- a step (step.cu)
    // Pinned host memory for micro-batches 0 .. micro_batches-1 of a step (grown when a step has more):
    // copies from it are asynchronous, so the host never waits for the device to take a micro-batch.
    void reserve_pinned_tokens(int micro_batches);
    int* pinned_inputs(int micro_batch) const { return pinned_tokens_ + (size_t)micro_batch * 2 * max_N_; }
    int* pinned_targets(int micro_batch) const { return pinned_inputs(micro_batch) + max_N_; }
    // Checks micro-batch `micro_batch`'s tokens and copies them into its pinned area (targets may be
    // null: a forward without loss).
    void pin_tokens(const int* inputs, const int* targets, int B, int T, int micro_batch);
    // The pinned tokens of `micro_batch` to the device buffers the next forward reads.
    void upload_tokens(int micro_batch, bool with_targets);
    // Micro-batch i's passes on this stage, with the transfers to and from its neighbours: the forward,
    // the layers' backward, then the embeddings' backward and the gradients' finish.
    void forward_micro_batch(int slot, Pass pass, float loss_scale, int micro_steps, bool last_micro_step);
    void backward_micro_batch_layers(int slot, int micro_batch, bool last_micro_step);
    void finish_micro_batch_backward(int micro_batch, bool last_micro_step);
    // The micro-step executor: a step's actions on this stage in the schedule's order (a plain step:
    // the schedule of one stage), each micro-batch's loss scaled by loss_scale; `ends_step`: the last
    // micro-batch's reductions end the step's accumulation.
    void run_schedule(const std::vector<PipelineAction>& actions, int micro_steps, float loss_scale, bool ends_step);
    // One optimizer step's forward and backward passes over `micro_steps` micro-batches (read and
    // pinned first), from zeroed gradients and loss, by run_schedule; then the gradients finished.
    void accumulate(int micro_steps, int B, int T, const NextBatch& next_batch);
    // The end of the step's backward passes: every gradient reduction done, and with a pipeline the
    // tied embedding's two copies summed.
    void finish_gradients();
    // The squared global gradient norm into control->totals.norm_squared, summed over the ranks.
    void issue_norm();
    // The end of a step on the device: the loss from the last stage averaged over the data ranks, the
    // norm, the verdict and the clipped update (kernels/step_guard.h), and the totals copied out.
    void issue_update(const OptimizerSettings& constants);
    // The stochastic rounding's seed of step `step`.
    uint32_t rounding_seed(int step) const;
    // Copies control->totals to the host (waits for the device: a host synchronisation).
    const StepTotals& read_totals();
    // The operations' byte counters: zeroed, read, and (once) checked against the plan.
    void reset_traffic();
    Traffic traffic_sent() const;
    void check_traffic_against_plan(const Traffic& planned);
    // The device memory each rank holds beside its arena, against the plan (printed by rank 0).
    void report_measured_overhead();
    // Issues `issue`'s work on the compute stream: as a CUDA graph captured under `key` once graphs are
    // on and the first optimizer step is done (it runs eagerly: cuBLASLt's algorithm choices, lazily
    // made streams and the traffic check happen outside any capture), else directly. A replay runs none
    // of the host code that counts the bytes sent: what the capture counted is added in its place.
    template <typename Issue>
    void issue_graphed(const std::vector<long long>& key, Issue&& issue) {
        if (steps_done_ == 0 || !graphs_.enabled()) return issue();
        const Traffic before = traffic_sent();
        timer_.graph_begins(key);
        const bool captured = graphs_.run(key, stream_, issue);
        timer_.graph_ends(captured);
        if (captured)
            graph_traffic_[key] = traffic_sent() - before;
        else
            replayed_traffic_ += graph_traffic_.at(key);
    }
    bool stream_capturing() const {
        cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
        CUDA_CHECK(cudaStreamIsCapturing(stream_, &status));
        return status != cudaStreamCaptureStatusNone;
    }

    // ---- construction (gpu_model.cu)
    void read_device(const TrainOptions& opt);
    void allocate(const TrainOptions& opt, int num_ranks);

    ModelShape shape_;          // the core's shape (FamilyShape::core)
    ModelConfig model_config_;  // the model as the training loop sees it
    const Family& family_;      // its registered family (gpu/model_family.h)
    bool tied_classifier_;      // the classifier reuses the embedding (GPT-2)
    WorldRanks world_;
    Mesh mesh_;                       // this rank's place among the ranks (-tp, -pp, data)
    MeshCommunicators comms_;         // its groups' NCCL communicators
    TensorParallel tp_;               // the operations of its tensor group
    PipelineParallel pipeline_;       // the transfers along its pipeline
    int accum_steps_;
    std::string schedule_;            // --pp-schedule
    PipelineStage stage_;             // the layers it computes, the micro-batches it keeps
    ParamBuckets buckets_;            // device order of parameters and gradients (this rank's slice)
    ParameterStore params_;           // weights and gradients as ZeRO shards them, and their collectives
    ParameterScope scope_{params_, buckets_};  // their collectives around each unit of a pass
    Optimizer optimizer_;             // AdamW on the parameters this rank owns
    GraphCache graphs_;               // micro-steps and updates as CUDA graphs (--cuda-graphs)
    GpuStepTimer timer_;              // the phase timers' events (set_step_timeline)
    std::string graphs_text_;         // for the description: on, or why not
    int steps_done_ = 0;              // optimizer steps so far (the first runs without graphs)
    int max_B_, max_T_;
    size_t max_N_, max_Nl_;           // positions of a micro-batch, and those this rank keeps (-sp)
    int classifier_rows_;             // rows of logits held at once (classifier_rows)
    int recompute_;
    double peak_flops_ = 0;           // dense bf16 tensor-core peak, for MFU (0: unknown)
    int device_ = 0;                  // the CUDA device
    std::string device_name_, peak_text_;
    int sm_count_ = 0;
    uint64_t seed_;
    cudaStream_t stream_ = nullptr;
    DeviceArena arena_;
    ModelMemory memory_;
    Traffic last_step_traffic_;
    Traffic planned_traffic_;             // what the start-up report's plan says a step sends
    Traffic planned_compressed_traffic_;  // and a step whose gradients are compressed
    std::map<std::vector<long long>, Traffic> graph_traffic_;  // what each CUDA graph sends
    Traffic replayed_traffic_;            // what this step's graph replays sent
    double bytes_sent_ = 0;               // over the steps so far, for the end of the run
    int compression_start_ = 0;           // --compression-start
    CompressionState compression_state_shape() const;
    bool plain_step_checked_ = false, compressed_step_checked_ = false;  // against their plans

    StepBuffers buf_;
    Activations& act_ = buf_.act;
    LayerWidths widths_;              // the family's activation widths

    // Pinned host memory (cudaMallocHost): each micro-batch's tokens (inputs then targets, max_N_ each)
    // and the encoder backward's grouping of them, for pinned_ micro-batches; the step's control block.
    int* pinned_tokens_ = nullptr;
    char* encoder_host_scratch_ = nullptr;
    size_t encoder_host_bytes_ = 0;  // per micro-batch
    int pinned_ = 0;
    StepControl* control_host_ = nullptr;

    int B_ = 0, T_ = 0;                // shape of the micro-batches
    // The samples' key/value cache, the family's, made by the first sample.
    std::unique_ptr<FamilyDecoder> decoder_;
    // What the family's layer maths reads of this model (its members, by reference), and the maths.
    LayerContext context_;
    std::unique_ptr<ModelLayers> layers_;
    std::vector<PassUnit> training_units_, forward_units_;  // plan_micro_step's, for training and not
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

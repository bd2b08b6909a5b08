// The CUDA trainer's model built for Llama 3 (GPUModel with gpu/llama_layers.h, its kernels run
// through the emulator) against the fp32 CPU reference (cpu/llama_cpu.h) on the same weights and
// tokens: the logits, the loss and every gradient tensor, with grouped-query attention, at each
// recomputation level. Built twice, bf16 and fp32 (-DENABLE_FP32), like the kernels.
#include "gpu/gpu_model.h"
#include "gpu/memory_plan.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "base/model_init.h"
#include "cpu/llama_cpu.h"
#include "test/kernels/kernel_test.h"
#include "test/gpu/memory_plan_check.h"

namespace {

// Whole-model gradients pass through ~12 kernels per layer, each rounding its output in bf16:
// measured worst tensor about 1.2e-2 relative (fp32: about 1e-6).
#ifdef ENABLE_FP32
constexpr double LLAMA_TOLERANCE = 1e-5;
#else
constexpr double LLAMA_TOLERANCE = 2e-2;
#endif

// 4 query heads sharing 2 key/value heads; and an odd shape: 6 query heads over 2, an MLP width, a
// vocabulary and a sequence length that are not powers of two, three layers, Llama 3.1's RoPE scaling
// (with a short original context, so that every band of frequencies occurs).
LlamaConfig small_config() {
    LlamaConfig c;
    c.num_layers = 2, c.channels = 128, c.num_heads = 4, c.num_kv_heads = 2;
    c.ffn_channels = 256, c.vocab_size = 512, c.max_seq_len = 64;
    return c;
}
LlamaConfig odd_config() {
    LlamaConfig c;
    c.num_layers = 3, c.channels = 192, c.num_heads = 6, c.num_kv_heads = 2;
    c.ffn_channels = 200, c.vocab_size = 997, c.max_seq_len = 37;
    c.rope_theta = 10000.0;
    c.rope_scaling.enabled = true;
    c.rope_scaling.factor = 4.0;
    c.rope_scaling.original_max_position = 64;
    return c;
}

TrainOptions options(int B, int T, int recompute) {
    TrainOptions opt;
    opt.batch_size = B, opt.seq_len = T, opt.recompute = recompute;
    opt.fp32_master = 1, opt.tf32 = 0, opt.seed = 7;
    return opt;
}

// Fresh weights with the norms' gains moved off 1 (so that their use is tested too), rounded to the
// storage type so both models start from the same values.
std::vector<float> initial_weights(const LlamaConfig& c) {
    std::vector<float> w(llama_param_count(c));
    init_model_params(llama3_model(c), 11, w.data());
    for (const LlamaTensor& t : llama_tensors(c))
        if (!t.is_matrix())
            for (size_t i = 0; i < t.size(); i++) w[t.offset + i] = 1.0f + 0.25f * std::sin(0.7f * (float)i + t.layer);
    return round_to_floatX(w);
}

// One training micro-step on both models from the same weights: the logits of a separate forward,
// the loss, and every gradient tensor, with the worst relative error printed.
void check_against_reference(const LlamaConfig& c, int B, int T, int recompute) {
    const std::vector<float> weights = initial_weights(c);
    const std::vector<int> inputs = random_tokens((size_t)B * T, c.vocab_size, 1);
    const std::vector<int> targets = random_tokens((size_t)B * T, c.vocab_size, 2);

    GPUModel gpu(llama3_model(c), options(B, T, recompute));
    gpu.set_working_weights(weights);
    LlamaCpu* cpu = llama_cpu_create(c, B, T);
    llama_cpu_params(cpu) = weights;

    gpu.forward(inputs.data(), nullptr, B, T);
    llama_cpu_forward(cpu, inputs.data(), nullptr, B, T);
    std::vector<float> row(c.vocab_size), gpu_logits;
    for (int t = 0; t < T; t++) {
        gpu.logits_at(t, row.data());
        gpu_logits.insert(gpu_logits.end(), row.begin(), row.end());
    }
    const std::vector<float> cpu_logits(llama_cpu_logits(cpu), llama_cpu_logits(cpu) + (size_t)T * c.vocab_size);
    const double logits_error = tst::rel_l2_error(gpu_logits.data(), cpu_logits.data(), cpu_logits.size());

    gpu.zero_grad();
    const float gpu_loss = gpu.forward_backward(inputs.data(), targets.data(), B, T, 1.0f, true);
    llama_cpu_zero_grad(cpu);
    const float cpu_loss = llama_cpu_forward(cpu, inputs.data(), targets.data(), B, T);
    llama_cpu_backward(cpu, 1.0f);
    const double loss_error = std::fabs(gpu_loss - cpu_loss) / std::fabs(cpu_loss);

    const std::vector<float> grads = gpu.gradients(), &ref = llama_cpu_grads(cpu);
    double worst = 0;
    std::string worst_name;
    for (const LlamaTensor& t : llama_tensors(c)) {
        const double err = tst::rel_l2_error(grads.data() + t.offset, ref.data() + t.offset, t.size());
        if (err > worst) worst = err, worst_name = t.name;
        if (getenv("SHOW_ERRORS")) printf("    %-48s %.3g\n", t.name.c_str(), err);
        CHECK_MSG(err <= LLAMA_TOLERANCE, "gradient of %s: relative error %.3g > %.3g (" PRECISION_NAME ")",
                  t.name.c_str(), err, LLAMA_TOLERANCE);
    }
    printf("  L%d C%d H%d KV%d F%d V%d, B=%d T=%d -r %d (" PRECISION_NAME "): logits %.2g, loss %.2g, worst "
           "gradient %.2g (%s)\n", c.num_layers, c.channels, c.num_heads, c.num_kv_heads, c.ffn_channels,
           c.vocab_size, B, T, recompute, logits_error, loss_error, worst, worst_name.c_str());
    CHECK_MSG(logits_error <= LLAMA_TOLERANCE, "logits: relative error %.3g", logits_error);
    CHECK_MSG(loss_error <= LLAMA_TOLERANCE, "loss %.7f vs reference %.7f", gpu_loss, cpu_loss);
    llama_cpu_free(cpu);
}

// The loss and every gradient of one micro-step at recomputation level `recompute`.
std::pair<float, std::vector<float>> one_step(const LlamaConfig& c, int B, int T, int recompute) {
    GPUModel gpu(llama3_model(c), options(B, T, recompute));
    gpu.set_working_weights(initial_weights(c));
    gpu.zero_grad();
    const std::vector<int> inputs = random_tokens((size_t)B * T, c.vocab_size, 3);
    const std::vector<int> targets = random_tokens((size_t)B * T, c.vocab_size, 4);
    const float loss = gpu.forward_backward(inputs.data(), targets.data(), B, T, 1.0f, true);
    return {loss, gpu.gradients()};
}

}  // namespace

// -r 1 and -r 2 recompute what they did not keep (the SwiGLU output; the RMSNorm outputs) with kernels
// that round as the forward pass did, so the loss and every gradient are the bits of -r 0.
TEST(llama_recompute_levels_give_identical_bits) {
    const LlamaConfig c = odd_config();
    const auto [loss0, grads0] = one_step(c, 2, 37, 0);
    for (int level : {1, 2}) {
        const auto [loss, grads] = one_step(c, 2, 37, level);
        CHECK_MSG(loss == loss0, "-r %d: loss %.9g vs -r 0 %.9g", level, loss, loss0);
        size_t differ = 0;
        for (size_t i = 0; i < grads.size(); i++) differ += memcmp(&grads[i], &grads0[i], sizeof(float)) != 0;
        CHECK_MSG(differ == 0, "-r %d: %zu of %zu gradient elements differ from -r 0", level, differ, grads.size());
    }
}

// The planner (gpu/memory_plan.h, what --dry-run prints) plans exactly what the model allocates: on
// one rank of an NCCL world at each ZeRO stage and recomputation level, the model's report equals the
// device's allocation and the plan equals the report, part by part, with the network bytes and the
// device overhead; and (below -z 3, which adds the gathered copies) the parameters are the Llama 3
// tensors' elements (llama_param_count) in the storage type, laid out in padded buckets. Meshes of
// several ranks (-tp, -pp) need one process per rank: test_train_llama_emu.sh checks there that
// --dry-run plans the memory, traffic and stages the ranks of -tp 2 and -tp 2 -pp 2 -z 1 report.
TEST(llama_memory_plan_equals_device_allocation) {
    const LlamaConfig c = odd_config();
    // The weights as param_buckets.h lays them out on one rank: the embedding, each layer, and the final
    // norm with lm_head, each bucket padded to a multiple of 128 elements, the vocabulary's rows to 8.
    const size_t C = c.channels, L = c.num_layers, Vp = (c.vocab_size + 7) / 8 * 8;
    const size_t layer = (llama_param_count(c) - 2 * (size_t)c.vocab_size * C - C) / L;
    auto padded = [](size_t n) { return (n + 127) / 128 * 128; };
    const size_t weights = (padded(Vp * C) + L * padded(layer) + padded(C + Vp * C)) * sizeof(floatX);
    ncclUniqueId id;
    ncclComm_t comm = nullptr;
    CHECK(ncclGetUniqueId(&id) == ncclSuccess);
    CHECK(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess);
    for (int zero_stage = 0; zero_stage <= 3; zero_stage++)
        for (int recompute = 0; recompute <= 2; recompute++) {
            TrainOptions opt = options(2, 37, recompute);
            opt.zero_stage = zero_stage;
            opt.total_batch = 2 * 37 * 2;  // two micro-steps
            const ModelMemory plan = check_plan_equals_allocation(llama3_model(c), opt, comm);
            if (zero_stage == 3) continue;  // -z 3 adds the layers' gathered copies
            CHECK_MSG(plan.parameters == weights, "-z %d: %zu bytes of parameters planned for %zu bytes of weights",
                      zero_stage, plan.parameters, weights);
        }
    ncclCommDestroy(comm);
}

TEST(llama_matches_reference_gqa_r0) { check_against_reference(small_config(), 2, 32, 0); }
TEST(llama_matches_reference_gqa_r1) { check_against_reference(small_config(), 2, 32, 1); }
TEST(llama_matches_reference_gqa_r2) { check_against_reference(small_config(), 2, 32, 2); }
TEST(llama_matches_reference_odd_shape_r0) { check_against_reference(odd_config(), 2, 37, 0); }
TEST(llama_matches_reference_odd_shape_r1) { check_against_reference(odd_config(), 2, 37, 1); }
TEST(llama_matches_reference_odd_shape_r2) { check_against_reference(odd_config(), 2, 37, 2); }

#if defined(__SANITIZE_ADDRESS__)
// The NCCL stand-in runs over MPI, whose libraries leak at exit (see test/emu/test_nccl.sh):
// address and UB checks stay on, leak detection is off for this program.
extern "C" const char* __asan_default_options() { return "detect_leaks=0"; }
#endif

// The training step of train_gpt, timed whole and split by op class, so that what remains between
// us and the ceilings is visible (CUDA events, warm-up, medians, ceilings measured in the run: dev/RESULTS.md):
//   (a) whole steps of GPUModel (gpu/gpu_model.h: the trainer's model, its kernels and cuBLASLt) as the trainer runs
//       them (optimizer_step: zeroed gradients, forward + classifier + backward, global norm, clipping
//       and AdamW decided on the device, one host synchronisation; as CUDA graphs unless
//       --cuda-graphs 0); median of timed steps after
//       warm-up; tokens/s, and MFU against the bf16 GEMM rate measured in this run
//       (dev/cuda/gemm_ceiling.h) and against the 989 TFLOP/s datasheet peak (H100 SXM, H200);
//   (b) each op class alone, with the same kernels (kernels/*.h) at the step's exact shapes on
//       buffers of those shapes (one per layer where the model keeps one per layer, so that no
//       class runs out of L2 that the step would not), all of the class's calls of one step per
//       timed run: GEMMs, attention, LayerNorm/residual, GELU, classifier, encoder, AdamW + global
//       norm, and the memsets and copies. A table gives ms per step, % of the whole step, the
//       achieved TFLOP/s or GB/s and its share of the measured ceiling, and the sum of the classes
//       beside the whole step: the difference is launch gaps, synchronisation and host work.
// Usage: dev/bin/bench_step [-b B] [-t T] [--model DESC] [-r 0|1|2] [-i SHARDS] [--steps N]
//                           [--warmup N] [--whole-step-only] [--cuda-graphs 1|0]
//   defaults on a GPU: GPT-2 124M (d12), B=16, T=1024, -r 1 (train_gpt's defaults), 10 timed steps
//   after 3 warm-up steps, random tokens (-i: the first batch of these token shards instead).
// Every step trains on the same batch, so the loss must go down: the run checks that, and that
// losses and norms are finite (PASS/FAIL lines). Built through the emulator (build/dev/
// bench_step_emu, run by test/trainer/test_bench_step_emu.sh) it runs a tiny model (default
// custom:L2:C64:H2:T64, B=2, T=64) as a smoke test: every call at its shapes, and the table; its
// times are the emulator's, never GPU figures.
#include "gpu/gpu_model.h"
#include "gpu/memory_plan.h"
#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/classifier.h"
#include "kernels/encoder.h"
#include "kernels/gelu.h"
#include "kernels/global_norm.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"

#include <cerrno>
#include <chrono>
#include <functional>

#include "base/gpt_init.h"
#include "base/model_descriptor.h"
#include "base/rng.h"
#include "dev/cuda/bench.h"
#include "dev/cuda/gemm_ceiling.h"
#include "train/dataloader.h"
#include "train/train_loop.h"

namespace {

constexpr double DATASHEET_PEAK_TFLOPS = 989.0;  // H100 SXM / H200, dense bf16

struct BenchOptions {
    std::string model = BENCH_ON_GPU ? "d12" : "custom:L2:C64:H2:T64";
    int B = BENCH_ON_GPU ? 16 : 2;
    int T = BENCH_ON_GPU ? 1024 : 64;
    int recompute = 1;
    int warmup = BENCH_ON_GPU ? 3 : 1;
    int steps = BENCH_ON_GPU ? 10 : 3;
    std::string data;  // token shards for the batch; empty: random tokens
    bool whole_step_only = false;
    std::string attention_kernel = "auto";  // --attention-kernel (kernels/attention.h)
    int cuda_graphs = 1;                    // --cuda-graphs: the whole steps replayed as CUDA graphs
};

void print_usage() {
    printf(
        "usage: bench_step [-b B] [-t T] [--model DESC] [-r 0|1|2] [-i SHARDS] [--steps N] [--warmup N]\n"
        "                  [--whole-step-only] [--attention-kernel auto|hopper|mma|cuda-cores]\n"
        "                  [--cuda-graphs 1|0]\n"
        "  times whole training steps of train_gpt's GPUModel, then each op class alone at the\n"
        "  step's shapes (see the top of dev/bench_step.cu). Defaults: --model %s -b %d -t %d -r 1\n"
        "  --steps %d --warmup %d, random tokens.\n",
        BenchOptions().model.c_str(), BenchOptions().B, BenchOptions().T, BenchOptions().steps,
        BenchOptions().warmup);
}

int parse_int(const std::string& flag, const std::string& text, int lo, int hi) {
    char* end = nullptr;
    errno = 0;
    const long value = strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno != 0 || value < lo || value > hi)
        fail("%s: '%s' is not a whole number in [%d, %d]", flag.c_str(), text.c_str(), lo, hi);
    return (int)value;
}

BenchOptions parse_options(int argc, char** argv) {
    BenchOptions o;
    for (int i = 1; i < argc; i++) {
        const std::string flag = argv[i];
        if (flag == "-h" || flag == "--help") {
            print_usage();
            exit(0);
        }
        if (flag == "--whole-step-only") {
            o.whole_step_only = true;
            continue;
        }
        if (i + 1 >= argc) fail("%s: needs a value (try --help)", flag.c_str());
        const std::string value = argv[++i];
        if (flag == "-b" || flag == "--batch-size")
            o.B = parse_int(flag, value, 1, 1 << 16);
        else if (flag == "-t" || flag == "--seq-len")
            o.T = parse_int(flag, value, 1, 1 << 20);
        else if (flag == "-e" || flag == "--model")
            o.model = value;
        else if (flag == "-r" || flag == "--recompute")
            o.recompute = parse_int(flag, value, 0, 2);
        else if (flag == "-i" || flag == "--train-data")
            o.data = value;
        else if (flag == "--steps")
            o.steps = parse_int(flag, value, 1, 100000);
        else if (flag == "--warmup")
            o.warmup = parse_int(flag, value, 0, 100000);
        else if (flag == "--attention-kernel")
            o.attention_kernel = value;
        else if (flag == "--cuda-graphs")
            o.cuda_graphs = parse_int(flag, value, 0, 1);
        else
            fail("unknown flag '%s' (try --help)", flag.c_str());
    }
    return o;
}

double milliseconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}
double median_of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

bool all_passed = true;
void report_pass(bool ok, const std::string& what) {
    printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
    all_passed = all_passed && ok;
}

// The batch every step trains on: the first batch of the shards, or random tokens.
void make_batch(const BenchOptions& o, const GPTConfig& c, std::vector<int>* inputs,
                std::vector<int>* targets) {
    const size_t N = (size_t)o.B * o.T;
    inputs->resize(N);
    targets->resize(N);
    if (!o.data.empty()) {
        DataLoader loader(o.data, o.B, o.T, 0, 1, c.vocab_size, false, 0);
        loader.next_batch(inputs->data(), targets->data());
        return;
    }
    Rng rng(1234);
    int next = (int)rng.below(c.vocab_size);
    for (size_t i = 0; i < N; i++) {
        (*inputs)[i] = next;
        next = (int)rng.below(c.vocab_size);
        (*targets)[i] = next;
    }
}

// ------------------------------------------------------------------------------------------------
// (a) whole steps

struct WholeStep {
    double median_ms = 0;
    double tokens_per_s = 0;
};

WholeStep time_whole_steps(const BenchOptions& o, const GPTConfig& c, double gemm_tflops) {
    TrainOptions opt;
    opt.batch_size = o.B, opt.seq_len = o.T, opt.recompute = o.recompute;
    opt.fp32_master = 1, opt.tf32 = 1, opt.seed = 42;
    opt.attention_kernel = o.attention_kernel;
    opt.cuda_graphs = o.cuda_graphs;
    GPUModel model(gpt2_model(c), opt);
    {
        std::vector<float> weights(param_layout(c).total);
        gpt_init_params(c, opt.seed, weights.data());
        model.set_working_weights(weights);
    }
    std::vector<int> inputs, targets;
    make_batch(o, c, &inputs, &targets);
    printf("\n(a) whole training steps: %s\n", model.description().c_str());
    printf("    %d warm-up steps, then the median of %d; %s\n", o.warmup, o.steps,
           o.data.empty() ? "random tokens" : ("the first batch of " + o.data).c_str());

    // The trainer's step (GPUModel::optimizer_step): one host synchronisation, at its end.
    StepUpdate update;
    update.optimizer.learning_rate = 3e-4f;
    update.optimizer.weight_decay = 0.1f;
    const TrainModel::NextBatch same_batch = [&](int* in, int* out) {
        std::copy(inputs.begin(), inputs.end(), in);
        std::copy(targets.begin(), targets.end(), out);
    };
    std::vector<double> ms, losses, norms;
    for (int step = 1; step <= o.warmup + o.steps; step++) {
        CUDA_CHECK(cudaDeviceSynchronize());
        const auto start = std::chrono::steady_clock::now();
        update.step = step;
        const StepOutcome r = model.optimizer_step(1, o.B, o.T, same_batch, update, [](double x) { return x; });
        const double loss = r.loss, norm = r.norm;
        const double step_ms = milliseconds_since(start);
        printf("    step %d%s: loss %.4f, norm %.3f, %.2f ms\n", step, step <= o.warmup ? " (warm-up)" : "",
               loss, norm, step_ms);
        losses.push_back(loss);
        norms.push_back(norm);
        if (step > o.warmup) ms.push_back(step_ms);
    }
    bool finite = true;
    for (size_t i = 0; i < losses.size(); i++)
        finite = finite && std::isfinite(losses[i]) && std::isfinite(norms[i]);
    report_pass(finite, "whole steps: losses and gradient norms finite");
    report_pass(losses.back() < losses.front(),
                strprintf("whole steps: the loss goes down on the repeated batch (%.4f -> %.4f)",
                          losses.front(), losses.back()));

    WholeStep w;
    w.median_ms = median_of(ms);
    const double tokens = (double)o.B * o.T;
    w.tokens_per_s = tokens / (w.median_ms * 1e-3);
    const double tflops = training_flops_per_token(gpt2_model(c), o.T) * tokens / (w.median_ms * 1e-3) / 1e12;
    printf("    median step %.2f ms (min %.2f, max %.2f): %.0f tok/s, %.1f TFLOP/s\n", w.median_ms,
           *std::min_element(ms.begin(), ms.end()), *std::max_element(ms.begin(), ms.end()), w.tokens_per_s,
           tflops);
    printf("    (FLOPs as train_gpt counts them for MFU: 6 per parameter and token, plus attention)\n");
    if (BENCH_ON_GPU)
        printf(
            "    MFU %.1f%% of the measured bf16 GEMM rate (%.1f TFLOP/s), %.1f%% of the %.0f TFLOP/s "
            "datasheet peak\n",
            100 * tflops / gemm_tflops, gemm_tflops, 100 * tflops / DATASHEET_PEAK_TFLOPS,
            DATASHEET_PEAK_TFLOPS);
    printf(
        "bench_step_result B=%d T=%d median_ms=%.3f tokens_per_s=%.0f mfu_measured=%.2f mfu_datasheet=%.2f\n",
        o.B, o.T, w.median_ms, w.tokens_per_s, BENCH_ON_GPU ? 100 * tflops / gemm_tflops : 0.0,
        100 * tflops / DATASHEET_PEAK_TFLOPS);
    return w;
}

// ------------------------------------------------------------------------------------------------
// (b) op classes alone

// Device buffers of one step's shapes. Parameters and their state in the model's bucket order (as
// GPUModel keeps them, so that AdamW runs over the same runs); activations as GPUModel's Activations.
struct StepBuffers {
    GPTConfig c;
    int B, T, N, L, C, NH, HS, Vp, recompute;
    ParamBuckets buckets;
    floatX *params, *grads;
    float *master, *m, *v;
    Activations a;
    int *inputs, *targets;
    std::vector<int> inputs_host;
    void* scratch;
    void* host_scratch;
    std::vector<float> losses_host;
    float* norm;
    StepControl* control;       // the update's values and verdict, as the trainer's (kernels/step_guard.h)
    AdamWMultiTensor adamw;     // every run GPUModel updates, in one launch
    std::vector<void*> allocations;

    template <typename T>
    void allocate(T** p, size_t count) {
        CUDA_CHECK(cudaMalloc(p, std::max<size_t>(count, 1) * sizeof(T)));
        allocations.push_back(*p);
    }

    StepBuffers(const GPTConfig& config, int B_, int T_, int recompute_, const std::vector<int>& tokens)
        : c(config),
          B(B_),
          T(T_),
          N(B_ * T_),
          L(config.num_layers),
          C(config.channels),
          NH(config.num_heads),
          HS(config.channels / config.num_heads),
          Vp(config.padded_vocab_size),
          recompute(recompute_),
          buckets(make_param_buckets(config, 1)),
          inputs_host(tokens) {
        const size_t P = buckets.total, n = N;
        allocate(&params, P), allocate(&grads, P), allocate(&master, P), allocate(&m, P), allocate(&v, P);
        const size_t ln_layers = recompute >= 2 ? 1 : L, gelu_layers = recompute >= 1 ? 1 : L;
        allocate(&a.encoded, n * C);
        allocate(&a.ln1, ln_layers * n * C);
        allocate(&a.ln1_mean, L * n), allocate(&a.ln1_rstd, L * n);
        allocate(&a.qkv, L * n * 3 * C);
        allocate(&a.atty, L * n * C);
        allocate(&a.att_lse, L * n * NH);
        allocate(&a.residual2, L * n * C);
        allocate(&a.ln2, ln_layers * n * C);
        allocate(&a.ln2_mean, L * n), allocate(&a.ln2_rstd, L * n);
        allocate(&a.mlp_hidden, L * n * 4 * C);
        allocate(&a.mlp_activated, gelu_layers * n * 4 * C);
        allocate(&a.residual3, L * n * C);
        allocate(&a.lnf, n * C);
        allocate(&a.lnf_mean, n), allocate(&a.lnf_rstd, n);
        allocate(&a.logits, n * Vp);
        allocate(&a.losses, n);
        allocate(&a.branch, n * C);
        allocate(&a.dresidual[0], n * C), allocate(&a.dln, n * C), allocate(&a.datty, n * C);
        allocate(&a.dqkv, n * 3 * C);
        allocate(&a.dmlp_hidden, n * 4 * C);
        allocate(&inputs, n), allocate(&targets, n);
        const size_t scratch_bytes =
            std::max({encoder_backward_scratch_bytes(B, T), layernorm_backward_scratch_bytes(N, C),
                      matmul_backward_scratch_bytes(N, 4 * C), matmul_backward_scratch_bytes(N, Vp),
                      attention_backward_scratch_bytes(B, T, NH, HS), global_norm_scratch_bytes()});
        allocate(reinterpret_cast<char**>(&scratch), scratch_bytes);
        allocate(&norm, 1);
        allocate(&control, 1);
        host_scratch = malloc(encoder_backward_host_scratch_bytes(B, T));

        // Random contents everywhere (never zeros): weights at GPT-2's scale, LayerNorm weights 1.
        uint32_t seed = 1;
        auto random = [&](auto* p, size_t count, float scale) {
            fill_random_device(p, count, seed++, scale);
        };
        random(params, P, 0.02f), random(grads, P, 1e-3f), random(master, P, 0.02f);
        random(m, P, 1e-4f);
        CUDA_CHECK(cudaMemset(v, 0, P * sizeof(float)));  // v ≥ 0: a fresh optimizer's (then updated)
        for (int l = 0; l < L; l++)
            for (int t : {LN1W, LN2W}) fill_array(params + buckets.device_offset(t, l), 1.0f, C, 0);
        fill_array(params + buckets.device_offset(LNFW), 1.0f, C, 0);
        random(a.encoded, n * C, 1.0f), random(a.ln1, ln_layers * n * C, 1.0f);
        random(a.qkv, L * n * 3 * C, 1.0f), random(a.atty, L * n * C, 1.0f);
        random(a.residual2, L * n * C, 1.0f), random(a.ln2, ln_layers * n * C, 1.0f);
        random(a.mlp_hidden, L * n * 4 * C, 1.0f), random(a.mlp_activated, gelu_layers * n * 4 * C, 1.0f);
        random(a.residual3, L * n * C, 1.0f), random(a.lnf, n * C, 1.0f);
        random(a.logits, n * Vp, 4.0f), random(a.branch, n * C, 1.0f);
        random(a.dresidual[0], n * C, 1e-3f), random(a.dln, n * C, 1e-3f), random(a.datty, n * C, 1e-3f);
        random(a.dqkv, n * 3 * C, 1e-3f), random(a.dmlp_hidden, n * 4 * C, 1e-3f);
        CUDA_CHECK(cudaMemcpy(inputs, tokens.data(), n * sizeof(int), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(targets, tokens.data(), n * sizeof(int), cudaMemcpyHostToDevice));
        // Mean and rstd as the forward LayerNorms leave them (the backward reads them).
        for (int l = 0; l < L; l++) {
            layernorm_forward(ln1(l), a.ln1_mean + (size_t)l * N, a.ln1_rstd + (size_t)l * N,
                              l == 0 ? a.encoded : residual3(l - 1), p(LN1W, l), p(LN1B, l), N, C, 0);
            layernorm_forward(ln2(l), a.ln2_mean + (size_t)l * N, a.ln2_rstd + (size_t)l * N, residual2(l),
                              p(LN2W, l), p(LN2B, l), N, C, 0);
        }
        layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, residual3(L - 1), p(LNFW), p(LNFB), N, C, 0);
        CUDA_CHECK(cudaDeviceSynchronize());
    }
    ~StepBuffers() {
        for (void* p : allocations) cudaFree(p);
        adamw_multi_tensor_free(adamw);
        free(host_scratch);
    }

    floatX* p(int t, int l = 0) const { return params + buckets.device_offset(t, l); }
    floatX* g(int t, int l = 0) const { return grads + buckets.device_offset(t, l); }
    floatX* per_layer(floatX* base, int l, size_t width, bool kept = true) const {
        return base + (kept ? (size_t)l * N * width : 0);
    }
    floatX* ln1(int l) const { return per_layer(a.ln1, l, C, recompute < 2); }
    floatX* ln2(int l) const { return per_layer(a.ln2, l, C, recompute < 2); }
    floatX* qkv(int l) const { return per_layer(a.qkv, l, 3 * C); }
    floatX* atty(int l) const { return per_layer(a.atty, l, C); }
    floatX* residual2(int l) const { return per_layer(a.residual2, l, C); }
    floatX* residual3(int l) const { return per_layer(a.residual3, l, C); }
    floatX* fch(int l) const { return per_layer(a.mlp_hidden, l, 4 * C); }
    floatX* fch_gelu(int l) const { return per_layer(a.mlp_activated, l, 4 * C, recompute < 1); }
    float* lse(int l) const { return a.att_lse + (size_t)l * N * NH; }
    float* ln1_mean(int l) const { return a.ln1_mean + (size_t)l * N; }
    float* ln1_rstd(int l) const { return a.ln1_rstd + (size_t)l * N; }
    float* ln2_mean(int l) const { return a.ln2_mean + (size_t)l * N; }
    float* ln2_rstd(int l) const { return a.ln2_rstd + (size_t)l * N; }
};

// Each op class's calls of one training step, in the step's order (as GPUModel's run_forward,
// run_classifier, run_backward, grad_norm and update make them), on stream 0.

// The four linear layers of every layer and the logits, forward and backward (bias gradients and
// the GELU-gradient epilogue of fcproj's backward included).
void run_gemms(StepBuffers& s) {
    const int N = s.N, C = s.C, Vp = s.Vp;
    const Activations& a = s.a;
    for (int l = 0; l < s.L; l++) {
        matmul_forward(s.qkv(l), s.ln1(l), s.p(QKVW, l), s.p(QKVB, l), N, C, 3 * C, 0);
        matmul_forward(a.branch, s.atty(l), s.p(ATTPROJW, l), s.p(ATTPROJB, l), N, C, C, 0);
        matmul_forward(s.fch(l), s.ln2(l), s.p(FCW, l), s.p(FCB, l), N, C, 4 * C, 0);
        matmul_forward(a.branch, s.fch_gelu(l), s.p(FCPROJW, l), s.p(FCPROJB, l), N, 4 * C, C, 0);
    }
    matmul_forward(a.logits, a.lnf, s.p(WTE), nullptr, N, C, Vp, 0);
    matmul_backward(a.dln, s.g(WTE), nullptr, s.scratch, a.logits, a.lnf, s.p(WTE), N, C, Vp, 0);
    // (fcproj's and attproj's bias gradients are summed by the LayerNorm backward, as in the trainer)
    for (int l = s.L - 1; l >= 0; l--) {
        matmul_backward(a.dmlp_hidden, s.g(FCPROJW, l), nullptr, s.scratch, a.dresidual[0], s.fch_gelu(l),
                        s.p(FCPROJW, l), N, 4 * C, C, 0, s.fch(l));
        matmul_backward(a.dln, s.g(FCW, l), s.g(FCB, l), s.scratch, a.dmlp_hidden, s.ln2(l), s.p(FCW, l), N, C,
                        4 * C, 0);
        matmul_backward(a.datty, s.g(ATTPROJW, l), nullptr, s.scratch, a.dresidual[0], s.atty(l),
                        s.p(ATTPROJW, l), N, C, C, 0);
        matmul_backward(a.dln, s.g(QKVW, l), s.g(QKVB, l), s.scratch, a.dqkv, s.ln1(l), s.p(QKVW, l), N, C,
                        3 * C, 0);
    }
}

void run_attention(StepBuffers& s) {
    for (int l = 0; l < s.L; l++) attention_forward(s.atty(l), s.lse(l), s.qkv(l), s.B, s.T, s.NH, s.HS, 0);
    for (int l = s.L - 1; l >= 0; l--)
        attention_backward(s.a.dqkv, s.scratch, s.a.datty, s.atty(l), s.lse(l), s.qkv(l), s.B, s.T, s.NH,
                           s.HS, 0);
}

// The first ln1 (every other LayerNorm is fused with the residual add before it), the backward of
// all 2L + 1 (each also summing the bias gradient of the projection added into its input, as the
// trainer's does), and with -r 2 the outputs recomputed in backward.
void run_layernorms(StepBuffers& s) {
    const int N = s.N, C = s.C, L = s.L;
    Activations& a = s.a;
    layernorm_forward(s.ln1(0), s.ln1_mean(0), s.ln1_rstd(0), a.encoded, s.p(LN1W, 0), s.p(LN1B, 0), N, C, 0);
    for (int l = 0; l < L; l++) {
        const floatX* x = l == 0 ? a.encoded : s.residual3(l - 1);
        residual_layernorm_forward(s.residual2(l), s.ln2(l), s.ln2_mean(l), s.ln2_rstd(l), x, a.branch,
                                   s.p(LN2W, l), s.p(LN2B, l), N, C, 0);
        if (l + 1 < L)
            residual_layernorm_forward(s.residual3(l), s.ln1(l + 1), s.ln1_mean(l + 1), s.ln1_rstd(l + 1),
                                       s.residual2(l), a.branch, s.p(LN1W, l + 1), s.p(LN1B, l + 1), N, C, 0);
        else
            residual_layernorm_forward(s.residual3(l), a.lnf, a.lnf_mean, a.lnf_rstd, s.residual2(l),
                                       a.branch, s.p(LNFW), s.p(LNFB), N, C, 0);
    }
    layernorm_backward(a.dresidual[0], s.g(LNFW), s.g(LNFB), s.scratch, a.dln, s.residual3(L - 1), s.p(LNFW),
                       a.lnf_mean, a.lnf_rstd, N, C, 0, s.g(FCPROJB, L - 1));
    const bool recompute = s.recompute >= 2;
    for (int l = L - 1; l >= 0; l--) {
        const floatX* x = l == 0 ? a.encoded : s.residual3(l - 1);
        if (recompute)
            layernorm_recompute(s.ln2(l), s.residual2(l), s.ln2_mean(l), s.ln2_rstd(l), s.p(LN2W, l),
                                s.p(LN2B, l), N, C, 0);
        layernorm_backward(a.dresidual[0], s.g(LN2W, l), s.g(LN2B, l), s.scratch, a.dln, s.residual2(l),
                           s.p(LN2W, l), s.ln2_mean(l), s.ln2_rstd(l), N, C, 0, s.g(ATTPROJB, l));
        if (recompute)
            layernorm_recompute(s.ln1(l), x, s.ln1_mean(l), s.ln1_rstd(l), s.p(LN1W, l), s.p(LN1B, l), N, C,
                                0);
        layernorm_backward(a.dresidual[0], s.g(LN1W, l), s.g(LN1B, l), s.scratch, a.dln, x, s.p(LN1W, l),
                           s.ln1_mean(l), s.ln1_rstd(l), N, C, 0, l > 0 ? s.g(FCPROJB, l - 1) : nullptr);
    }
}

// GELU's own passes: forward, and with -r ≥ 1 its recomputation in backward. (Its gradient is the
// fcproj GEMM's epilogue, timed with the GEMMs.)
void run_gelus(StepBuffers& s) {
    const size_t n = (size_t)s.N * 4 * s.C;
    for (int l = 0; l < s.L; l++) gelu_forward(s.fch_gelu(l), s.fch(l), n, 0);
    if (s.recompute >= 1)
        for (int l = s.L - 1; l >= 0; l--) gelu_forward(s.fch_gelu(l), s.fch(l), n, 0);
}

void run_classifier(StepBuffers& s) {
    fused_classifier(s.a.logits, s.a.losses, 1.0f / s.N, s.targets, s.N, s.c.vocab_size, s.Vp, true, 0);
}

// Forward, and backward with the host's grouping of positions by token and its upload.
void run_encoder(StepBuffers& s) {
    encoder_forward(s.a.encoded, s.inputs, s.p(WTE), s.p(WPE), s.B, s.T, s.C, 0);
    encoder_backward(s.g(WTE), s.g(WPE), s.a.dresidual[0], s.inputs_host.data(), s.B, s.T, s.C, s.scratch,
                     s.host_scratch, 0);
}

// The global norm, the verdict and clipping factor on the device, then AdamW with fp32 master weights
// over the runs GPUModel updates, in one launch reading the step's values from the device (as the
// trainer's update does: nothing read back).
void run_update(StepBuffers& s, const std::vector<OwnedRun>& runs) {
    if (!s.adamw.table) {  // planned once, in the warm-up run
        std::vector<AdamWRun> table;
        for (const OwnedRun& r : runs)
            table.push_back({s.params + r.device_offset, s.master + r.device_offset, s.m + r.device_offset,
                             s.v + r.device_offset, s.grads + r.device_offset, r.length, r.key_offset,
                             is_weight_matrix(r.tensor)});
        s.adamw = adamw_multi_tensor_plan(table.data(), (int)table.size());
        StepControl c{};
        c.adamw = adamw_device_step(3e-4f, 0.9f, 0.95f, 0.1f, 1.0f, 1, 7);
        c.guard.clip_norm = 1.0;
        CUDA_CHECK(cudaMemcpy(s.control, &c, sizeof c, cudaMemcpyHostToDevice));
    }
    CUDA_CHECK(cudaMemsetAsync(&s.control->totals.norm_squared, 0, sizeof(float), 0));
    global_norm_squared(&s.control->totals.norm_squared, s.grads, s.buckets.total, s.scratch, 0);
    step_guard(s.control, 0);
    adamw_update_multi_tensor(s.adamw, 0.9f, 0.95f, 1e-8f, &s.control->adamw, 0);
}

// What the step does besides kernels: zero the gradients and dresidual, upload the tokens, copy the
// losses back (and wait for them, as run_classifier does).
void run_memsets_and_copies(StepBuffers& s) {
    const size_t N = s.N;
    CUDA_CHECK(cudaMemsetAsync(s.grads, 0, s.buckets.total * sizeof(floatX), 0));
    CUDA_CHECK(cudaMemcpyAsync(s.inputs, s.inputs_host.data(), N * sizeof(int), cudaMemcpyHostToDevice, 0));
    CUDA_CHECK(cudaMemcpyAsync(s.targets, s.inputs_host.data(), N * sizeof(int), cudaMemcpyHostToDevice, 0));
    CUDA_CHECK(cudaMemsetAsync(s.a.dresidual[0], 0, N * s.C * sizeof(floatX), 0));
    s.losses_host.resize(N);
    CUDA_CHECK(
        cudaMemcpyAsync(s.losses_host.data(), s.a.losses, N * sizeof(float), cudaMemcpyDeviceToHost, 0));
    CUDA_CHECK(cudaStreamSynchronize(0));
}

// One op class: its calls of one step, how many launch-function calls that is, and its work: FLOPs
// (rated in TFLOP/s against the GEMM rate) or the bytes it must move at least (rated in GB/s
// against the copy bandwidth), counted as the kernels' headers count them.
struct OpClass {
    std::string name;
    int calls;
    double flops, bytes;
    std::function<void()> run;
};

std::vector<OpClass> op_classes(StepBuffers& s) {
    const int L = s.L, C = s.C, N = s.N, T = s.T;
    const double n = N, S = sizeof(floatX), E = n * C;  // E: elements of one (N, C) activation
    const bool recompute_gelu = s.recompute >= 1, recompute_ln = s.recompute >= 2;

    // LayerNorm bytes per call (kernels/layernorm.h): forward reads E and writes E values and mean,
    // rstd; the residual-fused forward moves twice the values; backward reads dout, inp, dinp and
    // writes dinp; recomputation reads the input and writes the output.
    const double ln_forward = 2 * E * S + 8 * n, residual_ln_forward = 4 * E * S + 8 * n;
    const double ln_backward = 4 * E * S + 8 * n, ln_recompute = 2 * E * S + 8 * n;
    const int gelu_calls = L * (recompute_gelu ? 2 : 1);
    // Encoder: forward reads token ids, wte and wpe rows and writes E values; backward reads dout
    // twice and reads and writes the touched dwte rows (U distinct tokens) and T dwpe rows.
    std::vector<int> sorted(s.inputs_host);
    std::sort(sorted.begin(), sorted.end());
    const double distinct = (double)(std::unique(sorted.begin(), sorted.end()) - sorted.begin());
    const double encoder_bytes = (4 * n + 3 * E * S) + (2 * E * S + 2 * distinct * C * S + 2.0 * T * C * S);
    const std::vector<OwnedRun> runs = owned_runs(s.buckets, 0, false);
    size_t updated = 0;
    for (const OwnedRun& r : runs) updated += r.length;

    return {
        {"GEMMs (fwd+bwd, incl. logits)", 2 * (4 * L + 1), 6.0 * n * (12.0 * C * C * L + (double)C * s.Vp), 0,
         [&s] { run_gemms(s); }},
        // kernels/attention.h's count: forward 2·B·NH·T²·HS, backward 2.5 times that.
        {"attention (fwd+bwd)", 2 * L, 7.0 * s.B * s.NH * (double)T * T * s.HS * L, 0,
         [&s] { run_attention(s); }},
        {"LayerNorm + residual", 1 + 2 * L + (2 * L + 1) + (recompute_ln ? 2 * L : 0), 0,
         ln_forward + 2 * L * residual_ln_forward + (2 * L + 1) * ln_backward +
             (recompute_ln ? 2 * L * ln_recompute : 0),
         [&s] { run_layernorms(s); }},
        {"GELU (fwd, recompute)", gelu_calls, 0, gelu_calls * 2 * 4 * E * S, [&s] { run_gelus(s); }},
        {"classifier (softmax + loss + dlogits)", 1, 0, classifier_bytes(N, s.Vp, true),
         [&s] { run_classifier(s); }},
        {"encoder (fwd+bwd)", 2, 0, encoder_bytes, [&s] { run_encoder(s); }},
        {"AdamW + global norm", 4, 0, adamw_bytes(updated, true) + s.buckets.total * S,
         [&s, runs] { run_update(s, runs); }},
        {"memsets + copies", 5, 0, s.buckets.total * S + E * S + 12 * n, [&s] { run_memsets_and_copies(s); }},
    };
}

void time_op_classes(const BenchOptions& o, const GPTConfig& c, const std::vector<int>& tokens,
                     double step_ms, double gemm_tflops, double copy_gbs) {
    matmul_setup(true);  // the whole-step model's context went with it
    StepBuffers buffers(c, o.B, o.T, o.recompute, tokens);
    const std::vector<OpClass> classes = op_classes(buffers);
    const int warmup = BENCH_ON_GPU ? 3 : 1, repeats = BENCH_ON_GPU ? 20 : 2;
    printf(
        "\n(b) op classes alone, at the step's shapes (median of %d runs after %d warm-up; each run is "
        "all of one step's calls of the class)\n",
        repeats, warmup);
    printf("%-38s %6s %10s %8s %16s  %s\n", "op class", "calls", "ms/step", "of step", "achieved",
           "of ceiling");
    double sum_ms = 0;
    for (const OpClass& k : classes) {
        const double ms = time_median_ms(k.run, warmup, repeats);
        sum_ms += ms;
        std::string achieved = "-", share = "";
        if (k.flops > 0) {
            const double tflops = k.flops / (ms * 1e-3) / 1e12;
            achieved = strprintf("%.1f TFLOP/s", tflops);
            if (BENCH_ON_GPU) share = strprintf("%.1f%% of bf16 GEMM", 100 * tflops / gemm_tflops);
        } else if (k.bytes > 0) {
            const double gbs = k.bytes / (ms * 1e-3) / 1e9;
            achieved = strprintf("%.1f GB/s", gbs);
            if (BENCH_ON_GPU) share = strprintf("%.1f%% of copy", 100 * gbs / copy_gbs);
        }
        printf("%-38s %6d %10.3f %7.1f%% %16s  %s\n", k.name.c_str(), k.calls, ms, 100 * ms / step_ms,
               achieved.c_str(), share.c_str());
    }
    printf("%-38s %6s %10.3f %7.1f%%\n", "sum of the classes", "", sum_ms, 100 * sum_ms / step_ms);
    printf("%-38s %6s %10.3f %7.1f%%\n", "whole step (median of (a))", "", step_ms, 100.0);
    printf("%-38s %6s %10.3f %7.1f%%\n", "difference: launch gaps, syncs, host", "", step_ms - sum_ms,
           100 * (step_ms - sum_ms) / step_ms);
    if (!BENCH_ON_GPU) printf("(emulated: these times are the emulator's on the CPU, not GPU figures)\n");
    CUDA_CHECK(cudaDeviceSynchronize());
    report_pass(true, strprintf("op classes: %zu classes ran at the step's shapes", classes.size()));
    matmul_teardown();
}

int run(int argc, char** argv) {
    const BenchOptions o = parse_options(argc, argv);
    set_attention_kernel(o.attention_kernel.c_str());  // also for the op-class timings
    GPTConfig c;
    if (is_model_descriptor(o.model))
        c = config_from_descriptor(o.model);
    else
        fail("--model: '%s' is not a model descriptor (d12, gpt2:dN, custom:L2:C64:H2:T64, ...)",
             o.model.c_str());
    validate_config(c, "--model");
    if (o.T > c.max_seq_len) fail("-t %d exceeds the model's maximum sequence length %d", o.T, c.max_seq_len);

    double gemm_tflops = 0, copy_gbs = 0;
    if (BENCH_ON_GPU) {
        int devices = 0;
        if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
            cudaGetLastError();
            printf("SKIPPED bench_step (no CUDA device)\n");
            return 0;
        }
        print_device_header();
        gemm_tflops = measure_bf16_gemm_tflops();
        copy_gbs = measure_copy_bandwidth_gbs();
        printf("ceilings: bf16 GEMM (cuBLASLt, 8192^3) %.1f TFLOP/s; device copy %.1f GB/s\n", gemm_tflops,
               copy_gbs);
    } else {
        printf("emulated build: a smoke test of every call at its shapes; no GPU figures\n");
    }
    printf("model: %s (%s), %zu parameters; B=%d T=%d, -r %d\n", o.model.c_str(), describe_config(c).c_str(),
           param_layout(c).total, o.B, o.T, o.recompute);

    const WholeStep whole = time_whole_steps(o, c, gemm_tflops);
    if (!o.whole_step_only) {
        std::vector<int> inputs, targets;
        make_batch(o, c, &inputs, &targets);
        time_op_classes(o, c, inputs, whole.median_ms, gemm_tflops, copy_gbs);
    }
    printf(all_passed ? "bench_step: all checks passed\n" : "bench_step: SOME CHECKS FAILED\n");
    return all_passed ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const InputError& e) {
        fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}

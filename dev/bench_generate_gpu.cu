// Benchmark of generation on the GPU: the time of one generated token through the key/value cache
// (gpu/gpt_decode.h: one position through the forward's kernels plus attention over the cache) and
// by recomputation (GPUModel's forward over the whole prefix, gpu/gpu_model.h, then the last position's
// logits: what the samples cost without a cache), at prefixes of 1, 256 and 1024 tokens (and the
// model's maximum, if shorter), with the speed-up. Each token's time includes copying its logits to
// the host, as a sampler needs them. Medians of repeated runs after a warm-up.
// Usage: dev/bin/bench_generate_gpu [model descriptor]   (default d12, GPT-2 124M)
// Built through the emulator it runs too (slowly: use a tiny model, e.g. custom:L2:C64:H2:T64), but
// only the nvcc build's figures are GPU figures.
#include "gpu/gpu_model.h"
#include "gpu/memory_plan.h"

#include <chrono>

#include "base/gpt_init.h"
#include "base/model_descriptor.h"
#include "base/rng.h"
#include "gpu/gpt_decode.h"

template <typename Fn>
static double median_ms(int reps, Fn&& fn) {
    fn();  // warm-up: cuBLASLt's algorithm choice for the shape, caches
    std::vector<double> ms;
    for (int r = 0; r < reps; r++) {
        const auto start = std::chrono::steady_clock::now();
        fn();
        ms.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

static int run(const std::string& descriptor) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        printf("SKIPPED bench_generate_gpu (no CUDA device)\n");
        return 0;
    }
    const GPTConfig c = config_from_descriptor(descriptor);
    const int maxT = c.max_seq_len;
    std::vector<float> weights(param_layout(c).total);
    gpt_init_params(c, 1, weights.data());
    std::vector<int> tokens(maxT);
    Rng rng(2);
    for (int& t : tokens) t = (int)rng.below(c.vocab_size);

    TrainOptions opt;
    opt.batch_size = 1, opt.seq_len = maxT, opt.recompute = 0, opt.fp32_master = 0;
    GPUModel model(gpt2_model(c), opt);
    model.set_working_weights(weights);
    // The decoder reads its own copy of the same working weights (the model keeps its own private).
    const ParamLayout layout = param_layout(c);
    std::vector<floatX> narrow(weights.begin(), weights.end());
    floatX* device_weights = nullptr;
    CUDA_CHECK(cudaMalloc(&device_weights, narrow.size() * sizeof(floatX)));
    CUDA_CHECK(
        cudaMemcpy(device_weights, narrow.data(), narrow.size() * sizeof(floatX), cudaMemcpyHostToDevice));
    const DecodeWeights w = [&](int t, int l) -> const floatX* {
        const bool per_layer = t >= LN1W && t <= FCPROJB;
        return device_weights + layout.offset[t] + (per_layer ? l * layout.size[t] / c.num_layers : 0);
    };
    GPUDecoder decoder(c, maxT, 0);
    std::vector<float> logits(c.vocab_size);

    printf("model %s (%s), %s\n", descriptor.c_str(), describe_config(c).c_str(),
           model.description().c_str());
    printf("%8s %22s %22s %10s\n", "prefix", "recompute ms/token", "kv cache ms/token", "speed-up");
    std::vector<int> prefixes;
    for (int n : {1, 256, 1024})
        if (n < maxT) prefixes.push_back(n);
    prefixes.push_back(maxT);
    for (int n : prefixes) {
        // The cache holding the first n-1 tokens; each timed step appends token n and is undone.
        decoder.truncate(0);
        for (int i = 0; i < n - 1; i++) decoder.step(tokens[i], w, logits.data());
        const double cached = median_ms(21, [&] {
            decoder.truncate(n - 1);
            decoder.step(tokens[n - 1], w, logits.data());
        });
        const double full = median_ms(11, [&] {
            model.forward(tokens.data(), nullptr, 1, n);
            model.logits_at(n - 1, logits.data());
        });
        printf("%8d %22.3f %22.3f %9.1fx\n", n, full, cached, full / cached);
        fflush(stdout);
    }
    CUDA_CHECK(cudaFree(device_weights));
    return 0;
}

int main(int argc, char** argv) {
    try {
        return run(argc > 1 ? argv[1] : "d12");
    } catch (const InputError& e) {
        fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}

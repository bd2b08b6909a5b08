// Benchmark of ./generate's key/value cache: the time of one generated token with the cache
// (cpu/gpt_decode.h: one row of every product plus attention over the cached keys and values) and
// without it (the full forward pass over the prefix, cpu/gpt_cpu.h, which --kv-cache 0 runs at every
// token), at prefixes of 1, 256 and 1024 tokens, and the speed-up. Medians of repeated runs.
// Usage: bench_generate [model descriptor]   (default custom:L4:C256:H4:T1024, GPT-2's vocabulary;
//                                            threads: OMP_NUM_THREADS)
// Figures measured with it: dev/RESULTS.md.
// The cached token's time hardly moves with the prefix: its cost is reading the weights once (the
// output layer, 50304 x 256, dominates at this size); attention over 1024 cached positions is
// 0.5M multiply-adds per layer.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "base/model_descriptor.h"
#include "cpu/gpt_cpu.h"
#include "cpu/gpt_decode.h"

template <typename Fn>
static double median_ms(int reps, Fn&& fn) {
    std::vector<double> ms;
    for (int r = 0; r < reps; r++) {
        const double start = omp_get_wtime();
        fn();
        ms.push_back(1e3 * (omp_get_wtime() - start));
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

int main(int argc, char** argv) {
    const std::string descriptor = argc > 1 ? argv[1] : "custom:L4:C256:H4:T1024";
    const GPTConfig c = config_from_descriptor(descriptor);
    const int maxT = c.max_seq_len;
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<float> params(param_layout(c).total);
    for (float& p : params) p = normal(rng);
    std::vector<int> tokens(maxT);
    for (int& t : tokens) t = (int)(rng() % c.vocab_size);
    std::vector<float> logits(c.vocab_size);

    GPTDecoder* decoder = gpt_decoder_create(c, maxT);
    GPTCpu* model = gpt_cpu_create(c, 1, maxT);
    gpt_cpu_params(model) = params;
    printf("model %s (%s), %d threads\n", descriptor.c_str(), describe_config(c).c_str(),
           omp_get_max_threads());
    printf("%8s %22s %22s %10s\n", "prefix", "recompute ms/token", "kv cache ms/token", "speed-up");
    for (int n : {1, 256, 1024}) {
        if (n > maxT) continue;
        // The cache holding the first n-1 tokens; each timed step appends token n and is undone.
        gpt_decoder_truncate(decoder, 0);
        for (int i = 0; i < n - 1; i++) gpt_decoder_step(decoder, params.data(), tokens[i], logits.data());
        const double cached = median_ms(21, [&] {
            gpt_decoder_truncate(decoder, n - 1);
            gpt_decoder_step(decoder, params.data(), tokens[n - 1], logits.data());
        });
        const double full = median_ms(n >= 1024 ? 3 : 5, [&] {
            gpt_cpu_forward(model, tokens.data(), nullptr, 1, n);
        });
        printf("%8d %22.2f %22.2f %9.1fx\n", n, full, cached, full / cached);
        fflush(stdout);
    }
    gpt_cpu_free(model);
    gpt_decoder_free(decoder);
    return 0;
}

// The GPU key/value-cache decoder (gpu/gpt_decode.h; its attention kernel has its own test,
// test/kernels/test_decode_attention.cu), run through the emulator (bf16 and fp32 builds) and, built
// by nvcc, on a GPU:
//   - the decoder's logits at every length against the fp32 CPU decoder (cpu/gpt_decode.h) and
//     against the GPU model's own forward pass over the whole prefix (GPUModel of gpu/gpu_model.h);
//   - sampling through the cache (train/cached_sampling.h, including its restart once the window
//     slides) and by recomputation, in lockstep for several seeds, temperatures and top-k: in fp32
//     every token agrees; in bf16 the two paths' distributions stay within 0.05 in total variation
//     and a token may differ only where that distance (or a near tie) explains it;
//   - the GPU model's decode_reset/decode_next, once it offers them, the same way.
#include "gpu/gpu_model.h"
#include "gpu/memory_plan.h"

#include <functional>
#include <random>

#include "base/rng.h"
#include "cpu/gpt_decode.h"
#include "gpu/gpt_decode.h"
#include "test/kernels/kernel_test.h"
#include "test/gpu/decode_cache_check.h"
#include "train/cached_sampling.h"
#include "train/sampling.h"

namespace {

// The decoder's logits against the CPU decoder's and the forward pass's, ‖·‖ relative, at every length:
// fp32 1e-5 (measured ≤ 1.1e-6). In bf16 both GPU paths round every activation, and the forward pass's
// flash attention also rounds its probabilities, so they differ by bf16 rounding through the whole
// model: measured ≤ 1.4e-2 (3 layers); a cache row in the wrong place or a missing term is off by O(1).
// Sampling in bf16: the two paths' draw distributions within SAMPLING_DISTANCE in total variation.
#ifdef ENABLE_FP32
constexpr double DECODE_TOLERANCE = 1e-5;
#else
constexpr double DECODE_TOLERANCE = 2e-2;
constexpr double SAMPLING_DISTANCE = 0.05;
#endif

GPTConfig small_config() {  // GPT-2's vocabulary at a small width, head size 32
    GPTConfig c;
    c.max_seq_len = 24, c.vocab_size = 50257, c.padded_vocab_size = 50304;
    c.num_layers = 2, c.num_heads = 4, c.channels = 128;
    return c;
}
GPTConfig tiny_config() {  // for the many forwards of the sampling tests
    GPTConfig c;
    c.max_seq_len = 10, c.vocab_size = 500, c.padded_vocab_size = 512;
    c.num_layers = 2, c.num_heads = 2, c.channels = 64;
    return c;
}
GPTConfig odd_config() {  // 5 heads, a vocabulary not a multiple of 128
    GPTConfig c;
    c.max_seq_len = 40, c.vocab_size = 1000, c.padded_vocab_size = 1024;
    c.num_layers = 3, c.num_heads = 5, c.channels = 160;
    return c;
}

// Weights that make peaked next-token distributions (GPT-2's initialisation gives nearly uniform
// ones, where sampling would test little), rounded to floatX so that every model sees the same
// values; padded wte rows zero.
std::vector<float> sharp_weights(const GPTConfig& c, unsigned seed) {
    const ParamLayout layout = param_layout(c);
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.1f);
    std::vector<float> w(layout.total);
    for (float& v : w) v = normal(rng);
    for (size_t i = 0; i < layout.size[WTE]; i++) w[i] *= 3;  // logits of a few units
    for (int t : {LN1W, LN2W, LNFW})
        for (size_t i = 0; i < layout.size[t]; i++) w[layout.offset[t] + i] += 1.0f;
    std::fill(w.begin() + (size_t)c.vocab_size * c.channels, w.begin() + layout.size[WTE], 0.0f);
    return round_to_floatX(w);
}

// The weights on the device in ParamLayout order, and the decoder's view of them.
struct DeviceWeights {
    GPTConfig config;
    ParamLayout layout;
    floatX* base;
    DeviceWeights(const GPTConfig& c, const std::vector<float>& w)
        : config(c), layout(param_layout(c)), base(device_floatX(w)) {}
    ~DeviceWeights() { cudaFree(base); }
    DecodeWeights view() const {
        return [this](int t, int l) {
            const bool per_layer = t >= LN1W && t <= FCPROJB;
            return base + layout.offset[t] + (per_layer ? l * layout.size[t] / config.num_layers : 0);
        };
    }
};

TrainOptions options(int T) {
    TrainOptions opt;
    opt.batch_size = 1, opt.seq_len = T, opt.recompute = 0, opt.fp32_master = 0, opt.seed = 7;
    return opt;
}

// Logits of the last position of tokens, by the GPU model's forward pass over all of them.
std::vector<float> recomputed_logits(GPUModel& model, const std::vector<int>& tokens) {
    std::vector<float> logits(model.shape().vocab_size);
    model.forward(tokens.data(), nullptr, 1, (int)tokens.size());
    model.logits_at((int)tokens.size() - 1, logits.data());
    return logits;
}

}  // namespace

// ---- the decoder ----

// Steps the GPU decoder through tokens; at every length its logits against the CPU decoder's and
// against the GPU model's forward over the prefix.
void check_decoder(const GPTConfig& c, unsigned seed) {
    const std::vector<float> weights = sharp_weights(c, seed);
    const DeviceWeights device(c, weights);
    const int T = c.max_seq_len;
    const std::vector<int> tokens = random_tokens(T, c.vocab_size, seed);
    GPUModel model(gpt2_model(c), options(T));
    model.set_working_weights(weights);
    GPUDecoder gpu(c, T, 0);
    GPTDecoder* cpu = gpt_decoder_create(c, T);
    std::vector<float> logits(c.vocab_size), cpu_logits(c.vocab_size);
    double worst_cpu = 0, worst_forward = 0;
    for (int t = 0; t < T; t++) {
        gpu.step(tokens[t], device.view(), logits.data());
        gpt_decoder_step(cpu, weights.data(), tokens[t], cpu_logits.data());
        const std::vector<float> forward =
            recomputed_logits(model, std::vector<int>(tokens.begin(), tokens.begin() + t + 1));
        const double e_cpu = tst::rel_l2_error(logits.data(), cpu_logits.data(), c.vocab_size);
        const double e_forward = tst::rel_l2_error(logits.data(), forward.data(), c.vocab_size);
        CHECK_MSG(e_cpu <= DECODE_TOLERANCE && e_forward <= DECODE_TOLERANCE,
                  "length %d: relative error %.3g against the CPU decoder, %.3g against the forward "
                  "pass (" PRECISION_NAME ")",
                  t + 1, e_cpu, e_forward);
        worst_cpu = std::max(worst_cpu, e_cpu), worst_forward = std::max(worst_forward, e_forward);
    }
    CHECK(gpu.length() == T);
    gpt_decoder_free(cpu);
    printf("  L=%d C=%d NH=%d V=%d, %d tokens: worst relative error %.2g (CPU decoder), %.2g (forward)\n",
           c.num_layers, c.channels, c.num_heads, c.vocab_size, T, worst_cpu, worst_forward);
}

TEST(gpu_decoder_matches_cpu_decoder_and_forward) {
    check_decoder(odd_config(), 1);
    check_decoder(small_config(), 2);
}

TEST(gpu_decoder_truncates_and_refuses_bad_input) {
    const GPTConfig c = odd_config();
    const std::vector<float> weights = sharp_weights(c, 3);
    const DeviceWeights device(c, weights);
    GPUDecoder gpu(c, 8, 0);
    check_truncation_and_refusals(gpu, device.view(), c.vocab_size);
    try {
        GPUDecoder too_long(c, c.max_seq_len + 1, 0);
        CHECK_MSG(false, "a cache longer than the model's context was accepted");
    } catch (const InputError&) {
    }
}

// ---- sampling: through the cache and by recomputation, the same tokens ----

// What sample_token_top_k draws from: softmax(logits / temperature) over the top_k largest logits
// (all for 0), zero elsewhere.
std::vector<double> draw_distribution(const std::vector<float>& logits, double temperature, int top_k) {
    std::vector<float> sorted = logits;
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    const float cutoff = sorted[top_k > 0 ? top_k - 1 : sorted.size() - 1];
    std::vector<double> p(logits.size());
    double sum = 0;
    for (size_t i = 0; i < p.size(); i++)
        if (logits[i] >= cutoff) sum += p[i] = std::exp((logits[i] - sorted[0]) / temperature);
    for (double& x : p) x /= sum;
    return p;
}

// Samples through both paths in lockstep: at every step both give logits for the same tokens and
// draw with the same coin, and the sequence goes on with the recomputed draw. The draws must agree
// except where rounding decides: the two distributions differ by d in total variation, which moves
// every cumulative boundary by at most d, so the recomputed draw with a coin d away must already
// differ; or the two tokens' logits are within the largest logit difference (an order swapped by
// rounding). In the fp32 build every draw must agree.
struct LockstepResult {
    int draws = 0, disagreements = 0;
    double worst_distance = 0;  // total variation between the two paths' draw distributions
};
using NextLogits = std::function<void(const std::vector<int>&, float*)>;
LockstepResult sample_in_lockstep(const NextLogits& cached, const NextLogits& recomputed, int V, int count,
                                  uint64_t seed, double temperature, int top_k) {
    Rng rng(seed);
    std::vector<int> tokens = {V - 1};  // end-of-text
    std::vector<float> a(V), b(V);
    LockstepResult r;
    for (int i = 0; i < count; i++, r.draws++) {
        cached(tokens, a.data());
        recomputed(tokens, b.data());
        const double coin = rng.uniform();
        const int x = sample_token_top_k(a.data(), V, temperature, top_k, coin);
        const int y = sample_token_top_k(b.data(), V, temperature, top_k, coin);
        double largest = 0, distance = 0;
        for (int v = 0; v < V; v++) largest = std::max(largest, (double)std::fabs(a[v] - b[v]));
        if (temperature > 0) {
            const std::vector<double> p = draw_distribution(a, temperature, top_k),
                                      q = draw_distribution(b, temperature, top_k);
            for (int v = 0; v < V; v++) distance += 0.5 * std::fabs(p[v] - q[v]);
        }
        r.worst_distance = std::max(r.worst_distance, distance);
        if (x != y) {
            const bool near_tie = std::fabs(b[x] - b[y]) <= largest;
            const bool near_boundary =
                temperature > 0 &&
                sample_token_top_k(b.data(), V, temperature, top_k, std::max(0.0, coin - distance)) !=
                    sample_token_top_k(b.data(), V, temperature, top_k, std::min(coin + distance, 1 - 1e-12));
            CHECK_MSG(near_tie || near_boundary,
                      "draw %d (temperature %.1f, top-k %d): token %d through the cache, %d recomputed, "
                      "with the coin %.4f more than the distributions' distance %.2g from a boundary",
                      i, temperature, top_k, x, y, coin, distance);
            r.disagreements++;
        }
        tokens.push_back(y);
    }
    return r;
}

// By recomputation: the GPU model's forward over the window's tokens.
NextLogits recompute_with(GPUModel& model, int window) {
    return [&model, window](const std::vector<int>& tokens, float* logits) {
        const int start = std::max(0, (int)tokens.size() - window);
        const std::vector<float> l =
            recomputed_logits(model, std::vector<int>(tokens.begin() + start, tokens.end()));
        std::copy(l.begin(), l.end(), logits);
    };
}

// Lockstep samples for several seeds, temperatures and top-k; checks how often rounding decided.
void check_sampling(const NextLogits& cached, const NextLogits& recomputed, int V, int count) {
    LockstepResult all;
    for (const uint64_t seed : {1, 2, 3})
        for (const auto& [temperature, top_k] :
             std::vector<std::pair<double, int>>{{1.0, 0}, {0.7, 20}, {0.0, 0}}) {
            const LockstepResult r =
                sample_in_lockstep(cached, recomputed, V, count, seed, temperature, top_k);
            all.draws += r.draws, all.disagreements += r.disagreements;
            all.worst_distance = std::max(all.worst_distance, r.worst_distance);
        }
    printf("  %d draws, %d decided by rounding; worst total variation between the paths %.2g\n", all.draws,
           all.disagreements, all.worst_distance);
#ifdef ENABLE_FP32
    CHECK_MSG(all.disagreements == 0, "%d of %d draws differ (fp32)", all.disagreements, all.draws);
#else
    CHECK_MSG(all.worst_distance <= SAMPLING_DISTANCE && all.disagreements * 5 <= all.draws,
              "total variation up to %.3g, %d of %d draws differ (bf16)", all.worst_distance,
              all.disagreements, all.draws);
#endif
}

TEST(sampling_through_the_cache_gives_the_recomputed_tokens) {
    const GPTConfig c = tiny_config();
    const int window = c.max_seq_len;  // 14 draws: the window slides for the last 4 (the cache restarts)
    const std::vector<float> weights = sharp_weights(c, 4);
    const DeviceWeights device(c, weights);
    GPUModel model(gpt2_model(c), options(window));
    model.set_working_weights(weights);
    GPUDecoder decoder(c, window, 0);
    CachedSampler sampler(
        window, [&] { decoder.truncate(0); },
        [&](int token, float* logits) { decoder.step(token, device.view(), logits); });
    check_sampling([&](const std::vector<int>& t, float* l) { sampler.next_logits(t, l); },
                   recompute_with(model, window), c.vocab_size, 14);
}

// The GPU model's own decode path (TrainModel::decode_reset / decode_next), which the training loop's
// samples use when supports_decode() says so: logits against its forward pass, then sampling.
TEST(gpu_model_decodes_through_the_cache) {
    const GPTConfig c = tiny_config();
    const int T = c.max_seq_len;
    const std::vector<float> weights = sharp_weights(c, 5);
    GPUModel model(gpt2_model(c), options(T));
    model.set_working_weights(weights);
    TrainModel& m = model;
    if (!m.supports_decode()) SKIP("GPUModel does not offer decode_reset/decode_next");
    const std::vector<int> tokens = random_tokens(T, c.vocab_size, 5);
    std::vector<float> logits(c.vocab_size);
    m.decode_reset(T);
    for (int t = 0; t < T; t++) {
        m.decode_next(tokens[t], logits.data());
        const std::vector<float> forward =
            recomputed_logits(model, std::vector<int>(tokens.begin(), tokens.begin() + t + 1));
        CHECK_CLOSE(logits, forward, DECODE_TOLERANCE, tst::format("length %d", t + 1).c_str());
    }
    CachedSampler sampler(
        T, [&] { m.decode_reset(T); }, [&](int token, float* l) { m.decode_next(token, l); });
    check_sampling([&](const std::vector<int>& t, float* l) { sampler.next_logits(t, l); },
                   recompute_with(model, T), c.vocab_size, T + 4);
}

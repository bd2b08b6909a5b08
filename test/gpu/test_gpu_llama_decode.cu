// Llama 3's GPU key/value-cache decoder (gpu/llama_decode.h), run through the emulator (bf16 and fp32
// builds) and, built by nvcc, on a GPU:
//   - its logits at every length against the fp32 CPU Llama decoder (cpu/llama_decode.h) and
//     against the GPU model's own forward pass over the whole prefix (GPUModel with
//     gpu/llama_layers.h), with grouped-query attention (4 query heads on 2 key/value heads, and 6 on
//     2) and Llama 3.1's RoPE scaling, over weights uploaded in the model file's layout
//     (gpu/llama_gpu_generate.h's LlamaDeviceWeights, what ./generate runs on);
//   - truncation, a full cache and tokens outside the vocabulary;
//   - the GPU model's decode_reset/decode_next (what the training loop's samples use) for Llama 3,
//     against its forward pass.
#include "gpu/gpu_model.h"

#include <random>

#include "cpu/llama_decode.h"
#include "gpu/llama_decode.h"
#include "gpu/llama_gpu_generate.h"
#include "test/kernels/kernel_test.h"
#include "test/gpu/decode_cache_check.h"

namespace {

// The decoder's logits against the CPU decoder's and the forward pass's, ‖·‖ relative, at every
// length. fp32: 1e-5 (measured ≤ 2.2e-6: the products' and reductions' orders differ, nothing else).
// bf16: both GPU paths round every activation to bf16 (and the forward pass's flash attention its
// probabilities too) and the CPU decoder rounds none, so they differ by bf16 rounding through the
// whole model (each rounding up to 2⁻⁹ relative): measured ≤ 2.7e-2 (3 layers, 30 positions), a little more
// than GPT-2's decoder (test_gpu_decode.cu) as RoPE, SwiGLU's product and the RMSNorm gains round
// too. A cache row in the wrong place, a position rotated by another's angle or a query head reading
// the wrong key/value head is off by O(1).
#ifdef ENABLE_FP32
constexpr double DECODE_TOLERANCE = 1e-5;
#else
constexpr double DECODE_TOLERANCE = 4e-2;
#endif

// 4 query heads sharing 2 key/value heads (head size 32); and 6 query heads on 2 (head size 32), an
// MLP width and a vocabulary that are not powers of two, three layers, Llama 3.1's RoPE scaling with a
// short original context (64), so that its three bands of frequencies (kept, divided by the factor,
// and blended) all occur, as in test_gpu_llama.cu.
LlamaConfig small_config() {
    LlamaConfig c;
    c.num_layers = 2, c.channels = 128, c.num_heads = 4, c.num_kv_heads = 2;
    c.ffn_channels = 256, c.vocab_size = 512, c.max_seq_len = 20;
    return c;
}
LlamaConfig odd_config() {
    LlamaConfig c;
    c.num_layers = 3, c.channels = 192, c.num_heads = 6, c.num_kv_heads = 2;
    c.ffn_channels = 200, c.vocab_size = 997, c.max_seq_len = 30;
    c.rope_theta = 10000.0;
    c.rope_scaling.enabled = true;
    c.rope_scaling.factor = 4.0;
    c.rope_scaling.original_max_position = 64;
    return c;
}

// Weights that make peaked next-token distributions (logits of a few units): matrices normal with
// σ 0.1, lm_head 0.3; the norms' gains off 1 (so that their use is tested too). Rounded to floatX so
// that every model sees the same values.
std::vector<float> sharp_weights(const LlamaConfig& c, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.1f);
    std::vector<float> w(llama_param_count(c));
    for (float& v : w) v = normal(rng);
    const std::vector<LlamaTensor> tensors = llama_tensors(c);
    for (const LlamaTensor& t : tensors)
        for (size_t i = 0; i < t.size() && !t.is_matrix(); i++)
            w[t.offset + i] = 1.0f + 0.25f * std::sin(0.7f * (float)i + t.layer);
    const LlamaTensor& head = tensors[llama_lm_head_index(c)];
    for (size_t i = 0; i < head.size(); i++) w[head.offset + i] *= 3;
    return round_to_floatX(w);
}

TrainOptions options(int T) {
    TrainOptions opt;
    opt.batch_size = 1, opt.seq_len = T, opt.recompute = 0, opt.fp32_master = 1, opt.tf32 = 0, opt.seed = 7;
    return opt;
}

// Logits of the last position of tokens, by the GPU model's forward pass over all of them.
std::vector<float> recomputed_logits(GPUModel& model, const std::vector<int>& tokens) {
    std::vector<float> logits(model_vocab_size(model.model_config()));
    model.forward(tokens.data(), nullptr, 1, (int)tokens.size());
    model.logits_at((int)tokens.size() - 1, logits.data());
    return logits;
}

// Steps the GPU decoder through tokens; at every length its logits against the CPU decoder's and
// against the GPU model's forward over the prefix.
void check_decoder(const LlamaConfig& c, unsigned seed) {
    const std::vector<float> weights = sharp_weights(c, seed);
    const int T = c.max_seq_len, V = c.vocab_size;
    const std::vector<int> tokens = random_tokens(T, V, seed);
    GPUModel model(llama3_model(c), options(T));
    model.set_working_weights(weights);
    const LlamaDeviceWeights device(c, weights);
    LlamaGPUDecoder gpu(c, T, 0);
    LlamaDecoder* cpu = llama_decoder_create(c, T);
    std::vector<float> logits(V), cpu_logits(V);
    double worst_cpu = 0, worst_forward = 0;
    for (int t = 0; t < T; t++) {
        gpu.step(tokens[t], device.view(), logits.data());
        llama_decoder_step(cpu, weights.data(), tokens[t], cpu_logits.data());
        const std::vector<float> forward =
            recomputed_logits(model, std::vector<int>(tokens.begin(), tokens.begin() + t + 1));
        const double e_cpu = tst::rel_l2_error(logits.data(), cpu_logits.data(), V);
        const double e_forward = tst::rel_l2_error(logits.data(), forward.data(), V);
        CHECK_MSG(e_cpu <= DECODE_TOLERANCE && e_forward <= DECODE_TOLERANCE,
                  "length %d: relative error %.3g against the CPU decoder, %.3g against the forward "
                  "pass (" PRECISION_NAME ")",
                  t + 1, e_cpu, e_forward);
        worst_cpu = std::max(worst_cpu, e_cpu), worst_forward = std::max(worst_forward, e_forward);
    }
    CHECK(gpu.length() == T);
    llama_decoder_free(cpu);
    printf("  L=%d C=%d H=%d KV=%d F=%d V=%d%s, %d tokens: worst relative error %.2g (CPU decoder), %.2g "
           "(forward)\n",
           c.num_layers, c.channels, c.num_heads, c.num_kv_heads, c.ffn_channels, V,
           c.rope_scaling.enabled ? " scaled RoPE" : "", T, worst_cpu, worst_forward);
}

}  // namespace

TEST(llama_gpu_decoder_matches_cpu_decoder_and_forward) {
    check_decoder(small_config(), 1);
    check_decoder(odd_config(), 2);
}

TEST(llama_gpu_decoder_truncates_and_refuses_bad_input) {
    const LlamaConfig c = odd_config();
    const std::vector<float> weights = sharp_weights(c, 3);
    matmul_setup();
    {
        const LlamaDeviceWeights device(c, weights);
        LlamaGPUDecoder gpu(c, 8, 0);
        check_truncation_and_refusals(gpu, device.view(), c.vocab_size);
    }
    // Shapes it cannot take: longer than the model's context, an MLP width its kernels cannot split.
    LlamaConfig narrow = c;
    narrow.ffn_channels = 100;
    CHECK(LlamaGPUDecoder::shape_error(c, c.max_seq_len + 1) != "");
    CHECK(LlamaGPUDecoder::shape_error(narrow, 8) != "");
    CHECK(LlamaGPUDecoder::shape_error(c, c.max_seq_len) == "");
    try {
        LlamaGPUDecoder::device_bytes(narrow, 8);
        CHECK_MSG(false, "an MLP width of 100 was accepted");
    } catch (const InputError& e) {
        CHECK_MSG(strstr(e.what(), "must be multiples of 8") && !strchr(e.what(), '\n'), "message: %s", e.what());
    }
    matmul_teardown();
}

// The GPU model's own decode path for Llama 3 (TrainModel::decode_reset / decode_next), which the
// training loop's samples use when supports_decode() says so: logits against its forward pass at every
// length, and the same logits, bit for bit, once the cache is reset and refilled.
TEST(gpu_model_decodes_llama_through_the_cache) {
    const LlamaConfig c = small_config();
    const int T = c.max_seq_len, V = c.vocab_size;
    const std::vector<float> weights = sharp_weights(c, 5);
    GPUModel model(llama3_model(c), options(T));
    model.set_working_weights(weights);
    TrainModel& m = model;
    CHECK_MSG(m.supports_decode(), "GPUModel does not offer decode_reset/decode_next for Llama 3");
    const std::vector<int> tokens = random_tokens(T, V, 5);
    std::vector<float> logits(V), last(V);
    m.decode_reset(T);
    for (int t = 0; t < T; t++) {
        m.decode_next(tokens[t], logits.data());
        const std::vector<float> forward =
            recomputed_logits(model, std::vector<int>(tokens.begin(), tokens.begin() + t + 1));
        CHECK_CLOSE(logits, forward, DECODE_TOLERANCE, tst::format("length %d", t + 1).c_str());
    }
    m.decode_reset(T / 2);  // a shorter window reuses the cache
    for (int t = 0; t < T; t++) m.decode_next(tokens[t], last.data());
    CHECK(bitwise_equal(logits.data(), last.data(), logits.size() * sizeof(float)));
}

// The Llama 3 key/value-cache decoder (cpu/llama_decode.h) against the CPU model's full forward
// pass (cpu/llama_cpu.h): fed a sequence one token at a time, the decoder's logits after token i
// must equal row i of one forward pass over the whole sequence, at every position up to maxT, for a
// grouped-query shape, an odd one (three query heads on one key/value head, odd V, Llama 3.1's RoPE
// scaling with a short original context, so that the scaling moves frequencies) and a multi-head
// one (KV = H); truncating and refilling the cache gives the same logits bit for bit; a full cache,
// a token outside the vocabulary and an impossible capacity are std::invalid_argument.
//
// The tolerance: the two paths compute the same sums in different orders (the decoder's products are
// one-row GEMMs, which OpenBLAS runs with other kernels than the whole sequence's; its attention
// reads the cache in its own layout), so each logit carries a few fp32 roundings (6e-8 relative)
// per op, accumulated over the layers; 3e-5 of the logits' largest magnitude leaves room for that
// and none for a wrong position, head mapping or rotation, which change logits at order 1e-2 or more.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>

#include "cpu/llama_cpu.h"
#include "cpu/llama_decode.h"
#include "cpu/rope.h"
#include "test/test.h"

constexpr double RELATIVE_TOLERANCE = 3e-5;

// Matrices normal with σ 0.3 (logits of order 1), RMSNorm weights near 1.
static std::vector<float> random_params(const LlamaConfig& c, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.3f);
    std::vector<float> p(llama_param_count(c));
    for (float& v : p) v = normal(rng);
    for (const LlamaTensor& t : llama_tensors(c))
        if (!t.is_matrix())
            for (size_t i = 0; i < t.size(); i++) p[t.offset + i] = 1.0f + 0.3f * p[t.offset + i];
    return p;
}

static LlamaConfig gqa_config() {  // L2 C32 H4 KV2 F48 V61 maxT16
    LlamaConfig c;
    c.num_layers = 2, c.channels = 32, c.num_heads = 4, c.num_kv_heads = 2;
    c.ffn_channels = 48, c.vocab_size = 61, c.max_seq_len = 16;
    return c;
}

// Three query heads of 6 channels on one key/value head, V 37, θ 100 and Llama 3.1's scaling by 4
// with an original context of 64: the three wavelengths are 6, 29 and 135 positions, so the scaling
// keeps the first, blends the second and divides the third.
static LlamaConfig odd_config() {
    LlamaConfig c;
    c.num_layers = 3, c.channels = 18, c.num_heads = 3, c.num_kv_heads = 1;
    c.ffn_channels = 26, c.vocab_size = 37, c.max_seq_len = 21;
    c.rope_theta = 100;
    c.rope_scaling.enabled = true;
    c.rope_scaling.factor = 4;
    c.rope_scaling.original_max_position = 64;
    return c;
}

static LlamaConfig multi_head_config() {  // KV = H: every query head has its own key/value head
    LlamaConfig c;
    c.num_layers = 1, c.channels = 16, c.num_heads = 2, c.num_kv_heads = 2;
    c.ffn_channels = 20, c.vocab_size = 29, c.max_seq_len = 12;
    return c;
}

struct Comparison {
    double max_diff = 0, max_logit = 0;
    size_t differing = 0, compared = 0;
};

// Decodes n random tokens (n = maxT) one at a time and compares each step's logits with the
// matching row of one full forward pass over all n.
static Comparison compare_with_forward(const LlamaConfig& c, unsigned seed) {
    const int n = c.max_seq_len, V = c.vocab_size;
    const std::vector<float> params = random_params(c, seed);
    std::mt19937 rng(seed + 100);
    std::vector<int> tokens(n);
    for (int& t : tokens) t = (int)(rng() % V);
    LlamaCpu* model = llama_cpu_create(c, 1, n);
    llama_cpu_params(model) = params;
    llama_cpu_forward(model, tokens.data(), nullptr, 1, n);
    const float* full = llama_cpu_logits(model);
    LlamaDecoder* decoder = llama_decoder_create(c, n);
    std::vector<float> logits(V);
    Comparison r;
    for (int i = 0; i < n; i++) {
        llama_decoder_step(decoder, params.data(), tokens[i], logits.data());
        const float* row = full + (size_t)i * V;
        for (int v = 0; v < V; v++) {
            r.max_diff = std::max(r.max_diff, (double)std::fabs(logits[v] - row[v]));
            r.max_logit = std::max(r.max_logit, (double)std::fabs(row[v]));
            r.differing += memcmp(&logits[v], &row[v], 4) != 0;
            r.compared++;
        }
    }
    CHECK(llama_decoder_length(decoder) == n && llama_decoder_capacity(decoder) == n);
    llama_decoder_free(decoder);
    llama_cpu_free(model);
    printf("  L=%d C=%d H=%d KV=%d F=%d V=%d, %d positions: %zu of %zu logits differ bitwise, "
           "max |diff| %.3g (largest |logit| %.3g)\n",
           c.num_layers, c.channels, c.num_heads, c.num_kv_heads, c.ffn_channels, V, n, r.differing,
           r.compared, r.max_diff, r.max_logit);
    return r;
}

static void check_matches_forward(const LlamaConfig& c, unsigned seed) {
    const Comparison r = compare_with_forward(c, seed);
    CHECK_MSG(r.max_logit > 0.5, "logits too small to tell anything: %.3g", r.max_logit);
    CHECK_MSG(r.max_diff <= RELATIVE_TOLERANCE * r.max_logit, "max |cached - full| %.3g of %.3g",
              r.max_diff, r.max_logit);
}

TEST(llama_decoder_matches_the_full_forward_at_every_position) {
    check_matches_forward(gqa_config(), 1);
    check_matches_forward(odd_config(), 2);
    check_matches_forward(multi_head_config(), 3);
}

// The odd shape's scaling is not a no-op (so the test above checks that the decoder applies it):
// it changes frequencies, and the decoder's logits with it differ from those without.
TEST(llama_decoder_applies_rope_scaling) {
    LlamaConfig scaled = odd_config(), plain = odd_config();
    plain.rope_scaling.enabled = false;
    const std::vector<double> f = rope_frequencies(scaled.head_size(), scaled.rope_theta,
                                                   scaled.rope_scaling);
    const std::vector<double> g = rope_frequencies(plain.head_size(), plain.rope_theta,
                                                   plain.rope_scaling);
    int changed = 0;
    for (size_t i = 0; i < f.size(); i++) changed += f[i] != g[i];
    CHECK_MSG(changed == 2 && f[0] == g[0] && f[2] == g[2] / 4, "%d of %zu frequencies scaled",
              changed, f.size());
    const std::vector<float> params = random_params(scaled, 2);
    LlamaDecoder* a = llama_decoder_create(scaled, 8);
    LlamaDecoder* b = llama_decoder_create(plain, 8);
    std::vector<float> la(scaled.vocab_size), lb(scaled.vocab_size);
    double diff = 0;
    for (int i = 0; i < 8; i++) {
        llama_decoder_step(a, params.data(), (i * 7) % scaled.vocab_size, la.data());
        llama_decoder_step(b, params.data(), (i * 7) % scaled.vocab_size, lb.data());
        for (int v = 0; v < scaled.vocab_size; v++) diff = std::max(diff, (double)std::fabs(la[v] - lb[v]));
    }
    llama_decoder_free(a);
    llama_decoder_free(b);
    CHECK_MSG(diff > 1e-3, "scaling changed the logits by only %.3g", diff);
}

TEST(llama_decoder_truncate_and_refill_gives_the_same_logits) {
    const LlamaConfig c = gqa_config();
    const int n = c.max_seq_len, V = c.vocab_size;
    const std::vector<float> params = random_params(c, 9);
    LlamaDecoder* d = llama_decoder_create(c, n);
    std::vector<int> tokens(n);
    std::mt19937 rng(9);
    for (int& t : tokens) t = (int)(rng() % V);
    std::vector<std::vector<float>> first(n, std::vector<float>(V));
    for (int i = 0; i < n; i++) llama_decoder_step(d, params.data(), tokens[i], first[i].data());
    std::vector<float> again(V);
    for (int keep : {10, 0, 15}) {
        llama_decoder_truncate(d, keep);
        CHECK(llama_decoder_length(d) == keep);
        for (int i = keep; i < n; i++) {
            llama_decoder_step(d, params.data(), tokens[i], again.data());
            CHECK_MSG(memcmp(first[i].data(), again.data(), V * 4) == 0, "position %d after keeping %d",
                      i, keep);
        }
    }
    llama_decoder_truncate(d, n + 5);  // beyond the length: nothing to forget
    CHECK(llama_decoder_length(d) == n);
    llama_decoder_free(d);
}

// The message of the std::invalid_argument fn throws ("" if it throws none).
template <typename Fn>
static std::string invalid_argument_of(Fn&& fn) {
    try {
        fn();
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    return "";
}

TEST(llama_decoder_full_cache_bad_token_and_bad_capacity_are_errors) {
    const LlamaConfig c = gqa_config();
    const std::vector<float> params = random_params(c, 4);
    std::vector<float> logits(c.vocab_size);
    LlamaDecoder* d = llama_decoder_create(c, 3);
    for (int i = 0; i < 3; i++) llama_decoder_step(d, params.data(), i, logits.data());
    CHECK(invalid_argument_of([&] { llama_decoder_step(d, params.data(), 1, logits.data()); })
              .find("holds 3 tokens and is full") != std::string::npos);
    CHECK(llama_decoder_length(d) == 3);
    llama_decoder_truncate(d, 0);
    for (int token : {-1, c.vocab_size}) {
        const std::string e =
            invalid_argument_of([&] { llama_decoder_step(d, params.data(), token, logits.data()); });
        CHECK_MSG(e.find("token " + std::to_string(token) + " is outside the vocabulary [0, 61)") !=
                      std::string::npos,
                  "'%s'", e.c_str());
    }
    CHECK(llama_decoder_length(d) == 0);  // a refused token is not appended
    llama_decoder_free(d);
    for (int max_len : {0, c.max_seq_len + 1})
        CHECK(invalid_argument_of([&] { llama_decoder_create(c, max_len); }).find("impossible shape") !=
              std::string::npos);
    LlamaConfig bad = c;
    bad.num_kv_heads = 3;  // does not divide 4 query heads
    CHECK(!invalid_argument_of([&] { llama_decoder_create(bad, 4); }).empty());
}

TEST(llama_decoder_bytes_counts_the_caches) {
    const LlamaConfig c = gqa_config();  // 2 layers, 2 key/value heads of 8 channels
    const size_t caches = 2 * 2 * 16 * (2 * 8) * sizeof(float);
    CHECK(llama_decoder_bytes(c, 16) > caches && llama_decoder_bytes(c, 16) < 2 * caches);
}

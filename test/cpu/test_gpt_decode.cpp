// The key/value-cache decoder (cpu/gpt_decode.h) against the full forward pass (cpu/gpt_cpu.h):
// after each token, the decoder's logits must equal the last row of a forward pass over the whole
// prefix (the number of bitwise-different logits and the largest difference are printed), at
// lengths across the cache's growth up to maxT, for several shapes; truncating and refilling the
// cache gives the same logits again; a full cache and a bad token are errors.
#include <algorithm>
#include <cstring>
#include <random>
#include <stdexcept>

#include "cpu/gpt_cpu.h"
#include "cpu/gpt_decode.h"
#include "test/test.h"

static std::vector<float> random_params(const GPTConfig& c, std::mt19937& rng) {
    const ParamLayout layout = param_layout(c);
    std::normal_distribution<float> normal(0.0f, 0.15f);
    std::vector<float> p(layout.total);
    for (float& v : p) v = normal(rng);
    for (int t : {LN1W, LN2W, LNFW})
        for (size_t i = 0; i < layout.size[t]; i++) p[layout.offset[t] + i] += 1.0f;
    return p;
}

// Feeds n random tokens one at a time and compares every step with the full forward's last row.
static void check_against_forward(const GPTConfig& c, int n, unsigned seed) {
    std::mt19937 rng(seed);
    const std::vector<float> params = random_params(c, rng);
    GPTCpu* model = gpt_cpu_create(c, 1, n);
    gpt_cpu_params(model) = params;
    GPTDecoder* decoder = gpt_decoder_create(c, n);
    std::vector<int> tokens;
    std::vector<float> logits(c.vocab_size);
    double max_diff = 0;
    size_t differing = 0;
    for (int i = 0; i < n; i++) {
        tokens.push_back((int)(rng() % c.vocab_size));
        gpt_decoder_step(decoder, params.data(), tokens.back(), logits.data());
        gpt_cpu_forward(model, tokens.data(), nullptr, 1, i + 1);
        const float* row = gpt_cpu_logits(model) + (size_t)i * c.padded_vocab_size;
        for (int v = 0; v < c.vocab_size; v++) {
            max_diff = std::max(max_diff, (double)std::fabs(logits[v] - row[v]));
            differing += memcmp(&logits[v], &row[v], 4) != 0;
        }
    }
    printf("  L=%d C=%d H=%d V=%d, %d tokens: %zu of %zu logits differ bitwise, max |diff| %.3g\n",
           c.num_layers, c.channels, c.num_heads, c.vocab_size, n, differing,
           (size_t)n * c.vocab_size, max_diff);
    CHECK_MSG(max_diff < 2e-5, "max |cached - full| %.3g", max_diff);
    CHECK(gpt_decoder_length(decoder) == n);
    gpt_decoder_free(decoder);
    gpt_cpu_free(model);
}

static GPTConfig shape(int L, int C, int H, int V, int T) {
    GPTConfig c;
    c.num_layers = L, c.channels = C, c.num_heads = H, c.vocab_size = V, c.max_seq_len = T;
    c.padded_vocab_size = (V + 127) / 128 * 128;
    return c;
}

TEST(decoder_matches_the_full_forward_at_every_length) {
    check_against_forward(shape(2, 32, 4, 200, 40), 40, 1);
    check_against_forward(shape(3, 64, 2, 300, 130), 130, 2);  // hs 32, past 128 positions
    check_against_forward(shape(1, 48, 3, 129, 8), 8, 3);      // hs 16, V just over 128
}

TEST(decoder_truncate_and_refill_gives_the_same_logits) {
    const GPTConfig c = shape(2, 32, 4, 200, 24);
    std::mt19937 rng(9);
    const std::vector<float> params = random_params(c, rng);
    GPTDecoder* d = gpt_decoder_create(c, 24);
    std::vector<float> first(c.vocab_size), again(c.vocab_size);
    std::vector<int> tokens(24);
    for (int& t : tokens) t = (int)(rng() % c.vocab_size);
    for (int i = 0; i < 24; i++) gpt_decoder_step(d, params.data(), tokens[i], first.data());
    gpt_decoder_truncate(d, 10);
    CHECK(gpt_decoder_length(d) == 10);
    for (int i = 10; i < 24; i++) gpt_decoder_step(d, params.data(), tokens[i], again.data());
    CHECK(memcmp(first.data(), again.data(), first.size() * 4) == 0);
    // Full cache, and a token outside the vocabulary.
    bool threw = false;
    try {
        gpt_decoder_step(d, params.data(), 1, again.data());
    } catch (const std::invalid_argument& e) { threw = std::string(e.what()).find("full") != std::string::npos; }
    CHECK(threw);
    gpt_decoder_truncate(d, 0);
    threw = false;
    try {
        gpt_decoder_step(d, params.data(), c.vocab_size, again.data());
    } catch (const std::invalid_argument& e) { threw = std::string(e.what()).find("vocabulary") != std::string::npos; }
    CHECK(threw);
    gpt_decoder_free(d);
}

// What a data rank sends per step under each gradient compression method
// (parallel/plan/compression_cost.h): the formulas on small cases worked by hand, and GPT-2 124M on 8
// ranks against the savings each method exists for: PowerSGD (r = 4) at least 50x below fp32, int8 at
// least 1.9x and sign at least 12x below bf16. The measured ratios are printed.
#include <algorithm>
#include <cstdio>

#include "parallel/plan/compression_cost.h"
#include "test/test.h"

namespace {

CompressionSettings settings(GradCompression method, int ranks, size_t element_bytes = 4, int r = 4) {
    CompressionSettings s;
    s.method = method;
    s.ranks = ranks;
    s.element_bytes = element_bytes;
    s.powersgd_rank = r;
    return s;
}

// GPT-2 124M's gradient tensors as listed by hand: 12 layers, C = 768, vocabulary padded to 50304,
// T = 1024.
std::vector<TensorShape> gpt2_124m_shapes() {
    const size_t C = 768;
    std::vector<TensorShape> shapes = {{50304, C}, {1024, C}};
    for (int layer = 0; layer < 12; layer++) {
        const std::vector<TensorShape> own = {{C, 1},     {C, 1},         // ln1 weight, bias
                                              {C, 3 * C}, {3 * C, 1},     // qkv weight, bias
                                              {C, C},     {C, 1},         // attention projection
                                              {C, 1},     {C, 1},         // ln2 weight, bias
                                              {C, 4 * C}, {4 * C, 1},     // fc weight, bias
                                              {4 * C, C}, {C, 1}};        // fc projection weight, bias
        shapes.insert(shapes.end(), own.begin(), own.end());
    }
    shapes.push_back({C, 1});  // ln_f weight
    shapes.push_back({C, 1});  // ln_f bias
    return shapes;
}

// A shape list as (smaller, larger) dimension pairs, sorted: the same tensors whichever way round.
std::vector<std::pair<size_t, size_t>> normalised(const std::vector<TensorShape>& shapes) {
    std::vector<std::pair<size_t, size_t>> out;
    for (const TensorShape& s : shapes) out.push_back({std::min(s.rows, s.cols), std::max(s.rows, s.cols)});
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace

TEST(compression_names_parse_back) {
    for (GradCompression m : {GradCompression::NONE, GradCompression::POWERSGD, GradCompression::INT8,
                              GradCompression::SIGN}) {
        GradCompression parsed = GradCompression::NONE;
        CHECK(parse_grad_compression(grad_compression_name(m), &parsed) && parsed == m);
    }
    GradCompression parsed;
    CHECK(!parse_grad_compression("fp8", &parsed) && !parse_grad_compression("", &parsed));
}

// The formulas of the header's comment, worked out by hand.
TEST(compression_bytes_follow_the_formulas) {
    // none: the ring all-reduce, 2·(R−1)·⌈n/R⌉ elements.
    CHECK(compressed_tensor_bytes({1000, 1}, settings(GradCompression::NONE, 4)) == 2 * 3 * 250 * 4);
    CHECK(compressed_tensor_bytes({1001, 1}, settings(GradCompression::NONE, 4, 2)) == 2 * 3 * 251 * 2);
    // int8: 1000 elements are 4 blocks, 1 per shard on 4 ranks: 2·3·1·260.
    CHECK(compressed_tensor_bytes({1000, 1}, settings(GradCompression::INT8, 4)) == 2 * 3 * 260);
    // 10 blocks (2560 elements; 2561 make 11) over 4 ranks: shards of 3 blocks.
    CHECK(compressed_tensor_bytes({2560, 1}, settings(GradCompression::INT8, 4)) == 2 * 3 * 3 * 260);
    CHECK(compressed_tensor_bytes({2561, 1}, settings(GradCompression::INT8, 4)) == 2 * 3 * 3 * 260);
    CHECK(compressed_tensor_bytes({2560, 1}, settings(GradCompression::SIGN, 4)) == 2 * 3 * 3 * 36);
    // powersgd: a 1000×600 matrix at r = 4 goes as P (4000) and Q (2400) in fp32, whatever
    // element_bytes says; a 1-D tensor and a matrix too small to gain go as they are.
    CHECK(powersgd_compresses({1000, 600}, 4));
    CHECK(compressed_tensor_bytes({1000, 600}, settings(GradCompression::POWERSGD, 4, 2)) ==
          2 * 3 * 1000 * 4 + 2 * 3 * 600 * 4);
    CHECK(!powersgd_compresses({100000, 1}, 1) && !powersgd_compresses({16, 16}, 5));
    CHECK(powersgd_compresses({16, 16}, 4));  // 2·(16 + 16)·4 = 256 = 16·16: exactly at the bound
    CHECK(compressed_tensor_bytes({16, 16}, settings(GradCompression::POWERSGD, 4, 2, 5)) == 2 * 3 * 64 * 2);
    // One rank sends nothing, whatever the method.
    for (GradCompression m : {GradCompression::NONE, GradCompression::POWERSGD, GradCompression::INT8,
                              GradCompression::SIGN})
        CHECK(compressed_tensor_bytes({1000, 600}, settings(m, 1)) == 0);
    // The sum over tensors.
    CHECK(compressed_gradient_bytes({{1000, 1}, {1000, 1}}, settings(GradCompression::NONE, 4)) ==
          2 * (2 * 3 * 250 * 4));
}

// The blockwise formulas against their approximations 2·(R−1)/R·(bytes per element)·n on a large
// tensor (the shards' rounding up to whole blocks is then negligible).
TEST(compression_bytes_match_the_per_element_approximations) {
    const size_t n = (size_t)1 << 24;
    for (int R : {2, 3, 8, 64}) {
        const double share = 2.0 * (R - 1) / R * n;
        const double int8 = (double)compressed_tensor_bytes({n, 1}, settings(GradCompression::INT8, R));
        const double sign = (double)compressed_tensor_bytes({n, 1}, settings(GradCompression::SIGN, R));
        CHECK_MSG(std::fabs(int8 / (share * (1 + 4.0 / 256)) - 1) < 1e-3, "int8 on %d ranks: %.0f bytes", R, int8);
        CHECK_MSG(std::fabs(sign / (share * (1.0 / 8 + 4.0 / 256)) - 1) < 1e-3, "sign on %d ranks: %.0f bytes", R,
                  sign);
    }
}

TEST(gpt2_124m_shapes_are_the_models_tensors) {
    GPTConfig c;  // GPT-2 124M: 12 layers, C = 768, Vp = 50304, maxT = 1024
    const std::vector<TensorShape> listed = gpt2_124m_shapes(), from_model = model_gradient_shapes(c);
    CHECK(normalised(listed) == normalised(from_model));
    size_t total = 0;
    for (const TensorShape& s : listed) total += s.elements();
    CHECK(total == param_layout(c).total && total == 124475904);
}

// GPT-2 124M on 8 data ranks.
TEST(gpt2_124m_on_8_ranks_compression_saves_what_it_should) {
    const std::vector<TensorShape> shapes = gpt2_124m_shapes();
    const int R = 8;
    const double fp32 = (double)compressed_gradient_bytes(shapes, settings(GradCompression::NONE, R, 4));
    const double bf16 = (double)compressed_gradient_bytes(shapes, settings(GradCompression::NONE, R, 2));
    const double powersgd = (double)compressed_gradient_bytes(shapes, settings(GradCompression::POWERSGD, R, 4, 4));
    const double int8 = (double)compressed_gradient_bytes(shapes, settings(GradCompression::INT8, R));
    const double sign = (double)compressed_gradient_bytes(shapes, settings(GradCompression::SIGN, R));
    const double MB = 1e6;
    printf("GPT-2 124M, 8 data ranks, bytes one rank sends per step:\n"
           "  none fp32 %.1f MB, none bf16 %.1f MB\n"
           "  powersgd r=4 %.2f MB: %.1fx below fp32\n"
           "  int8 %.1f MB: %.2fx below bf16\n"
           "  sign %.1f MB: %.1fx below bf16\n",
           fp32 / MB, bf16 / MB, powersgd / MB, fp32 / powersgd, int8 / MB, bf16 / int8, sign / MB, bf16 / sign);
    CHECK_MSG(fp32 / powersgd >= 50, "powersgd r=4: %.1fx below fp32", fp32 / powersgd);
    CHECK_MSG(bf16 / int8 >= 1.9, "int8: %.2fx below bf16", bf16 / int8);
    CHECK_MSG(bf16 / sign >= 12, "sign: %.1fx below bf16", bf16 / sign);
    // Which tensors PowerSGD compresses: wte, wpe and the 4 weight matrices of each layer.
    int compressed = 0;
    for (const TensorShape& s : shapes) compressed += powersgd_compresses(s, 4);
    CHECK(compressed == 2 + 12 * 4);
}

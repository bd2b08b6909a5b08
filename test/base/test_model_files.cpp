// Tests of llm.c model files (write → read bitwise, bf16 rounding, every corruption a clear error),
// model descriptors, and GPT-2 initialisation.
#include <cmath>
#include <cstring>

#include "base/file_io.h"
#include "base/gpt_init.h"
#include "base/model_descriptor.h"
#include "base/model_file.h"
#include "base/rng.h"
#include "test/train/host_test_util.h"

static GPTConfig tiny_config() { return config_from_descriptor("custom:L2:C64:H4:V500:T32"); }

static std::vector<float> random_params(const GPTConfig& c, uint64_t seed) {
    std::vector<float> p(param_layout(c).total);
    Rng rng(seed);
    for (float& x : p) x = (float)(rng.normal() * 0.5);
    return p;
}

static bool same_config(const GPTConfig& a, const GPTConfig& b) {
    return a.max_seq_len == b.max_seq_len && a.vocab_size == b.vocab_size &&
           a.padded_vocab_size == b.padded_vocab_size && a.num_layers == b.num_layers &&
           a.num_heads == b.num_heads && a.channels == b.channels;
}

TEST(fp32_model_file_round_trip_is_bitwise) {
    const std::string dir = tst::make_temp_dir();
    GPTConfig c = tiny_config();
    std::vector<float> params = random_params(c, 1);
    params[3] = -0.0f;
    params[4] = 1e-40f;  // a denormal survives too
    write_model_file(dir + "/a.bin", c, params.data(), WeightType::FP32);
    ModelFile m = read_model_file(dir + "/a.bin");
    CHECK(m.type == WeightType::FP32);
    CHECK(same_config(m.config, c));
    CHECK(m.params.size() == params.size());
    CHECK(memcmp(m.params.data(), params.data(), params.size() * 4) == 0);
    CHECK(file_size(dir + "/a.bin") == FILE_HEADER_BYTES + params.size() * 4);
    write_model_file(dir + "/b.bin", m.config, m.params.data(), WeightType::FP32);
    CHECK(read_all(dir + "/a.bin") == read_all(dir + "/b.bin"));
    // The header is llm.c's: magic, version 3, maxT, V, L, NH, C, Vp.
    std::vector<int32_t> h = read_header(dir + "/a.bin");
    CHECK(h[0] == 20240326 && h[1] == 3 && h[2] == 32 && h[3] == 500 && h[4] == 2 && h[5] == 4 &&
          h[6] == 64 && h[7] == 512 && h[8] == 0);
}

// Independent bf16 reference: of the two bf16 neighbours of x, the nearer one (in exact double
// arithmetic), and on a tie the one with an even last mantissa bit.
static uint16_t reference_bf16(float x) {
    uint32_t bits;
    memcpy(&bits, &x, 4);
    uint32_t down = bits & 0xFFFF0000u, up = down + 0x10000u;  // toward zero, away from zero
    auto value = [](uint32_t b) {
        if ((b & 0x7FFFFFFFu) == 0x7F800000u)
            return std::copysign(std::ldexp(1.0, 128), (b >> 31) ? -1.0 : 1.0);
        float f;
        memcpy(&f, &b, 4);
        return (double)f;
    };
    double d_down = std::fabs((double)x - value(down)), d_up = std::fabs((double)x - value(up));
    if (d_down < d_up) return (uint16_t)(down >> 16);
    if (d_up < d_down) return (uint16_t)(up >> 16);
    return (uint16_t)(((down >> 16) & 1) ? up >> 16 : down >> 16);
}

TEST(bf16_rounding_is_round_to_nearest_even) {
    const float specials[] = {1.0f + 0x1p-8f,      // tie between 1 and 1+2^-7: down to even
                              1.0f + 3 * 0x1p-8f,  // tie between odd and even: up
                              -(1.0f + 0x1p-8f),  0.0f, -0.0f, 3.4028235e38f, 1e-40f, 65504.0f};
    for (float x : specials)
        CHECK_MSG(float_to_bf16(x) == reference_bf16(x), "%a: %04x vs %04x", x, float_to_bf16(x),
                  reference_bf16(x));
    CHECK(float_to_bf16(1.0f + 0x1p-8f) == 0x3F80 && float_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3F82);
    CHECK(float_to_bf16(3.4028235e38f) == 0x7F80);  // rounds up past the largest bf16 to infinity
    CHECK(std::isnan(bf16_to_float(float_to_bf16(NAN))));
    Rng rng(7);
    for (int i = 0; i < 200000; i++) {
        uint32_t bits = (uint32_t)rng.next_u64();
        float x;
        memcpy(&x, &bits, 4);
        if (std::isnan(x)) continue;
        CHECK_MSG(float_to_bf16(x) == reference_bf16(x), "%a: %04x vs %04x", x, float_to_bf16(x),
                  reference_bf16(x));
    }
}

TEST(bf16_model_file_round_trip) {
    const std::string dir = tst::make_temp_dir();
    GPTConfig c = tiny_config();
    std::vector<float> params = random_params(c, 2);
    write_model_file(dir + "/a.bin", c, params.data(), WeightType::BF16);
    CHECK(file_size(dir + "/a.bin") == FILE_HEADER_BYTES + params.size() * 2);
    CHECK(read_header(dir + "/a.bin")[1] == 5);
    ModelFile m = read_model_file(dir + "/a.bin");
    CHECK(m.type == WeightType::BF16 && same_config(m.config, c));
    for (size_t i = 0; i < params.size(); i++) {
        uint16_t expected = reference_bf16(params[i]);
        uint32_t got;
        memcpy(&got, &m.params[i], 4);
        CHECK_MSG(got == (uint32_t)expected << 16, "element %zu", i);
    }
    // Values already in bf16 survive a second write → read bit for bit.
    write_model_file(dir + "/b.bin", c, m.params.data(), WeightType::BF16);
    CHECK(read_all(dir + "/a.bin") == read_all(dir + "/b.bin"));
}

// Writes a good fp32 file, applies `corrupt` to its bytes, and expects a read to fail with `words`.
static void check_corruption(const char* name, void (*corrupt)(std::vector<unsigned char>&),
                             const std::vector<std::string>& words) {
    const std::string dir = tst::make_temp_dir();
    const std::string path = dir + "/" + name + ".bin";
    GPTConfig c = tiny_config();
    std::vector<float> params = random_params(c, 3);
    write_model_file(path, c, params.data(), WeightType::FP32);
    std::vector<unsigned char> bytes = read_all(path);
    corrupt(bytes);
    write_all(path, bytes);
    std::vector<std::string> all = words;
    all.push_back(path);
    expect_input_error([&] { read_model_file(path); }, all);
}

static void set_header(std::vector<unsigned char>& bytes, int index, int32_t value) {
    memcpy(bytes.data() + 4 * index, &value, 4);
}

TEST(model_file_corruptions_are_clear_errors) {
    check_corruption("magic", [](std::vector<unsigned char>& b) { set_header(b, 0, 12345); },
                     {"not a model file", "magic 12345"});
    check_corruption("version", [](std::vector<unsigned char>& b) { set_header(b, 1, 4); },
                     {"version 4"});
    check_corruption("layers", [](std::vector<unsigned char>& b) { set_header(b, 4, 1); },
                     {"does not match its header"});
    check_corruption("heads", [](std::vector<unsigned char>& b) { set_header(b, 5, 5); },
                     {"5 heads do not divide 64 channels"});
    check_corruption("truncated",
                     [](std::vector<unsigned char>& b) { b.erase(b.end() - 100, b.end()); },
                     {"truncated tensor data"});
    check_corruption("header_only",
                     [](std::vector<unsigned char>& b) { b.resize(FILE_HEADER_BYTES); },
                     {"truncated tensor data"});
    check_corruption("short", [](std::vector<unsigned char>& b) { b.resize(100); },
                     {"shorter than the 1024-byte header"});
    check_corruption("huge",
                     [](std::vector<unsigned char>& b) {
                         set_header(b, 6, 1 << 30);
                         set_header(b, 5, 1);
                     },
                     {"beyond any model"});
    expect_input_error([] { read_model_file("/nonexistent/model.bin"); },
                       {"/nonexistent/model.bin", "cannot open"});
}

TEST(failed_write_leaves_no_file) {
    const std::string dir = tst::make_temp_dir();
    {
        AtomicFile file(dir + "/x.bin");
        file.write("abc", 3);
        // destroyed without commit(), as when an error unwinds the stack
    }
    CHECK(read_all(dir + "/x.bin").empty() && !path_exists(dir + "/x.bin"));
    std::string listing;
    tst::run_command("ls -A " + dir, &listing);
    CHECK_MSG(listing.empty(), "left behind: %s", listing.c_str());
    expect_input_error([&] { AtomicFile f(dir + "/no/such/dir/x.bin"); }, {"cannot create"});
}

TEST(descriptors_give_the_published_shapes) {
    struct Case {
        const char* descriptor;
        int L, C, NH, maxT;
    };
    const Case cases[] = {{"d12", 12, 768, 12, 1024},         {"d24", 24, 1024, 16, 1024},
                          {"d36", 36, 1280, 20, 1024},        {"d48", 48, 1600, 25, 1024},
                          {"gpt2:d12", 12, 768, 12, 1024},    {"gpt3:c768", 12, 768, 12, 2048},
                          {"gpt3:c2048", 24, 2048, 16, 2048}, {"gpt3:c12288", 96, 12288, 96, 2048}};
    for (const Case& k : cases) {
        GPTConfig c = config_from_descriptor(k.descriptor);
        CHECK_MSG(c.num_layers == k.L && c.channels == k.C && c.num_heads == k.NH &&
                      c.max_seq_len == k.maxT && c.vocab_size == 50257 &&
                      c.padded_vocab_size == 50304,
                  "%s gave %s", k.descriptor, describe_config(c).c_str());
    }
    CHECK(param_layout(config_from_descriptor("d12")).total == 124475904);  // GPT-2 124M with Vp
    GPTConfig t = config_from_descriptor("custom:L3:C48:H6:V300:T20");
    CHECK(t.num_layers == 3 && t.channels == 48 && t.num_heads == 6 && t.vocab_size == 300 &&
          t.padded_vocab_size == 384 && t.max_seq_len == 20);
    CHECK(is_model_descriptor("d12") && is_model_descriptor("custom:L1:C8:H1") &&
          !is_model_descriptor("model.bin") && !is_model_descriptor("dir/d12"));
    expect_input_error([] { config_from_descriptor("d13"); },
                       {"d13", "no GPT-2 model of depth 13"});
    expect_input_error([] { config_from_descriptor("gpt3:c100"); },
                       {"no GPT-3 model with 100 channels"});
    expect_input_error([] { config_from_descriptor("gpt2:x"); }, {"gpt2:x"});
    expect_input_error([] { config_from_descriptor("custom:L2:C64"); }, {"need L, C and H"});
    expect_input_error([] { config_from_descriptor("custom:L2:C64:H5"); },
                       {"5 heads do not divide 64 channels"});
    expect_input_error([] { config_from_descriptor("custom:L2:C64:H4:X3"); },
                       {"unknown field 'X'"});
    expect_input_error([] { config_from_descriptor("custom:L2:C64:H4:V70000"); }, {"uint16"});
}

static double stddev(const float* p, size_t n, double* mean_out) {
    double sum = 0, sq = 0;
    for (size_t i = 0; i < n; i++) sum += p[i];
    double mean = sum / n;
    for (size_t i = 0; i < n; i++) sq += (p[i] - mean) * (p[i] - mean);
    *mean_out = mean;
    return std::sqrt(sq / n);
}

// fill_normal draws a long run of normals on all threads in blocks: the values and the Rng's state
// after it must be those of the one-thread loop it replaces, at lengths around its block size (2^20)
// and from a state already moved on by other draws.
TEST(fill_normal_gives_the_sequential_draws) {
    for (const size_t n : {(size_t)0, (size_t)1, (size_t)(1 << 20), (size_t)(1 << 20) + 1, (size_t)3 * (1 << 20) + 77}) {
        Rng sequential(42), parallel(42);
        sequential.uniform(), parallel.uniform();  // an odd number of draws before
        std::vector<float> want(n), got(n, -1.0f);
        for (size_t i = 0; i < n; i++) want[i] = (float)(0.02 * sequential.normal());
        fill_normal(got.data(), n, 0.02, parallel);
        CHECK_MSG(n == 0 || memcmp(want.data(), got.data(), n * sizeof(float)) == 0, "n=%zu: values differ", n);
        CHECK_MSG(sequential.state == parallel.state, "n=%zu: the state after differs", n);
        CHECK(sequential.next_u64() == parallel.next_u64());
    }
}

TEST(gpt2_init_statistics_and_determinism) {
    GPTConfig c = config_from_descriptor("custom:L4:C128:H4:V1000:T64");
    ParamLayout layout = param_layout(c);
    std::vector<float> a(layout.total), b(layout.total), other(layout.total);
    gpt_init_params(c, 1234, a.data());
    gpt_init_params(c, 1234, b.data());
    gpt_init_params(c, 1235, other.data());
    CHECK(memcmp(a.data(), b.data(), a.size() * 4) == 0);
    CHECK(memcmp(a.data(), other.data(), a.size() * 4) != 0);
    const double residual = 0.02 / std::sqrt(2.0 * c.num_layers);
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        const float* p = a.data() + layout.offset[t];
        size_t n = layout.size[t];
        if (t == WTE) n = (size_t)c.vocab_size * c.channels;  // real rows only
        if (is_weight_matrix(t)) {
            double mean, sd = stddev(p, n, &mean);
            double want = (t == ATTPROJW || t == FCPROJW) ? residual : 0.02;
            // n ≥ 8192 draws: the sample std is within 3% of the true one far beyond 5 sigma.
            CHECK_MSG(std::fabs(sd / want - 1) < 0.03, "tensor %d std %g, want %g", t, sd, want);
            CHECK_MSG(std::fabs(mean) < 4 * want / std::sqrt((double)n), "tensor %d mean %g", t,
                      mean);
        } else {
            const float want = (t == LN1W || t == LN2W || t == LNFW) ? 1.0f : 0.0f;
            for (size_t i = 0; i < n; i++) CHECK_MSG(p[i] == want, "tensor %d element %zu", t, i);
        }
    }
    for (size_t i = (size_t)c.vocab_size * c.channels; i < layout.size[WTE]; i++)
        CHECK_MSG(a[i] == 0.0f, "padded wte element %zu", i);
}

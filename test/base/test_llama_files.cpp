// Llama 3 descriptors (base/llama_descriptor.h) and Llama 3 model files (base/llama_model_file.h):
// the named and custom shapes, every bad descriptor a one-line error; a model file written and read
// back gives the same config and bits (fp32) or the bf16-rounded values, and truncated, overlong,
// mislabelled (GPT-2, token shard, unknown magic) and corrupt-header files are one-line errors.
#include <cstring>
#include <filesystem>
#include <random>

#include "base/formats.h"
#include "base/llama_descriptor.h"
#include "base/llama_model_file.h"
#include "base/model_descriptor.h"
#include "base/model_file.h"
#include "test/train/host_test_util.h"

TEST(llama_descriptors_name_the_published_and_custom_shapes) {
    CHECK(is_llama_descriptor("llama3.2-1b") && is_llama_descriptor("llama3:L2:C64:H4:KV2:T16"));
    CHECK(!is_llama_descriptor("d12") && !is_llama_descriptor("custom:L2:C64:H4") &&
          !is_llama_descriptor("llama3.2-1b.bin"));
    const LlamaConfig b8 = llama_config_from_descriptor("llama3.1-8b");
    CHECK(b8.num_layers == 32 && b8.channels == 4096 && b8.ffn_channels == 14336 &&
          b8.num_kv_heads == 8 && b8.vocab_size == 128256 && b8.rope_scaling.enabled);
    CHECK(llama_config_from_descriptor("llama3.2-1b").num_layers == 16);
    CHECK(llama_config_from_descriptor("llama3.2-3b").channels == 3072);
    const LlamaConfig c = llama_config_from_descriptor("llama3:T16:L2:C64:H4:KV2");
    CHECK(c.num_layers == 2 && c.channels == 64 && c.num_heads == 4 && c.num_kv_heads == 2 &&
          c.max_seq_len == 16 && c.ffn_channels == 176 && c.vocab_size == LLAMA3_VOCAB_SIZE &&
          !c.rope_scaling.enabled && c.rope_theta == 500000.0 && c.rmsnorm_eps == 1e-5);
    const LlamaConfig d = llama_config_from_descriptor("llama3:L1:C32:H4:KV4:T8:F40:V96");
    CHECK(d.ffn_channels == 40 && d.vocab_size == 96);
    CHECK(llama_default_ffn_channels(768) == 2048 && llama_default_ffn_channels(4096) == 11008);
}

TEST(bad_llama_descriptors_are_one_line_errors) {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"llama3:L2:C64:H3:KV1:T16", "3 heads do not divide 64 channels"},
        {"llama3:L2:C64:H4:KV3:T16", "3 key/value heads do not divide 4 query heads"},
        {"llama3:L2:C12:H4:KV2:T16", "head size 3"},
        {"llama3:L2:C64:H4:T16", "need L, C, H, KV and T"},
        {"llama3:L2:C64:H4:KV2:T16:X3", "unknown field 'X'"},
        {"llama3:L2:C64:H4:KV0:T16", "field 'KV0'"},
        {"llama3:L2:C64:H4:KV2:T16:Vx", "field 'Vx'"},
        {"llama3.2-2b", "not a Llama 3 shape"},
        {"llama3:L4096:C65536:H64:KV8:T16", "beyond any model"},
    };
    for (const auto& [descriptor, words] : cases)
        expect_input_error([&] { llama_config_from_descriptor(descriptor); },
                           {"model '" + descriptor + "'", words});
}

static LlamaConfig tiny_config() { return llama_config_from_descriptor("llama3:L2:C16:H4:KV2:T8:F24:V40"); }

static std::vector<float> random_params(const LlamaConfig& c) {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 0.5f);
    std::vector<float> p(llama_param_count(c));
    for (float& v : p) v = normal(rng);
    return p;
}

TEST(llama_model_file_round_trip) {
    const std::string dir = tst::make_temp_dir();
    LlamaConfig c = tiny_config();
    c.rope_scaling.enabled = true;
    c.rope_scaling.factor = 32.0, c.rope_scaling.original_max_position = 4;
    c.rope_theta = 1234.5, c.rmsnorm_eps = 3e-6;
    const std::vector<float> p = random_params(c);
    write_llama_model_file(dir + "/m.bin", c, p.data(), WeightType::FP32);
    CHECK(std::filesystem::file_size(dir + "/m.bin") == FILE_HEADER_BYTES + p.size() * 4);
    const LlamaModelFile m = read_llama_model_file(dir + "/m.bin");
    CHECK(m.type == WeightType::FP32 && m.params.size() == p.size());
    CHECK(memcmp(m.params.data(), p.data(), p.size() * 4) == 0);
    CHECK(m.config.num_kv_heads == 2 && m.config.ffn_channels == 24 && m.config.vocab_size == 40 &&
          m.config.rope_theta == 1234.5 && m.config.rmsnorm_eps == 3e-6 &&
          m.config.rope_scaling.enabled && m.config.rope_scaling.factor == 32.0 &&
          m.config.rope_scaling.original_max_position == 4);
    write_llama_model_file(dir + "/b.bin", c, p.data(), WeightType::BF16);
    CHECK(std::filesystem::file_size(dir + "/b.bin") == FILE_HEADER_BYTES + p.size() * 2);
    const LlamaModelFile b = read_llama_model_file(dir + "/b.bin");
    CHECK(b.type == WeightType::BF16);
    for (size_t i = 0; i < p.size(); i++) CHECK(b.params[i] == bf16_to_float(float_to_bf16(p[i])));
    const std::vector<int32_t> h = read_header(dir + "/b.bin");
    CHECK(h[0] == LLAMA3_MODEL_FILE_MAGIC && h[1] == 1 && h[2] == 2 && h[3] == 2 && h[6] == 2);
}

TEST(bad_llama_model_files_are_one_line_errors) {
    const std::string dir = tst::make_temp_dir();
    const LlamaConfig c = tiny_config();
    const std::vector<float> p = random_params(c);
    write_llama_model_file(dir + "/m.bin", c, p.data(), WeightType::FP32);
    const std::vector<unsigned char> good = read_all(dir + "/m.bin");
    const auto variant = [&](const std::string& name, const std::function<void(std::vector<unsigned char>&)>& edit) {
        std::vector<unsigned char> bytes = good;
        edit(bytes);
        write_all(dir + "/" + name, bytes);
        return dir + "/" + name;
    };
    const auto slot = [](std::vector<unsigned char>& b, int i, int32_t v) { memcpy(&b[4 * i], &v, 4); };
    const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
        {variant("trunc.bin", [](auto& b) { b.resize(b.size() - 4); }), {"truncated"}},
        {variant("long.bin", [](auto& b) { b.push_back(0); }), {"does not match its header"}},
        {variant("short.bin", [](auto& b) { b.resize(100); }), {"shorter than the 1024-byte header"}},
        {variant("magic.bin", [&](auto& b) { slot(b, 0, 12345); }), {"not a Llama 3 model file", "magic 12345"}},
        {variant("shard.bin", [&](auto& b) { slot(b, 0, TOKEN_SHARD_MAGIC); }), {"is a token shard, not a Llama 3"}},
        {variant("version.bin", [&](auto& b) { slot(b, 1, 2); }), {"version 2"}},
        {variant("type.bin", [&](auto& b) { slot(b, 2, 3); }), {"3 bytes per weight"}},
        {variant("heads.bin", [&](auto& b) { slot(b, 6, 3); }), {"header", "3 key/value heads"}},
        {variant("slot.bin", [&](auto& b) { slot(b, 100, 7); }), {"header slot 100 is 7"}},
    };
    for (const auto& [path, words] : cases)
        expect_input_error([&] { read_llama_model_file(path); }, words);
    // A GPT-2 model file where a Llama 3 one is expected, and the other way round: each says what it is.
    GPTConfig g = config_from_descriptor("custom:L1:C16:H2:V40:T8");
    write_model_file(dir + "/gpt2.bin", g, std::vector<float>(param_layout(g).total).data(), WeightType::FP32);
    expect_input_error([&] { read_llama_model_file(dir + "/gpt2.bin"); },
                       {"is a GPT-2 model file", "not a Llama 3 model file"});
    expect_input_error([&] { read_model_file(dir + "/m.bin"); },
                       {"is a Llama 3 model file, not a GPT-2 model file"});
    CHECK(std::string(file_kind_of_magic(LLAMA3_MODEL_FILE_MAGIC)) == "a Llama 3 model file");
    // An impossible shape is refused before anything is written.
    LlamaConfig odd = c;
    odd.num_kv_heads = 3;
    expect_input_error([&] { write_llama_model_file(dir + "/odd.bin", odd, p.data(), WeightType::FP32); },
                       {"odd.bin", "3 key/value heads"});
    CHECK(!std::filesystem::exists(dir + "/odd.bin"));
}

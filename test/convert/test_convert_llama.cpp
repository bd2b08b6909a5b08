// ./convert for Llama 3 (train/hf_llama.h): export then import gives the model file back bit for bit
// (fp32 and bf16); a folder with tied embeddings and no lm_head.weight imports with lm_head =
// embed_tokens; bad folders (a NaN among the weights too) are one-line errors with no output left;
// and the exported folder, run by a Python reader written from the published architecture
// (test/convert/llama_reader.py, standard library only), gives our CPU Llama's loss
// (cpu/llama_cpu.h) on the same tokens.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include <nlohmann/json.hpp>

#include "base/llama_descriptor.h"
#include "base/llama_model_file.h"
#include "cpu/llama_cpu.h"
#include "test/convert/convert_util.h"
#include "test/train/host_test_util.h"
#include "train/hf_llama.h"
#include "train/safetensors.h"

using nlohmann::json;
namespace fs = std::filesystem;

// Two layers, grouped-query attention (4 query heads over 2 key/value heads), and RoPE scaling with
// θ and the original length chosen so that over 8 positions one frequency is kept, two blended and
// one divided by the factor.
static LlamaConfig small_llama() {
    LlamaConfig c = llama_config_from_descriptor("llama3:L2:C32:H4:KV2:T8:F48:V50");
    c.rope_theta = 100.0;
    c.rope_scaling.enabled = true;
    c.rope_scaling.factor = 8.0;
    c.rope_scaling.original_max_position = 64;
    return c;
}

// Random weights large enough that every op matters; norm gains around 1.
static std::vector<float> random_llama_weights(const LlamaConfig& c, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.3f);
    std::vector<float> p(llama_param_count(c));
    for (float& v : p) v = normal(rng);
    for (const LlamaTensor& t : llama_tensors(c))
        if (!t.is_matrix())
            for (size_t i = 0; i < t.size(); i++) p[t.offset + i] += 1.0f;
    return p;
}

static json read_json(const std::string& path) {
    const auto bytes = read_all(path);
    return json::parse(std::string(bytes.begin(), bytes.end()));
}

static void write_json(const std::string& path, const json& j) {
    const std::string text = j.dump(2);
    write_all(path, std::vector<unsigned char>(text.begin(), text.end()));
}

TEST(llama_export_then_import_is_bitwise) {
    const std::string dir = tst::make_temp_dir();
    const LlamaConfig c = small_llama();
    const std::vector<float> p = random_llama_weights(c, 1);
    std::string out;
    for (const WeightType type : {WeightType::FP32, WeightType::BF16}) {
        const std::string name = type == WeightType::FP32 ? "fp32" : "bf16";
        const std::string a = dir + "/" + name + ".bin", b = dir + "/" + name + "_back.bin";
        write_llama_model_file(a, c, p.data(), type);
        CHECK_MSG(convert("export-hf " + a + " " + dir + "/hf_" + name, &out) == 0, "%s", out.c_str());
        CHECK_MSG(out.find("Llama 3") != std::string::npos, "%s", out.c_str());
        const json config = read_json(dir + "/hf_" + name + "/config.json");
        CHECK(config["model_type"] == "llama" && config["architectures"][0] == "LlamaForCausalLM" &&
              config["num_key_value_heads"] == 2 && config["intermediate_size"] == 48 &&
              config["rope_scaling"]["rope_type"] == "llama3" && config["tie_word_embeddings"] == false);
        CHECK_MSG(convert("import-hf " + dir + "/hf_" + name + " " + b, &out) == 0, "%s", out.c_str());
        CHECK_MSG(read_all(a) == read_all(b), "%s: import of the export differs", name.c_str());
    }
    // to-bf16 of the fp32 file is the bf16 file.
    CHECK(convert("to-bf16 " + dir + "/fp32.bin " + dir + "/to16.bin", &out) == 0);
    CHECK(read_all(dir + "/to16.bin") == read_all(dir + "/bf16.bin"));
}

// The weights as safetensors tensors under transformers' names and shapes; with_head: lm_head too.
static std::vector<StOutTensor> as_tensors(const LlamaConfig& c, const std::vector<float>& p,
                                           bool with_head) {
    std::vector<StOutTensor> tensors;
    for (const LlamaTensor& t : llama_tensors(c)) {
        if (t.name == "lm_head.weight" && !with_head) continue;
        std::vector<uint64_t> shape = {(uint64_t)t.rows};
        if (t.is_matrix()) shape.push_back((uint64_t)t.cols);
        tensors.push_back({t.name, shape, std::vector<float>(p.begin() + t.offset, p.begin() + t.offset + t.size())});
    }
    return tensors;
}

// A folder as transformers writes one for tied embeddings: no lm_head.weight, F16 weights.
static void write_tied_folder(const std::string& dir, const LlamaConfig& c,
                              const std::vector<float>& p) {
    fs::create_directories(dir);
    const std::vector<StOutTensor> tensors = as_tensors(c, p, false);
    write_safetensors(dir + "/model.safetensors", tensors, StDtype::F16, {{"format", "pt"}});
    json config = json::parse(hf_llama_config_json(c, StDtype::F16));
    config["tie_word_embeddings"] = true;
    write_json(dir + "/config.json", config);
}

TEST(llama_tied_folder_imports_with_lm_head_the_embedding) {
    const std::string dir = tst::make_temp_dir();
    const LlamaConfig c = small_llama();
    write_tied_folder(dir + "/tied", c, random_llama_weights(c, 2));
    std::string out;
    CHECK_MSG(convert("import-hf " + dir + "/tied " + dir + "/m.bin", &out) == 0, "%s", out.c_str());
    const LlamaModelFile m = read_llama_model_file(dir + "/m.bin");
    CHECK(m.type == WeightType::FP32);
    const std::vector<LlamaTensor> t = llama_tensors(c);
    const LlamaTensor& embed = t[llama_embedding_index()];
    const LlamaTensor& head = t[llama_lm_head_index(c)];
    CHECK(memcmp(&m.params[embed.offset], &m.params[head.offset], embed.size() * 4) == 0);
}

// A copy of the folder `ok` with config.json's key set to value.
static std::string with_config(const std::string& ok, const std::string& name, const std::string& key,
                               const json& value) {
    const std::string d = fs::path(ok).parent_path().string() + "/" + name;
    fs::copy(ok, d);
    json config = read_json(d + "/config.json");
    config[key] = value;
    write_json(d + "/config.json", config);
    return d;
}

TEST(bad_llama_folders_fail_cleanly) {
    const std::string dir = tst::make_temp_dir(), out_bin = dir + "/out.bin";
    const LlamaConfig c = small_llama();
    const std::vector<float> p = random_llama_weights(c, 3);
    write_llama_model_file(dir + "/m.bin", c, p.data(), WeightType::FP32);
    std::string out;
    CHECK_MSG(convert("export-hf " + dir + "/m.bin " + dir + "/ok", &out) == 0, "%s", out.c_str());
    const std::string ok = dir + "/ok";
    const std::vector<std::tuple<std::string, json, std::string>> cases = {
        {"num_hidden_layers", 3, "no tensor 'model.layers.2."},
        {"num_hidden_layers", 1, "unexpected tensor 'model.layers.1."},
        {"intermediate_size", 40, "gate_proj.weight' has shape (48, 32); config.json's Llama needs (40, 32)"},
        {"hidden_size", 64, "head_dim 8 is not hidden_size / num_attention_heads = 16"},
        {"num_key_value_heads", 4, "k_proj.weight' has shape (16, 32)"},
        {"num_key_value_heads", 3, "3 key/value heads do not divide 4"},
        {"model_type", "mistral", "model_type 'mistral' is neither gpt2 nor llama"},
        {"model_type", "gpt2", "names neither GPT2LMHeadModel nor GPT2Model"},
        {"architectures", json::array({"GPT2LMHeadModel"}), "does not name LlamaForCausalLM"},
        {"hidden_act", "gelu", "hidden_act"},
        {"head_dim", 16, "head_dim 16"},
        {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 2.0}}, "rope_type 'yarn'"},
    };
    int n = 0;
    for (const auto& [key, value, words] : cases) {
        const std::string d = with_config(ok, "case" + std::to_string(n++), key, value);
        convert_fails("import-hf " + d + " " + out_bin, out_bin, {words});
    }
    // An untied folder without lm_head.weight: the tied folder, its config saying untied.
    write_tied_folder(dir + "/tied", c, p);
    const std::string untied = with_config(dir + "/tied", "untied", "tie_word_embeddings", false);
    convert_fails("import-hf " + untied + " " + out_bin, out_bin,
                  {"no tensor 'lm_head.weight'", "tie_word_embeddings is false"});
    // A tensor too many: the model's, plus one.
    fs::create_directories(dir + "/extra");
    fs::copy(ok + "/config.json", dir + "/extra/config.json");
    std::vector<StOutTensor> tensors = {{"model.layers.0.self_attn.q_norm.weight", {8}, std::vector<float>(8, 1)}};
    for (StOutTensor& t : as_tensors(c, p, true)) tensors.push_back(std::move(t));
    write_safetensors(dir + "/extra/model.safetensors", tensors, StDtype::F32, {});
    convert_fails("import-hf " + dir + "/extra " + out_bin, out_bin, {"unexpected tensor 'model.layers.0.self_attn.q_norm.weight'"});
    // Export into a folder that holds files is refused; to-bf16 of a file that is no model file
    // names its header.
    convert_fails("export-hf " + dir + "/m.bin " + ok, dir + "/none", {"already exists"});
    convert_fails("to-bf16 " + ok + "/config.json " + out_bin, out_bin, {"header"});
}

// A NaN or an infinity in a Llama folder's weights is refused naming the tensor and the element;
// --allow-nonfinite 1 imports it as it is.
TEST(llama_nonfinite_weights_are_refused_naming_the_tensor) {
    const std::string dir = tst::make_temp_dir(), out_bin = dir + "/out.bin";
    const LlamaConfig c = small_llama();
    std::vector<float> p = random_llama_weights(c, 4);
    const std::vector<LlamaTensor> tensors = llama_tensors(c);
    const LlamaTensor* down = nullptr;
    for (const LlamaTensor& t : tensors)
        if (t.name == "model.layers.1.mlp.down_proj.weight") down = &t;
    CHECK(down != nullptr);
    p[down->offset + 17] = NAN;
    write_llama_model_file(dir + "/m.bin", c, p.data(), WeightType::FP32);
    std::string out;
    CHECK_MSG(convert("export-hf " + dir + "/m.bin " + dir + "/hf", &out) == 0, "%s", out.c_str());
    convert_fails("import-hf " + dir + "/hf " + out_bin, out_bin,
                  {dir + "/hf/model.safetensors: tensor 'model.layers.1.mlp.down_proj.weight' holds NaN "
                   "at element 17 (--allow-nonfinite 1 imports it anyway)"});
    CHECK_MSG(convert("import-hf " + dir + "/hf " + out_bin + " --allow-nonfinite 1", &out) == 0, "%s",
              out.c_str());
    const LlamaModelFile m = read_llama_model_file(out_bin);
    CHECK(std::isnan(m.params[down->offset + 17]) && m.params[down->offset + 16] == p[down->offset + 16]);
}

// The Python reader's loss on tokens → targets over the folder; NAN when it fails.
static double python_loss(const std::string& python, const std::string& folder,
                          const std::vector<int>& tokens, const std::vector<int>& targets) {
    const auto join = [](const std::vector<int>& v) {
        std::string s;
        for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
        return s;
    };
    std::string out;
    const int status = tst::run_command(python + " test/convert/llama_reader.py " + folder + " " +
                                            join(tokens) + " " + join(targets), &out);
    CHECK_MSG(status == 0, "the Python reader failed: %s", out.c_str());
    return std::atof(out.c_str());
}

static double our_loss(const LlamaModelFile& m, const std::vector<int>& tokens,
                       const std::vector<int>& targets) {
    LlamaCpu* model = llama_cpu_create(m.config, 1, (int)tokens.size());
    llama_cpu_params(model) = m.params;
    const double loss = llama_cpu_forward(model, tokens.data(), targets.data(), 1, (int)tokens.size());
    llama_cpu_free(model);
    return loss;
}

TEST(python_llama_reader_gives_our_loss) {
    std::string python;
    if (tst::run_command("command -v python3", &python) != 0 || python.empty())
        SKIP("no python3 here");
    python = python.substr(0, python.find('\n'));
    const std::string dir = tst::make_temp_dir();
    const LlamaConfig c = small_llama();
    const std::vector<float> p = random_llama_weights(c, 4);
    std::mt19937 rng(5);
    std::vector<int> tokens(c.max_seq_len), targets(c.max_seq_len);
    for (int t = 0; t < c.max_seq_len; t++) tokens[t] = rng() % c.vocab_size, targets[t] = rng() % c.vocab_size;
    for (const char* type : {"fp32", "bf16"}) {
        const std::string file = dir + "/" + type + ".bin", folder = dir + "/hf_" + type;
        write_llama_model_file(file, c, p.data(), std::string(type) == "fp32" ? WeightType::FP32 : WeightType::BF16);
        std::string out;
        CHECK_MSG(convert("export-hf " + file + " " + folder, &out) == 0, "%s", out.c_str());
        const double ours = our_loss(read_llama_model_file(file), tokens, targets);
        const double theirs = python_loss(python, folder, tokens, targets);
        printf("  %s: loss %.7f (cpu/llama_cpu) vs %.7f (Python, double)\n", type, ours, theirs);
        // fp32 arithmetic over a few hundred terms against double: agreement to 2e-5 absolute.
        CHECK_MSG(std::fabs(ours - theirs) < 2e-5, "%s: |diff| %.3g", type, std::fabs(ours - theirs));
    }
}

// Llama 3 folders in transformers' layout, to and from our Llama 3 model files (see hf_llama.h).
#include "train/hf_llama.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "base/errors.h"
#include "base/file_io.h"
#include "base/formats.h"
#include "base/llama_descriptor.h"
#include "train/hf_folder.h"

using nlohmann::json;

// <|begin_of_text|> and <|end_of_text|>, or the last token of a smaller vocabulary.
static int begin_of_text(const LlamaConfig& c) { return std::min(LLAMA3_BOS_TOKEN, c.vocab_size - 1); }
static int end_of_text(const LlamaConfig& c) { return std::min(LLAMA3_EOT_TOKEN, c.vocab_size - 1); }

static json rope_scaling_json(const RopeScaling& s) {
    if (!s.enabled) return nullptr;
    return {{"rope_type", "llama3"},
            {"factor", s.factor},
            {"low_freq_factor", s.low_freq_factor},
            {"high_freq_factor", s.high_freq_factor},
            {"original_max_position_embeddings", s.original_max_position}};
}

std::string hf_llama_config_json(const LlamaConfig& c, StDtype dtype) {
    // No dropout: the model was trained without it, and fine-tuning continues the same way.
    const json config = {
        {"architectures", {"LlamaForCausalLM"}},
        {"model_type", "llama"},
        {"hidden_size", c.channels},
        {"intermediate_size", c.ffn_channels},
        {"num_attention_heads", c.num_heads},
        {"num_key_value_heads", c.num_kv_heads},
        {"num_hidden_layers", c.num_layers},
        {"head_dim", c.head_size()},
        {"vocab_size", c.vocab_size},
        {"max_position_embeddings", c.max_seq_len},
        {"rope_theta", c.rope_theta},
        {"rope_scaling", rope_scaling_json(c.rope_scaling)},
        {"rms_norm_eps", c.rmsnorm_eps},
        {"hidden_act", "silu"},
        {"attention_bias", false},
        {"attention_dropout", 0.0},
        {"mlp_bias", false},
        {"pretraining_tp", 1},
        {"tie_word_embeddings", false},
        {"initializer_range", 0.02},
        {"bos_token_id", begin_of_text(c)},
        {"eos_token_id", end_of_text(c)},
        {"use_cache", true},
        {"torch_dtype", torch_dtype_name(dtype)},
    };
    return config.dump(2) + "\n";
}

namespace {

// config[name] as a positive number, or `otherwise` when absent (transformers' default).
double positive_number(const json& config, const char* name, double otherwise,
                       const std::string& what) {
    if (!config.contains(name) || config[name].is_null()) return otherwise;
    const json& v = config[name];
    if (!v.is_number() || !(v.get<double>() > 0))
        fail("%s: %s is %s, not a positive number", what.c_str(), name,
             v.dump().substr(0, 40).c_str());
    return v.get<double>();
}

void check_model_type(const json& config, const std::string& what) {
    const std::string type = hf_model_type(config);
    if (type.empty())
        fail("%s: no model_type (a Llama config.json says \"model_type\": \"llama\")", what.c_str());
    if (type != "llama")
        fail("%s: model_type '%s' is not llama", what.c_str(), type.c_str());
    if (!config.contains("architectures")) return;
    const json& a = config["architectures"];
    if (!a.is_array() || std::find(a.begin(), a.end(), json("LlamaForCausalLM")) == a.end())
        fail("%s: architectures %s does not name LlamaForCausalLM", what.c_str(),
             a.dump().substr(0, 60).c_str());
}

// rope_scaling: absent, null or of rope_type "default" (no scaling), or Llama 3.1's "llama3".
RopeScaling parse_rope_scaling(const json& config, const std::string& what) {
    RopeScaling s;
    if (!config.contains("rope_scaling") || config["rope_scaling"].is_null()) return s;
    const json& r = config["rope_scaling"];
    if (!r.is_object()) fail("%s: rope_scaling is not an object or null", what.c_str());
    const char* key = r.contains("rope_type") ? "rope_type" : "type";  // older configs say "type"
    const std::string type = r.contains(key) && r[key].is_string() ? r[key].get<std::string>() : "";
    if (type == "default") return s;
    if (type != "llama3")
        fail("%s: rope_scaling's rope_type '%s' is not llama3 (the only scaling this trainer has)",
             what.c_str(), type.c_str());
    const std::string where = what + " rope_scaling";
    s.enabled = true;
    s.factor = positive_number(r, "factor", 0, where);
    s.low_freq_factor = positive_number(r, "low_freq_factor", 0, where);
    s.high_freq_factor = positive_number(r, "high_freq_factor", 0, where);
    s.original_max_position = int_field(r, "original_max_position_embeddings", where, 1, 1 << 30);
    if (!(s.factor > 0 && s.low_freq_factor > 0 && s.high_freq_factor > 0))
        fail("%s: needs factor, low_freq_factor and high_freq_factor", where.c_str());
    return s;
}

// The fields that must have one value for this trainer's Llama: SiLU, no biases, no split matmuls.
void check_fixed_fields(const json& config, const LlamaConfig& c, const std::string& what) {
    if (config.contains("hidden_act") && config["hidden_act"] != "silu")
        fail("%s: hidden_act %s: this trainer's MLP is SwiGLU (silu)", what.c_str(),
             config["hidden_act"].dump().substr(0, 40).c_str());
    require_bool(config, "attention_bias", false, what, "this trainer's attention has no biases");
    require_bool(config, "mlp_bias", false, what, "this trainer's MLP has no biases");
    if (config.contains("pretraining_tp") && config["pretraining_tp"] != 1)
        fail("%s: pretraining_tp %s: only 1 is read", what.c_str(),
             config["pretraining_tp"].dump().substr(0, 40).c_str());
    if (config.contains("head_dim") && !config["head_dim"].is_null() &&
        config["head_dim"] != c.head_size())
        fail("%s: head_dim %s is not hidden_size / num_attention_heads = %d", what.c_str(),
             config["head_dim"].dump().substr(0, 40).c_str(), c.head_size());
}

}  // namespace

LlamaConfig parse_hf_llama_config(const json& config, const std::string& what, bool* tied) {
    check_model_type(config, what);
    LlamaConfig c;
    c.num_layers = int_field(config, "num_hidden_layers", what, 1, 1 << 16);
    c.channels = int_field(config, "hidden_size", what, 1, 1 << 20);
    c.num_heads = int_field(config, "num_attention_heads", what, 1, 1 << 16);
    c.num_kv_heads = config.contains("num_key_value_heads") && !config["num_key_value_heads"].is_null()
                         ? int_field(config, "num_key_value_heads", what, 1, 1 << 16)
                         : c.num_heads;
    c.ffn_channels = int_field(config, "intermediate_size", what, 1, 1 << 24);
    c.vocab_size = int_field(config, "vocab_size", what, 1, 1 << 24);
    c.max_seq_len = int_field(config, "max_position_embeddings", what, 1, 1 << 30);
    c.rope_theta = positive_number(config, "rope_theta", 10000.0, what);
    c.rmsnorm_eps = positive_number(config, "rms_norm_eps", 1e-6, what);
    c.rope_scaling = parse_rope_scaling(config, what);
    validate_llama_config(c, what);
    check_fixed_fields(config, c, what);
    *tied = false;  // transformers' default for Llama
    if (config.contains("tie_word_embeddings") && !config["tie_word_embeddings"].is_null()) {
        const json& t = config["tie_word_embeddings"];
        if (!t.is_boolean())
            fail("%s: tie_word_embeddings is %s, not true or false", what.c_str(),
                 t.dump().substr(0, 40).c_str());
        *tied = t.get<bool>();
    }
    return c;
}

// A tensor's shape as transformers stores it: (rows, cols) for a matrix, (C) for a norm's weight.
static std::vector<uint64_t> hf_shape(const LlamaTensor& t) {
    if (!t.is_matrix()) return {(uint64_t)t.rows};
    return {(uint64_t)t.rows, (uint64_t)t.cols};
}

// ---- export ----

void export_hf_llama_folder(const LlamaModelFile& model, const std::string& dir, StDtype dtype) {
    check_export_target(dir);
    const LlamaConfig& c = model.config;
    std::vector<StOutTensor> tensors;
    for (const LlamaTensor& t : llama_tensors(c)) {
        const float* ours = model.params.data() + t.offset;
        tensors.push_back({t.name, hf_shape(t), std::vector<float>(ours, ours + t.size())});
    }
    TempFolder folder(dir);
    const std::string tmp = folder.path();
    write_safetensors(tmp + "/model.safetensors", tensors, dtype, {{"format", "pt"}});
    write_text(tmp + "/config.json", hf_llama_config_json(c, dtype));
    const json generation = {{"bos_token_id", begin_of_text(c)},
                             {"eos_token_id", end_of_text(c)},
                             {"_from_model_config", true}};
    write_text(tmp + "/generation_config.json", generation.dump(2) + "\n");
    folder.commit();  // replaces the empty folder given, if any
}

// ---- import ----

namespace {

// What the weight files have given so far.
struct LlamaImport {
    std::map<std::string, const LlamaTensor*> wanted;  // by name
    std::map<std::string, std::string> found;          // name → the file it came from
    std::set<std::string> dtypes;
};

// Buffers some checkpoints carry beside the weights (RoPE's frequencies), which hold no weights.
bool is_buffer(const std::string& name) {
    const std::string suffix = ".rotary_emb.inv_freq";
    return name.size() > suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Reads one tensor of the weight file at path into the model, after checking that the model wants
// it, once, with its shape and a float dtype.
void import_tensor(const std::string& path, const StHeader& header, const StTensor& st,
                   bool allow_nonfinite, LlamaModelFile* model, LlamaImport* state) {
    if (is_buffer(st.name)) return;
    const auto it = state->wanted.find(st.name);
    if (it == state->wanted.end())
        fail("%s: unexpected tensor '%s' for a Llama with num_hidden_layers=%d (config.json)",
             path.c_str(), st.name.c_str(), model->config.num_layers);
    if (state->found.count(st.name))
        fail("%s: tensor '%s' appears twice (also in %s)", path.c_str(), st.name.c_str(),
             state->found[st.name].c_str());
    const LlamaTensor& t = *it->second;
    if (st.shape != hf_shape(t))
        fail("%s: tensor '%s' has shape %s; config.json's Llama needs %s", path.c_str(),
             st.name.c_str(), shape_text(st.shape).c_str(), shape_text(hf_shape(t)).c_str());
    const std::vector<float> values = read_float_tensor(path, header, st, "Llama", allow_nonfinite);
    std::copy(values.begin(), values.end(), model->params.begin() + t.offset);
    state->dtypes.insert(dtype_name(st.dtype));
    state->found[st.name] = path;
}

// Every tensor was found; a tied model's absent lm_head becomes the embedding, a present one must
// equal it.
void finish_import(const std::string& dir, bool tied, const LlamaImport& state,
                   LlamaModelFile* model) {
    const std::vector<LlamaTensor> tensors = llama_tensors(model->config);
    const LlamaTensor& embed = tensors[llama_embedding_index()];
    const LlamaTensor& head = tensors[llama_lm_head_index(model->config)];
    for (const LlamaTensor& t : tensors)
        if (!state.found.count(t.name) && !(tied && &t == &head))
            fail("%s: no tensor '%s' in the weights%s", dir.c_str(), t.name.c_str(),
                 &t == &head ? " (config.json's tie_word_embeddings is false)" : "");
    float* p = model->params.data();
    if (!state.found.count(head.name)) {
        std::copy(p + embed.offset, p + embed.offset + embed.size(), p + head.offset);
        return;
    }
    if (tied && memcmp(p + embed.offset, p + head.offset, embed.size() * sizeof(float)) != 0)
        fail("%s: lm_head.weight differs from model.embed_tokens.weight, but config.json ties them",
             state.found.at(head.name).c_str());
}

}  // namespace

LlamaModelFile import_hf_llama_folder(const std::string& dir, std::string* source_dtypes,
                                     bool allow_nonfinite) {
    const json config = read_hf_config(dir);
    bool tied = false;
    LlamaModelFile model;
    model.config = parse_hf_llama_config(config, dir + "/config.json", &tied);
    model.params.assign(llama_param_count(model.config), 0.0f);
    const std::vector<LlamaTensor> tensors = llama_tensors(model.config);
    LlamaImport state;
    for (const LlamaTensor& t : tensors) state.wanted[t.name] = &t;
    for (const std::string& path : weight_files(dir)) {
        const StHeader header = read_safetensors_header(path);
        for (const StTensor& st : header.tensors) import_tensor(path, header, st, allow_nonfinite, &model, &state);
    }
    finish_import(dir, tied, state, &model);
    model.type = imported_weight_type(state.dtypes, source_dtypes);
    return model;
}

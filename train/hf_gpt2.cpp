// GPT-2 folders in transformers' layout, to and from our model files (see hf_gpt2.h).
#include "train/hf_gpt2.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "base/errors.h"
#include "base/file_io.h"
#include "base/model_descriptor.h"
#include "train/hf_folder.h"

using nlohmann::json;
namespace fs = std::filesystem;

// End of text: GPT-2's token 50256, or the last token of a smaller vocabulary.
static int end_of_text(const GPTConfig& c) { return std::min(50256, c.vocab_size - 1); }

std::string hf_config_json(const GPTConfig& c, StDtype dtype) {
    // No dropout: the model was trained without it, and fine-tuning continues the same way.
    const json config = {
        {"architectures", {"GPT2LMHeadModel"}},
        {"model_type", "gpt2"},
        {"vocab_size", c.vocab_size},
        {"n_positions", c.max_seq_len},
        {"n_ctx", c.max_seq_len},
        {"n_embd", c.channels},
        {"n_layer", c.num_layers},
        {"n_head", c.num_heads},
        {"n_inner", nullptr},
        {"activation_function", "gelu_new"},
        {"layer_norm_epsilon", 1e-5},
        {"initializer_range", 0.02},
        {"resid_pdrop", 0.0},
        {"embd_pdrop", 0.0},
        {"attn_pdrop", 0.0},
        {"scale_attn_weights", true},
        {"scale_attn_by_inverse_layer_idx", false},
        {"reorder_and_upcast_attn", false},
        {"tie_word_embeddings", true},
        {"bos_token_id", end_of_text(c)},
        {"eos_token_id", end_of_text(c)},
        {"use_cache", true},
        {"torch_dtype", torch_dtype_name(dtype)},
    };
    return config.dump(2) + "\n";
}

GPTConfig parse_hf_config(const std::string& text, const std::string& what) {
    const json config = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded()) fail("%s: not valid JSON", what.c_str());
    if (!config.is_object()) fail("%s: not a JSON object", what.c_str());
    if (!config.contains("model_type") || !config["model_type"].is_string())
        fail("%s: no model_type (a GPT-2 config.json says \"model_type\": \"gpt2\")", what.c_str());
    const std::string type = config["model_type"].get<std::string>();
    if (type != "gpt2")
        fail("%s: model_type '%s' is not gpt2: only GPT-2 models are read", what.c_str(),
             type.c_str());
    if (config.contains("architectures")) {
        const json& a = config["architectures"];
        bool gpt2 = false;
        if (a.is_array())
            for (const json& name : a)
                if (name.is_string() && (name == "GPT2LMHeadModel" || name == "GPT2Model"))
                    gpt2 = true;
        if (!gpt2)
            fail("%s: architectures %s names neither GPT2LMHeadModel nor GPT2Model", what.c_str(),
                 a.dump().substr(0, 60).c_str());
    }
    GPTConfig c;
    c.num_layers = int_field(config, "n_layer", what, 1, 1 << 16);
    c.num_heads = int_field(config, "n_head", what, 1, 1 << 16);
    c.channels = int_field(config, "n_embd", what, 1, 1 << 20);
    c.vocab_size = int_field(config, "vocab_size", what, 1, 65536);
    c.max_seq_len = int_field(config, config.contains("n_positions") ? "n_positions" : "n_ctx", what,
                              1, 1 << 20);
    c.padded_vocab_size = padded_vocab_size(c.vocab_size);
    validate_config(c, what);
    if (config.contains("n_inner") && !config["n_inner"].is_null() &&
        !(config["n_inner"].is_number_integer() && config["n_inner"] == 4 * (long)c.channels))
        fail("%s: n_inner %s: this trainer's MLP is 4·n_embd = %d wide", what.c_str(),
             config["n_inner"].dump().substr(0, 40).c_str(), 4 * c.channels);
    if (config.contains("activation_function")) {
        const json& f = config["activation_function"];
        if (!f.is_string() || (f != "gelu_new" && f != "gelu_pytorch_tanh"))
            fail("%s: activation_function %s: this trainer's GELU is the tanh form (gelu_new)",
                 what.c_str(), f.dump().substr(0, 40).c_str());
    }
    if (config.contains("layer_norm_epsilon")) {
        const json& e = config["layer_norm_epsilon"];
        if (!e.is_number() || std::fabs(e.get<double>() - 1e-5) > 1e-12)
            fail("%s: layer_norm_epsilon %s: this trainer's LayerNorm uses 1e-05", what.c_str(),
                 e.dump().substr(0, 40).c_str());
    }
    require_bool(config, "tie_word_embeddings", true, what,
                 "the output layer must be the token embedding (GPT-2 ties them)");
    require_bool(config, "scale_attn_weights", true, what,
                 "attention scores must be scaled by 1/sqrt(head size)");
    require_bool(config, "scale_attn_by_inverse_layer_idx", false, what,
                 "attention scaled per layer is not GPT-2's");
    require_bool(config, "add_cross_attention", false, what, "cross-attention is not GPT-2's");
    return c;
}

std::vector<HfTensor> hf_gpt2_tensors(const GPTConfig& c) {
    const uint64_t V = c.vocab_size, C = c.channels, T = c.max_seq_len;
    std::vector<HfTensor> list = {{"wte.weight", WTE, 0, {V, C}, false},
                                  {"wpe.weight", WPE, 0, {T, C}, false}};
    for (int l = 0; l < c.num_layers; l++) {
        const std::string h = "h." + std::to_string(l) + ".";
        const std::vector<HfTensor> layer = {
            {h + "ln_1.weight", LN1W, l, {C}, false},
            {h + "ln_1.bias", LN1B, l, {C}, false},
            {h + "attn.c_attn.weight", QKVW, l, {C, 3 * C}, true},
            {h + "attn.c_attn.bias", QKVB, l, {3 * C}, false},
            {h + "attn.c_proj.weight", ATTPROJW, l, {C, C}, true},
            {h + "attn.c_proj.bias", ATTPROJB, l, {C}, false},
            {h + "ln_2.weight", LN2W, l, {C}, false},
            {h + "ln_2.bias", LN2B, l, {C}, false},
            {h + "mlp.c_fc.weight", FCW, l, {C, 4 * C}, true},
            {h + "mlp.c_fc.bias", FCB, l, {4 * C}, false},
            {h + "mlp.c_proj.weight", FCPROJW, l, {4 * C, C}, true},
            {h + "mlp.c_proj.bias", FCPROJB, l, {C}, false},
        };
        list.insert(list.end(), layer.begin(), layer.end());
    }
    list.push_back({"ln_f.weight", LNFW, 0, {C}, false});
    list.push_back({"ln_f.bias", LNFB, 0, {C}, false});
    return list;
}

// Where one HfTensor's values start in our parameter buffer (`elements` per layer slice; for wte
// the first V rows).
static size_t our_offset(const ParamLayout& layout, const HfTensor& t, size_t elements) {
    const bool per_layer = t.tensor >= LN1W && t.tensor <= FCPROJB;
    return layout.offset[t.tensor] + (per_layer ? (size_t)t.layer * elements : 0);
}

// ---- export ----

// Copies a tokenizer file into the folder; read through base/file_io.h, which refuses a FIFO or a
// device rather than waiting on it.
static void copy_file(const std::string& from, const std::string& to) {
    std::string bytes(file_size(from), '\0');
    if (!bytes.empty()) read_bytes(from, 0, &bytes[0], bytes.size());
    write_text(to, bytes);
}

void export_hf_folder(const ModelFile& model, const std::string& dir, StDtype dtype,
                      const HfTokenizerFiles& tokenizer) {
    check_export_target(dir);
    const GPTConfig& c = model.config;
    const ParamLayout layout = param_layout(c);
    std::vector<StOutTensor> tensors;
    for (const HfTensor& t : hf_gpt2_tensors(c)) {
        StOutTensor out;
        out.name = "transformer." + t.name;
        out.shape = t.shape;
        size_t n = 1;
        for (uint64_t d : t.shape) n *= d;
        const float* ours = model.params.data() + our_offset(layout, t, n);
        out.values.resize(n);
        if (!t.transposed) {
            std::copy(ours, ours + n, out.values.begin());
        } else {
            // transformers' (in, out) from our (out, in): hf[i][o] = ours[o][i].
            const size_t in = t.shape[0], outs = t.shape[1];
            for (size_t i = 0; i < in; i++)
                for (size_t o = 0; o < outs; o++) out.values[i * outs + o] = ours[o * in + i];
        }
        tensors.push_back(std::move(out));
    }
    TempFolder folder(dir);
    const std::string tmp = folder.path();
    write_safetensors(tmp + "/model.safetensors", tensors, dtype, {{"format", "pt"}});
    write_text(tmp + "/config.json", hf_config_json(c, dtype));
    const json generation = {{"bos_token_id", end_of_text(c)},
                             {"eos_token_id", end_of_text(c)},
                             {"_from_model_config", true}};
    write_text(tmp + "/generation_config.json", generation.dump(2) + "\n");
    if (!tokenizer.encoder_json.empty()) {
        copy_file(tokenizer.encoder_json, tmp + "/vocab.json");
        copy_file(tokenizer.vocab_bpe, tmp + "/merges.txt");
        const json tokenizer_config = {
            {"tokenizer_class", "GPT2Tokenizer"}, {"model_max_length", c.max_seq_len},
            {"bos_token", "<|endoftext|>"},       {"eos_token", "<|endoftext|>"},
            {"unk_token", "<|endoftext|>"},       {"add_prefix_space", false},
        };
        write_text(tmp + "/tokenizer_config.json", tokenizer_config.dump(2) + "\n");
    }
    folder.commit();  // replaces the empty folder given, if any
}

// ---- import ----

namespace {

// Strips the "transformer." prefix; returns false for the causal-mask buffers, which hold no weights.
bool weight_name(std::string name, std::string* out) {
    const std::string prefix = "transformer.";
    if (name.compare(0, prefix.size(), prefix) == 0) name = name.substr(prefix.size());
    const auto ends_with = [&](const std::string& suffix) {
        return name.size() > suffix.size() &&
               name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    if (name.compare(0, 2, "h.") == 0 && (ends_with(".attn.bias") || ends_with(".attn.masked_bias")))
        return false;
    *out = name;
    return true;
}

// What the weight files have given so far.
struct ImportedWeights {
    std::map<std::string, std::string> found;  // our name → the file it came from
    std::set<std::string> dtypes;
    std::vector<float> lm_head;
    std::string lm_head_file;
};

// Copies one tensor's values to its place in our parameters: transformers' (in, out) matrices
// become our (out, in).
void place_values(const HfTensor& t, const std::vector<float>& values, float* ours) {
    if (!t.transposed) {
        std::copy(values.begin(), values.end(), ours);
    } else {
        const size_t in = t.shape[0], outs = t.shape[1];
        for (size_t i = 0; i < in; i++)
            for (size_t o = 0; o < outs; o++) ours[o * in + i] = values[i * outs + o];
    }
}

// Reads one tensor of the weight file at `path` into the model, after checking that the model
// wants it (once), with its shape and a float dtype; lm_head.weight is kept aside, to be compared
// with wte once all are read. The causal-mask buffers are skipped.
void import_tensor(const std::string& path, const StHeader& header, const StTensor& st,
                   const std::map<std::string, const HfTensor*>& wanted, const ParamLayout& layout,
                   bool allow_nonfinite, ModelFile* model, ImportedWeights* imported) {
    const GPTConfig& c = model->config;
    std::string name;
    if (!weight_name(st.name, &name)) return;
    if (imported->found.count(name) || (name == "lm_head.weight" && !imported->lm_head_file.empty()))
        fail("%s: tensor '%s' appears twice (with and without the transformer. prefix, "
             "or in two files)", path.c_str(), name.c_str());
    const bool head = name == "lm_head.weight";
    const auto it = wanted.find(name);
    if (!head && it == wanted.end())
        fail("%s: unexpected tensor '%s' for a GPT-2 with n_layer=%d (config.json)",
             path.c_str(), st.name.c_str(), c.num_layers);
    const std::vector<uint64_t> shape =
        head ? std::vector<uint64_t>{(uint64_t)c.vocab_size, (uint64_t)c.channels}
             : it->second->shape;
    if (st.shape != shape)
        fail("%s: tensor '%s' has shape %s; config.json's GPT-2 needs %s", path.c_str(),
             st.name.c_str(), shape_text(st.shape).c_str(), shape_text(shape).c_str());
    std::vector<float> values = read_float_tensor(path, header, st, "GPT-2", allow_nonfinite);
    imported->dtypes.insert(dtype_name(st.dtype));
    if (head) {
        imported->lm_head = std::move(values);
        imported->lm_head_file = path;
        return;
    }
    const HfTensor& t = *it->second;
    place_values(t, values, model->params.data() + our_offset(layout, t, values.size()));
    imported->found[name] = path;
}

// Every tensor the model needs was found, and lm_head (where given) is the token embedding.
void check_all_imported(const std::string& dir, const std::vector<HfTensor>& expected,
                        const ImportedWeights& imported, const ModelFile& model,
                        const ParamLayout& layout) {
    for (const HfTensor& t : expected)
        if (!imported.found.count(t.name))
            fail("%s: no tensor 'transformer.%s' (or '%s') in the weights", dir.c_str(),
                 t.name.c_str(), t.name.c_str());
    if (!imported.lm_head.empty()) {
        const float* wte = model.params.data() + layout.offset[WTE];
        for (size_t i = 0; i < imported.lm_head.size(); i++)
            if (memcmp(&imported.lm_head[i], &wte[i], 4) != 0)
                fail("%s: lm_head.weight differs from wte.weight (row %zu): an untied output layer, "
                     "which GPT-2 and this trainer do not have", imported.lm_head_file.c_str(),
                     i / model.config.channels);
    }
}

}  // namespace

ModelFile import_hf_folder(const std::string& dir, std::string* source_dtypes,
                           bool allow_nonfinite) {
    read_hf_config(dir);  // the folder, its config.json and the JSON checked
    const std::string config_path = dir + "/config.json";
    ModelFile model;
    model.config = parse_hf_config(read_text(config_path), config_path);
    const ParamLayout layout = param_layout(model.config);
    model.params.assign(layout.total, 0.0f);

    std::map<std::string, const HfTensor*> wanted;
    const std::vector<HfTensor> expected = hf_gpt2_tensors(model.config);
    for (const HfTensor& t : expected) wanted[t.name] = &t;
    ImportedWeights imported;
    for (const std::string& path : weight_files(dir)) {
        const StHeader header = read_safetensors_header(path);
        for (const StTensor& st : header.tensors)
            import_tensor(path, header, st, wanted, layout, allow_nonfinite, &model, &imported);
    }
    check_all_imported(dir, expected, imported, model, layout);
    model.type = imported_weight_type(imported.dtypes, source_dtypes);
    return model;
}

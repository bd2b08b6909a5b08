// The families' parameter tables (see param_table.h).
#include "parallel/plan/param_table.h"

#include "base/errors.h"

const ParamSpec& ParamTable::spec(int id) const {
    for (const ParamSpec& s : tensors)
        if (s.id == id) return s;
    fail("internal error: no parameter tensor %d in the model's table", id);
}

int ParamTable::tensor_index(int id, int layer) const {
    int index = 0;
    for (const ParamSpec& s : tensors)
        if (s.id < id) index += s.group == ParamGroup::LAYER ? num_layers : 1;
    return index + (spec(id).group == ParamGroup::LAYER ? layer : 0);
}

int ParamTable::tensor_count() const {
    int count = 0;
    for (const ParamSpec& s : tensors) count += s.group == ParamGroup::LAYER ? num_layers : 1;
    return count;
}

ParamTable gpt2_param_table(const GPTConfig& c) {
    const ParamLayout layout = param_layout(c);
    const size_t L = c.num_layers, C = c.channels, Vp = c.padded_vocab_size, maxT = c.max_seq_len;
    ParamTable table;
    table.num_layers = c.num_layers, table.channels = C, table.layout_total = layout.total;
    table.tied_classifier = true;
    // Tensor `id`: rows × row_length per layer (or whole), where llm.c's layout puts it (tensor-major:
    // layer l's copy follows layer l−1's).
    auto add = [&](int id, const char* name, ParamGroup group, size_t rows, size_t row_length, TensorSplit split,
                   int blocks = 1) {
        ParamSpec s{id, name, group, layout.offset[id], group == ParamGroup::LAYER ? layout.size[id] / L : 0,
                    rows, row_length, split, blocks};
        s.sequence_summed = id == LN1W || id == LN1B || id == LN2W || id == LN2B || id == LNFW || id == LNFB;
        s.decayed = is_weight_matrix(id);
        if (split == TensorSplit::HEADS) s.head_rows = C / c.num_heads;
        table.tensors.push_back(s);
    };
    using G = ParamGroup;
    using S = TensorSplit;
    add(WPE, "wpe", G::POSITIONS, maxT, C, S::REPLICATED);
    add(WTE, "wte", G::VOCABULARY, Vp, C, S::VOCABULARY);
    add(LN1W, "ln1w", G::LAYER, C, 1, S::REPLICATED);
    add(LN1B, "ln1b", G::LAYER, C, 1, S::REPLICATED);
    add(LN2W, "ln2w", G::LAYER, C, 1, S::REPLICATED);
    add(LN2B, "ln2b", G::LAYER, C, 1, S::REPLICATED);
    add(ATTPROJB, "attprojb", G::LAYER, C, 1, S::REPLICATED);
    add(FCPROJB, "fcprojb", G::LAYER, C, 1, S::REPLICATED);
    add(QKVW, "qkvw", G::LAYER, 3 * C, C, S::HEADS, 3);
    add(QKVB, "qkvb", G::LAYER, 3 * C, 1, S::HEADS, 3);
    add(ATTPROJW, "attprojw", G::LAYER, C, C, S::ROW);
    add(FCW, "fcw", G::LAYER, 4 * C, C, S::COLUMN);
    add(FCB, "fcb", G::LAYER, 4 * C, 1, S::COLUMN);
    add(FCPROJW, "fcprojw", G::LAYER, C, 4 * C, S::ROW);
    add(LNFW, "lnfw", G::FINAL_NORM, C, 1, S::REPLICATED);
    add(LNFB, "lnfb", G::FINAL_NORM, C, 1, S::REPLICATED);
    return table;
}

ParamTable llama_param_table(const LlamaConfig& c) {
    const std::vector<LlamaTensor> file = llama_tensors(c);
    ParamTable table;
    table.num_layers = c.num_layers, table.channels = c.channels, table.layout_total = llama_param_count(c);
    table.tied_classifier = false;
    size_t layer_size = 0;  // one layer's nine tensors, one after the other in the file
    for (int k = 0; k < NUM_LLAMA_LAYER_TENSORS; k++) layer_size += file[llama_layer_tensor_index(0, k)].size();
    // Tensor `id`, the file's entry `t` (layer 0's for a per-layer tensor).
    auto add = [&](int id, const LlamaTensor& t, ParamGroup group, TensorSplit split, bool norm) {
        ParamSpec s{id, t.name, group, t.offset, group == ParamGroup::LAYER ? layer_size : 0, (size_t)t.rows,
                    (size_t)t.cols, split};
        s.sequence_summed = norm;
        s.decayed = t.is_matrix();
        if (split == TensorSplit::HEADS) s.head_rows = c.head_size();
        table.tensors.push_back(s);
    };
    auto layer = [&](int kind, TensorSplit split, bool norm = false) {
        add(kind, file[llama_layer_tensor_index(0, kind)], ParamGroup::LAYER, split, norm);
    };
    using S = TensorSplit;
    add(LLAMA_EMBEDDING, file[llama_embedding_index()], ParamGroup::VOCABULARY, S::VOCABULARY, false);
    layer(ATTN_NORM, S::REPLICATED, true);
    layer(MLP_NORM, S::REPLICATED, true);
    layer(Q_PROJ, S::HEADS);
    layer(K_PROJ, S::HEADS);
    layer(V_PROJ, S::HEADS);
    layer(O_PROJ, S::ROW);
    layer(GATE_PROJ, S::COLUMN);
    layer(UP_PROJ, S::COLUMN);
    layer(DOWN_PROJ, S::ROW);
    add(LLAMA_FINAL_NORM, file[llama_final_norm_index(c)], ParamGroup::FINAL_NORM, S::REPLICATED, true);
    add(LLAMA_LM_HEAD, file[llama_lm_head_index(c)], ParamGroup::FINAL_NORM, S::VOCABULARY, false);
    return table;
}

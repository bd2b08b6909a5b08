// The device layout of a family's parameters (parallel/plan/param_buckets.h from the family's table,
// param_table.h): GPT-2's buckets segment by segment as the header documents them (the layout the
// trainer has always used); for both families, on every tensor rank, pipeline stage and data-rank
// count of small meshes, every parameter is written by exactly one rank, a split tensor's elements
// sit on exactly one tensor rank, stochastic rounding's counters are unique across the tensor group,
// buckets are padded for their chunks and start with their copies; Llama's table against its file
// layout; a tensor the tensor ranks cannot split is a clear error.
#include <algorithm>
#include <map>
#include <string>

#include "base/errors.h"
#include "base/model_tensors.h"
#include "parallel/plan/compression_cost.h"
#include "parallel/plan/param_buckets.h"
#include "test/test.h"

namespace {

GPTConfig tiny_gpt2() {
    GPTConfig c;
    c.max_seq_len = 8, c.vocab_size = 100, c.padded_vocab_size = 128, c.num_layers = 2, c.num_heads = 4,
    c.channels = 16;
    return c;
}

LlamaConfig tiny_llama(int layers = 3) {
    LlamaConfig c;
    c.num_layers = layers, c.channels = 16, c.num_heads = 4, c.num_kv_heads = 2, c.ffn_channels = 24,
    c.vocab_size = 11, c.max_seq_len = 8;
    return c;
}

ModelSlice slice_of(int t, int T, int first, int end, bool first_stage, bool last_stage) {
    ModelSlice s;
    s.tensor_rank = t, s.tensor_ranks = T, s.first_layer = first, s.end_layer = end;
    s.first_stage = first_stage, s.last_stage = last_stage;
    return s;
}

// A segment as the test spells it: tensor, layout offset, length, row length, row stride, key,
// written.
struct Expected {
    int tensor;
    size_t layout_offset, length, row_length, row_stride, key_offset;
    bool written;
};

void check_segments(const ParamBuckets& b, int bucket, const std::vector<Expected>& expected) {
    const ParamBucket& k = b.buckets[bucket];
    CHECK_MSG(k.segment_count == (int)expected.size(), "bucket %d: %d segments, expected %zu", bucket, k.segment_count,
              expected.size());
    size_t at = k.offset;
    for (size_t i = 0; i < expected.size(); i++) {
        const ParamSegment& s = b.segments[k.first_segment + i];
        const Expected& e = expected[i];
        CHECK_MSG(s.tensor == e.tensor && s.device_offset == at && s.length == e.length &&
                      s.layout_offset == e.layout_offset && s.row_length == e.row_length &&
                      s.row_stride == e.row_stride && s.key_offset == e.key_offset && s.written == e.written,
                  "bucket %d segment %zu: tensor %d at %zu, layout %zu, length %zu, rows of %zu every %zu, key %zu, "
                  "written %d; expected tensor %d at %zu, layout %zu, length %zu, rows of %zu every %zu, key %zu, "
                  "written %d",
                  bucket, i, s.tensor, s.device_offset, s.layout_offset, s.length, s.row_length, s.row_stride,
                  s.key_offset, (int)s.written, e.tensor, at, e.layout_offset, e.length, e.row_length, e.row_stride,
                  e.key_offset, (int)e.written);
        at += s.length;
    }
}

}  // namespace

// GPT-2 on tensor rank 1 of 2, the whole model, one data rank, as param_buckets.h lays it out.
TEST(gpt2_buckets_as_documented) {
    const GPTConfig c = tiny_gpt2();
    const ParamLayout p = param_layout(c);
    const size_t C = 16, h = C / 2;  // h: this rank's rows of each third, columns of a row-parallel row
    const ParamBuckets b = make_param_buckets(c, 1, slice_of(1, 2, 0, -1, true, true));
    CHECK(b.buckets.size() == 5 && b.position_bucket() == 0 && b.vocabulary_bucket() == 1 &&
          b.layer_bucket(0) == 2 && b.layer_bucket(1) == 3 && b.final_norm_bucket() == 4);
    check_segments(b, 0, {{WPE, p.offset[WPE], 8 * C, 8 * C, 8 * C, p.offset[WPE], false}});
    const size_t wte = p.offset[WTE] + 64 * C;  // rows [64, 128): vocab_slice_rows(128, 2) = 64
    check_segments(b, 1, {{WTE, wte, 64 * C, 64 * C, 64 * C, wte, true}});
    for (size_t l = 0; l < 2; l++) {
        auto at = [&](int t) { return p.offset[t] + l * (p.size[t] / 2); };
        std::vector<Expected> e;
        for (int t : {LN1W, LN1B, LN2W, LN2B, ATTPROJB, FCPROJB}) e.push_back({t, at(t), C, C, C, at(t), false});
        for (size_t third = 0; third < 3; third++) {
            const size_t o = at(QKVW) + (third * C + h) * C;
            e.push_back({QKVW, o, h * C, h * C, h * C, o, true});
        }
        for (size_t third = 0; third < 3; third++) {
            const size_t o = at(QKVB) + third * C + h;
            e.push_back({QKVB, o, h, h, h, o, true});
        }
        e.push_back({ATTPROJW, at(ATTPROJW) + h, C * h, h, C, at(ATTPROJW) + C * h, true});
        e.push_back({FCW, at(FCW) + 2 * C * C, 2 * C * C, 2 * C * C, 2 * C * C, at(FCW) + 2 * C * C, true});
        e.push_back({FCB, at(FCB) + 2 * C, 2 * C, 2 * C, 2 * C, at(FCB) + 2 * C, true});
        e.push_back({FCPROJW, at(FCPROJW) + 2 * C, C * 2 * C, 2 * C, 4 * C, at(FCPROJW) + C * 2 * C, true});
        check_segments(b, 2 + l, e);
        CHECK(b.buckets[2 + l].unwritten == 6 * C && b.buckets[2 + l].sequence_summed == 4 * C);
    }
    check_segments(b, 4, {{LNFW, p.offset[LNFW], C, C, C, p.offset[LNFW], false},
                          {LNFB, p.offset[LNFB], C, C, C, p.offset[LNFB], false}});
    CHECK(b.buckets[4].sequence_summed == 2 * C);

    // One tensor rank: each third continues the one before it, so qkvw is one segment.
    const ParamBuckets whole = make_param_buckets(c, 1);
    const ParamBucket& layer0 = whole.buckets[whole.layer_bucket(0)];
    const ParamSegment& qkvw = whole.segments[layer0.first_segment + 6];
    CHECK(qkvw.tensor == QKVW && qkvw.length == 3 * C * C);
    // A last stage that is not the first: the classifier's copy of wte first, unwritten.
    const ParamBuckets last = make_param_buckets(c, 1, slice_of(0, 1, 1, 2, false, true));
    CHECK(last.position_bucket() == -1 && last.vocabulary_bucket() == 0 && last.layer_bucket(1) == 1 &&
          last.final_norm_bucket() == 2);
    check_segments(last, 0, {{WTE, p.offset[WTE], 128 * C, 128 * C, 128 * C, p.offset[WTE], false}});
}

// GPT-2's table numbers its tensors as base/model_tensors.h lists them (the layer-adaptive optimizers'
// sums), decays the weight matrices, and gives PowerSGD the rows it has always factored.
TEST(gpt2_table_keeps_the_tensor_numbers_and_settings) {
    const GPTConfig c = tiny_gpt2();
    const ParamTable table = gpt2_param_table(c);
    CHECK(table.tensor_count() == model_tensor_count(c) && (int)table.tensors.size() == NUM_PARAM_TENSORS);
    for (int kind = 0; kind < NUM_PARAM_TENSORS; kind++) {
        const ParamSpec& s = table.spec(kind);
        CHECK_MSG(s.decayed == is_weight_matrix(kind) && s.matrix_row_length() == matrix_row_length(kind, c.channels),
                  "%s", s.name.c_str());
        for (int l = 0; l < c.num_layers; l++)
            CHECK_MSG(table.tensor_index(kind, l) == model_tensor_index(c, kind, l), "%s of layer %d", s.name.c_str(),
                      l);
    }
}

// Llama's table: every tensor where llama_tensors puts it, in every layer.
TEST(llama_table_follows_the_file_layout) {
    const LlamaConfig c = tiny_llama();
    const ParamTable table = llama_param_table(c);
    const std::vector<LlamaTensor> file = llama_tensors(c);
    CHECK(table.layout_total == llama_param_count(c) && (int)table.tensors.size() == NUM_LLAMA_TENSORS);
    CHECK(!table.tied_classifier);
    size_t sum = 0;
    for (const ParamSpec& s : table.tensors) {
        const int layers = s.group == ParamGroup::LAYER ? c.num_layers : 1;
        for (int l = 0; l < layers; l++) {
            const int index = s.id == LLAMA_EMBEDDING    ? llama_embedding_index()
                              : s.id == LLAMA_FINAL_NORM ? llama_final_norm_index(c)
                              : s.id == LLAMA_LM_HEAD    ? llama_lm_head_index(c)
                                                         : llama_layer_tensor_index(l, s.id);
            const LlamaTensor& f = file[index];
            CHECK_MSG(s.offset + l * s.layer_stride == f.offset && s.rows == (size_t)f.rows &&
                          s.row_length == (size_t)f.cols && s.decayed == f.is_matrix(),
                      "%s of layer %d", f.name.c_str(), l);
            sum += s.size();
        }
    }
    CHECK(sum == table.layout_total);
    // The layer-adaptive optimizers' numbering: every (tensor, layer) once, 9 per layer and 3 more.
    std::vector<int> seen(table.tensor_count(), 0);
    for (const ParamSpec& s : table.tensors)
        for (int l = 0; l < (s.group == ParamGroup::LAYER ? c.num_layers : 1); l++)
            seen.at(table.tensor_index(s.id, l))++;
    CHECK(table.tensor_count() == 9 * c.num_layers + 3 && std::count(seen.begin(), seen.end(), 1) == (long)seen.size());
}

// Llama on tensor rank 1 of 2: its key and value head (KV = 2), its query heads, its columns of o_proj.
TEST(llama_splits_query_and_key_value_heads) {
    const LlamaConfig c = tiny_llama(1);
    const std::vector<LlamaTensor> file = llama_tensors(c);
    const size_t C = 16, hs = 4;
    const ParamBuckets b = make_param_buckets(llama_param_table(c), 1, slice_of(1, 2, 0, -1, true, true));
    CHECK(b.position_bucket() == -1 && b.vocabulary_bucket() == 0 && b.layer_bucket(0) == 1 &&
          b.final_norm_bucket() == 2 && b.buckets.size() == 3);
    auto base = [&](int kind) { return file[llama_layer_tensor_index(0, kind)].offset; };
    const size_t o = base(O_PROJ), d = base(DOWN_PROJ);
    check_segments(b, 1, {{ATTN_NORM, base(ATTN_NORM), C, C, C, base(ATTN_NORM), false},
                          {MLP_NORM, base(MLP_NORM), C, C, C, base(MLP_NORM), false},
                          {Q_PROJ, base(Q_PROJ) + 2 * hs * C, 2 * hs * C, 2 * hs * C, 2 * hs * C,
                           base(Q_PROJ) + 2 * hs * C, true},
                          {K_PROJ, base(K_PROJ) + hs * C, hs * C, hs * C, hs * C, base(K_PROJ) + hs * C, true},
                          {V_PROJ, base(V_PROJ) + hs * C, hs * C, hs * C, hs * C, base(V_PROJ) + hs * C, true},
                          {O_PROJ, o + C / 2, C * C / 2, C / 2, C, o + C * C / 2, true},
                          {GATE_PROJ, base(GATE_PROJ) + 12 * C, 12 * C, 12 * C, 12 * C, base(GATE_PROJ) + 12 * C,
                           true},
                          {UP_PROJ, base(UP_PROJ) + 12 * C, 12 * C, 12 * C, 12 * C, base(UP_PROJ) + 12 * C, true},
                          {DOWN_PROJ, d + 12, C * 12, 12, 24, d + C * 12, true}});
    CHECK(b.buckets[1].unwritten == 2 * C && b.buckets[1].sequence_summed == 2 * C);
    // The vocabulary: 11 rows, vocab_slice_rows(11, 2) = 8 per rank: rank 1 has rows 8..10 and 5 rows of padding.
    const size_t embed = file[llama_embedding_index()].offset, head = file[llama_lm_head_index(c)].offset;
    check_segments(b, 0, {{LLAMA_EMBEDDING, embed + 8 * C, 3 * C, 3 * C, 3 * C, embed + 8 * C, true}});
    check_segments(b, 2, {{LLAMA_FINAL_NORM, file[llama_final_norm_index(c)].offset, C, C, C,
                           file[llama_final_norm_index(c)].offset, false},
                          {LLAMA_LM_HEAD, head + 8 * C, 3 * C, 3 * C, 3 * C, head + 8 * C, true}});
    CHECK(b.buckets[2].sequence_summed == C && b.device_offset(LLAMA_LM_HEAD) == b.buckets[2].offset + C);
    // Pipeline stages: the untied lm_head lives with the final norm, so a later stage holds no vocabulary.
    const ParamBuckets last = make_param_buckets(llama_param_table(tiny_llama()), 1, slice_of(0, 1, 2, 3, false, true));
    CHECK(last.vocabulary_bucket() == -1 && last.position_bucket() == -1 && last.layer_bucket(2) == 0 &&
          last.final_norm_bucket() == 1 && last.buckets.size() == 2);
}

// Every mesh of up to 2 tensor ranks, 3 pipeline stages and 3 data ranks, for both families.
TEST(every_parameter_has_one_writer) {
    const std::vector<std::pair<std::string, ParamTable>> tables = {{"GPT-2", gpt2_param_table(tiny_gpt2())},
                                                                    {"Llama 3", llama_param_table(tiny_llama())}};
    for (const auto& [family, table] : tables)
        for (int T : {1, 2})
            for (int P : {1, 2, 3})
                for (int R : {1, 3}) {
                    if (P > table.num_layers) continue;
                    std::vector<int> written(table.layout_total, 0);
                    for (int stage = 0; stage < P; stage++) {
                        const int first = stage * table.num_layers / P, end = (stage + 1) * table.num_layers / P;
                        std::map<size_t, int> keys;  // stochastic rounding's counter -> tensor ranks using it
                        for (int t = 0; t < T; t++) {
                            const ParamBuckets b =
                                make_param_buckets(table, R, slice_of(t, T, first, end, stage == 0, stage == P - 1));
                            for (const ParamBucket& k : b.buckets) {
                                CHECK(k.length % (128 * R) == 0);
                                size_t leading = 0;
                                for (int i = 0; i < k.segment_count && !b.segments[k.first_segment + i].written; i++)
                                    leading += b.segments[k.first_segment + i].length;
                                CHECK(k.unwritten == leading);
                            }
                            for (const ParamSegment& s : b.segments) {
                                const bool replicated = table.spec(s.tensor).split == TensorSplit::REPLICATED;
                                for_each_layout_run(s, 0, s.length, [&](size_t at, size_t index, size_t count) {
                                    for (size_t i = 0; i < count; i++) {
                                        CHECK(at + i < table.layout_total);
                                        written[at + i] += s.written;
                                        if (!replicated || t == 0) keys[s.key_offset + index + i]++;
                                    }
                                });
                            }
                        }
                        // Each counter once across the tensor group (replicated tensors counted on rank 0).
                        for (const auto& [key, uses] : keys)
                            CHECK_MSG(uses == 1 && key < table.layout_total, "%s T%d P%d: key %zu used %d times",
                                      family.c_str(), T, P, key, uses);
                    }
                    for (size_t i = 0; i < table.layout_total; i++)
                        CHECK_MSG(written[i] == 1, "%s T%d P%d R%d: parameter %zu written %d times", family.c_str(), T,
                                  P, R, i, written[i]);
                }
}

// Four tensor ranks cannot split Llama's two key/value heads.
TEST(tensor_ranks_must_divide_the_heads) {
    try {
        make_param_buckets(llama_param_table(tiny_llama()), 1, slice_of(0, 4, 0, -1, true, true));
        CHECK_MSG(false, "4 tensor ranks split 2 key/value heads");
    } catch (const InputError& e) {
        const std::string what = e.what();
        CHECK_MSG(what.find("k_proj") != std::string::npos && what.find("4 tensor-parallel ranks") != std::string::npos,
                  "message: %s", what.c_str());
    }
}

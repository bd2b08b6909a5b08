// Writes the fuzzers' seed corpus, test/fuzz/corpus/<target>/: for each format a small valid file
// (written by the project's own writers) and the known-bad cases (truncated, wrong magic, version
// or size, a flipped payload byte, an out-of-range token or label). The files are committed; rerun
// with
//   make -f test/fuzz/fuzz.mk corpus-tool && build-fuzz/make_corpus test/fuzz/corpus
// after a format changes.
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/decode_table.h"
#include "base/errors.h"
#include "base/formats.h"
#include "base/model_descriptor.h"
#include "base/model_file.h"
#include "data/token_shard.h"
#include "train/algorithm_table.h"
#include "train/folder_lock.h"
#include "train/run_folder.h"
#include "train/train_flags.h"
#include "train/training_state.h"

using Bytes = std::string;

static std::string root;

static Bytes read_all(const std::string& path) {
    FILE* f = fopen(path.c_str(), "rb");
    Bytes b;
    char buf[4096];
    for (size_t n; f && (n = fread(buf, 1, sizeof buf, f)) > 0;) b.append(buf, n);
    if (f) fclose(f);
    return b;
}

static void put(const std::string& target, const std::string& name, const Bytes& bytes) {
    const std::string dir = root + "/" + target;
    mkdir(dir.c_str(), 0755);
    FILE* f = fopen((dir + "/" + name).c_str(), "wb");
    fwrite(bytes.data(), 1, bytes.size(), f);
    fclose(f);
}

// Writes a file with `writer` into a temporary place, returns its bytes.
template <typename Fn>
static Bytes written(Fn&& writer) {
    const std::string path = root + "/.tmp.bin";
    writer(path);
    Bytes b = read_all(path);
    remove(path.c_str());
    return b;
}

static void set_int(Bytes& b, size_t index, int32_t value) { memcpy(&b[index * 4], &value, 4); }

// The smallest model shape the formats allow: 2 positions, 8 tokens (padded to 128), 1 layer of 2
// channels.
static GPTConfig tiny_config() {
    GPTConfig c;
    c.max_seq_len = 2, c.vocab_size = 8, c.padded_vocab_size = padded_vocab_size(8);
    c.num_layers = 1, c.num_heads = 1, c.channels = 2;
    return c;
}

static std::vector<float> some_values(size_t n) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) v[i] = 0.01f * (float)((i * 37) % 101) - 0.5f;
    return v;
}

static void model_seeds() {
    const GPTConfig c = tiny_config();
    const std::vector<float> p = some_values(param_layout(c).total);
    for (auto [name, weight_type] :
         {std::pair{"fp32", WeightType::FP32}, {"bf16", WeightType::BF16}}) {
        const WeightType type = weight_type;
        const Bytes file = written([&](auto& path) { write_model_file(path, c, p.data(), type); });
        put("model_file", std::string("valid_") + name + ".bin", file);
        put("model_file", std::string("bad_truncated_") + name + ".bin",
            file.substr(0, file.size() - 6));
        Bytes wrong_layers = file;
        set_int(wrong_layers, 4, 2);
        put("model_file", std::string("bad_size_") + name + ".bin", wrong_layers);
    }
    const Bytes valid =
        written([&](auto& path) { write_model_file(path, c, p.data(), WeightType::FP32); });
    Bytes version = valid;
    set_int(version, 1, 4);
    put("model_file", "bad_version.bin", version);
    put("model_file", "bad_header_only.bin", valid.substr(0, FILE_HEADER_BYTES));
    Bytes heads = valid;
    set_int(heads, 5, 3);  // 3 heads do not divide 2 channels
    put("model_file", "bad_heads.bin", heads);
}

static void state_seeds() {
    TrainingState s;
    s.shape.config = gpt2_model(tiny_config());
    s.shape.batch_size = 1, s.shape.seq_len = 2, s.shape.total_batch = 2;
    s.step = 3;
    s.params = some_values(parameter_count(s.shape.config));
    s.adam_m = s.adam_v = s.params;
    s.ranges = whole_model_ranges(s.params.size());
    const Bytes valid = written([&](auto& path) { write_training_state(path, s); });
    put("training_state", "valid.bin", valid);
    // With gradient compression's state (version 3's section): 2 data ranks' int8 residuals.
    s.shape.num_ranks = 2, s.rank = 1, s.data_ranks = 2;
    s.compression.method = 2, s.compression.data_ranks = 2, s.compression.layout = 0x1234;
    s.compression.values = some_values(24);
    put("training_state", "valid_compressed.bin", written([&](auto& path) { write_training_state(path, s); }));
    s.shape.num_ranks = 1, s.rank = 0, s.data_ranks = 1, s.compression = CompressionState();
    // One rank's part of a split model: rank 1 of 2 tensor ranks, two ranges. (valid_v1.bin,
    // valid_v2.bin and valid_v3*.bin, states in the version 1 to 3 formats, the last ones with
    // FNV-1a's checksum, were written by the earlier writers and are kept.)
    s.shape.num_ranks = 2, s.rank = 1, s.tensor_parallel = 2;
    s.ranges = {{4, 6}, {20, 10}};
    s.params.resize(16), s.adam_m.resize(16), s.adam_v.resize(16);
    put("training_state", "valid_part.bin", written([&](auto& path) { write_training_state(path, s); }));
    put("training_state", "bad_truncated.bin", valid.substr(0, valid.size() - 4));
    Bytes flipped = valid;
    flipped[flipped.size() / 2] ^= 1;
    put("training_state", "bad_checksum.bin", flipped);
    Bytes version = valid;
    version[8] = 9;
    put("training_state", "bad_version.bin", version);
}

static void shard_seeds() {
    std::vector<uint16_t> tokens(40);
    for (size_t i = 0; i < tokens.size(); i++) tokens[i] = (uint16_t)(i * 1259 % GPT2_VOCAB_SIZE);
    const Bytes valid =
        written([&](auto& path) { write_token_shard(path, tokens.data(), tokens.size()); });
    put("token_shard", "valid.bin", valid);
    put("token_shard", "bad_size.bin", valid.substr(0, valid.size() - 2));
    Bytes token = valid;
    token[FILE_HEADER_BYTES + 6] = token[FILE_HEADER_BYTES + 7] = (char)0xFF;  // 65535 ≥ vocab
    put("token_shard", "bad_token.bin", token);
    Bytes count = valid;
    set_int(count, 2, -1);
    put("token_shard", "bad_count.bin", count);
    Bytes few = valid;
    set_int(few, 2, 3);
    put("token_shard", "bad_too_few_tokens.bin", few.substr(0, FILE_HEADER_BYTES + 6));
}

static void decode_table_seeds() {
    DecodeTable t;
    t.token_bytes = {"a", "b", " the", "\n", "\xC3\xA9", "ing", "xyz", "<|endoftext|>"};
    t.eot_token = 7;
    const Bytes valid = written([&](auto& path) { write_decode_table(path, t); });
    put("decode_table", "valid.bin", valid);
    Bytes v1 = valid;
    set_int(v1, 1, 1);
    set_int(v1, 3, 0);
    put("decode_table", "bad_version1_small_vocab.bin", v1);  // version 1 means EOT 50256
    put("decode_table", "bad_truncated.bin", valid.substr(0, valid.size() - 3));
    Bytes zero = valid;
    zero[FILE_HEADER_BYTES] = 0;
    put("decode_table", "bad_zero_length.bin", zero);
    Bytes eot = valid;
    set_int(eot, 3, 8);
    put("decode_table", "bad_eot.bin", eot);
}

static void vocab_seeds() {
    const std::string sep = "\n#vocab.bpe\n";
    put("gpt2_vocab", "small.txt",
        "{\"!\": 0, \"\\\"\": 1, \"a\": 2, \"b\": 3, \"ab\": 4, \"\\u0120\": 5, \"\\u0120a\": 6, "
        "\"<|endoftext|>\": 50256}" +
            sep + "#version: 0.2\na b\n\xC4\xA0 a\n");
    put("gpt2_vocab", "bad_json.txt", "{\"a\": 0, \"b\": }" + sep + "a b\n");
    put("gpt2_vocab", "bad_id.txt", "{\"a\": -1, \"b\": 1.5, \"c\": \"x\"}" + sep + "a b c\n");
    put("gpt2_vocab", "bad_not_object.txt", "[1, 2, [3, {\"a\": null}]]" + sep);
    put("gpt2_vocab", "bad_spelling.txt", "{\"\xE2\x82\xAC\": 0, \"\\n\": 1}" + sep + "\n\n");
}

static void run_json_seeds() {
    RunRecord r;
    r.program = "train_gpt_cpu";
    r.command = {"./train_gpt_cpu", "-e", "d12", "-o", "out/run", "-x", "20"};
    r.commit = "0123456789abcdef";
    r.model_config = describe_config(GPTConfig{});
    r.parameters = 124475904;
    r.train_files = {"data/janeausten/janeausten_train.bin"};
    r.val_files = {"data/janeausten/janeausten_val.bin"};
    r.settings = train_flag_values(TrainOptions{});
    const Bytes valid = run_record_json(r);
    put("run_json", "valid.json", valid);
    put("run_json", "bad_cut.json", valid.substr(0, valid.size() * 3 / 4));
    put("run_json", "bad_no_settings.json", "{\"format\": \"gpt-trainer run record 1\"}\n");
    put("run_json", "bad_settings.json",
        "{\"settings\": {\"--batch-size\": 4, \"--seed\": \"\\u00\"");
}

// An output folder's lock file (train/folder_lock.h): a dead holder's, a live one's, one on another
// host, and cut or malformed ones.
static void lock_file_seeds() {
    LockHolder h;
    h.pid = 999999999, h.host = "node07", h.since = "2026-12-02T07:50:11Z", h.started = 123456, h.valid = true;
    put("lock_file", "remote.txt", lock_holder_text(h));
    h.host = this_process_as_holder().host;
    put("lock_file", "dead.txt", lock_holder_text(h));
    const Bytes live = lock_holder_text(this_process_as_holder());
    put("lock_file", "live.txt", live);
    put("lock_file", "bad_cut.txt", live.substr(0, live.size() / 2));
    put("lock_file", "bad_fields.txt", "pid -1\nhost a b\nsince\nstarted x\n");
}

// A run folder's table of cuBLASLt algorithms (train/algorithm_table.h).
static void algorithm_table_seeds() {
    AlgorithmTable t;
    t.environment = "NVIDIA H100 80GB HBM3 (132 SMs), cuBLASLt 130100, bf16 storage";
    t.choices = {{"matmul m:2304 n:8192 k:768 op:TN accumulate:0 epilogue:128 align:256,256,256,256,256 compute:68",
                  std::string(127, '0') + "1"},
                 {"matmul m:768 n:8192 k:768 op:TN accumulate:0 epilogue:128 align:256,256,256,256,256 compute:68",
                  std::string(128, 'f')}};
    const Bytes valid = algorithm_table_text(t);
    put("algorithm_table", "valid.txt", valid);
    put("algorithm_table", "bad_cut.txt", valid.substr(0, valid.size() * 2 / 3));
    Bytes damaged = valid;
    damaged[damaged.find(" = ") + 5] = '7';
    put("algorithm_table", "bad_checksum.txt", damaged);
}

// llm.c's eval file: header, then per example 65535, size, index, label, completions, context,
// endings.
static void hellaswag_seeds() {
    auto example = [](int index, int label, std::vector<std::vector<uint16_t>> parts) {
        std::vector<uint16_t> v = {65535, 0, (uint16_t)index, (uint16_t)label,
                                   (uint16_t)(parts.size() - 1)};
        for (auto& p : parts) {
            v.push_back((uint16_t)p.size());
            v.insert(v.end(), p.begin(), p.end());
        }
        v[1] = (uint16_t)(v.size() * 2);
        return v;
    };
    auto file = [](std::vector<std::vector<uint16_t>> examples) {
        Bytes b(FILE_HEADER_BYTES, '\0');
        size_t longest = 0;
        for (auto& e : examples) longest = std::max(longest, e.size() * 2);
        set_int(b, 0, EVAL_FILE_MAGIC);
        set_int(b, 1, EVAL_FILE_VERSION);
        set_int(b, 2, (int32_t)examples.size());
        set_int(b, 3, (int32_t)longest);
        for (auto& e : examples) b.append((const char*)e.data(), e.size() * 2);
        return b;
    };
    const auto e0 = example(0, 1, {{464, 3290, 318}, {257, 922}, {50256}, {11, 262, 13}, {1}});
    const auto e1 = example(1, 0, {{40}, {588}, {1049, 13}});
    put("hellaswag", "valid.bin", file({e0, e1}));
    put("hellaswag", "bad_label.bin", file({e0, example(1, 5, {{40}, {588}, {1049}})}));
    auto marker = e1;
    marker[0] = 7;
    put("hellaswag", "bad_marker.bin", file({e0, marker}));
    auto token = e1;
    token[6] = 60000;
    put("hellaswag", "bad_token.bin", file({e0, token}));
    const Bytes valid = file({e0, e1});
    put("hellaswag", "bad_truncated.bin", valid.substr(0, valid.size() - 4));
}

// The first byte picks the rank count (1 + byte % 8); then one argument per line.
static void flags_seeds() {
    const std::vector<std::pair<const char*, std::string>> lines = {
        {"valid_small",
         std::string(1, '\0') + "-e\ncustom:L2:C64:H4:V512:T64\n-b\n4\n-t\n32\n-x\n10"},
        {"valid_long",
         std::string(1, '\1') + "--batch-size=2\n--seq-len\n64\n-d\n256\n-k\nwsd\n-q\n0.1"},
        {"valid_llmc", std::string(1, '\0') +
                           "-i\ntrain*.bin\n-j\nval*.bin\n-e\nd12\n-o\nout\n-l\n6e-4\n-u\n700\n"
                           "-c\n0.1\n-v\n250\n-s\n20000\n-h\n1\n-z\n1\n-r\n2\n-sl\n5\n-sg\n5"},
        {"help", std::string(1, '\0') + "--help"},
        {"bad_number", std::string(1, '\0') + "-b\n4x"},
        {"bad_unknown", std::string(1, '\0') + "--no-such-flag\n1"},
        {"bad_missing_value", std::string(1, '\0') + "-t"},
        {"bad_total_batch", std::string(1, '\3') + "-b\n4\n-t\n64\n-d\n1000"},
        {"bad_llmc_ranks", std::string(1, '\1') + "-pn\n4\n-pr\n9"},
        // Found by the fuzzer: an accumulation count past int's range.
        {"bad_accumulation", std::string(1, '\n') + "-t\n6\n-d\n0911291105160\n"},
    };
    for (auto& [name, text] : lines) put("flags", std::string(name) + ".txt", text);
}

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    root = argv[1];
    mkdir(root.c_str(), 0755);
    try {
        model_seeds();
        state_seeds();
        shard_seeds();
        decode_table_seeds();
        vocab_seeds();
        run_json_seeds();
        lock_file_seeds();
        algorithm_table_seeds();
        hellaswag_seeds();
        flags_seeds();
    } catch (const InputError& e) {
        fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}

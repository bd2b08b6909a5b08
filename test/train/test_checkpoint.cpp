// Tests of the training-state file (round trip, corruption detected, run-shape check), of which
// checkpoints in an output folder count as complete, of pruning, of a failed write and the tidying of
// the folder before a resume (leftovers of incomplete checkpoints removed, damaged ones set aside), of
// the background writer's queue, of the host arrays a checkpoint's copy reuses, and of the metrics log
// lines.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "base/file_io.h"
#include "base/host_arrays.h"
#include "base/model_descriptor.h"
#include "base/rng.h"
#include "base/xxhash64.h"
#include "test/train/host_test_util.h"
#include "train/background_writer.h"
#include "train/checkpoint.h"
#include "train/metrics_log.h"
#include "train/snapshots.h"
#include "train/training_state.h"

// The compression section of a state without compression (version 3 on), and version 4's model
// family block after the mesh (6 i32 and 5 f64).
constexpr size_t EMPTY_COMPRESSION_BYTES = 4 + 4 + 8 + 8;
constexpr size_t FAMILY_BYTES = 64;

static TrainingState sample_state(const char* model = "custom:L2:C32:H2:V300:T16", uint64_t seed = 5) {
    TrainingState s;
    s.shape.config = gpt2_model(config_from_descriptor(model));
    s.shape.batch_size = 2;
    s.shape.seq_len = 8;
    s.shape.total_batch = 32;
    s.shape.num_ranks = 1;
    s.shape.shuffle = 1;
    s.shape.data_seed = 0xFEEDFACECAFEBEEFull;
    s.rank = 0;
    s.step = 1234567890123ll;
    s.loader = {3, 1, 42};
    s.sample_rng_state = 0x0123456789ABCDEFull;
    for (int i = 0; i < 130; i++) s.loss_detector.update(i * 0.5);
    for (int i = 0; i < 7; i++) s.norm_detector.update(i);
    const size_t n = parameter_count(s.shape.config);
    s.ranges = whole_model_ranges(n);
    Rng rng(seed);
    for (std::vector<float>* v : {&s.params, &s.adam_m, &s.adam_v}) {
        v->resize(n);
        for (float& x : *v) x = (float)rng.normal();
    }
    return s;
}

TEST(training_state_round_trip) {
    const std::string dir = tst::make_temp_dir();
    TrainingState s = sample_state();
    write_training_state(dir + "/state.bin", s);
    TrainingState r = read_training_state(dir + "/state.bin");
    check_same_run(r.shape, s.shape, "state.bin");  // identical shapes pass
    CHECK(r.rank == s.rank && r.step == s.step && r.sample_rng_state == s.sample_rng_state);
    CHECK(r.loader.epoch == 3 && r.loader.shard_step == 1 && r.loader.chunk_step == 42);
    CHECK(r.shape.data_seed == s.shape.data_seed && r.shape.total_batch == 32 &&
          r.shape.shuffle == 1);
    CHECK(r.params.size() == s.params.size() && r.adam_m.size() == s.adam_m.size());
    CHECK(memcmp(&r.loss_detector, &s.loss_detector, sizeof(OutlierDetector)) == 0);
    CHECK(memcmp(&r.norm_detector, &s.norm_detector, sizeof(OutlierDetector)) == 0);
    CHECK(r.loss_detector.count == 128 && r.norm_detector.count == 7);
    CHECK(memcmp(r.params.data(), s.params.data(), s.params.size() * 4) == 0);
    CHECK(memcmp(r.adam_m.data(), s.adam_m.data(), s.adam_m.size() * 4) == 0);
    CHECK(memcmp(r.adam_v.data(), s.adam_v.data(), s.adam_v.size() * 4) == 0);
    write_training_state(dir + "/again.bin", r);
    CHECK(read_all(dir + "/state.bin") == read_all(dir + "/again.bin"));
}

// A Llama 3 run's state (version 4's family block): its whole shape, RoPE scaling included, comes back;
// a GPT-2 run of the same slots, or another RoPE scaling, is another model; a family number past the
// known ones is refused.
TEST(training_state_keeps_a_llama_shape) {
    const std::string dir = tst::make_temp_dir(), path = dir + "/state.bin";
    TrainingState s = sample_state();
    LlamaConfig c;
    c.num_layers = 2, c.channels = 16, c.num_heads = 4, c.num_kv_heads = 2, c.ffn_channels = 40;
    c.vocab_size = 77, c.max_seq_len = 32, c.rope_theta = 1234.5, c.rmsnorm_eps = 1e-6;
    c.rope_scaling.enabled = true, c.rope_scaling.factor = 4, c.rope_scaling.original_max_position = 24;
    s.shape.config = llama3_model(c);
    const size_t n = parameter_count(s.shape.config);
    s.ranges = whole_model_ranges(n);
    for (std::vector<float>* v : {&s.params, &s.adam_m, &s.adam_v}) v->assign(n, 0.25f);
    write_training_state(path, s);
    const TrainingState r = read_training_state(path);
    CHECK(is_llama3(r.shape.config) && same_model(r.shape.config, s.shape.config));
    CHECK(r.shape.config.llama.rope_scaling.factor == 4 && r.shape.config.llama.rmsnorm_eps == 1e-6);
    check_same_run(r.shape, s.shape, path);
    RunShape other = s.shape;
    other.config.llama.rope_scaling.original_max_position = 8192;
    expect_input_error([&] { check_same_run(r.shape, other, path); }, {"saved model Llama 3", "differs"});
    other = s.shape;
    other.config = gpt2_model(config_from_descriptor("custom:L2:C16:H4:V77:T32"));
    expect_input_error([&] { check_same_run(r.shape, other, path); }, {"saved model Llama 3", "GPT-2"});
    // The family number (the block's first field, after the mesh) set to 2, the checksum redone.
    std::vector<unsigned char> bytes = read_all(path);
    const size_t family_at = bytes.size() - 3 * n * 4 - 3 * 8 - EMPTY_COMPRESSION_BYTES - 16 - 8 - FAMILY_BYTES;
    const int32_t unknown = 2;
    memcpy(&bytes[family_at], &unknown, 4);
    const uint64_t checksum = training_state_checksum(TRAINING_STATE_VERSION, &bytes[32], bytes.size() - 32);
    memcpy(&bytes[24], &checksum, 8);
    write_all(path, bytes);
    expect_input_error([&] { read_training_state(path); }, {path, "unknown model family 2"});
}

// A part of the state (what one rank of a split model writes): its ranges come back as written, and
// ranges that leave the model or do not match the arrays are refused.
TEST(training_state_part_keeps_its_ranges) {
    const std::string dir = tst::make_temp_dir(), path = dir + "/state.bin";
    TrainingState s = sample_state();
    s.shape.num_ranks = 4, s.rank = 3, s.data_ranks = 1, s.tensor_parallel = 2, s.pipeline_parallel = 2;
    s.ranges = {{10, 5}, {100, 20}};
    for (std::vector<float>* v : {&s.params, &s.adam_m, &s.adam_v}) v->resize(25);
    write_training_state(path, s);
    const TrainingState r = read_training_state(path);
    CHECK(r.ranges.size() == 2 && r.ranges[0].offset == 10 && r.ranges[0].length == 5 &&
          r.ranges[1].offset == 100 && r.ranges[1].length == 20);
    CHECK(r.data_ranks == 1 && r.tensor_parallel == 2 && r.pipeline_parallel == 2 && r.params == s.params);
    s.ranges = {{parameter_count(s.shape.config) - 4, 25}};
    write_training_state(path, s);
    expect_input_error([&] { read_training_state(path); }, {path, "lies outside the model"});
    s.ranges = {{10, 24}};
    expect_input_error([&] { write_training_state(path, s); }, {"ranges list 24"});
    s.ranges = {{10, 25}}, s.tensor_parallel = 3;  // 1 x 2 x 3 meshes do not make 4 ranks
    write_training_state(path, s);
    expect_input_error([&] { read_training_state(path); }, {path, "implausible run state"});
}

// The empty compression section of a version 3 file (method, data ranks, layout, count): 24 bytes
// between the ranges and the three arrays' lengths.


// The version 1 format (a whole-model state, before the ranges) is still read: the file is rebuilt
// here from one of the current version by the old layout (a zero `sharded` flag where the mesh is, no
// ranges, no compression section, FNV-1a's checksum).
TEST(version1_training_state_is_read) {
    const std::string dir = tst::make_temp_dir(), path = dir + "/state.bin";
    const TrainingState s = sample_state();
    write_training_state(path, s);
    std::vector<unsigned char> v3 = read_all(path);
    const size_t n = s.params.size();
    // mesh, range count, one range, compression section
    const size_t mesh_at = v3.size() - 3 * n * 4 - 3 * 8 - EMPTY_COMPRESSION_BYTES - 16 - 8 - FAMILY_BYTES - 16;
    std::vector<unsigned char> v1(v3.begin(), v3.begin() + mesh_at);
    v1.insert(v1.end(), 8, 0);  // sharded = 0
    v1.insert(v1.end(), v3.begin() + mesh_at + 16 + FAMILY_BYTES + 8 + 16 + EMPTY_COMPRESSION_BYTES,
              v3.end());  // lengths, arrays
    const uint32_t version = 1;
    const uint64_t payload = v1.size() - 32, checksum = training_state_checksum(version, &v1[32], payload);
    memcpy(&v1[8], &version, 4), memcpy(&v1[16], &payload, 8), memcpy(&v1[24], &checksum, 8);
    write_all(path, v1);
    const TrainingState r = read_training_state(path);
    CHECK(r.step == s.step && r.params == s.params && r.adam_v == s.adam_v && r.data_ranks == 1);
    CHECK(r.ranges.size() == 1 && r.ranges[0].offset == 0 && r.ranges[0].length == n);
    v1[mesh_at] = 1;  // a version 1 ZeRO shard: refused with what to do
    const uint64_t resum = training_state_checksum(version, &v1[32], payload);
    memcpy(&v1[24], &resum, 8);
    write_all(path, v1);
    expect_input_error([&] { read_training_state(path); }, {path, "version 1", "build that wrote it"});
}

// Version 3's gradient compression state (the residuals and factors of --grad-compression) comes back
// bit for bit, method, ranks and layout included; a version 2 file (the same without the section) reads
// as a run without compression; a method out of range, or values without a method, are refused.
TEST(training_state_keeps_the_compression_state) {
    const std::string dir = tst::make_temp_dir(), path = dir + "/state.bin";
    TrainingState s = sample_state();
    write_training_state(path, s);
    const std::vector<unsigned char> without = read_all(path);
    CHECK(read_training_state(path).compression.empty());
    s.compression.method = 2, s.compression.data_ranks = 3, s.compression.layout = 0x0123456789abcdefull;
    Rng rng(7);
    s.compression.values.resize(777);
    for (float& x : s.compression.values) x = (float)rng.normal();
    write_training_state(path, s);
    const std::vector<unsigned char> with = read_all(path);
    CHECK(with.size() == without.size() + 777 * 4);
    TrainingState r = read_training_state(path);
    CHECK(r.compression.method == 2 && r.compression.data_ranks == 3 && r.compression.layout == s.compression.layout);
    CHECK(r.compression.values == s.compression.values && r.params == s.params && r.adam_v == s.adam_v);
    TrainingStateFile file = open_training_state(path);  // the values read on demand only
    CHECK(file.state().compression.values.empty() && file.read_compression().values == s.compression.values);

    // Version 2: the section and the family block left out, the version field 2.
    const size_t n = s.params.size();
    const size_t section_at = without.size() - 3 * n * 4 - 3 * 8 - EMPTY_COMPRESSION_BYTES;
    const size_t family_at = section_at - 16 - 8 - FAMILY_BYTES;  // before the range count and one range
    std::vector<unsigned char> v2(without.begin(), without.begin() + family_at);
    v2.insert(v2.end(), without.begin() + family_at + FAMILY_BYTES, without.begin() + section_at);
    v2.insert(v2.end(), without.begin() + section_at + EMPTY_COMPRESSION_BYTES, without.end());
    const uint32_t version = 2;
    const uint64_t payload = v2.size() - 32, checksum = training_state_checksum(version, &v2[32], payload);
    memcpy(&v2[8], &version, 4), memcpy(&v2[16], &payload, 8), memcpy(&v2[24], &checksum, 8);
    write_all(path, v2);
    r = read_training_state(path);
    CHECK(r.compression.empty() && r.params == s.params && r.step == s.step);

    s.compression.method = 4;
    write_training_state(path, s);
    expect_input_error([&] { read_training_state(path); }, {path, "implausible gradient compression state"});
    s.compression.method = 0;
    write_training_state(path, s);
    expect_input_error([&] { read_training_state(path); }, {path, "implausible gradient compression state"});
    // A count past the file's end behind a valid checksum.
    s = sample_state();
    write_training_state(path, s);
    std::vector<unsigned char> bytes = read_all(path);
    const uint64_t huge = 1ull << 60;
    memcpy(&bytes[section_at + 16], &huge, 8);
    const uint64_t resum = training_state_checksum(TRAINING_STATE_VERSION, &bytes[32], bytes.size() - 32);
    memcpy(&bytes[24], &resum, 8);
    write_all(path, bytes);
    expect_input_error([&] { read_training_state(path); }, {path, "compression values do not fit"});
}

// XXH64 against values of the reference implementation (libxxhash 0.8.1, seed 0), whole and fed in
// uneven pieces.
TEST(xxhash64_matches_the_reference) {
    const std::string fox = "The quick brown fox jumps over the lazy dog";
    CHECK(xxhash64("", 0) == 0xEF46DB3751D8E999ull);
    CHECK(xxhash64("abc", 3) == 0x44BC2CF5AD770999ull);
    CHECK(xxhash64(fox.data(), fox.size()) == 0x0B242D361FDA71BCull);
    std::vector<unsigned char> bytes(65537);
    for (size_t i = 0; i < bytes.size(); i++) bytes[i] = (unsigned char)(i * 131 + 7);
    CHECK(xxhash64(bytes.data(), 1000) == 0x0BF0BDBCC82EB373ull);
    CHECK(xxhash64(bytes.data(), bytes.size()) == 0x66B3D0BD2AA2ACFAull);
    Xxh64 pieces;
    for (size_t at = 0, n = 1; at < bytes.size(); at += n, n = n * 3 % 37 + 1)
        pieces.update(&bytes[at], std::min(n, bytes.size() - at));
    CHECK(pieces.digest() == 0x66B3D0BD2AA2ACFAull);
}

// Version 5 changed only the checksum (XXH64 for FNV-1a 64): a version 4 file, the same payload with
// FNV-1a's checksum, is still read, and each version's checksum is checked by its own rule.
TEST(version4_training_state_is_read) {
    const std::string path = tst::make_temp_dir() + "/state.bin";
    const TrainingState s = sample_state();
    write_training_state(path, s);
    std::vector<unsigned char> bytes = read_all(path);
    const uint32_t version = 4;
    const uint64_t fnv = fnv1a64(&bytes[32], bytes.size() - 32, FNV_OFFSET);
    uint64_t written;
    memcpy(&written, &bytes[24], 8);
    CHECK(written == xxhash64(&bytes[32], bytes.size() - 32) && written != fnv);
    memcpy(&bytes[8], &version, 4);
    write_all(path, bytes);  // version 4 with XXH64's checksum
    expect_input_error([&] { read_training_state(path); }, {path, "checksum mismatch"});
    memcpy(&bytes[24], &fnv, 8);
    write_all(path, bytes);
    const TrainingState r = read_training_state(path);
    CHECK(r.step == s.step && r.params == s.params && r.adam_m == s.adam_m && r.adam_v == s.adam_v);
    CHECK(r.loss_detector.count == s.loss_detector.count && r.ranges.size() == 1);
}

TEST(corrupted_training_state_is_a_clear_error) {
    const std::string dir = tst::make_temp_dir();
    const std::string path = dir + "/state.bin";
    write_training_state(path, sample_state());
    const std::vector<unsigned char> good = read_all(path);
    std::vector<unsigned char> bad = good;
    bad[good.size() / 2] ^= 0x10;  // one flipped bit in the weights
    write_all(path, bad);
    expect_input_error([&] { read_training_state(path); }, {path, "checksum mismatch"});
    bad = good;
    bad.resize(good.size() - 4);
    write_all(path, bad);
    expect_input_error([&] { read_training_state(path); }, {path, "does not match its header"});
    bad = good;
    bad[0] = 'X';
    write_all(path, bad);
    expect_input_error([&] { read_training_state(path); }, {path, "not a training state"});
    bad = good;
    bad[8] = 99;  // version
    write_all(path, bad);
    expect_input_error([&] { read_training_state(path); }, {path, "version 99"});
    write_all(path, {1, 2, 3});
    expect_input_error([&] { read_training_state(path); }, {path, "too short"});
}

// Fields behind a valid checksum that a resumed run would trust: an outlier window's slot (an index
// into its array), the rank and step, and array lengths whose sum wraps around to the right total.
TEST(training_state_with_fields_out_of_range_is_refused) {
    const std::string path = tst::make_temp_dir() + "/state.bin";
    TrainingState s = sample_state();
    s.loss_detector.next = 500;
    write_training_state(path, s);
    expect_input_error([&] { read_training_state(path); }, {path, "outlier window out of range"});
    s = sample_state();
    s.norm_detector.count = -1;
    write_training_state(path, s);
    expect_input_error([&] { read_training_state(path); }, {path, "outlier window out of range"});
    s = sample_state();
    s.rank = 1;  // of 1 rank
    write_training_state(path, s);
    expect_input_error([&] { read_training_state(path); }, {path, "implausible run state"});
    s = sample_state();
    s.step = -5;
    write_training_state(path, s);
    expect_input_error([&] { read_training_state(path); }, {path, "implausible run state"});
    // The three lengths sit just before the arrays; make the first two huge, keeping their sum.
    write_training_state(path, sample_state());
    std::vector<unsigned char> bytes = read_all(path);
    const size_t n = parameter_count(sample_state().shape.config);
    const size_t lengths_at = bytes.size() - 3 * n * 4 - 3 * 8;
    uint64_t lengths[3];
    memcpy(lengths, &bytes[lengths_at], sizeof lengths);
    CHECK(lengths[0] == n && lengths[1] == n && lengths[2] == n);
    lengths[0] += 1ull << 63, lengths[1] += 1ull << 63;
    memcpy(&bytes[lengths_at], lengths, sizeof lengths);
    const uint64_t checksum = training_state_checksum(TRAINING_STATE_VERSION, &bytes[32], bytes.size() - 32);
    memcpy(&bytes[24], &checksum, 8);
    write_all(path, bytes);
    expect_input_error([&] { read_training_state(path); }, {path, "array lengths do not match"});
}

// The optimizer sits in the mesh's fourth i32, which files written before LAMB and LARS hold as 0:
// 0 reads as AdamW, LAMB and LARS come back as written (their files differ from AdamW's in that field
// and the checksum alone), any other value is refused, and a resume under another optimizer too.
TEST(training_state_names_its_optimizer) {
    const std::string path = tst::make_temp_dir() + "/state.bin";
    TrainingState s = sample_state();
    write_training_state(path, s);
    const std::vector<unsigned char> adamw = read_all(path);
    const size_t n = s.params.size();
    const size_t optimizer_at = adamw.size() - 3 * n * 4 - 3 * 8 - EMPTY_COMPRESSION_BYTES - 16 - 8 - FAMILY_BYTES - 16 + 12;
    int32_t field = -1;
    memcpy(&field, &adamw[optimizer_at], 4);
    CHECK(field == 0 && read_training_state(path).optimizer == OptimizerKind::ADAMW);
    for (OptimizerKind kind : {OptimizerKind::LAMB, OptimizerKind::LARS, OptimizerKind::MUON}) {
        s.optimizer = kind;
        write_training_state(path, s);
        std::vector<unsigned char> bytes = read_all(path);
        CHECK(read_training_state(path).optimizer == kind);
        memcpy(&field, &bytes[optimizer_at], 4);
        CHECK(field == (int32_t)kind);
        memset(&bytes[24], 0, 8), memset(&bytes[optimizer_at], 0, 4);
        std::vector<unsigned char> expected = adamw;
        memset(&expected[24], 0, 8);
        CHECK(bytes == expected);
    }
    std::vector<unsigned char> bytes = adamw;
    field = kOptimizerKinds;
    memcpy(&bytes[optimizer_at], &field, 4);
    const uint64_t checksum = training_state_checksum(TRAINING_STATE_VERSION, &bytes[32], bytes.size() - 32);
    memcpy(&bytes[24], &checksum, 8);
    write_all(path, bytes);
    expect_input_error([&] { read_training_state(path); }, {path, "unknown optimizer 4"});
    expect_input_error([&] { check_same_optimizer(OptimizerKind::ADAMW, OptimizerKind::LARS, "st.bin"); },
                       {"st.bin", "written by --optimizer adamw", "asks for --optimizer lars"});
    check_same_optimizer(OptimizerKind::LAMB, OptimizerKind::LAMB, "st.bin");
}

TEST(resume_rejects_a_different_run) {
    TrainingState s = sample_state();
    RunShape other = s.shape;
    other.batch_size = 4;
    expect_input_error([&] { check_same_run(s.shape, other, "st.bin"); },
                       {"st.bin", "-b (batch size) = 2", "4"});
    other = s.shape;
    other.config.gpt.num_layers = 3;
    expect_input_error([&] { check_same_run(s.shape, other, "st.bin"); }, {"st.bin", "L=2", "L=3"});
    // Another -d (only the accumulation changes; run.json's check asks for --accept-changes) and
    // another number of ranks (the optimizer state is re-sharded) continue the same run.
    other = s.shape;
    other.total_batch = 64;
    other.num_ranks = 3;
    check_same_run(s.shape, other, "st.bin");
    other = s.shape;
    other.data_seed = 1;
    expect_input_error([&] { check_same_run(s.shape, other, "st.bin"); }, {"--seed"});
}

static void touch(const std::string& path) { write_all(path, {}); }

TEST(only_complete_checkpoints_count_and_pruning_keeps_the_newest) {
    const std::string dir = tst::make_temp_dir();
    CHECK(checkpoint_model_path(dir, 20) == dir + "/model_00000020.bin");
    CHECK(checkpoint_state_path(dir, 20, 3) == dir + "/state_00000020_00003.bin");
    CHECK(checkpoint_done_path(dir, 20) == dir + "/DONE_00000020");
    for (int step : {10, 20, 30, 40}) {
        touch(checkpoint_model_path(dir, step));
        for (int r = 0; r < 2; r++) touch(checkpoint_state_path(dir, step, r));
        mark_checkpoint_done(dir, step);
    }
    touch(checkpoint_model_path(dir, 50));  // step 50: rank 1's state and DONE never written
    touch(checkpoint_state_path(dir, 50, 0));
    remove(checkpoint_state_path(dir, 40, 1).c_str());  // step 40: DONE but a file is missing
    touch(dir + "/DONE_123");                           // not a marker name
    CHECK(complete_checkpoints(dir, 2) == (std::vector<long long>{10, 20, 30}));
    CHECK(complete_checkpoints(dir + "/missing", 2).empty());
    prune_checkpoints(dir, 2, 2);
    CHECK(complete_checkpoints(dir, 2) == (std::vector<long long>{20, 30}));
    CHECK(!path_exists(checkpoint_model_path(dir, 10)) &&
          !path_exists(checkpoint_state_path(dir, 10, 1)));
    CHECK(path_exists(checkpoint_model_path(dir, 50)));  // incomplete newer ones are left alone
    prune_checkpoints(dir, 0, 2);                        // 0 keeps everything
    CHECK(complete_checkpoints(dir, 2).size() == 2);
}

// A rank's write that fails removes the files of the checkpoint it wrote before the error (rank 0's
// model file), and only its own: another rank's stay. A write that succeeds keeps them.
TEST(a_failed_checkpoint_write_removes_what_it_wrote) {
    const std::string dir = tst::make_temp_dir();
    const std::string model = checkpoint_model_path(dir, 6), state0 = checkpoint_state_path(dir, 6, 0);
    expect_input_error(
        [&] {
            write_checkpoint_or_remove_it(dir, 6, 0, [&] {
                touch(model);
                fail("%s: write failed (No space left on device)", state0.c_str());
            });
        },
        {"state_00000006_00000.bin", "No space left"});
    CHECK(!path_exists(model) && !path_exists(state0));

    touch(model);  // rank 0's files written; rank 1's write fails after its file was committed
    touch(state0);
    const std::string state1 = checkpoint_state_path(dir, 6, 1);
    expect_input_error(
        [&] {
            write_checkpoint_or_remove_it(dir, 6, 1, [&] {
                touch(state1);
                fail("disk full");
            });
        },
        {"disk full"});
    CHECK(!path_exists(state1) && path_exists(model) && path_exists(state0));
    write_checkpoint_or_remove_it(dir, 8, 0, [&] { touch(checkpoint_model_path(dir, 8)); });
    CHECK(path_exists(checkpoint_model_path(dir, 8)));
}

// The files of steps without a DONE marker go, one line per step naming them; complete checkpoints
// and every name that only looks like a checkpoint file stay.
TEST(files_of_checkpoints_without_a_done_marker_are_removed_by_exact_name) {
    const std::string dir = tst::make_temp_dir();
    touch(checkpoint_model_path(dir, 10));
    touch(checkpoint_state_path(dir, 10, 0));
    mark_checkpoint_done(dir, 10);
    touch(checkpoint_model_path(dir, 20));  // step 20: every file but the marker
    touch(checkpoint_state_path(dir, 20, 0));
    touch(checkpoint_state_path(dir, 20, 1));
    touch(checkpoint_state_path(dir, 30, 1));  // step 30: one rank's state file
    const std::vector<std::string> lookalikes = {"model_00000020.bin.tmp.999999999", "model_20.bin",
                                                 "state_00000020_1.bin", "model_00000020.bin.bak",
                                                 "state_00000020_00001.binx", "notes.txt"};
    for (const std::string& name : lookalikes) touch(dir + "/" + name);
    const std::vector<std::string> lines = remove_incomplete_checkpoints(dir);
    CHECK_MSG(lines.size() == 2 &&
                  lines[0] == "removed the incomplete checkpoint of step 20 (model_00000020.bin, "
                              "state_00000020_00000.bin and state_00000020_00001.bin): it never completed" &&
                  lines[1] == "removed the incomplete checkpoint of step 30 (state_00000030_00001.bin): it never "
                              "completed",
              "%s", lines.empty() ? "no lines" : lines[0].c_str());
    CHECK(!path_exists(checkpoint_model_path(dir, 20)) && !path_exists(checkpoint_state_path(dir, 20, 1)) &&
          !path_exists(checkpoint_state_path(dir, 30, 1)));
    CHECK(complete_checkpoints(dir, 1) == std::vector<long long>{10});
    for (const std::string& name : lookalikes) CHECK_MSG(path_exists(dir + "/" + name), "%s removed", name.c_str());
    CHECK(remove_incomplete_checkpoints(dir).empty());
}

// Rank `rank` of a checkpoint written by `ranks` ranks, as a state file.
static void write_rank_state(const std::string& dir, long long step, int rank, int ranks) {
    TrainingState s = sample_state();
    s.shape.num_ranks = ranks, s.data_ranks = ranks, s.rank = rank, s.step = step;
    write_training_state(checkpoint_state_path(dir, step, rank), s);
}

// A checkpoint with a DONE marker but a file missing (the model, rank 0's state file, or the last
// rank's, known from rank 0's file) is moved whole into damaged_NNNNNNNN (a second of the same step
// into damaged_NNNNNNNN_2), marker last; complete ones stay, and so does one whose rank 0 file is
// corrupt (its rank count unproven: the resume reports the corruption).
TEST(damaged_checkpoints_are_set_aside_whole) {
    const std::string dir = tst::make_temp_dir();
    for (long long step : {10, 20, 30, 40, 50}) {
        touch(checkpoint_model_path(dir, step));
        for (int r = 0; r < 2; r++) write_rank_state(dir, step, r, 2);
        mark_checkpoint_done(dir, step);
    }
    CHECK(state_file_rank_count(checkpoint_state_path(dir, 10, 1)) == 2);
    CHECK(state_file_rank_count(checkpoint_model_path(dir, 10)) == 0);  // an empty file: no state
    const std::vector<unsigned char> kept_state = read_all(checkpoint_state_path(dir, 30, 0));
    remove(checkpoint_state_path(dir, 20, 1).c_str());
    remove(checkpoint_model_path(dir, 30).c_str());
    remove(checkpoint_state_path(dir, 40, 0).c_str());
    std::vector<unsigned char> corrupt = read_all(checkpoint_state_path(dir, 50, 0));
    corrupt[corrupt.size() - 9] ^= 1;
    write_all(checkpoint_state_path(dir, 50, 0), corrupt);
    remove(checkpoint_state_path(dir, 50, 1).c_str());
    std::filesystem::create_directory(dir + "/damaged_00000030");  // an earlier damaged step 30
    touch(dir + "/damaged_00000030/DONE_00000030");

    CHECK(missing_checkpoint_files(dir, 10).empty());
    CHECK(missing_checkpoint_files(dir, 20) == std::vector<std::string>{"state_00000020_00001.bin"});
    const std::vector<DamagedCheckpoint> damaged = set_aside_damaged_checkpoints(dir);
    CHECK(damaged.size() == 3 && damaged[0].step == 20 && damaged[1].step == 30 && damaged[2].step == 40);
    CHECK(damaged[1].missing == std::vector<std::string>{"model_00000030.bin"});
    CHECK(damaged[1].moved == (std::vector<std::string>{"state_00000030_00000.bin", "state_00000030_00001.bin",
                                                        "DONE_00000030"}));
    CHECK(damaged[1].folder == dir + "/damaged_00000030_2");
    CHECK(damaged[2].missing == std::vector<std::string>{"state_00000040_00000.bin"});
    CHECK(read_all(damaged[1].folder + "/state_00000030_00000.bin") == kept_state);
    CHECK(path_exists(dir + "/damaged_00000020/model_00000020.bin") &&
          path_exists(dir + "/damaged_00000040/state_00000040_00001.bin"));
    for (long long step : {20, 30, 40})
        CHECK(!path_exists(checkpoint_done_path(dir, step)) && !path_exists(checkpoint_state_path(dir, step, 1)));
    CHECK(complete_checkpoints(dir, 1) == (std::vector<long long>{10, 50}));
    CHECK(describe_damaged_checkpoint(damaged[0]) ==
          "damaged checkpoint of step 20: state_00000020_00001.bin is missing; its other files (model_00000020.bin, "
          "state_00000020_00000.bin and DONE_00000020) were moved to " + dir +
              "/damaged_00000020, where nothing overwrites them");
    CHECK(set_aside_damaged_checkpoints(dir).empty());
}

// Only -y 1 tidies the folder (a fresh run in a folder holding a run is refused before it writes).
TEST(the_folder_is_tidied_only_for_a_resume) {
    const std::string dir = tst::make_temp_dir();
    touch(checkpoint_model_path(dir, 4));  // a leftover, and a damaged checkpoint
    mark_checkpoint_done(dir, 2);
    TrainOptions opt;
    opt.output_dir = dir;
    RankGroup one_rank;
    CHECK(tidy_checkpoints_for_resume(opt, one_rank).empty());
    CHECK(path_exists(checkpoint_model_path(dir, 4)) && path_exists(checkpoint_done_path(dir, 2)));
    opt.resume = 1;
    const std::string report = tidy_checkpoints_for_resume(opt, one_rank);
    CHECK_MSG(report.find("removed the incomplete checkpoint of step 4 (model_00000004.bin)") == 0 &&
                  report.find("\ndamaged checkpoint of step 2: model_00000002.bin and state_00000002_00000.bin are "
                              "missing; its other files (DONE_00000002) were moved") != std::string::npos &&
                  std::count(report.begin(), report.end(), '\n') == 2,
              "%s", report.c_str());
    CHECK(!path_exists(checkpoint_model_path(dir, 4)) && path_exists(dir + "/damaged_00000002/DONE_00000002"));
}

// The writer runs its jobs in order, one at a time (a DONE marker queued behind a checkpoint's files
// is written after them); a failed job drops those behind it and its error comes from wait(); the
// destructor runs what is still queued.
TEST(background_writer_runs_jobs_in_order_and_stops_at_an_error) {
    const std::string dir = tst::make_temp_dir();
    std::vector<int> order;
    std::atomic<bool> go{false};
    {
        BackgroundWriter writer;
        CHECK(writer.finished());
        writer.queue([&] {
            while (!go) std::this_thread::sleep_for(std::chrono::milliseconds(1));
            order.push_back(1);
        });
        writer.queue({{dir + "/a.bin", {'a', 'b'}}});
        writer.queue([&] { order.push_back(path_exists(dir + "/a.bin") ? 2 : -2); });
        CHECK(!writer.finished());  // the first job waits for `go`
        go = true;
        writer.wait();
        CHECK(writer.finished() && order == (std::vector<int>{1, 2}));

        writer.queue([] { fail("disk full"); });
        writer.queue([&] { order.push_back(3); });  // dropped: behind a failed job
        expect_input_error([&] { writer.wait(); }, {"disk full"});
        writer.wait();  // the error was reported once
        CHECK(order == (std::vector<int>{1, 2}));

        writer.queue([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            order.push_back(4);
        });
    }  // the destructor runs the last job
    CHECK(order == (std::vector<int>{1, 2, 4}));
}

// A large array handed back is handed out again (the same memory), to the smallest request it holds;
// small ones are left to the C library; at most kReusedArraysKept are kept, the smallest dropped.
TEST(large_host_arrays_are_handed_out_again) {
    const size_t big = kReusedArrayBytes / sizeof(float), small = big / 2;
    CHECK(reused_host_arrays_kept() == 0);
    std::vector<float> a = reusable_host_array(big + 10);
    CHECK(a.size() == big + 10);
    std::fill(a.begin(), a.end(), 1.5f);
    const float* memory = a.data();
    reuse_host_array(std::move(a));
    CHECK(a.empty() && reused_host_arrays_kept() == 1);
    CHECK(reused_host_array_bytes() >= (big + 10) * sizeof(float));
    std::vector<float> b = reusable_host_array(big + 20);  // larger than any kept: a fresh one, zeroed
    CHECK(b.data() != memory && b[big + 19] == 0.0f && reused_host_arrays_kept() == 1);
    std::vector<float> c = reusable_host_array(big);  // fits in the kept one
    CHECK(c.data() == memory && c.size() == big && reused_host_arrays_kept() == 0);
    reuse_host_array(std::move(c));
    reuse_host_array(std::move(b));
    std::vector<float> d = reusable_host_array(big);  // the smaller of the two that hold it
    CHECK(d.data() == memory && reused_host_arrays_kept() == 1);
    std::vector<float> e = reused_copy(d);
    CHECK(e == d && e.data() != d.data() && reused_host_arrays_kept() == 0);

    std::vector<float> tiny = reusable_host_array(small);
    reuse_host_array(std::move(tiny));
    CHECK(tiny.empty() && reused_host_arrays_kept() == 0);

    std::vector<std::vector<float>> many;
    for (int i = 0; i <= kReusedArraysKept; i++) many.push_back(std::vector<float>(big + i));
    const float* largest = many.back().data();
    for (std::vector<float>& m : many) reuse_host_array(std::move(m));
    CHECK(reused_host_arrays_kept() == (size_t)kReusedArraysKept);
    std::vector<float> f = reusable_host_array(big + kReusedArraysKept);
    CHECK(f.data() == largest);
    while (reused_host_arrays_kept() > 0) reusable_host_array(big);  // leaves nothing kept for other tests

    // Byte images (a snapshot's files) are kept apart from the fp32 arrays.
    std::vector<char> image = reusable_host_bytes(kReusedArrayBytes);
    const char* image_memory = image.data();
    reuse_host_bytes(std::move(image));
    CHECK(image.empty() && reused_host_arrays_kept() == 1);
    CHECK(reusable_host_array(big).data() != (const float*)image_memory && reused_host_arrays_kept() == 1);
    CHECK(reusable_host_bytes(kReusedArrayBytes).data() == image_memory && reused_host_arrays_kept() == 0);
}

// A snapshot made in the byte images the snapshot before was written from (base/host_arrays.h: a
// model over 32 MiB) holds the files the checkpoint writer streams to disk for the same part.
TEST(snapshot_files_made_in_reused_images_are_the_checkpoint_files) {
    const char* model = "custom:L1:C256:H4:V32768:T8";
    auto part = [&](long long step, uint64_t seed) {
        CheckpointPart p;
        p.step = step;
        p.state = sample_state(model, seed);
        p.state.step = step;
        p.config = p.state.shape.config;
        p.weight_type = WeightType::FP32;  // the model file over 32 MiB too
        p.weights = p.state.adam_m;
        return p;
    };
    const std::string root = tst::make_temp_dir(), checkpoint = tst::make_temp_dir();
    RankGroup one_rank;
    BackgroundWriter writer;
    const size_t kept_before = reused_host_arrays_kept();
    SnapshotWrite first = prepare_snapshot(root, part(1, 7), one_rank);
    writer.queue(std::move(first.files), std::move(first.remove));
    writer.wait();
    CHECK(reused_host_arrays_kept() == kept_before + 2);  // its model and state images, written

    const CheckpointPart second = part(2, 8);
    SnapshotWrite made = prepare_snapshot(root, second, one_rank);
    CHECK(reused_host_arrays_kept() == kept_before);  // made in them
    write_checkpoint_files(checkpoint, second);
    CHECK(made.files.size() == 2);
    for (const FileImage& f : made.files) {
        const std::string name = std::filesystem::path(f.path).filename().string();
        const std::vector<unsigned char> streamed = read_all(checkpoint + "/" + name);
        CHECK_MSG(f.bytes.size() >= kReusedArrayBytes &&
                      streamed == std::vector<unsigned char>(f.bytes.begin(), f.bytes.end()),
                  "%s differs from the checkpoint file", name.c_str());
    }
}

TEST(metrics_log_lines) {
    StepMetrics m;
    m.step = 12;
    m.has_train = true;
    m.loss = 3.45678;
    m.lr = 3e-4;
    m.norm = 1.25;
    m.ms = 123.4;
    m.tokens_per_s = 54321;
    CHECK(metrics_json(m) ==
          "{\"step\":12,\"loss\":3.456780,\"lr\":3.000000e-04,\"norm\":1.250000,\"ms\":123.400,"
          "\"tok_per_s\":54321.0}");
    m.has_val = true;
    m.val_loss = 3.21;
    CHECK(metrics_json(m).find(",\"val_loss\":3.210000}") != std::string::npos);
    StepMetrics v;
    v.has_val = true;
    v.val_loss = NAN;
    CHECK(metrics_json(v) == "{\"step\":0,\"val_loss\":null}");
    const std::string dir = tst::make_temp_dir();
    {
        MetricsLog log(dir + "/m.jsonl");
        log.write(m);
        log.write(v);
    }
    {
        MetricsLog log(dir + "/m.jsonl");  // reopening appends
        log.write(v);
    }
    std::vector<unsigned char> bytes = read_all(dir + "/m.jsonl");
    std::string text(bytes.begin(), bytes.end());
    CHECK(text == metrics_json(m) + "\n" + metrics_json(v) + "\n" + metrics_json(v) + "\n");
}

TEST(metrics_log_truncated_on_resume) {
    const std::string dir = tst::make_temp_dir(), path = dir + "/m.jsonl";
    truncate_metrics_log(path, 5);  // no log yet: nothing happens
    CHECK(!path_exists(path));
    {
        MetricsLog log(path);
        for (int step = 0; step <= 12; step++) {
            StepMetrics m;
            m.step = step;
            m.has_val = true;
            m.val_loss = step;
            log.write(m);
        }
    }
    truncate_metrics_log(path, 10);
    std::vector<unsigned char> bytes = read_all(path);
    std::string text(bytes.begin(), bytes.end());
    CHECK(std::count(text.begin(), text.end(), '\n') == 11);
    CHECK(text.find("{\"step\":10,") != std::string::npos);
    CHECK(text.find("{\"step\":11,") == std::string::npos);
}

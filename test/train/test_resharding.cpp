// Tests of reading slices of a checkpoint (train/resharding.h): a state file's sub-ranges are exactly
// the bytes of its whole read, also past the checksum's streaming buffer; a rank's placed arrays from
// a checkpoint cut into odd parts are exactly what placing the whole model gives, and the counts say
// what was read and held; a model file's slices (fp32 and bf16) are its whole read's; a corrupted,
// incomplete or overlapping checkpoint is a one-line error naming the file.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/file_io.h"
#include "base/model_descriptor.h"
#include "base/model_file.h"
#include "base/rng.h"
#include "test/train/host_test_util.h"
#include "train/checkpoint.h"
#include "train/resharding.h"
#include "train/training_state.h"

namespace {

// ~90,000 parameters: three arrays of it pass the checksum's 1 MiB buffer.
const char* MODEL = "custom:L2:C64:H2:V256:T32";

// Rank `rank` of `ranks` holding `ranges` of the model, with values that name their element and array.
TrainingState state_part(int rank, int ranks, const std::vector<LayoutRange>& ranges) {
    TrainingState s;
    s.shape.config = gpt2_model(config_from_descriptor(MODEL));
    s.shape.batch_size = 2, s.shape.seq_len = 8, s.shape.total_batch = 16 * ranks;
    s.shape.num_ranks = ranks, s.data_ranks = ranks;
    s.rank = rank, s.step = 7;
    s.ranges = ranges;
    for (const LayoutRange& r : ranges)
        for (uint64_t i = r.offset; i < r.offset + r.length; i++) {
            s.params.push_back((float)i);
            s.adam_m.push_back((float)i + 0.25f);
            s.adam_v.push_back(-(float)i);
        }
    return s;
}

// The model cut into three parts of interleaved ranges (in no order), written as checkpoint 7 of dir.
size_t write_three_parts(const std::string& dir) {
    const size_t n = param_layout(config_from_descriptor(MODEL)).total;
    const std::vector<std::vector<LayoutRange>> parts = {
        {{5000, 30000}, {0, 1000}},
        {{1000, 4000}, {60000, n - 60000}},
        {{35000, 25000}}};
    for (int r = 0; r < 3; r++) write_training_state(checkpoint_state_path(dir, 7, r), state_part(r, 3, parts[r]));
    return n;
}

// A rank's placement of `total` elements: ranges cut at random, in random order, into an array with gaps.
Placement random_placement(size_t total, uint64_t seed) {
    Rng rng(seed);
    Placement p;
    for (uint64_t at = rng.below(500); at < total;) {
        const uint64_t length = std::min<uint64_t>(1 + rng.below(9000), total - at);
        if (rng.below(3)) p.ranges.push_back({at, length, 0});
        at += length + rng.below(100);
    }
    for (size_t i = p.ranges.size(); i > 1; i--) std::swap(p.ranges[i - 1], p.ranges[rng.below(i)]);
    for (PlacedRange& r : p.ranges) {
        p.size += rng.below(7);  // padding between them
        r.at = p.size;
        p.size += r.length;
    }
    return p;
}

}  // namespace

// Every sub-range of each array, read alone, is byte for byte the same part of the whole read.
TEST(state_file_slices_are_the_whole_reads_bytes) {
    const std::string dir = tst::make_temp_dir(), path = dir + "/state.bin";
    const size_t n = param_layout(config_from_descriptor(MODEL)).total;
    write_training_state(path, state_part(0, 1, {{0, n}}));
    const TrainingState whole = read_training_state(path);
    TrainingStateFile file = open_training_state(path);
    CHECK(file.values() == n && file.state().step == 7 && file.state().params.empty());
    const std::vector<float>* arrays[3] = {&whole.params, &whole.adam_m, &whole.adam_v};
    Rng rng(3);
    for (int i = 0; i < 20; i++) {
        const uint64_t first = rng.below(n), count = 1 + rng.below(n - first);
        for (int a = 0; a < 3; a++) {
            std::vector<float> slice(count);
            file.read_values(a, first, count, slice.data());
            CHECK_MSG(memcmp(slice.data(), arrays[a]->data() + first, count * 4) == 0,
                      "array %d, values [%llu, +%llu)", a, (unsigned long long)first, (unsigned long long)count);
        }
    }
    expect_input_error([&] { std::vector<float> x(2); file.read_values(1, n - 1, 2, x.data()); },
                       {"internal error", path});
}

// A rank's placed arrays from three interleaved parts are the whole model's placed, bit for bit.
TEST(placed_state_is_the_whole_models_placed) {
    const std::string dir = tst::make_temp_dir();
    const size_t n = write_three_parts(dir);
    std::vector<float> whole[3];
    for (int r = 0; r < 3; r++) {
        const TrainingState part = read_training_state(checkpoint_state_path(dir, 7, r));
        for (std::vector<float>& w : whole) w.resize(n, NAN);
        scatter_part(part.ranges, part.params.data(), &whole[0]);
        scatter_part(part.ranges, part.adam_m.data(), &whole[1]);
        scatter_part(part.ranges, part.adam_v.data(), &whole[2]);
    }
    CheckpointState state(dir, 7, open_training_state(checkpoint_state_path(dir, 7, 0)));
    CHECK(state.first().step == 7);
    for (uint64_t seed : {1, 2, 3}) {
        const Placement placement = random_placement(n, seed);
        std::vector<float> placed[3];
        ReshardingCounts counts;
        state.read_placed(placement, &placed[0], &placed[1], &placed[2], &counts);
        for (int a = 0; a < 3; a++) {
            const std::vector<float> expected = place(placement, whole[a]);
            CHECK_MSG(placed[a].size() == placement.size &&
                      memcmp(placed[a].data(), expected.data(), expected.size() * 4) == 0, "array %d", a);
        }
        size_t elements = 0;
        for (const PlacedRange& r : placement.ranges) elements += r.length;
        CHECK(counts.bytes_read == 12 * elements);
        CHECK(counts.bytes_held >= 12 * placement.size && counts.bytes_held <= 12 * placement.size + 4096);
    }
}

// The model file's slices, fp32 and bf16, are its whole read's; a model of another shape is refused.
TEST(model_file_slices_are_the_whole_reads) {
    const std::string dir = tst::make_temp_dir(), path = dir + "/model.bin";
    const GPTConfig config = config_from_descriptor(MODEL);
    const size_t n = param_layout(config).total;
    std::vector<float> weights(n);
    Rng rng(8);
    for (float& w : weights) w = (float)rng.normal();
    for (WeightType type : {WeightType::FP32, WeightType::BF16}) {
        write_model_file(path, config, weights.data(), type);
        const ModelFile whole = read_model_file(path);
        ModelWeightsReader file(path);
        const Placement placement = random_placement(n, 4);
        ReshardingCounts counts;
        const std::vector<float> placed = read_placed_weights(file, gpt2_model(config), placement, &counts);
        CHECK(placed == place(placement, whole.params));
        CHECK(counts.bytes_held == 4 * placement.size);
    }
    ModelWeightsReader file(path);
    ReshardingCounts counts;
    expect_input_error([&] { read_placed_weights(file, gpt2_model(config_from_descriptor("custom:L3:C64:H2:V256:T32")),
                                                 whole_model_placement(n), &counts); },
                       {path, "holds a model"});
}

// A corrupted part, a missing part's elements and elements held twice: one line naming the file.
TEST(a_bad_checkpoint_is_a_clear_error) {
    const std::string dir = tst::make_temp_dir();
    write_three_parts(dir);
    const std::string first = checkpoint_state_path(dir, 7, 0), second = checkpoint_state_path(dir, 7, 1);
    auto open = [&] { CheckpointState(dir, 7, open_training_state(first)); };
    const std::vector<unsigned char> good = read_all(second);
    std::vector<unsigned char> bad = good;
    bad[good.size() - 5] ^= 0x01;  // the last value of v, far past the streaming buffer's first block
    write_all(second, bad);
    expect_input_error(open, {second, "checksum mismatch"});
    bad.resize(good.size() - 1);
    write_all(second, bad);
    expect_input_error(open, {second, "does not match its header"});
    const size_t n = param_layout(config_from_descriptor(MODEL)).total;
    write_training_state(second, state_part(1, 3, {{1000, 4000}, {60000, n - 60001}}));
    expect_input_error(open, {"state files of step 7", "parameter " + std::to_string(n - 1) + " is missing"});
    write_training_state(second, state_part(1, 3, {{1000, 4001}, {60000, n - 60000}}));
    expect_input_error(open, {first, "parameter 5000 is stored twice"});
    write_training_state(second, state_part(2, 3, {{1000, 4000}, {60000, n - 60000}}));
    expect_input_error(open, {second, "not rank 1 of 3"});
}

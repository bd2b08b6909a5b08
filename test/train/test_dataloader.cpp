// Tests of the token-shard data loader: batches against the shard contents, shard boundaries and
// epochs, multi-shard globs, shuffled order (a permutation, deterministic, continued exactly after
// a saved position), rank slices (disjoint and complete), and every kind of corrupted shard.
#include <algorithm>
#include <set>

#include "test/train/host_test_util.h"
#include "train/dataloader.h"

// Shard s holds `n` tokens with values that identify (shard, index): (s * 1000 + i) % vocab.
static std::vector<uint16_t> shard_tokens(int s, int n, int vocab) {
    std::vector<uint16_t> t(n);
    for (int i = 0; i < n; i++) t[i] = (uint16_t)((s * 1000 + i) % vocab);
    return t;
}

struct Batch {
    std::vector<int> inputs, targets;
    bool operator==(const Batch& o) const { return inputs == o.inputs && targets == o.targets; }
};
static Batch next(DataLoader& loader, int B, int T) {
    Batch b{std::vector<int>(B * T), std::vector<int>(B * T)};
    loader.next_batch(b.inputs.data(), b.targets.data());
    return b;
}
// The batch a loader must return for chunk `chunk` of a shard's tokens (reference, written out).
static Batch expected(const std::vector<uint16_t>& tokens, int chunk, int B, int T, int rank,
                      int ranks) {
    Batch b;
    size_t start = ((size_t)chunk * ranks + rank) * B * T;
    for (int i = 0; i < B * T; i++) {
        b.inputs.push_back(tokens[start + i]);
        b.targets.push_back(tokens[start + i + 1]);
    }
    return b;
}

TEST(sequential_batches_cross_shard_boundaries_and_epochs) {
    const std::string dir = tst::make_temp_dir();
    const int B = 2, T = 4, V = 60000;
    // Shard 0: 8·3+1 = 25 tokens → exactly 3 chunks; shard 1: 8·2+5 → 2 chunks, 4 tokens unused.
    std::vector<uint16_t> s0 = shard_tokens(0, 25, V), s1 = shard_tokens(1, 21, V);
    write_shard(dir + "/train_000.bin", s0);
    write_shard(dir + "/train_001.bin", s1);
    DataLoader loader(dir + "/train_*.bin", B, T, 0, 1, V, false, 0);
    CHECK(loader.files().size() == 2 && loader.chunks_per_epoch() == 5);
    for (int epoch = 0; epoch < 2; epoch++) {
        for (int c = 0; c < 3; c++)
            CHECK_MSG(next(loader, B, T) == expected(s0, c, B, T, 0, 1),
                      "epoch %d shard 0 chunk %d", epoch, c);
        for (int c = 0; c < 2; c++)
            CHECK_MSG(next(loader, B, T) == expected(s1, c, B, T, 0, 1),
                      "epoch %d shard 1 chunk %d", epoch, c);
    }
    CHECK(loader.position().epoch == 2);
    // The last target of shard 0's last chunk is its final token (the +1), never shard 1's first.
    Batch last = expected(s0, 2, B, T, 0, 1);
    CHECK(last.targets.back() == s0[24]);
    loader.reset();
    CHECK(next(loader, B, T) == expected(s0, 0, B, T, 0, 1));
}

TEST(glob_takes_matching_shards_in_sorted_order) {
    const std::string dir = tst::make_temp_dir();
    const int V = 50257;
    write_shard(dir + "/data_train_002.bin", shard_tokens(2, 9, V));
    write_shard(dir + "/data_train_000.bin", shard_tokens(0, 9, V));
    write_shard(dir + "/data_train_001.bin", shard_tokens(1, 9, V));
    write_shard(dir + "/data_val_000.bin", shard_tokens(9, 9, V));
    DataLoader loader(dir + "/data_train_*.bin", 2, 4, 0, 1, V, false, 0);
    CHECK(loader.files().size() == 3);
    for (int s = 0; s < 3; s++) {
        CHECK(loader.files()[s] == dir + "/data_train_00" + std::to_string(s) + ".bin");
        CHECK(next(loader, 2, 4) == expected(shard_tokens(s, 9, V), 0, 2, 4, 0, 1));
    }
    DataLoader single(dir + "/data_val_000.bin", 2, 4, 0, 1, V, false,
                      0);  // a plain path works too
    CHECK(single.files().size() == 1);
}

// All batches of `epochs` epochs.
static std::vector<Batch> walk(DataLoader& loader, int count, int B, int T) {
    std::vector<Batch> out;
    for (int i = 0; i < count; i++) out.push_back(next(loader, B, T));
    return out;
}

TEST(shuffled_order_is_a_seeded_permutation_that_resumes_exactly) {
    const std::string dir = tst::make_temp_dir();
    const int B = 1, T = 4, V = 50000;
    std::vector<std::vector<uint16_t>> shards;
    for (int s = 0; s < 3; s++) {
        shards.push_back(shard_tokens(s, 4 * (10 + s) + 1, V));  // 10, 11, 12 chunks
        write_shard(dir + "/s" + std::to_string(s) + ".bin", shards.back());
    }
    const std::string pattern = dir + "/s*.bin";
    DataLoader a(pattern, B, T, 0, 1, V, true, 99);
    const int per_epoch = 33;
    std::vector<Batch> straight = walk(a, 2 * per_epoch, B, T);

    // Each epoch visits every chunk of every shard exactly once.
    std::vector<Batch> all_chunks;
    for (int s = 0; s < 3; s++)
        for (int c = 0; c < 10 + s; c++) all_chunks.push_back(expected(shards[s], c, B, T, 0, 1));
    auto key = [](const Batch& b) { return b.inputs; };
    for (int e = 0; e < 2; e++) {
        std::set<std::vector<int>> seen;
        for (int i = 0; i < per_epoch; i++) seen.insert(key(straight[e * per_epoch + i]));
        CHECK(seen.size() == (size_t)per_epoch);
        for (const Batch& b : all_chunks) CHECK(seen.count(key(b)) == 1);
    }
    // Shuffled at all, differently per epoch, and differently for another seed.
    std::vector<Batch> sequential_order = all_chunks;
    CHECK(!std::equal(straight.begin(), straight.begin() + per_epoch, sequential_order.begin()));
    CHECK(
        !std::equal(straight.begin(), straight.begin() + per_epoch, straight.begin() + per_epoch));
    DataLoader other_seed(pattern, B, T, 0, 1, V, true, 100);
    CHECK(walk(other_seed, per_epoch, B, T) !=
          std::vector<Batch>(straight.begin(), straight.begin() + per_epoch));

    // Stop anywhere (mid-shard, mid-epoch, on an epoch edge), save the position, continue in a new
    // loader.
    for (int stop : {1, 7, 20, 33, 45}) {
        DataLoader first(pattern, B, T, 0, 1, V, true, 99);
        std::vector<Batch> got = walk(first, stop, B, T);
        LoaderPosition saved = first.position();
        DataLoader second(pattern, B, T, 0, 1, V, true, 99);
        second.set_position(saved);
        std::vector<Batch> rest = walk(second, 2 * per_epoch - stop, B, T);
        got.insert(got.end(), rest.begin(), rest.end());
        CHECK_MSG(got == straight, "resumed after %d batches", stop);
    }
    expect_input_error([&] { a.set_position({0, 5, 0}); }, {"does not fit these shards"});
}

TEST(rank_slices_are_disjoint_and_cover_each_batch) {
    const std::string dir = tst::make_temp_dir();
    const int B = 2, T = 3, R = 3, V = 50257;
    write_shard(dir + "/a.bin", shard_tokens(0, 200, V));
    write_shard(dir + "/b.bin", shard_tokens(1, 150, V));
    for (bool shuffle : {false, true}) {
        // One rank with R·B rows reads the same chunks; its rows are the ranks' rows in rank order.
        DataLoader whole(dir + "/*.bin", R * B, T, 0, 1, V, shuffle, 5);
        std::vector<DataLoader> ranks;
        for (int r = 0; r < R; r++) ranks.emplace_back(dir + "/*.bin", B, T, r, R, V, shuffle, 5);
        for (int step = 0; step < 40; step++) {  // more than one epoch (11 + 8 chunks)
            Batch all = next(whole, R * B, T);
            Batch joined;
            for (int r = 0; r < R; r++) {
                Batch part = next(ranks[r], B, T);
                joined.inputs.insert(joined.inputs.end(), part.inputs.begin(), part.inputs.end());
                joined.targets.insert(joined.targets.end(), part.targets.begin(),
                                      part.targets.end());
            }
            CHECK_MSG(joined == all, "shuffle %d step %d", shuffle, step);
            // Token values are unique within a shard, so distinct inputs mean distinct positions.
            std::set<int> distinct(joined.inputs.begin(), joined.inputs.end());
            CHECK(distinct.size() == joined.inputs.size());
        }
    }
}

TEST(corrupted_shards_are_clear_errors) {
    const std::string dir = tst::make_temp_dir();
    const int V = 1000;
    std::vector<uint16_t> good = shard_tokens(0, 100, V);
    auto open = [&](const std::string& path) { DataLoader l(path, 2, 4, 0, 1, V, false, 0); };
    write_shard(dir + "/magic.bin", good, 1234);
    expect_input_error([&] { open(dir + "/magic.bin"); },
                       {dir + "/magic.bin", "not a token shard", "magic 1234"});
    write_shard(dir + "/version.bin", good, TOKEN_SHARD_MAGIC, 7);
    expect_input_error([&] { open(dir + "/version.bin"); }, {dir + "/version.bin", "version 7"});
    write_shard(dir + "/long.bin", good, TOKEN_SHARD_MAGIC, 1, 99);
    expect_input_error([&] { open(dir + "/long.bin"); },
                       {dir + "/long.bin", "does not match its header"});
    write_shard(dir + "/short.bin", good, TOKEN_SHARD_MAGIC, 1, 101);
    expect_input_error([&] { open(dir + "/short.bin"); },
                       {dir + "/short.bin", "does not match its header"});
    std::vector<uint16_t> bad = good;
    bad[57] = V;  // one past the last token id
    write_shard(dir + "/token.bin", bad);
    expect_input_error([&] { open(dir + "/token.bin"); },
                       {dir + "/token.bin", "token 1000 at index 57"});
    write_shard(dir + "/tiny.bin", shard_tokens(0, 8, V));  // needs 2·4 + 1 tokens
    expect_input_error([&] { open(dir + "/tiny.bin"); }, {dir + "/tiny.bin", "too few"});
    write_all(dir + "/stub.bin", {1, 2, 3});
    expect_input_error([&] { open(dir + "/stub.bin"); },
                       {dir + "/stub.bin", "shorter than the 1024-byte header"});
    expect_input_error([&] { open(dir + "/none_*.bin"); },
                       {dir + "/none_*.bin", "no file matches"});
    // A bad shard later in a glob is found before training starts (header and size checks).
    write_shard(dir + "/mix_0.bin", good);
    write_shard(dir + "/mix_1.bin", good, 1234);
    expect_input_error([&] { open(dir + "/mix_*.bin"); }, {dir + "/mix_1.bin"});
}

// Token-shard data loader (the shard format: data/token_shard.h).
//
// A batch is a "chunk" of R·B·T consecutive tokens (plus one more for the last target) of one
// shard; rank r of R takes the r-th run of B·T tokens of it, so the ranks' slices of every batch
// are disjoint and together cover the chunk. Inputs are the tokens, targets the same tokens shifted
// by one. A shard of n tokens holds floor((n - 1) / (R·B·T)) chunks; the loader walks them
//   - sequentially: shards in sorted glob order, chunks in file order, then wraps to a new epoch;
//   - shuffled: each epoch visits the shards in a random order and each shard's chunks in a random
//     order, both drawn from Rng(seed mixed with epoch and shard), so the whole walk is a pure
//     function of the seed and a resumed run needs only the Position to continue identically.
// Shards may be GPT-2's (uint16 tokens) or Llama 3's (uint32 tokens) format. Every shard's header
// and size are checked up front (magic, version, size == 1024 + 2n or 4n, room for one chunk);
// its tokens are checked against the model's vocabulary when it is loaded. Errors name the file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

struct LoaderPosition {
    int64_t epoch = 0;       // completed passes over the data
    int64_t shard_step = 0;  // index into this epoch's shard order
    int64_t chunk_step = 0;  // index into this shard's chunk order
};

class DataLoader {
public:
    // pattern: a glob of shard files. Throws InputError if nothing matches or a shard is invalid.
    DataLoader(const std::string& pattern, int B, int T, int rank, int num_ranks, int vocab_size,
               bool shuffle, uint64_t seed);

    // Fills inputs and targets (B·T ints each) with this rank's slice of the next batch.
    void next_batch(int* inputs, int* targets);
    void reset();  // back to the first batch of epoch 0

    LoaderPosition position() const { return position_; }
    void set_position(const LoaderPosition& position);  // throws InputError if out of range

    const std::vector<std::string>& files() const { return files_; }
    int64_t chunks_per_epoch() const;

private:
    int shard_at(int64_t epoch, int64_t shard_step) const;  // which file, in this epoch's order
    int64_t chunk_at(int shard, int64_t epoch, int64_t chunk_step) const;
    void load_shard(int shard);

    std::string pattern_;
    int B_, T_, rank_, num_ranks_, vocab_size_;
    bool shuffle_;
    uint64_t seed_;
    std::vector<std::string> files_;
    std::vector<int64_t> num_chunks_;  // per file
    int loaded_shard_ = -1;
    // The loaded shard's tokens: GPT-2's uint16 or Llama 3's uint32 (the other vector is empty).
    std::vector<uint16_t> narrow_tokens_;
    std::vector<uint32_t> wide_tokens_;
    uint32_t token(int64_t i) const { return wide_tokens_.empty() ? narrow_tokens_[i] : wide_tokens_[i]; }
    mutable std::vector<int64_t> chunk_order_;  // cached chunk order of (epoch, shard)
    mutable int64_t chunk_order_epoch_ = -1, chunk_order_shard_ = -1;
    LoaderPosition position_;
};

// Token-shard data loader (see dataloader.h).
#include "train/dataloader.h"

#include <algorithm>
#include <glob.h>
#include <numeric>

#include "base/errors.h"
#include "base/file_io.h"
#include "base/formats.h"
#include "base/rng.h"

// The files a glob names, sorted; a plain path that exists is its own match.
static std::vector<std::string> expand_glob(const std::string& pattern) {
    std::vector<std::string> files;
    glob_t matches;
    if (glob(pattern.c_str(), 0, nullptr, &matches) == 0) {
        for (size_t i = 0; i < matches.gl_pathc; i++) files.push_back(matches.gl_pathv[i]);
        globfree(&matches);
    }
    std::sort(files.begin(), files.end());
    return files;
}

// Number of tokens in a shard, after checking its header and exact size; *token_bytes: 2 (GPT-2's
// format) or 4 (Llama 3's).
static int64_t checked_token_count(const std::string& path, int* token_bytes) {
    std::vector<int32_t> h = read_header(path);
    int version = 0;
    if (!token_shard_layout(h[0], &version, token_bytes)) {
        if (const char* kind = file_kind_of_magic(h[0]))
            fail("%s: is %s, not a token shard", path.c_str(), kind);
        fail("%s: not a token shard (magic %d, expected %d or %d)", path.c_str(), h[0],
             TOKEN_SHARD_MAGIC, LLAMA3_TOKEN_SHARD_MAGIC);
    }
    if (h[1] != version)
        fail("%s: unsupported token shard version %d (expected %d)", path.c_str(), h[1], version);
    if (h[2] < 0) fail("%s: negative token count %d in header", path.c_str(), h[2]);
    const uint64_t expected = FILE_HEADER_BYTES + (uint64_t)*token_bytes * (uint64_t)h[2];
    const uint64_t actual = file_size(path);
    if (actual != expected)
        fail("%s: size %llu bytes does not match its header (%d tokens need %llu bytes)",
             path.c_str(), (unsigned long long)actual, h[2], (unsigned long long)expected);
    return h[2];
}

DataLoader::DataLoader(const std::string& pattern, int B, int T, int rank, int num_ranks,
                       int vocab_size, bool shuffle, uint64_t seed)
    : pattern_(pattern),
      B_(B),
      T_(T),
      rank_(rank),
      num_ranks_(num_ranks),
      vocab_size_(vocab_size),
      shuffle_(shuffle),
      seed_(seed) {
    if (B <= 0 || T <= 0 || num_ranks <= 0 || rank < 0 || rank >= num_ranks)
        fail("%s: bad loader shape B=%d T=%d rank %d of %d", pattern.c_str(), B, T, rank,
             num_ranks);
    files_ = expand_glob(pattern);
    if (files_.empty()) fail("%s: no file matches", pattern.c_str());
    const int64_t chunk = (int64_t)num_ranks * B * T;
    for (const std::string& file : files_) {
        int token_bytes = 0;
        int64_t tokens = checked_token_count(file, &token_bytes);
        int64_t chunks = tokens > 0 ? (tokens - 1) / chunk : 0;
        if (chunks == 0)
            fail("%s: %lld tokens are too few for one batch of %lld (+1) tokens", file.c_str(),
                 (long long)tokens, (long long)chunk);
        num_chunks_.push_back(chunks);
    }
    load_shard(shard_at(0, 0));
}

int64_t DataLoader::chunks_per_epoch() const {
    return std::accumulate(num_chunks_.begin(), num_chunks_.end(), (int64_t)0);
}

// A permutation of 0..n-1 by Fisher-Yates from a seed.
static std::vector<int64_t> permutation(int64_t n, uint64_t seed) {
    std::vector<int64_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    Rng rng(seed);
    for (int64_t i = n - 1; i > 0; i--) std::swap(order[i], order[rng.below(i + 1)]);
    return order;
}

// Seeds for the per-epoch shard order and per-(epoch, shard) chunk order: the run's seed mixed with
// the indices through one SplitMix64 step each, so nearby indices give unrelated permutations.
static uint64_t mix(uint64_t seed, uint64_t a, uint64_t b) {
    Rng rng(seed ^ (a * 0xD1B54A32D192ED03ull));
    rng.state ^= b * 0x8CB92BA72F3D8DD7ull;
    return rng.next_u64();
}

int DataLoader::shard_at(int64_t epoch, int64_t shard_step) const {
    if (!shuffle_) return (int)shard_step;
    return (int)permutation((int64_t)files_.size(), mix(seed_, epoch, UINT64_MAX))[shard_step];
}

int64_t DataLoader::chunk_at(int shard, int64_t epoch, int64_t chunk_step) const {
    if (!shuffle_) return chunk_step;
    if (epoch != chunk_order_epoch_ || shard != chunk_order_shard_) {
        chunk_order_ = permutation(num_chunks_[shard], mix(seed_, epoch, (uint64_t)shard));
        chunk_order_epoch_ = epoch;
        chunk_order_shard_ = shard;
    }
    return chunk_order_[chunk_step];
}

void DataLoader::load_shard(int shard) {
    if (shard == loaded_shard_) return;
    const std::string& path = files_[shard];
    int token_bytes = 0;
    int64_t n = checked_token_count(path, &token_bytes);
    // Held at the shard's own width: a GPT-2 shard of 100M tokens takes 200 MB, not 400.
    narrow_tokens_.clear(), wide_tokens_.clear();
    if (token_bytes == 4) {
        wide_tokens_.resize(n);
        read_bytes(path, FILE_HEADER_BYTES, wide_tokens_.data(), n * sizeof(uint32_t));
    } else {
        narrow_tokens_.resize(n);
        read_bytes(path, FILE_HEADER_BYTES, narrow_tokens_.data(), n * sizeof(uint16_t));
    }
    for (int64_t i = 0; i < n; i++)
        if (token(i) >= (uint32_t)vocab_size_)
            fail("%s: token %u at index %lld is outside the vocabulary of %d", path.c_str(),
                 token(i), (long long)i, vocab_size_);
    loaded_shard_ = shard;
}

void DataLoader::next_batch(int* inputs, int* targets) {
    const int shard = shard_at(position_.epoch, position_.shard_step);
    load_shard(shard);
    const int64_t chunk = chunk_at(shard, position_.epoch, position_.chunk_step);
    const int64_t start = (chunk * num_ranks_ + rank_) * (int64_t)B_ * T_;
    for (int64_t i = 0; i < (int64_t)B_ * T_; i++) {
        inputs[i] = (int)token(start + i);
        targets[i] = (int)token(start + i + 1);
    }
    // Advance: next chunk, else next shard, else next epoch.
    if (++position_.chunk_step == num_chunks_[shard]) {
        position_.chunk_step = 0;
        if (++position_.shard_step == (int64_t)files_.size()) {
            position_.shard_step = 0;
            position_.epoch++;
        }
    }
}

void DataLoader::reset() { position_ = LoaderPosition(); }

void DataLoader::set_position(const LoaderPosition& position) {
    LoaderPosition p = position;
    // Just past a shard's last chunk (a position converted from another rank count, rounded up to a
    // whole chunk): the next shard's first, as reading on would reach it.
    if (p.epoch >= 0 && p.shard_step >= 0 && p.shard_step < (int64_t)files_.size() &&
        p.chunk_step == num_chunks_[shard_at(p.epoch, p.shard_step)]) {
        p.chunk_step = 0;
        if (++p.shard_step == (int64_t)files_.size()) p.shard_step = 0, p.epoch++;
    }
    if (p.epoch < 0 || p.shard_step < 0 || p.shard_step >= (int64_t)files_.size() ||
        p.chunk_step < 0 || p.chunk_step >= num_chunks_[shard_at(p.epoch, p.shard_step)])
        fail(
            "%s: saved data position (epoch %lld, shard %lld, batch %lld) does not fit these "
            "shards",
            pattern_.c_str(), (long long)p.epoch, (long long)p.shard_step, (long long)p.chunk_step);
    position_ = p;
}

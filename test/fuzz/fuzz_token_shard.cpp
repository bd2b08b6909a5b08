// Fuzz target: token shards, as the trainer's DataLoader reads them (header check up front, then
// batches, both data orders) and as data/'s read_token_shard does.
#include <vector>

#include "base/formats.h"
#include "data/token_shard.h"
#include "test/fuzz/fuzz_target.h"
#include "train/dataloader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = write_scratch("shard.bin", data, size);
    expect_clean([&] { read_token_shard(path, GPT2_VOCAB_SIZE); });
    for (bool shuffle : {false, true}) {
        expect_clean([&] {
            const int B = 2, T = 4;
            DataLoader loader(path, B, T, 0, 1, GPT2_VOCAB_SIZE, shuffle, 7);
            std::vector<int> inputs(B * T), targets(B * T);
            for (int i = 0; i < 3; i++) loader.next_batch(inputs.data(), targets.data());
        });
    }
    return 0;
}

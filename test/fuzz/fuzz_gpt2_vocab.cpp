// Fuzz target: GPT-2's encoder.json and vocab.bpe through load_gpt2_vocab. The input holds both
// files, split at the first line "#vocab.bpe" (absent: all of it is encoder.json, vocab.bpe empty).
#include "data/gpt2_vocab.h"
#include "test/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string input((const char*)data, size), separator = "\n#vocab.bpe\n";
    const size_t split = input.find(separator);
    const std::string json = input.substr(0, split);
    const std::string bpe =
        split == std::string::npos ? "" : input.substr(split + separator.size());
    const std::string json_path = write_scratch("encoder.json", json.data(), json.size());
    const std::string bpe_path = write_scratch("vocab.bpe", bpe.data(), bpe.size());
    expect_clean([&] { load_gpt2_vocab(json_path, bpe_path); });
    return 0;
}

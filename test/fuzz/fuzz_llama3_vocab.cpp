// Fuzz target: llama3-tokenizer-js's data file (its two base64 string constants) through
// load_llama3_vocab. Inputs rarely hold Llama 3's 128,000 tokens, so this exercises the reading of
// the constants, the base64 and the byte-alphabet spellings, and the refusals on the way.
#include "data/llama3_vocab.h"
#include "test/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = write_scratch("data-converted.js", data, size);
    expect_clean([&] { load_llama3_vocab(path); });
    return 0;
}

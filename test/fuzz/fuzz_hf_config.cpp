// Fuzz target: the Hugging Face GPT-2 config.json parser (train/hf_gpt2.h) on arbitrary bytes.
// Seeds: test/fuzz/corpus/hf_config/.
#include "test/fuzz/fuzz_target.h"
#include "train/hf_gpt2.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    expect_clean([&] { parse_hf_config(std::string((const char*)data, size), "fuzz"); });
    return 0;
}

// Fuzz target: the Hugging Face GPT-2 config.json parser (host/hf_gpt2.h) on arbitrary bytes.
// Seeds: test/fuzz/corpus/hf_config/.
#include "host/hf_gpt2.h"
#include "test/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    expect_clean([&] { parse_hf_config(std::string((const char*)data, size), "fuzz"); });
    return 0;
}

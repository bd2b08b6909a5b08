// Fuzz target: the Hugging Face config.json parsers on arbitrary bytes: GPT-2's (train/hf_gpt2.h, from
// the text) and, where the bytes are JSON, Llama's (train/hf_llama.h).
// Seeds: test/fuzz/corpus/hf_config/.
#include "test/fuzz/fuzz_target.h"
#include "train/hf_gpt2.h"
#include "train/hf_llama.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text((const char*)data, size);
    expect_clean([&] { parse_hf_config(text, "fuzz"); });
    const nlohmann::json config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded()) return 0;
    bool tied = false;
    expect_clean([&] { parse_hf_llama_config(config, "fuzz", &tied); });
    return 0;
}

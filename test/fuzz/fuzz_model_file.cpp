// Fuzz target: model files through both readers: llm.c's GPT-2 files, fp32 (version 3) and bf16
// (version 5), through read_model_file, and Llama 3 files through read_llama_model_file.
#include "base/llama_model_file.h"
#include "base/model_file.h"
#include "test/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = write_scratch("model.bin", data, size);
    expect_clean([&] { read_model_file(path); });
    expect_clean([&] { read_llama_model_file(path); });
    return 0;
}

// Fuzz target: safetensors files (train/safetensors.h) and GPT-2 folders (train/hf_gpt2.h). Each input
// is parsed as a safetensors file in memory (every floating tensor of an accepted header is then
// widened to fp32), and imported as the model.safetensors of a folder whose config.json describes a
// tiny GPT-2 (L=1, C=8, H=2, V=16, maxT=4), which exercises the tensor names, shapes and dtypes.
// A refusal must be a one-line InputError; another exception aborts (a finding), as do the crashes,
// leaks and out-of-bounds reads the sanitizers catch. Seeds: test/fuzz/corpus/safetensors/.
#include "test/fuzz/fuzz_target.h"
#include "train/hf_gpt2.h"
#include "train/safetensors.h"

// A scratch folder holding the tiny config.json; written once.
static std::string folder() {
    static const std::string dir = [] {
        const std::string d = scratch_file("hf");
        mkdir(d.c_str(), 0700);
        GPTConfig c;
        c.num_layers = 1, c.channels = 8, c.num_heads = 2, c.vocab_size = 16, c.max_seq_len = 4;
        c.padded_vocab_size = 128;
        const std::string config = hf_config_json(c, StDtype::F32);
        FILE* f = fopen((d + "/config.json").c_str(), "wb");
        if (!f || fwrite(config.data(), 1, config.size(), f) != config.size() || fclose(f)) abort();
        return d;
    }();
    return dir;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    expect_clean([&] {
        const StHeader header = parse_safetensors_header(data, size, size, "fuzz");
        for (const StTensor& t : header.tensors)
            if (t.dtype == StDtype::F32 || t.dtype == StDtype::F16 || t.dtype == StDtype::BF16)
                tensor_as_float(t, data + header.data_start, "fuzz");
    });
    const std::string hf_folder = folder();
    write_scratch("hf/model.safetensors", data, size);
    expect_clean([&] { import_hf_folder(hf_folder); });
    return 0;
}

// Fuzz target: the tokenizer decode table (data/gpt2_tokenizer.bin) through read_decode_table, then
// decoding a few ids, in range and out of it.
#include "base/decode_table.h"
#include "test/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = write_scratch("tokenizer.bin", data, size);
    expect_clean([&] {
        const DecodeTable table = read_decode_table(path);
        for (int token : {-1, 0, 1, table.eot_token, (int)table.token_bytes.size(), 1 << 30})
            table.decode(token);
    });
    return 0;
}

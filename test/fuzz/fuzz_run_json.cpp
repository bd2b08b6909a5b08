// Fuzz target: a run folder's run.json, whose "settings" a resumed run reads (read_run_settings).
#include "test/fuzz/fuzz_target.h"
#include "train/run_folder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = write_scratch("run.json", data, size);
    expect_clean([&] { read_run_settings(path); });
    return 0;
}

// Fuzz target: a run folder's matmul_algorithms.txt, which every rank of a resumed run reads
// (read_algorithm_table).
#include "test/fuzz/fuzz_target.h"
#include "train/algorithm_table.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = write_scratch("matmul_algorithms.txt", data, size);
    expect_clean([&] { read_algorithm_table(path); });
    return 0;
}

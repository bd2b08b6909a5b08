// Fuzz target: training-state files (state_NNNNNNNN_RRRRR.bin) through read_training_state. The
// checksum would stop almost every mutation at the header, so each input is read twice: as it is,
// and with the header's payload size and checksum made to match its payload (by the rule of the
// version it names), which takes the mutations on to the fields behind them. What a resumed run does
// first with the loaded outlier windows (-sl, -sg), adding a value, is done too, and a slice of the
// arrays is read alone.
#include <cstring>
#include <vector>

#include "test/fuzz/fuzz_target.h"
#include "train/training_state.h"

constexpr size_t HEADER_BYTES = 32;  // magic 8, version 4, zero 4, payload bytes 8, checksum 8

static void read_and_use(const std::string& path) {
    TrainingState s = read_training_state(path);
    s.loss_detector.update(1.0);
    s.norm_detector.update(1.0);
    TrainingStateFile file = open_training_state(path);  // and a slice, as a resuming rank reads one
    float value;
    if (file.values()) file.read_values(2, file.values() / 2, 1, &value);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = write_scratch("state.bin", data, size);
    expect_clean([&] { read_and_use(path); });
    if (size < HEADER_BYTES) return 0;
    std::vector<uint8_t> fixed(data, data + size);
    const uint64_t payload_bytes = size - HEADER_BYTES;
    uint32_t version;
    memcpy(&version, fixed.data() + 8, 4);
    const uint64_t checksum = training_state_checksum(version, fixed.data() + HEADER_BYTES, payload_bytes);
    memcpy(fixed.data() + 16, &payload_bytes, 8);
    memcpy(fixed.data() + 24, &checksum, 8);
    const std::string fixed_path = write_scratch("state_fixed.bin", fixed.data(), fixed.size());
    expect_clean([&] { read_and_use(fixed_path); });
    return 0;
}

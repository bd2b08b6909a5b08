// The safetensors format (Hugging Face's weight files), read and written here without a library:
//   8 bytes      N, the header's length (uint64, little-endian)
//   N bytes      a JSON object: per tensor "name": {"dtype": "F32", "shape": [d0, d1, ...],
//                "data_offsets": [begin, end]}, plus an optional "__metadata__" object of strings
//   the rest     the tensors' bytes, little-endian, row-major; offsets count from here
// Reading validates every field: the header length against the file, the JSON, each tensor's dtype,
// shape and offsets (end − begin = bytes of dtype·shape), and that the tensors tile the data exactly
// (no overlap, no gap, nothing after the last). Each failure is one InputError line naming the file.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

// The dtypes the format names; this project reads the floating ones (F32, F16, BF16) as values.
enum class StDtype { F64, F32, F16, BF16, I64, I32, I16, I8, U8, U16, U32, U64, BOOL, F8_E4M3, F8_E5M2 };
const char* dtype_name(StDtype dtype);  // "F32", as the header spells it
size_t dtype_bytes(StDtype dtype);

struct StTensor {
    std::string name;
    StDtype dtype = StDtype::F32;
    std::vector<uint64_t> shape;
    uint64_t begin = 0, end = 0;  // byte range within the data section
    uint64_t elements() const;
};

struct StHeader {
    std::vector<StTensor> tensors;  // in the order of their data
    std::map<std::string, std::string> metadata;
    uint64_t data_start = 0;  // file offset of the data section: 8 + N
    const StTensor* find(const std::string& name) const;  // nullptr when absent
};

// Parses and validates the 8-byte length and the JSON header of a file of file_bytes bytes, given
// its first bytes (at least the whole header, or all of the file). `what` names it in messages.
StHeader parse_safetensors_header(const uint8_t* bytes, size_t available, uint64_t file_bytes,
                                  const std::string& what);
// The same from a file on disk.
StHeader read_safetensors_header(const std::string& path);

// One tensor's values widened to fp32 (F32 exact, F16 and BF16 exact widenings); other dtypes are an
// InputError. `data` is the data section (all of it), as read from the file.
std::vector<float> tensor_as_float(const StTensor& tensor, const uint8_t* data,
                                   const std::string& what);
// Reads a tensor's bytes from the file.
std::vector<uint8_t> read_tensor_bytes(const std::string& path, const StHeader& header,
                                       const StTensor& tensor);

// A tensor to write: fp32 values stored as dtype (F32, F16 or BF16; round to nearest even).
struct StOutTensor {
    std::string name;
    std::vector<uint64_t> shape;
    std::vector<float> values;
};
// Writes tensors (in the given order) with the metadata, through AtomicFile. F16 values beyond its
// range (|x| > 65504) are an InputError rather than infinities.
void write_safetensors(const std::string& path, const std::vector<StOutTensor>& tensors,
                       StDtype dtype, const std::map<std::string, std::string>& metadata);

// IEEE half precision ↔ fp32 (to-half rounds to nearest even; NaN stays NaN).
uint16_t float_to_half(float value);
float half_to_float(uint16_t value);

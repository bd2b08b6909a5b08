// llm.c model file read/write (see model_file.h).
#include "base/model_file.h"

#include <algorithm>
#include <cstring>

#include "base/errors.h"
#include "base/file_io.h"
#include "base/formats.h"
#include "base/host_arrays.h"
#include "base/model_descriptor.h"

uint16_t float_to_bf16(float value) {
    uint32_t bits;
    memcpy(&bits, &value, 4);
    if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu))
        return (uint16_t)((bits >> 16) | 0x0040u);  // NaN: keep sign, force a quiet NaN
    // Add half of the dropped range, minus one unless the kept part is odd: ties go to even.
    uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
    return (uint16_t)((bits + rounding) >> 16);
}

float bf16_to_float(uint16_t value) {
    uint32_t bits = (uint32_t)value << 16;
    float out;
    memcpy(&out, &bits, 4);
    return out;
}

void write_weights(AtomicFile& file, const float* values, size_t count, WeightType type) {
    if (type == WeightType::FP32) {
        file.write(values, count * sizeof(float));
        return;
    }
    std::vector<uint16_t> chunk;
    const size_t chunk_size = 1 << 20;
    for (size_t start = 0; start < count; start += chunk_size) {
        const size_t n = std::min(chunk_size, count - start);
        chunk.resize(n);
        for (size_t i = 0; i < n; i++) chunk[i] = float_to_bf16(values[start + i]);
        file.write(chunk.data(), n * sizeof(uint16_t));
    }
}

void read_weights(FileReader& file, uint64_t offset, uint64_t count, WeightType type, float* out) {
    if (type == WeightType::FP32) {
        file.read(offset, out, count * 4);
        return;
    }
    // bf16 through a fixed-size buffer, widened as it comes.
    const uint64_t block = 1 << 16;
    std::vector<uint16_t> raw(std::min(count, block));
    for (uint64_t done = 0; done < count;) {
        const uint64_t n = std::min(block, count - done);
        file.read(offset + done * 2, raw.data(), n * 2);
        for (uint64_t i = 0; i < n; i++) out[done + i] = bf16_to_float(raw[i]);
        done += n;
    }
}

// The file's header: magic, version (the weight type), the shape.
static void model_file_header(const GPTConfig& c, WeightType type, int32_t header[FILE_HEADER_INTS]) {
    std::fill(header, header + FILE_HEADER_INTS, 0);
    header[0] = MODEL_FILE_MAGIC;
    header[1] = type == WeightType::FP32 ? MODEL_FILE_VERSION_FP32 : MODEL_FILE_VERSION_BF16;
    header[2] = c.max_seq_len;
    header[3] = c.vocab_size;
    header[4] = c.num_layers;
    header[5] = c.num_heads;
    header[6] = c.channels;
    header[7] = c.padded_vocab_size;
}

std::vector<char> model_file_bytes(const int32_t header[FILE_HEADER_INTS], const float* params, size_t count,
                                   WeightType type) {
    const size_t value_bytes = type == WeightType::FP32 ? sizeof(float) : sizeof(uint16_t);
    std::vector<char> image = reusable_host_bytes(FILE_HEADER_BYTES + count * value_bytes);  // all written
    memcpy(image.data(), header, FILE_HEADER_BYTES);
    if (type == WeightType::FP32) {
        memcpy(image.data() + FILE_HEADER_BYTES, params, count * sizeof(float));
    } else {
        uint16_t* values = (uint16_t*)(image.data() + FILE_HEADER_BYTES);
        for (size_t i = 0; i < count; i++) values[i] = float_to_bf16(params[i]);
    }
    return image;
}

std::vector<char> model_file_image(const GPTConfig& c, const float* params, WeightType type) {
    int32_t header[FILE_HEADER_INTS];
    model_file_header(c, type, header);
    return model_file_bytes(header, params, param_layout(c).total, type);
}

void write_model_file(const std::string& path, const GPTConfig& c, const float* params,
                      WeightType type) {
    int32_t header[FILE_HEADER_INTS];
    model_file_header(c, type, header);
    const size_t total = param_layout(c).total;
    AtomicFile file(path);
    file.write(header, sizeof header);
    write_weights(file, params, total, type);
    file.commit();
}

void check_model_file_size(const FileReader& file, uint64_t expected, const std::string& shape) {
    const uint64_t actual = file.size();
    const char* path = file.path().c_str();
    if (actual < expected)
        fail("%s: truncated tensor data (%llu bytes, the header's %s needs %llu)", path,
             (unsigned long long)actual, shape.c_str(), (unsigned long long)expected);
    if (actual > expected)
        fail("%s: file size %llu does not match its header (%s needs %llu bytes)", path,
             (unsigned long long)actual, shape.c_str(), (unsigned long long)expected);
}

// The header's config and weight type, checked, and that the file holds exactly the bytes they imply.
GPTConfig read_model_file_header(FileReader& file, WeightType* type) {
    GPTConfig c;
    const std::string& path = file.path();
    if (file.size() < (uint64_t)FILE_HEADER_BYTES)
        fail("%s: shorter than the %d-byte header", path.c_str(), FILE_HEADER_BYTES);
    int32_t h[FILE_HEADER_INTS];
    file.read(0, h, FILE_HEADER_BYTES);
    if (h[0] == LLAMA3_MODEL_FILE_MAGIC)
        fail("%s: is a Llama 3 model file, not a GPT-2 model file", path.c_str());
    if (h[0] != MODEL_FILE_MAGIC) {
        if (const char* kind = file_kind_of_magic(h[0]))
            fail("%s: is %s, not a model file", path.c_str(), kind);
        fail("%s: not a model file (magic %d, expected %d)", path.c_str(), h[0], MODEL_FILE_MAGIC);
    }
    if (h[1] != MODEL_FILE_VERSION_FP32 && h[1] != MODEL_FILE_VERSION_BF16)
        fail("%s: unsupported model file version %d (expected %d for fp32 or %d for bf16)",
             path.c_str(), h[1], MODEL_FILE_VERSION_FP32, MODEL_FILE_VERSION_BF16);
    *type = h[1] == MODEL_FILE_VERSION_FP32 ? WeightType::FP32 : WeightType::BF16;
    c.max_seq_len = h[2];
    c.vocab_size = h[3];
    c.num_layers = h[4];
    c.num_heads = h[5];
    c.channels = h[6];
    c.padded_vocab_size = h[7];
    validate_config(c, path + " header");
    const uint64_t expected = FILE_HEADER_BYTES + (uint64_t)param_layout(c).total * (*type == WeightType::FP32 ? 4 : 2);
    check_model_file_size(file, expected, describe_config(c));
    return c;
}

ModelFileReader::ModelFileReader(const std::string& path) : file_(path) {
    config_ = read_model_file_header(file_, &type_);
    total_ = param_layout(config_).total;
}

void ModelFileReader::read_values(uint64_t first, uint64_t count, float* out) {
    if (first > total_ || count > total_ - first)
        fail("internal error: weights [%llu, +%llu) of %s, which holds %zu", (unsigned long long)first,
             (unsigned long long)count, file_.path().c_str(), total_);
    read_weights(file_, FILE_HEADER_BYTES + first * (type_ == WeightType::FP32 ? 4 : 2), count,
                 type_, out);
}

ModelFile read_model_file(const std::string& path) {
    ModelFileReader reader(path);
    ModelFile model;
    model.config = reader.config();
    model.type = reader.type();
    model.params.resize(param_layout(model.config).total);
    reader.read_values(0, model.params.size(), model.params.data());
    return model;
}

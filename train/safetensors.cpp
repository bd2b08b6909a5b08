// safetensors reading and writing (see safetensors.h). JSON by nlohmann-json.
#include "train/safetensors.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "base/errors.h"
#include "base/file_io.h"
#include "base/model_file.h"  // bf16 conversions

using nlohmann::json;

namespace {

struct DtypeInfo {
    StDtype dtype;
    const char* name;
    size_t bytes;
};
const DtypeInfo DTYPES[] = {
    {StDtype::F64, "F64", 8},   {StDtype::F32, "F32", 4},   {StDtype::F16, "F16", 2},
    {StDtype::BF16, "BF16", 2}, {StDtype::I64, "I64", 8},   {StDtype::I32, "I32", 4},
    {StDtype::I16, "I16", 2},   {StDtype::I8, "I8", 1},     {StDtype::U8, "U8", 1},
    {StDtype::U16, "U16", 2},   {StDtype::U32, "U32", 4},   {StDtype::U64, "U64", 8},
    {StDtype::BOOL, "BOOL", 1}, {StDtype::F8_E4M3, "F8_E4M3", 1}, {StDtype::F8_E5M2, "F8_E5M2", 1},
};

const DtypeInfo& info(StDtype dtype) {
    for (const DtypeInfo& d : DTYPES)
        if (d.dtype == dtype) return d;
    return DTYPES[1];
}

// The safetensors reference implementation refuses headers over 100 MB; so do we.
constexpr uint64_t MAX_HEADER_BYTES = 100000000;

uint64_t read_u64_le(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

// A JSON value's kind, for messages.
std::string kind(const json& j) { return j.type_name(); }

uint64_t unsigned_field(const json& j, const std::string& what) {
    if (!j.is_number_unsigned())
        fail("%s must be a non-negative whole number, not %s", what.c_str(),
             j.is_number() ? j.dump().c_str() : kind(j).c_str());
    return j.get<uint64_t>();
}

StTensor parse_tensor(const std::string& name, const json& entry, const std::string& where) {
    const std::string what = where + ": tensor '" + name + "'";
    if (name.empty()) fail("%s: a tensor has an empty name", where.c_str());
    if (!entry.is_object())
        fail("%s: is %s, not an object with dtype, shape and data_offsets", what.c_str(),
             kind(entry).c_str());
    for (const auto& item : entry.items())
        if (item.key() != "dtype" && item.key() != "shape" && item.key() != "data_offsets")
            fail("%s: unknown field '%s' (expected dtype, shape, data_offsets)", what.c_str(),
                 item.key().c_str());
    for (const char* field : {"dtype", "shape", "data_offsets"})
        if (!entry.contains(field)) fail("%s: no '%s'", what.c_str(), field);
    StTensor t;
    t.name = name;
    const json& dtype = entry["dtype"];
    if (!dtype.is_string()) fail("%s: dtype is %s, not a string", what.c_str(), kind(dtype).c_str());
    const std::string dtype_text = dtype.get<std::string>();
    bool known = false;
    for (const DtypeInfo& d : DTYPES)
        if (dtype_text == d.name) t.dtype = d.dtype, known = true;
    if (!known) fail("%s: unknown dtype '%s'", what.c_str(), dtype_text.c_str());
    const json& shape = entry["shape"];
    if (!shape.is_array()) fail("%s: shape is %s, not an array", what.c_str(), kind(shape).c_str());
    uint64_t elements = 1;
    for (const json& d : shape) {
        t.shape.push_back(unsigned_field(d, what + ": a shape entry"));
        if (__builtin_mul_overflow(elements, t.shape.back(), &elements))
            fail("%s: shape %s overflows", what.c_str(), shape.dump().c_str());
    }
    const json& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2)
        fail("%s: data_offsets must be [begin, end], not %s", what.c_str(),
             offsets.dump().substr(0, 60).c_str());
    t.begin = unsigned_field(offsets[0], what + ": data_offsets[0]");
    t.end = unsigned_field(offsets[1], what + ": data_offsets[1]");
    if (t.end < t.begin)
        fail("%s: data_offsets [%llu, %llu] end before they begin", what.c_str(),
             (unsigned long long)t.begin, (unsigned long long)t.end);
    uint64_t bytes;
    if (__builtin_mul_overflow(elements, (uint64_t)dtype_bytes(t.dtype), &bytes) ||
        bytes != t.end - t.begin)
        fail("%s: data_offsets [%llu, %llu] hold %llu bytes, but %s of shape %s needs %llu",
             what.c_str(), (unsigned long long)t.begin, (unsigned long long)t.end,
             (unsigned long long)(t.end - t.begin), dtype_text.c_str(), shape.dump().c_str(),
             (unsigned long long)bytes);
    return t;
}

}  // namespace

const char* dtype_name(StDtype dtype) { return info(dtype).name; }
size_t dtype_bytes(StDtype dtype) { return info(dtype).bytes; }

uint64_t StTensor::elements() const {
    uint64_t n = 1;
    for (uint64_t d : shape) n *= d;
    return n;
}

const StTensor* StHeader::find(const std::string& name) const {
    for (const StTensor& t : tensors)
        if (t.name == name) return &t;
    return nullptr;
}

StHeader parse_safetensors_header(const uint8_t* bytes, size_t available, uint64_t file_bytes,
                                  const std::string& what) {
    if (file_bytes < 8 || available < 8)
        fail("%s: %llu bytes is too short for a safetensors file (8-byte header length first)",
             what.c_str(), (unsigned long long)file_bytes);
    const uint64_t n = read_u64_le(bytes);
    if (n > MAX_HEADER_BYTES || n > file_bytes - 8)
        fail("%s: header length %llu does not fit the file's %llu bytes (not a safetensors file?)",
             what.c_str(), (unsigned long long)n, (unsigned long long)file_bytes);
    if (n > available - 8) fail("%s: header not read in full", what.c_str());
    if (n < 2 || bytes[8] != '{')
        fail("%s: the header is not a JSON object (it must start with '{')", what.c_str());
    const std::string text((const char*)bytes + 8, (size_t)n);

    // Keys seen per open object, to refuse duplicates (the parser would keep the last silently).
    std::vector<std::set<std::string>> open_objects;
    std::string duplicate;
    const json::parser_callback_t note_keys = [&](int, json::parse_event_t event, json& parsed) {
        if (event == json::parse_event_t::object_start) open_objects.emplace_back();
        if (event == json::parse_event_t::object_end && !open_objects.empty())
            open_objects.pop_back();
        if (event == json::parse_event_t::key && !open_objects.empty() && parsed.is_string() &&
            !open_objects.back().insert(parsed.get<std::string>()).second && duplicate.empty())
            duplicate = parsed.get<std::string>();
        return true;
    };
    const json header = json::parse(text, note_keys, /*allow_exceptions=*/false);
    if (header.is_discarded()) fail("%s: the header is not valid JSON", what.c_str());
    if (!duplicate.empty())
        fail("%s: the header names '%s' twice", what.c_str(), duplicate.c_str());
    if (!header.is_object()) fail("%s: the header is not a JSON object", what.c_str());

    StHeader h;
    h.data_start = 8 + n;
    for (const auto& item : header.items()) {
        if (item.key() == "__metadata__") {
            if (!item.value().is_object())
                fail("%s: __metadata__ is %s, not an object of strings", what.c_str(),
                     kind(item.value()).c_str());
            for (const auto& m : item.value().items()) {
                if (!m.value().is_string())
                    fail("%s: __metadata__ '%s' is %s, not a string", what.c_str(),
                         m.key().c_str(), kind(m.value()).c_str());
                h.metadata[m.key()] = m.value().get<std::string>();
            }
            continue;
        }
        h.tensors.push_back(parse_tensor(item.key(), item.value(), what));
    }
    // The tensors must tile the data section: sorted by offset, each starts where the last ended.
    std::stable_sort(h.tensors.begin(), h.tensors.end(), [](const StTensor& a, const StTensor& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    const uint64_t data_bytes = file_bytes - h.data_start;
    uint64_t at = 0;
    for (const StTensor& t : h.tensors) {
        if (t.begin != at)
            fail("%s: tensor '%s' starts at byte %llu of the data, expected %llu (%s)",
                 what.c_str(), t.name.c_str(), (unsigned long long)t.begin,
                 (unsigned long long)at, t.begin < at ? "overlaps another" : "leaves a gap");
        at = t.end;
    }
    if (at != data_bytes)
        fail("%s: the tensors hold %llu bytes but the data section has %llu (%s)", what.c_str(),
             (unsigned long long)at, (unsigned long long)data_bytes,
             at > data_bytes ? "truncated file" : "bytes after the last tensor");
    return h;
}

StHeader read_safetensors_header(const std::string& path) {
    const uint64_t size = file_size(path);
    uint8_t length[8] = {0};
    if (size >= 8) read_bytes(path, 0, length, 8);
    const uint64_t n = read_u64_le(length);
    std::vector<uint8_t> head(8);
    std::copy(length, length + 8, head.begin());
    if (size >= 8 && n <= MAX_HEADER_BYTES && n <= size - 8) {
        head.resize(8 + n);
        read_bytes(path, 8, head.data() + 8, (size_t)n);
    }
    return parse_safetensors_header(head.data(), head.size(), size, path);
}

std::vector<uint8_t> read_tensor_bytes(const std::string& path, const StHeader& header,
                                       const StTensor& t) {
    std::vector<uint8_t> bytes(t.end - t.begin);
    if (!bytes.empty()) read_bytes(path, header.data_start + t.begin, bytes.data(), bytes.size());
    return bytes;
}

std::vector<float> tensor_as_float(const StTensor& t, const uint8_t* data, const std::string& what) {
    const size_t n = (size_t)t.elements();
    std::vector<float> out(n);
    const uint8_t* p = data + t.begin;
    switch (t.dtype) {
        case StDtype::F32:
            if (n) memcpy(out.data(), p, n * 4);
            break;
        case StDtype::F16:
        case StDtype::BF16:
            for (size_t i = 0; i < n; i++) {
                const uint16_t v = (uint16_t)(p[2 * i] | (p[2 * i + 1] << 8));
                out[i] = t.dtype == StDtype::F16 ? half_to_float(v) : bf16_to_float(v);
            }
            break;
        default:
            fail("%s: tensor '%s' is %s; only F32, F16 and BF16 weights are read", what.c_str(),
                 t.name.c_str(), dtype_name(t.dtype));
    }
    return out;
}

void write_safetensors(const std::string& path, const std::vector<StOutTensor>& tensors,
                       StDtype dtype, const std::map<std::string, std::string>& metadata) {
    if (dtype != StDtype::F32 && dtype != StDtype::F16 && dtype != StDtype::BF16)
        fail("%s: can only write F32, F16 or BF16, not %s", path.c_str(), dtype_name(dtype));
    json header = json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    uint64_t at = 0;
    for (const StOutTensor& t : tensors) {
        uint64_t elements = 1;
        for (uint64_t d : t.shape) elements *= d;
        if (elements != t.values.size())
            fail("%s: tensor '%s' has %zu values for its shape's %llu", path.c_str(),
                 t.name.c_str(), t.values.size(), (unsigned long long)elements);
        const uint64_t bytes = elements * dtype_bytes(dtype);
        header[t.name] = {{"dtype", dtype_name(dtype)}, {"shape", t.shape},
                          {"data_offsets", {at, at + bytes}}};
        at += bytes;
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned
    uint8_t length[8];
    for (int i = 0; i < 8; i++) length[i] = (uint8_t)((uint64_t)text.size() >> (8 * i));
    AtomicFile file(path);
    file.write(length, 8);
    file.write(text.data(), text.size());
    std::vector<uint16_t> narrow;
    for (const StOutTensor& t : tensors) {
        if (dtype == StDtype::F32) {
            if (!t.values.empty()) file.write(t.values.data(), t.values.size() * 4);
            continue;
        }
        narrow.resize(t.values.size());
        for (size_t i = 0; i < t.values.size(); i++) {
            const float v = t.values[i];
            narrow[i] = dtype == StDtype::BF16 ? float_to_bf16(v) : float_to_half(v);
            if (dtype == StDtype::F16 && std::isfinite(v) && (narrow[i] & 0x7FFF) == 0x7C00)
                fail("%s: tensor '%s' holds %g, beyond fp16's range (use --dtype bf16 or fp32)",
                     path.c_str(), t.name.c_str(), (double)v);
        }
        if (!narrow.empty()) file.write(narrow.data(), narrow.size() * 2);
    }
    file.commit();
}

uint16_t float_to_half(float value) {
    uint32_t x;
    memcpy(&x, &value, 4);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    const uint32_t a = x & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u | ((a >> 13) & 0x3FFu));  // NaN
    if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);  // 65520 and up round to infinity
    if (a >= 0x38800000u) {                                    // normal half: 2^-14 and up
        // Rebias the exponent (127 → 15) and round the 13 dropped bits to nearest even.
        const uint32_t rounded = a + 0xFFFu + ((a >> 13) & 1u);
        return (uint16_t)(sign | ((rounded - 0x38000000u) >> 13));
    }
    // Subnormal (or zero): a multiple of 2^-24, rounded to nearest even; 1024 is the smallest normal.
    float magnitude;
    memcpy(&magnitude, &a, 4);
    return (uint16_t)(sign | (uint16_t)std::nearbyint(magnitude * 16777216.0f));
}

float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1Fu,
                   mantissa = h & 0x3FFu;
    uint32_t bits;
    if (exponent == 0) {
        const float magnitude = (float)mantissa / 16777216.0f;  // exact: mantissa · 2^-24
        memcpy(&bits, &magnitude, 4);
        bits |= sign;
    } else if (exponent == 31) {
        bits = sign | 0x7F800000u | (mantissa << 13);
    } else {
        bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
    }
    float out;
    memcpy(&out, &bits, 4);
    return out;
}

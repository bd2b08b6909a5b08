// R lazy-load database reader (see rdata_reader.h). Inflation by zlib.
#include "data/rdata_reader.h"

#include <cstdint>
#include <zlib.h>

#include "base/errors.h"
#include "data/read_file.h"

// R's SEXP type codes and CHARSXP encoding flags (in the "levels" bits, above bit 12 of the flags).
constexpr int CHARSXP = 9, STRSXP = 16;
constexpr int LATIN1_MASK = 1 << 2;

// A bounds-checked reader of big-endian fields in one decompressed record.
struct XdrCursor {
    const std::string& bytes;
    size_t position;
    std::string where;  // "FILE: record N" for error messages

    const char* take(size_t count) {
        if (count > bytes.size() - position) fail("%s: ends in the middle of an object", where.c_str());
        const char* at = bytes.data() + position;
        position += count;
        return at;
    }
    int32_t int32() {
        const unsigned char* b = (const unsigned char*)take(4);
        return (int32_t)((uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3]);
    }
};

static std::string latin1_to_utf8(const std::string& latin1) {
    std::string utf8;
    for (unsigned char c : latin1) {
        if (c < 0x80) utf8 += (char)c;
        else utf8 += {(char)(0xC0 | c >> 6), (char)(0x80 | (c & 0x3F))};
    }
    return utf8;
}

// Inflates the zlib stream at data[0..available); returns the bytes of the stream it used.
static size_t inflate_record(const unsigned char* data, size_t available, size_t expected_size,
                             std::string* out, const std::string& where) {
    out->assign(expected_size, '\0');
    z_stream stream{};
    if (inflateInit(&stream) != Z_OK) fail("%s: zlib cannot start", where.c_str());
    stream.next_in = const_cast<unsigned char*>(data);
    stream.avail_in = (uInt)std::min<size_t>(available, UINT32_MAX);
    stream.next_out = (unsigned char*)out->data();
    stream.avail_out = (uInt)expected_size;
    int status = inflate(&stream, Z_FINISH);
    size_t used = stream.total_in, produced = stream.total_out;
    inflateEnd(&stream);
    if (status != Z_STREAM_END)
        fail("%s: not a valid zlib stream of %zu bytes (zlib: %s)", where.c_str(), expected_size,
             status == Z_BUF_ERROR ? "truncated or longer than stated" : "corrupt data");
    if (produced != expected_size) fail("%s: inflates to %zu bytes, not the stated %zu", where.c_str(),
                                        produced, expected_size);
    return used;
}

// Parses one serialised object; appends it to vectors if it is a character vector.
static void parse_record(const std::string& record, const std::string& where,
                         std::vector<std::vector<std::string>>* vectors) {
    XdrCursor in{record, 0, where};
    if (std::string(in.take(2), 2) != "X\n")
        fail("%s: not an R object in XDR serialisation format", where.c_str());
    int version = in.int32();
    in.int32(), in.int32();  // R version that wrote it, oldest R version that can read it
    if (version == 3) {
        int32_t name_length = in.int32();  // native encoding name, e.g. "UTF-8"
        if (name_length < 0) fail("%s: bad encoding name length", where.c_str());
        in.take(name_length);
    } else if (version != 2) {
        fail("%s: serialisation version %d (expected 2 or 3)", where.c_str(), version);
    }
    int32_t flags = in.int32();
    if ((flags & 0xFF) != STRSXP) return;  // some other object: not one of ours
    int64_t length = in.int32();
    if (length == -1) length = (int64_t)in.int32() << 32 | (uint32_t)in.int32();  // long vector
    if (length < 0) fail("%s: negative vector length", where.c_str());
    std::vector<std::string> elements;
    for (int64_t i = 0; i < length; i++) {
        int32_t element_flags = in.int32();
        if ((element_flags & 0xFF) != CHARSXP)
            fail("%s: element %lld of the character vector is not a string", where.c_str(),
                 (long long)i);
        int32_t bytes = in.int32();
        if (bytes == -1) continue;  // NA
        if (bytes < 0) fail("%s: element %lld has negative length", where.c_str(), (long long)i);
        std::string text(in.take(bytes), bytes);
        bool latin1 = (element_flags >> 12) & LATIN1_MASK;
        elements.push_back(latin1 ? latin1_to_utf8(text) : text);
    }
    vectors->push_back(std::move(elements));
}

std::vector<std::vector<std::string>> read_rdata_character_vectors(const std::string& path) {
    const std::string file = read_file(path);
    std::vector<std::vector<std::string>> vectors;
    size_t position = 0;
    for (int record_number = 1; position < file.size(); record_number++) {
        std::string where = strprintf("%s: record %d", path.c_str(), record_number);
        if (file.size() - position < 4) fail("%s: truncated length field", where.c_str());
        const unsigned char* b = (const unsigned char*)file.data() + position;
        size_t record_size = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
        if (record_size > (1u << 30)) fail("%s: implausible size %zu", where.c_str(), record_size);
        std::string record;
        position += 4;
        position += inflate_record(b + 4, file.size() - position, record_size, &record, where);
        parse_record(record, where, &vectors);
    }
    if (file.empty()) fail("%s: empty file", path.c_str());
    return vectors;
}

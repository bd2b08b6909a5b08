// Reading and writing the llm.c tokenizer decode table (see decode_table.h).
#include "base/decode_table.h"

#include <cstdint>

#include "base/errors.h"
#include "base/file_io.h"
#include "base/formats.h"

const std::string& DecodeTable::decode(int token) const {
    static const std::string nothing;
    return token >= 0 && token < (int)token_bytes.size() ? token_bytes[token] : nothing;
}

DecodeTable read_decode_table(const std::string& path) {
    const char* name = path.c_str();
    std::vector<int32_t> header = read_header(path);
    if (header[0] != DECODE_TABLE_MAGIC) {
        if (const char* kind = file_kind_of_magic(header[0]))
            fail("%s: is %s, not a tokenizer decode table", name, kind);
        fail("%s: not a tokenizer decode table (magic %d, expected %d)", name, header[0],
             DECODE_TABLE_MAGIC);
    }
    if (header[1] != 1 && header[1] != DECODE_TABLE_VERSION)
        fail("%s: decode table version %d (expected 1 or %d)", name, header[1], DECODE_TABLE_VERSION);
    const int vocab_size = header[2];
    if (vocab_size <= 0 || vocab_size > (1 << 24))
        fail("%s: implausible vocabulary size %d", name, vocab_size);
    DecodeTable table;
    table.eot_token = header[1] == 1 ? GPT2_EOT_TOKEN : header[3];
    if (table.eot_token < 0 || table.eot_token >= vocab_size)
        fail("%s: EOT token %d is outside the vocabulary of %d", name, table.eot_token, vocab_size);

    const uint64_t size = file_size(path);
    // Every token takes at least two bytes (its length and one byte): a header that announces more
    // tokens than the file can hold is refused before the table is allocated.
    if (size - FILE_HEADER_BYTES < 2 * (uint64_t)vocab_size)
        fail("%s: %llu bytes cannot hold %d tokens (truncated?)", name,
             (unsigned long long)(size - FILE_HEADER_BYTES), vocab_size);
    std::string body(size - FILE_HEADER_BYTES, '\0');
    read_bytes(path, FILE_HEADER_BYTES, body.data(), body.size());
    table.token_bytes.resize(vocab_size);
    size_t position = 0;
    for (int token = 0; token < vocab_size; token++) {
        if (position >= body.size())
            fail("%s: ends at token %d of %d (truncated?)", name, token, vocab_size);
        size_t length = (unsigned char)body[position++];
        if (length == 0) fail("%s: token %d has length 0", name, token);
        if (length > body.size() - position)
            fail("%s: ends inside token %d (truncated?)", name, token);
        table.token_bytes[token] = body.substr(position, length);
        position += length;
    }
    if (position != body.size())
        fail("%s: %zu unexpected bytes after the last token", name, body.size() - position);
    return table;
}

void write_decode_table(const std::string& path, const DecodeTable& table) {
    const int vocab_size = (int)table.token_bytes.size();
    if (table.eot_token < 0 || table.eot_token >= vocab_size)
        fail("%s: EOT token %d is outside the vocabulary of %d", path.c_str(), table.eot_token,
             vocab_size);
    std::vector<int32_t> header(FILE_HEADER_INTS, 0);
    header[0] = DECODE_TABLE_MAGIC;
    header[1] = DECODE_TABLE_VERSION;
    header[2] = vocab_size;
    header[3] = table.eot_token;
    std::string body;
    for (int token = 0; token < vocab_size; token++) {
        const std::string& bytes = table.token_bytes[token];
        if (bytes.empty() || bytes.size() > 255)
            fail("%s: token %d has %zu bytes; the format holds 1 to 255", path.c_str(), token,
                 bytes.size());
        body += (char)(unsigned char)bytes.size();
        body += bytes;
    }
    AtomicFile file(path);
    file.write(header.data(), FILE_HEADER_BYTES);
    file.write(body.data(), body.size());
    file.commit();
}

// The tokenizer decode table in llm.c's format: a 256-int32 header ([0] magic 20240328,
// [1] version 2, [2] vocab size, [3] EOT id), then for each token one uint8 length and its bytes.
// data/prepare writes it from GPT-2's vocabulary; the trainers read it to print samples as text.
// Version 1 files (llm.c's older ones, no EOT in the header) are read with EOT = 50256.
#pragma once
#include <string>
#include <vector>

struct DecodeTable {
    std::vector<std::string> token_bytes;  // token id -> its bytes (1 to 255 of them)
    int eot_token = 0;

    // The bytes of one token; an id outside the table gives "" (a sampler may pad the vocabulary).
    const std::string& decode(int token) const;
};

// Reads and checks a table; a wrong magic, version, size or length throws InputError naming the file.
DecodeTable read_decode_table(const std::string& path);

// Writes a table atomically (temporary file, then rename); throws InputError on failure or on a
// token the format cannot hold (empty, or longer than 255 bytes).
void write_decode_table(const std::string& path, const DecodeTable& table);

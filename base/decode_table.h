// The tokenizer decode table in llm.c's format: a 256-int32 header ([0] magic 20240328,
// [1] version 2, [2] vocab size, [3] EOT id), then for each token one uint8 length and its bytes.
// The "EOT" slot holds the token that starts each document, which a sampler puts first: for GPT-2
// <|endoftext|> (50256, llm.c's end-of-text, which GPT-2 also places between documents), for Llama 3
// <|begin_of_text|> (128000). data/prepare writes it from GPT-2's vocabulary (data/gpt2_tokenizer.bin)
// or Llama 3's (--tokenizer llama3: data/llama3_tokenizer.bin, the special tokens as their names);
// the trainers and ./generate read it to print samples as text.
// Version 1 files (llm.c's older ones, no EOT in the header) are read with EOT = 50256.
#pragma once
#include <string>
#include <vector>

struct DecodeTable {
    std::vector<std::string> token_bytes;  // token id -> its bytes (1 to 255 of them)
    int eot_token = 0;  // the header's EOT slot: the token that starts each document

    // The bytes of one token; an id outside the table gives "" (a sampler may pad the vocabulary).
    const std::string& decode(int token) const;
};

// Reads and checks a table; a wrong magic, version, size or length throws InputError naming the file.
DecodeTable read_decode_table(const std::string& path);

// Writes a table atomically (temporary file, then rename); throws InputError on failure or on a
// token the format cannot hold (empty, or longer than 255 bytes).
void write_decode_table(const std::string& path, const DecodeTable& table);

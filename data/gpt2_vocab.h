// GPT-2's vocabulary, read from the two files OpenAI published with the model: encoder.json maps each
// of the 50257 tokens to its id, vocab.bpe lists the 50000 merges in priority order. Both spell bytes
// as printable characters (GPT-2's byte <-> unicode table, e.g. a space is "Ġ"); the loader turns
// them back into plain bytes, so the rest of the tokenizer never sees that spelling.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

// One merge of vocab.bpe: the pair (left, right) becomes merged_token; lower rank merges first.
struct BpeMerge {
    int rank;
    int merged_token;
};

struct Gpt2Vocab {
    std::vector<std::string> token_bytes;          // token id -> the bytes it stands for
    int byte_token[256];                           // byte value -> its single-byte token
    std::unordered_map<uint64_t, BpeMerge> merges; // merge_key(left, right) -> the merge
};

inline uint64_t merge_key(int left, int right) { return (uint64_t)left << 32 | (uint32_t)right; }

// Reads and checks both files; bad input (unreadable file, broken JSON, a token or merge that is not
// GPT-2's shape) throws InputError with one line naming the file and the problem.
Gpt2Vocab load_gpt2_vocab(const std::string& encoder_json_path, const std::string& vocab_bpe_path);

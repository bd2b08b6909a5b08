// Llama 3's vocabulary, read from the file npm's llama3-tokenizer-js@1.2.0 ships it in
// (src/data-converted.js). That JavaScript file holds two base64 string constants:
//   llama_vocab_base64:  the 128,000 ordinary tokens, spelled in the byte alphabet of
//                        byte_alphabet.h and joined by newlines, in id order;
//   llama_merges_binary: the 280,147 merges in priority order, each two token ids (left, right) of
//                        17 bits, packed most significant bit first (zero bits pad the end).
// The 256 special tokens (ids 128,000 to 128,255) are not in the file: they are Llama 3's fixed
// list, named here. The loader turns spellings into plain bytes, so the rest of the tokenizer
// never sees the byte alphabet.
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "data/gpt2_vocab.h"  // BpeMerge, merge_key

constexpr int LLAMA3_ORDINARY_TOKENS = 128000;
constexpr int LLAMA3_MERGES = 280147;

struct Llama3Vocab {
    std::vector<std::string> token_bytes;          // token id -> its bytes (a special's: its name)
    std::unordered_map<std::string, int> id_of_bytes;  // ordinary tokens only
    int byte_token[256];                           // byte value -> its single-byte token
    std::unordered_map<uint64_t, BpeMerge> merges; // merge_key(left, right) -> the merge
};

// The name of special token id (128,000 <= id < 128,256), e.g. "<|begin_of_text|>".
std::string llama3_special_token_name(int id);

// Reads and checks the file; bad input (unreadable, not the expected constants, bad base64, a
// token not spelled in the byte alphabet, a merge of unknown tokens) throws InputError with one
// line naming the file and the problem.
Llama3Vocab load_llama3_vocab(const std::string& data_converted_js_path);

// Llama 3's byte-level BPE tokenizer: text -> token ids and back, as llama3-tokenizer-js@1.2.0
// encodes ordinary text. Encoding: cut the text into pieces by Llama 3's pre-tokenisation regex
// (case-insensitive contractions, letter runs with one leading non-letter, digits in groups of up
// to three, symbol runs with their trailing newlines, whitespace runs); a piece that is a token as
// a whole is that token; any other piece starts as one token per byte and merges, lowest merge
// rank first (leftmost first among equal ranks), until no adjacent pair is a merge. Decoding
// concatenates each token's bytes, so decode(encode(x)) == x for any bytes x. Special tokens are
// never produced from text: "<|begin_of_text|>" written in a file is just characters; the
// begin-of-text token (128000) is only ever placed by the caller, e.g. before each document.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/formats.h"
#include "data/llama3_vocab.h"
#include "data/pretokenize.h"

// Where `data/prepare decode-table --tokenizer llama3` writes Llama 3's decode table by default.
constexpr const char* LLAMA3_DECODE_TABLE = "data/llama3_tokenizer.bin";

// Llama 3's pre-tokenisation expression, in PCRE2 syntax. Whitespace is spelled out as
// JavaScript's \s (which includes U+FEFF and not U+0085), as the reference implementation uses it.
const char* llama3_pattern();

class Llama3Tokenizer {
public:
    using Token = uint32_t;
    // Pieces already encoded, by their bytes; one cache per thread.
    using Cache = std::unordered_map<std::string, std::vector<uint32_t>>;
    static constexpr int DOCUMENT_START = LLAMA3_BOS_TOKEN;  // placed before each document

    explicit Llama3Tokenizer(Llama3Vocab vocab)
        : vocab_(std::move(vocab)), pretokenizer_(llama3_pattern()) {}

    // Tokens of text; cache (may be null) remembers pieces across calls on the same thread.
    std::vector<uint32_t> encode(std::string_view text, Cache* cache = nullptr) const;
    // The bytes of the tokens (a special token's are its name); throws InputError for an id
    // outside the vocabulary.
    std::string decode(const uint32_t* tokens, size_t count) const;

    int vocab_size() const { return (int)vocab_.token_bytes.size(); }
    const std::string& token_bytes(int token) const { return vocab_.token_bytes[token]; }

private:
    void encode_piece(std::string_view piece, std::vector<uint32_t>* out) const;

    Llama3Vocab vocab_;
    Pretokenizer pretokenizer_;
};

// GPT-2's byte-level BPE tokenizer: text -> token ids and back, exactly as OpenAI's encoder.py.
// Encoding: cut the text into pieces (pretokenize.h), then inside each piece start from one token
// per byte and keep merging the adjacent pair with the best (lowest) rank in vocab.bpe until no
// listed pair remains. Decoding concatenates each token's bytes, so decode(encode(x)) == x for any
// bytes x. Text is encoded as ordinary text: "<|endoftext|>" written in a file is just characters;
// the EOT token (50256) is only ever placed by the caller, e.g. before each document.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/formats.h"
#include "data/gpt2_vocab.h"
#include "data/pretokenize.h"

// Pieces already encoded, by their bytes. Real text repeats its words, so most pieces are found
// here and BPE runs once per distinct word. One cache per thread.
using PieceCache = std::unordered_map<std::string, std::vector<uint16_t>>;

class Gpt2Tokenizer {
public:
    using Token = uint16_t;
    using Cache = PieceCache;
    static constexpr int DOCUMENT_START = GPT2_EOT_TOKEN;  // placed before each document

    explicit Gpt2Tokenizer(Gpt2Vocab vocab) : vocab_(std::move(vocab)) {}

    // Tokens of text; cache (may be null) remembers pieces across calls on the same thread.
    std::vector<uint16_t> encode(std::string_view text, PieceCache* cache = nullptr) const;
    // The bytes of the tokens; throws InputError for an id outside the vocabulary.
    std::string decode(const uint16_t* tokens, size_t count) const;

    int vocab_size() const { return (int)vocab_.token_bytes.size(); }
    const std::string& token_bytes(int token) const { return vocab_.token_bytes[token]; }

private:
    void encode_piece(std::string_view piece, std::vector<uint16_t>* out) const;

    Gpt2Vocab vocab_;
    Pretokenizer pretokenizer_;
};

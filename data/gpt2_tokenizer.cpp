// Byte-level BPE encode and decode (see gpt2_tokenizer.h).
#include "data/gpt2_tokenizer.h"

#include "base/errors.h"
#include "data/decode_tokens.h"

// BPE inside one piece, as encoder.py's bpe(): repeatedly find the adjacent pair with the lowest
// merge rank and merge every occurrence of it, left to right, until no adjacent pair is a merge.
void Gpt2Tokenizer::encode_piece(std::string_view piece, std::vector<uint16_t>* out) const {
    std::vector<int> parts(piece.size());
    for (size_t i = 0; i < piece.size(); i++) parts[i] = vocab_.byte_token[(unsigned char)piece[i]];
    while (parts.size() > 1) {
        const BpeMerge* best = nullptr;
        int best_left = 0, best_right = 0;
        for (size_t i = 0; i + 1 < parts.size(); i++) {
            auto it = vocab_.merges.find(merge_key(parts[i], parts[i + 1]));
            if (it != vocab_.merges.end() && (!best || it->second.rank < best->rank))
                best = &it->second, best_left = parts[i], best_right = parts[i + 1];
        }
        if (!best) break;
        size_t kept = 0;
        for (size_t i = 0; i < parts.size(); i++) {
            if (i + 1 < parts.size() && parts[i] == best_left && parts[i + 1] == best_right) {
                parts[kept++] = best->merged_token;
                i++;
            } else {
                parts[kept++] = parts[i];
            }
        }
        parts.resize(kept);
    }
    out->insert(out->end(), parts.begin(), parts.end());
}

std::vector<uint16_t> Gpt2Tokenizer::encode(std::string_view text, PieceCache* cache) const {
    std::vector<uint16_t> tokens;
    tokens.reserve(text.size() / 3);
    PieceCache local_cache;
    if (!cache) cache = &local_cache;
    if (cache->size() > (1u << 20)) cache->clear();  // bound its memory on huge, diverse inputs
    for (std::string_view piece : pretokenizer_.split(text)) {
        if (piece.size() == 1) {
            tokens.push_back(vocab_.byte_token[(unsigned char)piece[0]]);
            continue;
        }
        auto [entry, is_new] = cache->try_emplace(std::string(piece));
        if (is_new) encode_piece(piece, &entry->second);
        tokens.insert(tokens.end(), entry->second.begin(), entry->second.end());
    }
    return tokens;
}

std::string Gpt2Tokenizer::decode(const uint16_t* tokens, size_t count) const {
    return decode_tokens(vocab_.token_bytes, tokens, count);
}

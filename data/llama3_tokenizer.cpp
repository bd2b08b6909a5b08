// Llama 3's byte-level BPE encode and decode (see llama3_tokenizer.h).
#include "data/llama3_tokenizer.h"

#include <functional>
#include <queue>

#include "base/errors.h"
#include "data/decode_tokens.h"

const char* llama3_pattern() {
    // JavaScript's \s: tab, LF, VT, FF, CR, the space separators, LS, PS and U+FEFF.
    static const std::string space = R"(\t\n\x0b\f\r\x{20}\x{a0}\x{1680}\x{2000}-\x{200a})"
                                     R"(\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}\x{feff})";
    static const std::string pattern =
        R"((?:'(?:[sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD])))"  // contractions, any case
        R"(|[^\r\n\p{L}\p{N}]?\p{L}+)"                                // a word, maybe one mark before
        R"(|\p{N}{1,3})"                                              // up to three digits
        "| ?[^" + space + R"(\p{L}\p{N}]+[\r\n]*)"                    // symbols, their newlines
        "|[" + space + "]*[\\r\\n]+"                                  // whitespace up to newlines
        "|[" + space + "]+(?![^" + space + "])"                       // whitespace not before text
        "|[" + space + "]+";                                          // the rest of the whitespace
    return pattern.c_str();
}

namespace {
// A possible merge of the tokens at node `left` and the node after it, as they were when found.
struct Candidate {
    int rank, left;
    int left_token, right_token;
    bool operator>(const Candidate& other) const {
        return rank != other.rank ? rank > other.rank : left > other.left;
    }
};
}  // namespace

// BPE inside one piece on a linked list of nodes, one per byte at first. A merge keeps the left
// node (with the merged token) and unlinks the right one. Candidates found before a merge may be
// stale: one is applied only if both nodes still hold the tokens it was found with (a node's token
// only ever grows, so equal tokens mean the same pair).
void Llama3Tokenizer::encode_piece(std::string_view piece, std::vector<uint32_t>* out) const {
    const int n = (int)piece.size();
    std::vector<int> token(n), next(n), prev(n);
    for (int i = 0; i < n; i++) {
        token[i] = vocab_.byte_token[(unsigned char)piece[i]];
        next[i] = i + 1 < n ? i + 1 : -1;
        prev[i] = i - 1;
    }
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
    auto consider = [&](int left) {
        if (left < 0 || next[left] < 0) return;
        auto it = vocab_.merges.find(merge_key(token[left], token[next[left]]));
        if (it != vocab_.merges.end())
            queue.push({it->second.rank, left, token[left], token[next[left]]});
    };
    for (int i = 0; i + 1 < n; i++) consider(i);
    while (!queue.empty()) {
        const Candidate c = queue.top();
        queue.pop();
        const int right = next[c.left];
        if (right < 0 || token[c.left] != c.left_token || token[right] != c.right_token) continue;
        token[c.left] = vocab_.merges.at(merge_key(c.left_token, c.right_token)).merged_token;
        token[right] = -1;
        next[c.left] = next[right];
        if (next[right] >= 0) prev[next[right]] = c.left;
        consider(prev[c.left]);
        consider(c.left);
    }
    for (int i = 0; i >= 0; i = next[i]) out->push_back((uint32_t)token[i]);
}

std::vector<uint32_t> Llama3Tokenizer::encode(std::string_view text, Cache* cache) const {
    std::vector<uint32_t> tokens;
    tokens.reserve(text.size() / 3);
    Cache local_cache;
    if (!cache) cache = &local_cache;
    if (cache->size() > (1u << 20)) cache->clear();  // bound its memory on huge, diverse inputs
    for (std::string_view piece : pretokenizer_.split(text)) {
        auto whole = vocab_.id_of_bytes.find(std::string(piece));
        if (whole != vocab_.id_of_bytes.end()) {
            tokens.push_back((uint32_t)whole->second);
            continue;
        }
        auto [entry, is_new] = cache->try_emplace(std::string(piece));
        if (is_new) encode_piece(piece, &entry->second);
        tokens.insert(tokens.end(), entry->second.begin(), entry->second.end());
    }
    return tokens;
}

std::string Llama3Tokenizer::decode(const uint32_t* tokens, size_t count) const {
    return decode_tokens(vocab_.token_bytes, tokens, count);
}

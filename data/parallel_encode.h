// Encodes many documents on all cores, with GPT-2's or Llama 3's tokenizer. Each document is cut
// into chunks of about chunk_bytes, at places where both pre-tokenisers cut anyway, so the chunks
// encode independently and their tokens, put back together, are exactly the tokens of the whole
// document. Threads come from OpenMP (OMP_NUM_THREADS); each keeps its own piece cache.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>


// The first place at or after `from` where text can be cut without changing its pre-tokenisation:
// a space right after an ASCII letter. A piece starting at a position depends only on the text from
// there on (neither expression has a look-behind), and in neither does a piece hold both a letter and
// the space after it, so the pieces on both sides stay the same. Returns text.size() if there is none.
size_t next_safe_cut(std::string_view text, size_t from);

// Tokens of each document, in order. Progress goes to stderr when the work takes over a second.
// Tokenizer: Gpt2Tokenizer or Llama3Tokenizer (instantiated in parallel_encode.cpp).
template <typename Tokenizer>
std::vector<std::vector<typename Tokenizer::Token>> encode_documents(
    const Tokenizer& tokenizer, const std::vector<std::string_view>& documents,
    size_t chunk_bytes = 1 << 18);

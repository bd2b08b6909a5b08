// Parallel encoding of documents in chunks (see parallel_encode.h).
#include "data/parallel_encode.h"

#include <omp.h>

#include "data/gpt2_tokenizer.h"
#include "data/llama3_tokenizer.h"
#include "data/progress.h"

size_t next_safe_cut(std::string_view text, size_t from) {
    auto is_ascii_letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
    for (size_t i = from < 1 ? 1 : from; i < text.size(); i++)
        if (text[i] == ' ' && is_ascii_letter(text[i - 1])) return i;
    return text.size();
}

template <typename Tokenizer>
std::vector<std::vector<typename Tokenizer::Token>> encode_documents(
    const Tokenizer& tokenizer, const std::vector<std::string_view>& documents, size_t chunk_bytes) {
    using Tokens = std::vector<typename Tokenizer::Token>;
    struct Chunk {
        size_t document;
        std::string_view text;
    };
    std::vector<Chunk> chunks;
    size_t total_bytes = 0;
    for (size_t d = 0; d < documents.size(); d++) {
        std::string_view text = documents[d];
        total_bytes += text.size();
        for (size_t start = 0; start < text.size();) {
            size_t end = next_safe_cut(text, start + chunk_bytes);
            chunks.push_back({d, text.substr(start, end - start)});
            start = end;
        }
    }

    std::vector<Tokens> chunk_tokens(chunks.size());
    std::vector<typename Tokenizer::Cache> caches(omp_get_max_threads());
    Progress progress("encoding", total_bytes);
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t c = 0; c < chunks.size(); c++) {
        chunk_tokens[c] = tokenizer.encode(chunks[c].text, &caches[omp_get_thread_num()]);
        progress.add(chunks[c].text.size());
    }
    progress.finish();

    std::vector<Tokens> tokens(documents.size());
    for (size_t c = 0; c < chunks.size(); c++) {
        Tokens& out = tokens[chunks[c].document];
        out.insert(out.end(), chunk_tokens[c].begin(), chunk_tokens[c].end());
        Tokens().swap(chunk_tokens[c]);
    }
    return tokens;
}

template std::vector<std::vector<uint16_t>> encode_documents(const Gpt2Tokenizer&,
                                                             const std::vector<std::string_view>&,
                                                             size_t);
template std::vector<std::vector<uint32_t>> encode_documents(const Llama3Tokenizer&,
                                                             const std::vector<std::string_view>&,
                                                             size_t);

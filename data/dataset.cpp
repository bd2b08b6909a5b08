// Documents -> train/val token shards (see dataset.h).
#include "data/dataset.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "base/errors.h"
#include "base/formats.h"
#include "data/gpt2_tokenizer.h"
#include "data/llama3_tokenizer.h"
#include "data/parallel_encode.h"
#include "data/read_file.h"
#include "data/token_shard.h"

namespace fs = std::filesystem;

std::vector<Document> read_documents(const std::vector<std::string>& paths) {
    std::vector<Document> documents;
    for (const std::string& path : paths) {
        std::error_code error;
        if (!fs::is_directory(path, error)) {
            documents.push_back({path, read_file(path)});  // an empty file is an empty document
            continue;
        }
        std::vector<std::string> files;
        fs::recursive_directory_iterator walk(path, error), end;
        if (error) fail("%s: cannot list directory (%s)", path.c_str(), error.message().c_str());
        for (; walk != end; walk.increment(error)) {
            if (error) fail("%s: cannot list directory (%s)", path.c_str(), error.message().c_str());
            if (walk->path().extension() == ".txt" && !walk->is_directory())
                files.push_back(walk->path().string());
        }
        if (files.empty()) fail("%s: no .txt files in this directory", path.c_str());
        std::sort(files.begin(), files.end());
        for (const std::string& file : files) {
            std::string text = read_file(file);
            if (!text.empty()) documents.push_back({file, std::move(text)});
        }
    }
    size_t total_bytes = 0;
    for (const Document& document : documents) total_bytes += document.text.size();
    if (total_bytes == 0 && paths.size() == 1) fail("%s: empty, nothing to encode", paths[0].c_str());
    if (total_bytes == 0) fail("all %zu inputs are empty, nothing to encode", paths.size());
    return documents;
}

template <typename Tokenizer>
std::vector<typename Tokenizer::Token> encode_stream(const Tokenizer& tokenizer,
                                                     const std::vector<Document>& documents,
                                                     std::vector<size_t>* document_starts) {
    using Tokens = std::vector<typename Tokenizer::Token>;
    std::vector<std::string_view> texts;
    for (const Document& document : documents) texts.push_back(document.text);
    std::vector<Tokens> tokens = encode_documents(tokenizer, texts);
    Tokens stream;
    for (Tokens& document_tokens : tokens) {
        if (document_starts) document_starts->push_back(stream.size());
        stream.push_back(Tokenizer::DOCUMENT_START);
        stream.insert(stream.end(), document_tokens.begin(), document_tokens.end());
        Tokens().swap(document_tokens);
    }
    return stream;
}

size_t validation_start(const std::vector<size_t>& document_starts, size_t total_tokens,
                        double val_fraction) {
    if (val_fraction <= 0) return total_tokens;
    const double target = val_fraction * total_tokens;
    size_t best = total_tokens;  // start of the final documents whose size is closest to the target
    double best_distance = INFINITY;
    for (size_t d = 1; d < document_starts.size(); d++) {
        double distance = std::fabs((double)(total_tokens - document_starts[d]) - target);
        if (distance < best_distance) best = document_starts[d], best_distance = distance;
    }
    double held_out = (double)(total_tokens - best);
    if (best != total_tokens && held_out >= target / 2 && held_out <= target * 2) return best;
    return total_tokens - (size_t)std::llround(target);
}

// Writes tokens [begin, end) of the stream as PREFIX_SPLIT.bin or numbered shards.
template <typename Token>
static void write_split(const std::vector<Token>& stream, size_t begin, size_t end,
                        const std::string& prefix, const char* split, size_t shard_tokens,
                        std::vector<std::string>* written) {
    if (shard_tokens == 0) {
        std::string path = prefix + "_" + split + ".bin";
        if (end - begin > MAX_SHARD_TOKENS)
            fail("%s: %zu tokens do not fit one shard; give --shard-tokens", path.c_str(), end - begin);
        write_token_shard(path, stream.data() + begin, end - begin);
        written->push_back(path);
        return;
    }
    for (size_t start = begin, index = 0; start < end; start += shard_tokens, index++) {
        std::string path = strprintf("%s_%s_%06zu.bin", prefix.c_str(), split, index);
        write_token_shard(path, stream.data() + start, std::min(shard_tokens, end - start));
        written->push_back(path);
    }
}

template <typename Tokenizer>
std::vector<std::string> write_dataset(const Tokenizer& tokenizer,
                                       const std::vector<Document>& documents,
                                       const std::string& prefix, double val_fraction,
                                       size_t shard_tokens, DatasetSplit* split) {
    std::vector<size_t> document_starts;
    auto stream = encode_stream(tokenizer, documents, &document_starts);
    size_t val_begin = validation_start(document_starts, stream.size(), val_fraction);
    if (val_begin == 0 || (val_fraction > 0 && val_begin == stream.size()))
        fail("%s: %zu tokens are too few to split into train and validation", prefix.c_str(),
             stream.size());
    if (split) {
        *split = DatasetSplit();
        split->total_tokens = stream.size();
        split->val_tokens = stream.size() - val_begin;
        const auto first = std::find(document_starts.begin(), document_starts.end(), val_begin);
        if (val_begin < stream.size() && first != document_starts.end()) {
            split->val_documents = (size_t)(document_starts.end() - first);
            split->first_val_document = documents[first - document_starts.begin()].name;
        }
    }
    std::vector<std::string> written;
    if (val_begin < stream.size())
        write_split(stream, val_begin, stream.size(), prefix, "val", shard_tokens, &written);
    write_split(stream, 0, val_begin, prefix, "train", shard_tokens, &written);
    return written;
}

// The two tokenizers data/prepare offers.
#define INSTANTIATE_DATASET(Tokenizer)                                                           \
    template std::vector<Tokenizer::Token> encode_stream(                                       \
        const Tokenizer&, const std::vector<Document>&, std::vector<size_t>*);                  \
    template std::vector<std::string> write_dataset(const Tokenizer&, const std::vector<Document>&, \
                                                    const std::string&, double, size_t,          \
                                                    DatasetSplit*);
INSTANTIATE_DATASET(Gpt2Tokenizer)
INSTANTIATE_DATASET(Llama3Tokenizer)

// From documents to llm.c token shards: each document becomes the tokenizer's document-start token
// (GPT-2: EOT 50256; Llama 3: <|begin_of_text|> 128000) followed by its tokens; the stream of all
// documents is split into a training part and a validation part at the end, and each part is
// written as one shard or as numbered shards of a fixed size, in the tokenizer's shard format
// (token_shard.h). Tokenizer: Gpt2Tokenizer or Llama3Tokenizer (instantiated in dataset.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>


struct Document {
    std::string name;  // where it came from, for messages
    std::string text;
};

// One document per file. A directory contributes every *.txt file below it, in sorted path order,
// passing over empty ones; a file named directly is a document even when empty. A missing or
// unreadable path, a directory without .txt files, or no text at all throws InputError naming it.
std::vector<Document> read_documents(const std::vector<std::string>& paths);

// All documents' tokens as one stream, the document-start token before each (on all cores).
template <typename Tokenizer>
std::vector<typename Tokenizer::Token> encode_stream(const Tokenizer& tokenizer,
                                                     const std::vector<Document>& documents,
                                                     std::vector<size_t>* document_starts = nullptr);

// Where validation starts in a stream of total_tokens whose documents start at document_starts.
// Validation is whole documents at the end when that comes within a factor of two of val_fraction
// (the number of final documents closest to it is taken); otherwise, e.g. for a single document,
// the last val_fraction of the tokens. val_fraction 0 gives total_tokens (no validation).
size_t validation_start(const std::vector<size_t>& document_starts, size_t total_tokens,
                        double val_fraction);

// How the stream was split, for data/prepare to say how validation was chosen.
struct DatasetSplit {
    size_t total_tokens = 0, val_tokens = 0;
    size_t val_documents = 0;        // whole documents at the end (0 when split by tokens)
    std::string first_val_document;  // the name of the first of them
};

// Encodes the documents, splits them and writes PREFIX_train.bin and PREFIX_val.bin, or with
// shard_tokens > 0 PREFIX_train_000000.bin, ... of at most shard_tokens tokens each. No validation
// file when val_fraction is 0. Returns the paths written; *split (if given) says how it split.
template <typename Tokenizer>
std::vector<std::string> write_dataset(const Tokenizer& tokenizer,
                                       const std::vector<Document>& documents,
                                       const std::string& prefix, double val_fraction,
                                       size_t shard_tokens, DatasetSplit* split = nullptr);

// The built-in dataset: Jane Austen's six novels, as Debian's r-cran-janeaustenr package ships them
// (MIT; the texts are public domain) in janeaustenr/data/Rdata.rdb, one character vector of lines
// per novel. data/fetch_janeausten.sh puts that file into data/cache/janeaustenr/.
// Each novel is one document; in publication order, Persuasion, her last, comes last and is the
// validation set (about 12% of the tokens). About 4.0 MB of text, 1.0M tokens.
#pragma once
#include <string>
#include <vector>

#include "data/dataset.h"

constexpr const char* JANEAUSTEN_RDATA = "data/cache/janeaustenr/Rdata.rdb";
constexpr const char* JANEAUSTEN_PREFIX = "data/janeausten/janeausten";
constexpr const char* GPT2_DECODE_TABLE = "data/gpt2_tokenizer.bin";

// The six novels in publication order, each as its lines joined by "\n" (with a final "\n").
// Throws InputError if the file does not hold exactly these six novels.
std::vector<Document> read_janeausten_novels(const std::string& rdata_path);

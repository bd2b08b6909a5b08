// Checksum-checked loading of GPT-2's vocabulary (see pinned_vocab.h).
#include "data/pinned_vocab.h"

#include <openssl/evp.h>

#include "base/errors.h"
#include "base/file_io.h"
#include "data/read_file.h"

std::string sha256_of_file(const std::string& path) {
    const std::string bytes = read_file(path);
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int digest_length = 0;
    if (!EVP_Digest(bytes.data(), bytes.size(), digest, &digest_length, EVP_sha256(), nullptr))
        fail("%s: SHA-256 could not be computed", path.c_str());
    static const char hex[] = "0123456789abcdef";
    std::string text;
    for (unsigned int i = 0; i < digest_length; i++) text += {hex[digest[i] >> 4], hex[digest[i] & 15]};
    return text;
}

Gpt2Vocab load_pinned_gpt2_vocab(const std::string& dir) {
    const std::string encoder_json = dir + "/encoder.json", vocab_bpe = dir + "/vocab.bpe";
    for (auto [path, pinned] : {std::pair<std::string, const char*>{encoder_json, ENCODER_JSON_SHA256},
                                {vocab_bpe, VOCAB_BPE_SHA256}}) {
        if (!path_exists(path))
            fail("%s: missing; run bash data/fetch_vocab.sh (or scripts/install_deps.sh)", path.c_str());
        if (sha256_of_file(path) != pinned)
            fail("%s: SHA-256 differs from the pinned value (corrupted or not GPT-2's); delete it "
                 "and run bash data/fetch_vocab.sh", path.c_str());
    }
    return load_gpt2_vocab(encoder_json, vocab_bpe);
}

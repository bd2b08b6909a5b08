// Checksum-checked loading of the vocabularies (see pinned_vocab.h).
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

// Fails, saying how to fetch the right file, unless path exists with the pinned SHA-256.
static void check_pinned(const std::string& path, const char* pinned, const char* whose) {
    if (!path_exists(path))
        fail("%s: missing; run bash data/fetch_vocab.sh (or scripts/install_deps.sh)", path.c_str());
    if (sha256_of_file(path) != pinned)
        fail("%s: SHA-256 differs from the pinned value (corrupted or not %s); delete it and run "
             "bash data/fetch_vocab.sh", path.c_str(), whose);
}

Gpt2Vocab load_pinned_gpt2_vocab(const std::string& dir) {
    const std::string encoder_json = dir + "/encoder.json", vocab_bpe = dir + "/vocab.bpe";
    check_pinned(encoder_json, ENCODER_JSON_SHA256, "GPT-2's");
    check_pinned(vocab_bpe, VOCAB_BPE_SHA256, "GPT-2's");
    return load_gpt2_vocab(encoder_json, vocab_bpe);
}

Llama3Vocab load_pinned_llama3_vocab(const std::string& dir) {
    const std::string data = dir + "/data-converted.js";
    check_pinned(data, LLAMA3_DATA_SHA256, "Llama 3's");
    return load_llama3_vocab(data);
}

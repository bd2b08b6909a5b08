// Loads Llama 3's vocabulary from llama3-tokenizer-js's data file (see llama3_vocab.h).
#include "data/llama3_vocab.h"

#include "base/errors.h"
#include "base/formats.h"
#include "data/byte_alphabet.h"
#include "data/read_file.h"

std::string llama3_special_token_name(int id) {
    static const char* const first_eleven[] = {
        "begin_of_text",    "end_of_text",   "reserved_special_token_0", "reserved_special_token_1",
        "finetune_right_pad_id", "reserved_special_token_2", "start_header_id", "end_header_id",
        "eom_id",           "eot_id",        "python_tag"};
    const int index = id - LLAMA3_ORDINARY_TOKENS;
    if (index < 11) return std::string("<|") + first_eleven[index] + "|>";
    return "<|reserved_special_token_" + std::to_string(index - 8) + "|>";
}

// The text between the quotes of `const NAME = "...";` in a JavaScript file.
static std::string string_constant(const std::string& js, const std::string& name, const char* path) {
    const std::string head = "const " + name + " = \"";
    const size_t start = js.find(head);
    if (start == std::string::npos) fail("%s: has no string constant %s", path, name.c_str());
    const size_t end = js.find('"', start + head.size());
    if (end == std::string::npos) fail("%s: the constant %s is not closed", path, name.c_str());
    return js.substr(start + head.size(), end - start - head.size());
}

// Standard base64 (RFC 4648, '=' padding) to bytes.
static std::string base64_decode(const std::string& text, const char* what, const char* path) {
    int value_of[256];
    for (int& v : value_of) v = -1;
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; i++) value_of[(unsigned char)alphabet[i]] = i;
    size_t length = text.size();
    while (length > 0 && text[length - 1] == '=') length--;
    if (text.size() % 4 != 0 || text.size() - length > 2) fail("%s: %s is not base64", path, what);
    std::string bytes;
    bytes.reserve(length * 3 / 4);
    uint32_t bits = 0;
    int bit_count = 0;
    for (size_t i = 0; i < length; i++) {
        const int v = value_of[(unsigned char)text[i]];
        if (v < 0) fail("%s: %s is not base64 (character %zu)", path, what, i);
        bits = bits << 6 | (uint32_t)v;
        bit_count += 6;
        if (bit_count >= 8) {
            bit_count -= 8;
            bytes.push_back((char)(bits >> bit_count & 0xFF));
        }
    }
    return bytes;
}

// The ordinary tokens: newline-separated spellings, turned into bytes.
static void read_tokens(const std::string& spellings, Llama3Vocab* vocab, const char* path) {
    const ByteAlphabet alphabet;
    std::string bytes;
    for (size_t start = 0; start <= spellings.size();) {
        size_t end = spellings.find('\n', start);
        if (end == std::string::npos) end = spellings.size();
        const int id = (int)vocab->token_bytes.size();
        if (id == LLAMA3_ORDINARY_TOKENS) fail("%s: has more than %d tokens", path, id);
        if (!alphabet.to_bytes(spellings.substr(start, end - start), &bytes))
            fail("%s: token %d is not spelled in the byte alphabet", path, id);
        if (!vocab->id_of_bytes.emplace(bytes, id).second)
            fail("%s: token %d repeats an earlier token", path, id);
        vocab->token_bytes.push_back(bytes);
        start = end + 1;
    }
    if (vocab->token_bytes.size() != (size_t)LLAMA3_ORDINARY_TOKENS)
        fail("%s: has %zu tokens, Llama 3 has %d", path, vocab->token_bytes.size(),
             LLAMA3_ORDINARY_TOKENS);
    for (int b = 0; b < 256; b++) {
        auto it = vocab->id_of_bytes.find(std::string(1, (char)b));
        if (it == vocab->id_of_bytes.end()) fail("%s: has no token for byte %d", path, b);
        vocab->byte_token[b] = it->second;
    }
}

// The 17-bit id starting at bit `bit` of the packed merges (most significant bit first).
static int packed_id(const std::string& packed, size_t bit) {
    uint32_t window = 0;
    for (size_t i = 0; i < 3; i++) {
        const size_t byte = bit / 8 + i;
        window = window << 8 | (byte < packed.size() ? (unsigned char)packed[byte] : 0u);
    }
    return (int)(window >> (24 - 17 - bit % 8) & 0x1FFFF);
}

// The merges, in priority order: each pair's merged token is the one spelled as both together.
static void read_merges(const std::string& packed, Llama3Vocab* vocab, const char* path) {
    const size_t ids = packed.size() * 8 / 17;
    if (ids / 2 != (size_t)LLAMA3_MERGES)
        fail("%s: has %zu merges, Llama 3 has %d", path, ids / 2, LLAMA3_MERGES);
    for (int rank = 0; rank < LLAMA3_MERGES; rank++) {
        const int left = packed_id(packed, (size_t)rank * 34);
        const int right = packed_id(packed, (size_t)rank * 34 + 17);
        if (left >= LLAMA3_ORDINARY_TOKENS || right >= LLAMA3_ORDINARY_TOKENS)
            fail("%s: merge %d names a token outside the vocabulary", path, rank);
        auto merged = vocab->id_of_bytes.find(vocab->token_bytes[left] + vocab->token_bytes[right]);
        if (merged == vocab->id_of_bytes.end())
            fail("%s: merge %d makes a token that is not in the vocabulary", path, rank);
        if (!vocab->merges.emplace(merge_key(left, right), BpeMerge{rank, merged->second}).second)
            fail("%s: merge %d repeats an earlier merge", path, rank);
    }
}

Llama3Vocab load_llama3_vocab(const std::string& data_converted_js_path) {
    const char* path = data_converted_js_path.c_str();
    const std::string js = read_file(data_converted_js_path);
    Llama3Vocab vocab;
    vocab.token_bytes.reserve(LLAMA3_VOCAB_SIZE);
    read_tokens(base64_decode(string_constant(js, "llama_vocab_base64", path), "the vocabulary", path),
                &vocab, path);
    read_merges(base64_decode(string_constant(js, "llama_merges_binary", path), "the merges", path),
                &vocab, path);
    for (int id = LLAMA3_ORDINARY_TOKENS; id < LLAMA3_VOCAB_SIZE; id++)
        vocab.token_bytes.push_back(llama3_special_token_name(id));
    return vocab;
}

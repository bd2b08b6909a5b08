// Pre-tokenisation regexes on PCRE2 (see pretokenize.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/pretokenize.h"

#include <pcre2.h>
#include <stdexcept>
#include <string>

// The expression of GPT-2's encoder.py, unchanged. \p{L} letters, \p{N} numbers, \s whitespace.
const char* const GPT2_PATTERN =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

Pretokenizer::Pretokenizer(const char* pattern) {
    int error;
    PCRE2_SIZE error_offset;
    // UCP: \s and friends follow Unicode properties, as Python's regex module does for str patterns.
    // MATCH_INVALID_UTF: invalid UTF-8 in the subject is a barrier no match crosses, instead of an
    // error; it also means the subject is never re-validated from the start offset on each call, so
    // matching stays linear in the text (otherwise every match after the first needs NO_UTF_CHECK).
    code_ = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &error_offset,
                          nullptr);
    if (!code_) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(error, message, sizeof message);
        throw std::runtime_error(std::string("pre-tokenisation regex does not compile: ") + (char*)message);
    }
    if (pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) != 0) {
        // Without JIT, matching is correct but several times slower; carry on.
    }
}

Pretokenizer::~Pretokenizer() { pcre2_code_free(code_); }

std::vector<std::string_view> Pretokenizer::split(std::string_view text) const {
    std::vector<std::string_view> pieces;
    pcre2_match_data* match = pcre2_match_data_create_from_pattern(code_, nullptr);
    const PCRE2_SPTR subject = (PCRE2_SPTR)text.data();
    size_t position = 0;
    while (position < text.size()) {
        int found = pcre2_match(code_, subject, text.size(), position, 0, match, nullptr);
        size_t start = text.size(), end = text.size();
        if (found >= 0) {
            const PCRE2_SIZE* offsets = pcre2_get_ovector_pointer(match);
            start = offsets[0], end = offsets[1];
        } else if (found != PCRE2_ERROR_NOMATCH) {
            pcre2_match_data_free(match);
            PCRE2_UCHAR message[256];
            pcre2_get_error_message(found, message, sizeof message);
            throw std::runtime_error(std::string("pre-tokenisation regex match failed: ") + (char*)message);
        }
        if (start > position) pieces.push_back(text.substr(position, start - position));  // invalid UTF-8
        if (end > start) pieces.push_back(text.substr(start, end - start));
        if (end <= position) throw std::logic_error("pre-tokenisation regex matched nothing");  // cannot happen
        position = end;
    }
    pcre2_match_data_free(match);
    return pieces;
}

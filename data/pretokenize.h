// Pre-tokenisation: before BPE, text is cut into pieces by one regular expression. GPT-2's
// (contractions, optional space + letters, optional space + digits, optional space + other symbols,
// runs of whitespace) is the default; Llama 3 brings its own (llama3_tokenizer.cpp). BPE then works
// inside each piece, so no token ever crosses a piece boundary. The expression runs on PCRE2 with
// Unicode properties and JIT compilation.
#pragma once
#include <string_view>
#include <vector>

typedef struct pcre2_real_code_8 pcre2_code_8;

// The expression of GPT-2's encoder.py.
extern const char* const GPT2_PATTERN;

class Pretokenizer {
public:
    // Compiles the expression (PCRE2 syntax, UTF-8 with Unicode properties); throws
    // std::runtime_error if PCRE2 cannot.
    explicit Pretokenizer(const char* pattern = GPT2_PATTERN);
    ~Pretokenizer();
    Pretokenizer(const Pretokenizer&) = delete;
    Pretokenizer& operator=(const Pretokenizer&) = delete;

    // The pieces of text, in order; together they are exactly the text. Any byte sequence is
    // accepted: bytes that are not valid UTF-8 never match the expression, and each run of them
    // becomes a piece of its own (BPE still encodes them byte by byte). Safe to call from many
    // threads at once.
    std::vector<std::string_view> split(std::string_view text) const;

private:
    pcre2_code_8* code_;
};

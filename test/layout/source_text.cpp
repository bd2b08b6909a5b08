// Reading C++ and CUDA source text for the floor-plan checks (see source_text.h).
#include "test/layout/source_text.h"

#include <algorithm>
#include <cctype>
#include <set>

namespace layout {

namespace {

bool is_word_char(char c) { return std::isalnum((unsigned char)c) || c == '_'; }

// Whether the quote at `at` is a digit separator (1'000'000) rather than the start of a character
// literal: it is when the word it ends began with a digit.
bool is_digit_separator(const std::string& text, size_t at) {
    size_t start = at;
    while (start > 0 && (is_word_char(text[start - 1]) || text[start - 1] == '\'')) start--;
    return start < at && std::isdigit((unsigned char)text[start]);
}

// Where the quoted literal opening at `at` ends (one past its closing quote). An unterminated one
// ends at its line's end, so that one stray quote cannot swallow the rest of the file.
size_t quoted_literal_end(const std::string& text, size_t at) {
    const char quote = text[at];
    size_t i = at + 1;
    while (i < text.size() && text[i] != quote && text[i] != '\n') i += text[i] == '\\' ? 2 : 1;
    return i < text.size() && text[i] == quote ? i + 1 : i;
}

// Where the raw string literal whose opening quote is at `at` ends: R"delim( ... )delim".
size_t raw_literal_end(const std::string& text, size_t at) {
    const size_t paren = text.find('(', at);
    if (paren == std::string::npos) return text.size();
    const std::string closing = ")" + text.substr(at + 1, paren - at - 1) + "\"";
    const size_t end = text.find(closing, paren);
    return end == std::string::npos ? text.size() : end + closing.size();
}

bool opens_raw_literal(const std::string& text, size_t quote_at) {
    size_t start = quote_at;
    while (start > 0 && is_word_char(text[start - 1])) start--;
    const std::string prefix = text.substr(start, quote_at - start);
    return prefix == "R" || prefix == "u8R" || prefix == "uR" || prefix == "UR" || prefix == "LR";
}

// Where the comment or literal starting at `at` ends, or `at` itself when none starts there.
size_t skip_comment_or_literal(const std::string& text, size_t at) {
    const char c = text[at], next = at + 1 < text.size() ? text[at + 1] : '\0';
    if (c == '/' && next == '/') {
        size_t i = at;  // a line comment ending in a backslash goes on to the next line
        while (i < text.size() && text[i] != '\n') i += text[i] == '\\' ? 2 : 1;
        return std::min(i, text.size());
    }
    if (c == '/' && next == '*') {
        const size_t end = text.find("*/", at + 2);
        return end == std::string::npos ? text.size() : end + 2;
    }
    if (c == '"') return opens_raw_literal(text, at) ? raw_literal_end(text, at) : quoted_literal_end(text, at);
    if (c == '\'' && !is_digit_separator(text, at)) return quoted_literal_end(text, at);
    return at;
}

void blank(std::string& text, size_t from, size_t to) {
    for (size_t i = from; i < to; i++)
        if (text[i] != '\n') text[i] = ' ';
}

// Blanks each line whose first character is '#', and the lines its trailing backslashes continue to.
void blank_preprocessor_lines(std::string& code) {
    bool continued = false;
    size_t line_start = 0;
    while (line_start < code.size()) {
        size_t line_end = code.find('\n', line_start);
        if (line_end == std::string::npos) line_end = code.size();
        const size_t first = code.find_first_not_of(" \t", line_start);
        const bool directive = continued || (first < line_end && code[first] == '#');
        continued = directive && line_end > line_start && code[line_end - 1] == '\\';
        if (directive) blank(code, line_start, line_end);
        line_start = line_end + 1;
    }
}

}  // namespace

std::string code_only(const std::string& text, bool blank_preprocessor) {
    std::string code = text;
    size_t i = 0;
    while (i < text.size()) {
        const size_t end = skip_comment_or_literal(text, i);
        if (end == i) {
            i++;
            continue;
        }
        blank(code, i, end);
        i = end;
    }
    if (blank_preprocessor) blank_preprocessor_lines(code);
    return code;
}

std::vector<IncludeLine> include_lines(const std::string& text) {
    // The directive is found in the code (so that one inside a comment does not count), its target
    // read from the text (where the quoted name has not been blanked).
    const std::string code = code_only(text, false);
    std::vector<IncludeLine> found;
    size_t line_start = 0;
    for (int line = 1; line_start < text.size(); line++) {
        size_t line_end = text.find('\n', line_start);
        if (line_end == std::string::npos) line_end = text.size();
        size_t at = code.find_first_not_of(" \t", line_start);
        if (at < line_end && code[at] == '#') {
            at = code.find_first_not_of(" \t", at + 1);
            if (at < line_end && code.compare(at, 7, "include") == 0) {
                const size_t open = text.find_first_of("\"<", at + 7);
                const char closing = open < line_end && text[open] == '<' ? '>' : '"';
                const size_t close = open < line_end ? text.find(closing, open + 1) : std::string::npos;
                if (close < line_end)
                    found.push_back({line, text.substr(open + 1, close - open - 1), closing == '>'});
            }
        }
        line_start = line_end + 1;
    }
    return found;
}

// ---- function definitions ----

namespace {

struct Token {
    std::string text;
    int line;
};

// Words (identifiers, keywords, numbers), the two-character "::" and "->", and single characters.
std::vector<Token> tokenize(const std::string& code) {
    std::vector<Token> tokens;
    int line = 1;
    size_t i = 0;
    while (i < code.size()) {
        const char c = code[i];
        if (c == '\n') line++;
        if (std::isspace((unsigned char)c)) {
            i++;
            continue;
        }
        size_t end = i + 1;
        if (is_word_char(c)) {
            while (end < code.size() && is_word_char(code[end])) end++;
        } else if ((c == ':' && end < code.size() && code[end] == ':') ||
                   (c == '-' && end < code.size() && code[end] == '>')) {
            end++;
        }
        tokens.push_back({code.substr(i, end - i), line});
        i = end;
    }
    return tokens;
}

bool is_word(const Token& t) { return is_word_char(t.text[0]); }

bool head_has(const std::vector<Token>& head, const std::set<std::string>& words) {
    for (const Token& t : head)
        if (words.count(t.text)) return true;
    return false;
}

// The index of the ')' closing the '(' at `open`, or head.size().
size_t matching_close(const std::vector<Token>& head, size_t open) {
    int depth = 0;
    for (size_t i = open; i < head.size(); i++) {
        if (head[i].text == "(") depth++;
        if (head[i].text == ")" && --depth == 0) return i;
    }
    return head.size();
}

// The index of the '(' that the ')' at `close` closes, or head.size().
size_t matching_open(const std::vector<Token>& head, size_t close) {
    int depth = 0;
    for (size_t i = close + 1; i-- > 0;) {
        if (head[i].text == ")") depth++;
        if (head[i].text == "(" && --depth == 0) return i;
    }
    return head.size();
}

// Words that a parenthesised group can follow without being a parameter list.
const std::set<std::string>& not_function_names() {
    static const std::set<std::string> words = {
        "if",        "for",      "while",      "switch",   "catch",         "return",
        "sizeof",    "alignof",  "decltype",   "alignas",  "__align__",     "__attribute__",
        "__declspec", "noexcept", "throw",     "typeid",   "static_assert", "__launch_bounds__",
        "operator",  "new",      "delete",     "asm",      "__asm__",       "template"};
    return words;
}

// Whether the parenthesised group opening at head[open] follows a function's name; sets *name.
bool follows_function_name(const std::vector<Token>& head, size_t open, std::string* name) {
    if (open == 0) return false;
    const size_t before = open - 1;
    const std::string& p = head[before].text;
    if (p == "]") {  // operator[](...), or a lambda defined at namespace scope
        const bool subscript = before >= 2 && head[before - 1].text == "[" && head[before - 2].text == "operator";
        return *name = subscript ? "operator[]" : "lambda", true;
    }
    if (p == ")") {  // operator()(...)
        const size_t name_open = matching_open(head, before);
        return name_open > 0 && name_open < before && head[name_open - 1].text == "operator" &&
               (*name = "operator()", true);
    }
    if (!is_word(head[before])) {  // operator==(...), operator<<(...)
        std::string symbol;
        for (size_t i = before + 1; i-- > 0 && before - i < 3;) {
            if (head[i].text == "operator") return *name = "operator" + symbol, true;
            if (is_word(head[i])) return false;
            symbol = head[i].text + symbol;
        }
        return false;
    }
    if (not_function_names().count(p) || std::isdigit((unsigned char)p[0])) return false;
    *name = p;
    if (before > 0 && head[before - 1].text == "operator") *name = "operator " + p;
    size_t i = before;  // Class::name, Class::~Class
    if (i > 0 && head[i - 1].text == "~") *name = "~" + *name, i--;
    while (i >= 2 && head[i - 1].text == "::" && is_word(head[i - 2])) {
        *name = head[i - 2].text + "::" + *name;
        i -= 2;
    }
    return true;
}

// What may follow a parameter list before the body: qualifiers, noexcept(...), attributes, then a
// trailing return type (-> ...) or a constructor's initialiser list (: ...).
enum class Suffix { INVALID, PLAIN, INITIALISERS };
Suffix parameter_list_suffix(const std::vector<Token>& head, size_t after) {
    static const std::set<std::string> qualifiers = {"const", "volatile", "override", "final",
                                                     "mutable", "&", "__host__", "__device__"};
    static const std::set<std::string> with_argument = {"noexcept", "throw", "__attribute__"};
    size_t i = after;
    while (i < head.size()) {
        const std::string& t = head[i].text;
        if (qualifiers.count(t)) {
            i++;
        } else if (with_argument.count(t)) {
            i++;
            if (i < head.size() && head[i].text == "(") i = matching_close(head, i) + 1;
        } else if (t == "->") {
            return Suffix::PLAIN;
        } else if (t == ":") {
            return Suffix::INITIALISERS;
        } else {
            return Suffix::INVALID;
        }
    }
    return Suffix::PLAIN;
}

enum class Scope { NAMESPACE, CLASS, FUNCTION, OTHER };

struct Opening {
    Scope scope;
    std::string name;  // for FUNCTION
    bool device = false;
};

// What the brace ending `head` (the tokens since the last ';', '{' or '}' at this scope) opens.
Opening classify_brace(const std::vector<Token>& head) {
    if (head_has(head, {"namespace"}) || (head.size() == 1 && head[0].text == "extern"))
        return {Scope::NAMESPACE, ""};
    // Each outermost parenthesised group in turn, until one is a parameter list.
    for (size_t i = 0; i < head.size(); i = head[i].text == "(" ? matching_close(head, i) + 1 : i + 1) {
        if (head[i].text != "(") continue;
        std::string name;
        if (!follows_function_name(head, i, &name)) continue;
        const Suffix suffix = parameter_list_suffix(head, matching_close(head, i) + 1);
        if (suffix == Suffix::INVALID) continue;
        // In an initialiser list, a brace straight after a member's name initialises that member.
        const std::string& last = head.back().text;
        if (suffix == Suffix::INITIALISERS && last != ")" && last != "{}") return {Scope::OTHER, ""};
        return {Scope::FUNCTION, name, head_has(head, {"__global__", "__device__"})};
    }
    if (head_has(head, {"struct", "class", "union", "enum"})) return {Scope::CLASS, ""};
    return {Scope::OTHER, ""};  // a brace initialiser, or a block
}

struct Frame {
    Opening opening;
    int open_line;
    std::vector<Token> head;  // the enclosing scope's head, taken up again after an initialiser
};

}  // namespace

FunctionScan function_spans(const std::string& text) {
    FunctionScan scan;
    std::vector<Frame> open;   // the braces not yet closed, outermost first
    std::vector<Token> head;   // at namespace or class scope: the declaration read so far
    for (const Token& t : tokenize(code_only(text, true))) {
        const bool declarations = open.empty() || open.back().opening.scope == Scope::NAMESPACE ||
                                  open.back().opening.scope == Scope::CLASS;
        if (t.text == "{") {
            // Inside a function or an initialiser, a brace only nests.
            const Opening opening = declarations ? classify_brace(head) : Opening{Scope::OTHER, ""};
            open.push_back({opening, t.line, declarations ? head : std::vector<Token>{}});
            head.clear();
        } else if (t.text == "}") {
            if (open.empty()) {
                scan.error = "a '}' on line " + std::to_string(t.line) + " closes nothing";
                return scan;
            }
            const Frame frame = open.back();
            open.pop_back();
            head.clear();
            if (frame.opening.scope == Scope::FUNCTION)
                scan.functions.push_back({frame.opening.name, frame.open_line, t.line, frame.opening.device});
            const bool outer_declarations = open.empty() || open.back().opening.scope == Scope::NAMESPACE ||
                                            open.back().opening.scope == Scope::CLASS;
            if (frame.opening.scope == Scope::OTHER && outer_declarations) {
                head = frame.head;  // the declaration goes on after its initialiser
                head.push_back({"{}", t.line});
            }
        } else if (declarations) {
            if (t.text == ";")
                head.clear();
            else
                head.push_back(t);
        }
    }
    if (!open.empty())
        scan.error = "the '{' on line " + std::to_string(open.back().open_line) + " is never closed";
    return scan;
}

}  // namespace layout

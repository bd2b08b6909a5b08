// One-line input errors (see errors.h).
#include "base/errors.h"

#include <cstdarg>
#include <cstdio>

static std::string vformat(const char* fmt, va_list args) {
    va_list copy;
    va_copy(copy, args);
    int n = vsnprintf(nullptr, 0, fmt, copy);
    va_end(copy);
    std::string text(n > 0 ? n : 0, '\0');
    vsnprintf(text.data(), text.size() + 1, fmt, args);
    return text;
}

std::string strprintf(const char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    std::string text = vformat(fmt, args);
    va_end(args);
    return text;
}

// Control characters (a newline inside a tensor name read from a file, say) are written as \n, \r,
// \t or \xNN, so the message stays one line whatever the input held.
static std::string one_line(const std::string& text) {
    std::string out;
    for (const char ch : text) {
        const unsigned char c = (unsigned char)ch;
        if (c == '\n') out += "\\n";
        else if (c == '\r') out += "\\r";
        else if (c == '\t') out += "\\t";
        else if (c < 0x20 || c == 0x7f) out += strprintf("\\x%02x", c);
        else out += ch;
    }
    return out;
}

void fail(const char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    std::string text = vformat(fmt, args);
    va_end(args);
    throw InputError(one_line(text));
}

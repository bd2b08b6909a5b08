// The byte <-> character table of byte-level BPE vocabularies (GPT-2's encoder.json, and Llama 3's
// vocabulary, which uses the same table): every byte is spelled as one printable character, so a
// token's bytes can be written as text. The loaders turn spellings back into plain bytes.
#pragma once
#include <string>
#include <vector>

// GPT-2's byte <-> unicode table: bytes that are printable Latin-1 characters ('!'..'~', '¡'..'¬',
// '®'..'ÿ') stand for themselves; the other 68 bytes, in increasing order, become U+0100, U+0101, ...
struct ByteAlphabet {
    int code_point_of_byte[256];
    std::vector<int> byte_of_code_point = std::vector<int>(256 + 68, -1);  // -1: not a stand-in
    ByteAlphabet() {
        int next_stand_in = 256;
        for (int b = 0; b < 256; b++) {
            bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
            code_point_of_byte[b] = printable ? b : next_stand_in++;
            byte_of_code_point[code_point_of_byte[b]] = b;
        }
    }
    // The UTF-8 spelling of one byte's stand-in character (all are below U+0800).
    std::string spelling_of_byte(int b) const {
        int cp = code_point_of_byte[b];
        if (cp < 0x80) return std::string(1, (char)cp);
        return {(char)(0xC0 | cp >> 6), (char)(0x80 | (cp & 0x3F))};
    }
    // Turns a token spelled in stand-in characters back into its bytes; false if it is not so spelled.
    bool to_bytes(const std::string& spelling, std::string* bytes) const {
        bytes->clear();
        for (size_t i = 0; i < spelling.size();) {
            unsigned char c = spelling[i];
            int cp, extra;
            if (c < 0x80) cp = c, extra = 0;
            else if ((c & 0xE0) == 0xC0) cp = c & 0x1F, extra = 1;
            else return false;  // a three- or four-byte character is never a stand-in
            if (i + extra >= spelling.size()) return false;
            if (extra && (spelling[i + 1] & 0xC0) != 0x80) return false;
            if (extra) cp = cp << 6 | (spelling[i + 1] & 0x3F);
            i += 1 + extra;
            if (cp >= (int)byte_of_code_point.size() || byte_of_code_point[cp] < 0) return false;
            bytes->push_back((char)byte_of_code_point[cp]);
        }
        return !spelling.empty();
    }
};

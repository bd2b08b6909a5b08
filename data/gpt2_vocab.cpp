// Loads encoder.json and vocab.bpe (see gpt2_vocab.h). JSON is parsed by nlohmann-json.
#include "data/gpt2_vocab.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "base/errors.h"
#include "base/formats.h"
#include "data/read_file.h"

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

Gpt2Vocab load_gpt2_vocab(const std::string& encoder_json_path, const std::string& vocab_bpe_path) {
    const ByteAlphabet alphabet;
    const char* json_path = encoder_json_path.c_str();

    nlohmann::json encoder = nlohmann::json::parse(read_file(encoder_json_path), nullptr, false);
    if (encoder.is_discarded()) fail("%s: not valid JSON", json_path);
    if (!encoder.is_object()) fail("%s: expected a JSON object of token -> id", json_path);
    if (encoder.size() != (size_t)GPT2_VOCAB_SIZE)
        fail("%s: has %zu tokens, GPT-2 has %d", json_path, encoder.size(), GPT2_VOCAB_SIZE);

    Gpt2Vocab vocab;
    vocab.token_bytes.assign(GPT2_VOCAB_SIZE, std::string());
    std::vector<bool> seen(GPT2_VOCAB_SIZE, false);
    std::unordered_map<std::string, int> id_of_spelling;
    for (auto& [spelling, value] : encoder.items()) {
        if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
            value.get<int64_t>() >= GPT2_VOCAB_SIZE)
            fail("%s: token \"%s\" has id %s, expected an integer in [0, %d)", json_path,
                 spelling.c_str(), value.dump().c_str(), GPT2_VOCAB_SIZE);
        int id = value.get<int>();
        if (seen[id]) fail("%s: id %d is used twice", json_path, id);
        seen[id] = true;
        if (!alphabet.to_bytes(spelling, &vocab.token_bytes[id]))
            fail("%s: token %d is not spelled in GPT-2's byte alphabet", json_path, id);
        id_of_spelling[spelling] = id;
    }
    if (vocab.token_bytes[GPT2_EOT_TOKEN] != "<|endoftext|>")
        fail("%s: token %d is not <|endoftext|>", json_path, GPT2_EOT_TOKEN);
    for (int b = 0; b < 256; b++) {
        auto it = id_of_spelling.find(alphabet.spelling_of_byte(b));
        if (it == id_of_spelling.end()) fail("%s: has no token for byte %d", json_path, b);
        vocab.byte_token[b] = it->second;
    }

    // vocab.bpe: a "#version" line, then one merge per line, "LEFT RIGHT", highest priority first.
    const char* bpe_path = vocab_bpe_path.c_str();
    std::istringstream lines(read_file(vocab_bpe_path));
    std::string line;
    int line_number = 0;
    while (std::getline(lines, line)) {
        line_number++;
        if (line_number == 1 && line.rfind("#version", 0) == 0) continue;
        if (line.empty()) continue;
        size_t space = line.find(' ');
        if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
            fail("%s: line %d is not \"LEFT RIGHT\"", bpe_path, line_number);
        std::string left = line.substr(0, space), right = line.substr(space + 1);
        auto l = id_of_spelling.find(left), r = id_of_spelling.find(right),
             m = id_of_spelling.find(left + right);
        if (l == id_of_spelling.end() || r == id_of_spelling.end() || m == id_of_spelling.end())
            fail("%s: line %d merges tokens that are not in the vocabulary", bpe_path, line_number);
        int rank = (int)vocab.merges.size();
        if (!vocab.merges.emplace(merge_key(l->second, r->second), BpeMerge{rank, m->second}).second)
            fail("%s: line %d repeats an earlier merge", bpe_path, line_number);
    }
    if (vocab.merges.size() != (size_t)(GPT2_VOCAB_SIZE - 256 - 1))
        fail("%s: has %zu merges, GPT-2 has %d", bpe_path, vocab.merges.size(),
             GPT2_VOCAB_SIZE - 256 - 1);
    return vocab;
}

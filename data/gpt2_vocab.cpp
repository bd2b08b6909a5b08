// Loads encoder.json and vocab.bpe (see gpt2_vocab.h). JSON is parsed by nlohmann-json.
#include "data/gpt2_vocab.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "base/errors.h"
#include "base/formats.h"
#include "data/byte_alphabet.h"
#include "data/read_file.h"

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

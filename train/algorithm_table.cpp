// The table of timed choices in the run folder and between ranks (train/algorithm_table.h).
#include "train/algorithm_table.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <set>

#include "base/errors.h"
#include "base/file_io.h"
#include "train/training_state.h"

static const char kFirstLine[] = "matmul_algorithms 1";
static const size_t kMaxFileBytes = (size_t)16 << 20;  // thousands of configurations fit in 1 MiB

std::string algorithm_table_path(const std::string& dir) { return dir + "/matmul_algorithms.txt"; }

static uint64_t text_checksum(const std::string& text) { return fnv1a64(text.data(), text.size(), FNV_OFFSET); }

std::string algorithm_table_text(const AlgorithmTable& table) {
    std::string text = std::string(kFirstLine) + "\nenvironment " + table.environment + "\n";
    for (const AlgorithmChoice& c : table.choices) text += c.key + " = " + c.value + "\n";
    return text + strprintf("checksum %016" PRIx64 "\n", text_checksum(text));
}

// The body (everything before the checksum line), checked against that line.
static std::string checked_body(const std::string& text, const std::string& name) {
    if (text.size() > kMaxFileBytes) fail("%s: %zu bytes, more than a table of algorithms holds", name.c_str(), text.size());
    if (text.compare(0, strlen(kFirstLine), kFirstLine) != 0 || text.size() <= strlen(kFirstLine) ||
        text[strlen(kFirstLine)] != '\n')
        fail("%s: not a table of algorithms (its first line is not '%s')", name.c_str(), kFirstLine);
    if (text.empty() || text.back() != '\n') fail("%s: truncated (no line ends the file)", name.c_str());
    const size_t last = text.rfind('\n', text.size() - 2);
    const std::string body = text.substr(0, last + 1), line = text.substr(last + 1, text.size() - last - 2);
    char hex[17] = {};
    int used = 0;
    if (sscanf(line.c_str(), "checksum %16[0-9a-f]%n", hex, &used) != 1 || used != (int)line.size() ||
        strlen(hex) != 16)
        fail("%s: truncated (its last line is not 'checksum' and 16 hex digits)", name.c_str());
    if (strtoull(hex, nullptr, 16) != text_checksum(body))
        fail("%s: damaged (its checksum does not match its contents); delete it to time the algorithms "
             "afresh", name.c_str());
    return body;
}

// One "key = value" line into c; false when the line is not one.
static bool parse_choice(const std::string& line, AlgorithmChoice* c) {
    const size_t at = line.find(" = ");
    if (at == std::string::npos || at == 0 || line.find('=') != at + 1 || line.find('=', at + 2) != std::string::npos)
        return false;
    c->key = line.substr(0, at), c->value = line.substr(at + 3);
    return !c->value.empty() && c->value.find(' ') == std::string::npos;
}

AlgorithmTable parse_algorithm_table(const std::string& text, const std::string& name) {
    const std::string body = checked_body(text, name);
    AlgorithmTable table;
    std::set<std::string> keys;
    size_t at = strlen(kFirstLine) + 1;
    for (int line_number = 2; at < body.size(); line_number++) {
        const size_t end = body.find('\n', at);
        const std::string line = body.substr(at, end - at);
        at = end + 1;
        if (line_number == 2) {
            if (line.compare(0, 12, "environment ") != 0) fail("%s: line 2 is not 'environment ...'", name.c_str());
            table.environment = line.substr(12);
            continue;
        }
        AlgorithmChoice c;
        if (!parse_choice(line, &c)) fail("%s: line %d is not 'key = value'", name.c_str(), line_number);
        if (!keys.insert(c.key).second) fail("%s: line %d repeats the key '%s'", name.c_str(), line_number, c.key.c_str());
        table.choices.push_back(c);
    }
    if (at == strlen(kFirstLine) + 1) fail("%s: no 'environment' line", name.c_str());
    return table;
}

AlgorithmTable read_algorithm_table(const std::string& path) {
    const uint64_t bytes = file_size(path);
    if (bytes > kMaxFileBytes) fail("%s: %llu bytes, more than a table of algorithms holds", path.c_str(), (unsigned long long)bytes);
    std::string text(bytes, '\0');
    if (bytes > 0) read_bytes(path, 0, &text[0], bytes);
    return parse_algorithm_table(text, path);
}

void write_algorithm_table(const std::string& path, const AlgorithmTable& table) {
    const std::string text = algorithm_table_text(table);
    AtomicFile file(path);
    file.write(text.data(), text.size());
    file.commit();
}

AlgorithmTable merge_algorithm_tables(const std::vector<AlgorithmTable>& by_rank) {
    AlgorithmTable merged;
    if (by_rank.empty()) return merged;
    merged.environment = by_rank[0].environment;
    merged.timed = by_rank[0].timed;
    std::set<std::string> keys;
    for (const AlgorithmTable& table : by_rank)
        for (const AlgorithmChoice& c : table.choices)
            if (keys.insert(c.key).second) merged.choices.push_back(c);
    return merged;
}

AlgorithmTable share_algorithm_table(const AlgorithmTable& mine, RankGroup& ranks) {
    const std::string text = algorithm_table_text(mine);
    std::vector<std::vector<char>> all = ranks.gather_on_rank0(std::vector<char>(text.begin(), text.end()));
    std::string merged_text;
    if (ranks.rank == 0) {
        std::vector<AlgorithmTable> by_rank;
        for (size_t r = 0; r < all.size(); r++)
            by_rank.push_back(parse_algorithm_table(std::string(all[r].begin(), all[r].end()),
                                                    strprintf("rank %zu's algorithms", r)));
        merged_text = algorithm_table_text(merge_algorithm_tables(by_rank));
    }
    const std::vector<char> received = ranks.broadcast_from_rank0(std::vector<char>(merged_text.begin(), merged_text.end()));
    AlgorithmTable merged = parse_algorithm_table(std::string(received.begin(), received.end()), "rank 0's table of algorithms");
    merged.timed = mine.timed;  // this rank's, not sent
    return merged;
}

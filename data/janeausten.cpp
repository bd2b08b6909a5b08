// Reading Jane Austen's novels from the janeaustenr R package's data (see janeausten.h).
#include "data/janeausten.h"

#include <algorithm>
#include <cctype>

#include "base/errors.h"
#include "data/rdata_reader.h"

// Titles as the first line of each novel reads (case aside), in publication order.
static const char* const NOVELS_IN_ORDER[] = {"SENSE AND SENSIBILITY", "PRIDE AND PREJUDICE",
                                              "MANSFIELD PARK",        "EMMA",
                                              "NORTHANGER ABBEY",      "PERSUASION"};

std::vector<Document> read_janeausten_novels(const std::string& rdata_path) {
    std::vector<std::vector<std::string>> vectors = read_rdata_character_vectors(rdata_path);
    std::vector<Document> novels;
    for (const char* title : NOVELS_IN_ORDER) {
        auto is_this_novel = [&](const std::vector<std::string>& lines) {
            if (lines.empty()) return false;
            std::string first = lines[0];
            std::transform(first.begin(), first.end(), first.begin(), ::toupper);
            return first == title;
        };
        auto found = std::find_if(vectors.begin(), vectors.end(), is_this_novel);
        if (found == vectors.end())
            fail("%s: %s is not in it; is this janeaustenr's data/Rdata.rdb?", rdata_path.c_str(), title);
        std::string text;
        for (const std::string& line : *found) text += line + "\n";
        novels.push_back({title, std::move(text)});
    }
    if (vectors.size() != novels.size())
        fail("%s: holds %zu character vectors, expected the six novels", rdata_path.c_str(),
             vectors.size());
    return novels;
}

// Unit tests of the tokenizer's parts: round trips on arbitrary bytes, chunked parallel encoding,
// the decode table and token shards (read back by train/dataloader), the R data reader, and the
// vocabulary loader's errors. The exactness tests against js-tiktoken and gpt-tokenizer's test plans
// run with node in test_prepare.sh. Needs data/cache from scripts/install_deps.sh (fails without).
#include <cstring>
#include <fstream>
#include <random>
#include <zlib.h>

#include "base/decode_table.h"
#include "base/errors.h"
#include "base/formats.h"
#include "data/dataset.h"
#include "data/gpt2_tokenizer.h"
#include "data/janeausten.h"
#include "data/parallel_encode.h"
#include "data/pinned_vocab.h"
#include "data/rdata_reader.h"
#include "data/read_file.h"
#include "data/token_shard.h"
#include "test/data/tokenizer_test_util.h"
#include "test/test.h"
#include "train/dataloader.h"

static const Gpt2Tokenizer& tokenizer() {
    static Gpt2Tokenizer instance(load_pinned_gpt2_vocab(DEFAULT_VOCAB_DIR));
    return instance;
}

TEST(decode_of_encode_is_identity_on_arbitrary_bytes) {
    std::mt19937 rng(1234);
    const Gpt2Tokenizer& tok = tokenizer();
    for (int trial = 0; trial < 300; trial++) {
        std::string text = random_text(rng, 1 + rng() % 60);
        std::vector<uint16_t> tokens = tok.encode(text);
        CHECK_MSG(tok.decode(tokens.data(), tokens.size()) == text, "trial %d round trip", trial);
        for (uint16_t t : tokens) CHECK_MSG(t != GPT2_EOT_TOKEN, "EOT from ordinary text, trial %d", trial);
    }
    CHECK(tok.encode("").empty());
}

TEST(pieces_cover_the_text_exactly) {
    std::mt19937 rng(99);
    Pretokenizer pretokenizer;
    for (int trial = 0; trial < 100; trial++) {
        std::string text = random_text(rng, 40), joined;
        for (std::string_view piece : pretokenizer.split(text)) {
            CHECK(!piece.empty());
            joined += piece;
        }
        CHECK(joined == text);
    }
}

TEST(chunked_parallel_encoding_equals_whole_text_encoding) {
    std::mt19937 rng(7);
    const Gpt2Tokenizer& tok = tokenizer();
    std::vector<std::string> texts;
    for (int i = 0; i < 20; i++) texts.push_back(random_text(rng, 200));
    for (const Document& novel : read_janeausten_novels(JANEAUSTEN_RDATA)) texts.push_back(novel.text);
    std::vector<std::string_view> views(texts.begin(), texts.end());
    // Small chunks: thousands of cuts, every one of which must leave the tokens unchanged.
    std::vector<std::vector<uint16_t>> chunked = encode_documents(tok, views, 2000);
    for (size_t d = 0; d < texts.size(); d++)
        CHECK_MSG(chunked[d] == tok.encode(texts[d]), "document %zu", d);
}

// The property next_safe_cut promises: the pieces (and so the tokens) on both sides of the cut are
// those of the whole text. Pieces are compared, not only tokens: GPT-2 has no multi-space tokens,
// so some wrong cuts would still give the same tokens.
TEST(every_safe_cut_leaves_the_pieces_unchanged) {
    std::mt19937 rng(11);
    const Gpt2Tokenizer& tok = tokenizer();
    Pretokenizer pretokenizer;
    auto pieces = [&](std::string_view text) {
        std::vector<std::string> out;
        for (std::string_view piece : pretokenizer.split(text)) out.emplace_back(piece);
        return out;
    };
    for (int trial = 0; trial < 30; trial++) {
        std::string text = random_text(rng, 30);
        text.resize(std::min<size_t>(text.size(), 600));
        const std::vector<std::string> whole = pieces(text);
        const std::vector<uint16_t> whole_tokens = tok.encode(text);
        for (size_t from = 0; from < text.size(); from++) {
            size_t cut = next_safe_cut(text, from);
            CHECK(cut >= from);
            std::vector<std::string> parts = pieces(std::string_view(text).substr(0, cut));
            std::vector<std::string> rest = pieces(std::string_view(text).substr(cut));
            parts.insert(parts.end(), rest.begin(), rest.end());
            CHECK_MSG(parts == whole, "trial %d, cut at %zu", trial, cut);
            std::vector<uint16_t> tokens = tok.encode(std::string_view(text).substr(0, cut));
            std::vector<uint16_t> rest_tokens = tok.encode(std::string_view(text).substr(cut));
            tokens.insert(tokens.end(), rest_tokens.begin(), rest_tokens.end());
            CHECK_MSG(tokens == whole_tokens, "trial %d, cut at %zu", trial, cut);
        }
    }
}

TEST(decode_table_round_trips_every_token) {
    const Gpt2Tokenizer& tok = tokenizer();
    DecodeTable table;
    for (int t = 0; t < tok.vocab_size(); t++) table.token_bytes.push_back(tok.token_bytes(t));
    table.eot_token = GPT2_EOT_TOKEN;
    std::string dir = tst::make_temp_dir(), path = dir + "/table.bin";
    write_decode_table(path, table);

    std::string bytes = read_file(path);
    size_t expected_size = FILE_HEADER_BYTES;
    for (const std::string& token : table.token_bytes) expected_size += 1 + token.size();
    CHECK(bytes.size() == expected_size);
    int32_t header[4];
    memcpy(header, bytes.data(), sizeof header);
    CHECK(header[0] == 20240328 && header[1] == 2 && header[2] == 50257 && header[3] == 50256);

    DecodeTable read = read_decode_table(path);
    CHECK(read.eot_token == GPT2_EOT_TOKEN && read.token_bytes.size() == (size_t)tok.vocab_size());
    for (int t = 0; t < tok.vocab_size(); t++) {
        uint16_t token = (uint16_t)t;
        CHECK_MSG(read.decode(t) == tok.decode(&token, 1), "token %d", t);
    }
    CHECK(read.decode(GPT2_EOT_TOKEN) == "<|endoftext|>");

    write_file(dir + "/short.bin", bytes.substr(0, bytes.size() - 3));
    CHECK(error_of([&] { read_decode_table(dir + "/short.bin"); }).find("truncated") != std::string::npos);
    write_file(dir + "/long.bin", bytes + "x");
    CHECK(error_of([&] { read_decode_table(dir + "/long.bin"); }).find("unexpected bytes") != std::string::npos);
    // A header announcing more tokens than the file can hold is refused before any allocation.
    std::string huge = bytes.substr(0, FILE_HEADER_BYTES + 100);
    const int32_t many = 1 << 24;
    memcpy(&huge[8], &many, 4);
    write_file(dir + "/huge.bin", huge);
    CHECK(error_of([&] { read_decode_table(dir + "/huge.bin"); }).find("100 bytes cannot hold 16777216 tokens") != std::string::npos);
    std::string bad_magic = bytes;
    bad_magic[0] ^= 1;
    write_file(dir + "/magic.bin", bad_magic);
    CHECK(error_of([&] { read_decode_table(dir + "/magic.bin"); }).find("magic") != std::string::npos);

    table.token_bytes[5] = std::string(256, 'a');  // the format cannot hold it: no file may appear
    CHECK(error_of([&] { write_decode_table(dir + "/too_long.bin", table); }).find("255") != std::string::npos);
    CHECK(!tst::file_exists(dir + "/too_long.bin"));
}

TEST(shards_are_read_back_by_the_data_loader) {
    std::mt19937 rng(5);
    const int B = 4, T = 64, batches = 9;
    std::vector<uint16_t> tokens(batches * B * T + 1);
    for (uint16_t& t : tokens) t = rng() % GPT2_VOCAB_SIZE;
    std::string dir = tst::make_temp_dir(), path = dir + "/shard_000000.bin";
    write_token_shard(path, tokens.data(), tokens.size());

    std::string bytes = read_file(path);
    CHECK(bytes.size() == FILE_HEADER_BYTES + 2 * tokens.size());
    std::vector<int32_t> header(FILE_HEADER_INTS);
    memcpy(header.data(), bytes.data(), FILE_HEADER_BYTES);
    CHECK(header[0] == 20240520 && header[1] == 1 && header[2] == (int)tokens.size());
    for (int i = 3; i < FILE_HEADER_INTS; i++) CHECK(header[i] == 0);

    DataLoader loader(dir + "/shard_*.bin", B, T, 0, 1, GPT2_VOCAB_SIZE, false, 0);
    CHECK(loader.chunks_per_epoch() == batches);
    std::vector<int> inputs(B * T), targets(B * T);
    for (int b = 0; b < batches; b++) {
        loader.next_batch(inputs.data(), targets.data());
        for (int i = 0; i < B * T; i++) {
            CHECK(inputs[i] == tokens[b * B * T + i]);
            CHECK(targets[i] == tokens[b * B * T + i + 1]);
        }
    }
    CHECK(read_token_shard(path, GPT2_VOCAB_SIZE) == tokens);
}

// --- R data: a database built here by the format's rules, then the real janeaustenr file ---------

static void put_int(std::string* out, int32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) *out += (char)((uint32_t)v >> shift & 0xFF);
}
static std::string serialised_strings(const std::vector<std::pair<int, std::string>>& elements) {
    std::string s = "X\n";
    put_int(&s, 3), put_int(&s, 0x40200), put_int(&s, 0x30500), put_int(&s, 5);
    s += "UTF-8";
    put_int(&s, 16);  // STRSXP
    put_int(&s, (int)elements.size());
    for (auto& [flags, text] : elements) {
        put_int(&s, flags);
        if (flags < 0) {  // our marker for NA
            s.resize(s.size() - 4);
            put_int(&s, 9), put_int(&s, -1);
            continue;
        }
        put_int(&s, (int)text.size());
        s += text;
    }
    return s;
}
static std::string rdb_record(const std::string& serialised) {
    uLongf size = compressBound(serialised.size());
    std::string compressed(size, '\0');
    compress2((Bytef*)compressed.data(), &size, (const Bytef*)serialised.data(), serialised.size(), 6);
    std::string record;
    put_int(&record, (int)serialised.size());
    return record + compressed.substr(0, size);
}

TEST(rdata_reader_reads_character_vectors) {
    std::string integers = "X\n";
    put_int(&integers, 2), put_int(&integers, 0), put_int(&integers, 0);
    put_int(&integers, 13), put_int(&integers, 1), put_int(&integers, 42);  // INTSXP c(42L)
    std::string file = rdb_record(serialised_strings({{0x40009, "first line"}, {-1, ""}, {0x8009, "\xc2\xa3" "5"}})) +
                       rdb_record(integers) +
                       rdb_record(serialised_strings({{0x4009, "caf\xe9"}}));  // Latin-1
    std::string dir = tst::make_temp_dir();
    write_file(dir + "/Rdata.rdb", file);
    auto vectors = read_rdata_character_vectors(dir + "/Rdata.rdb");
    CHECK(vectors.size() == 2);
    CHECK(vectors[0] == std::vector<std::string>({"first line", "\xc2\xa3" "5"}));
    CHECK(vectors[1] == std::vector<std::string>({"caf\xc3\xa9"}));

    write_file(dir + "/cut.rdb", file.substr(0, file.size() - 5));
    CHECK(error_of([&] { read_rdata_character_vectors(dir + "/cut.rdb"); }).find("record 3") != std::string::npos);
    std::string corrupt = file;
    corrupt[10] ^= 0x55;
    write_file(dir + "/corrupt.rdb", corrupt);
    CHECK(error_of([&] { read_rdata_character_vectors(dir + "/corrupt.rdb"); }).find("record 1") != std::string::npos);
}

TEST(janeausten_novels_in_publication_order) {
    std::vector<Document> novels = read_janeausten_novels(JANEAUSTEN_RDATA);
    CHECK(novels.size() == 6);
    CHECK(novels[0].text.rfind("SENSE AND SENSIBILITY\n", 0) == 0);
    CHECK(novels[5].text.rfind("Persuasion\n", 0) == 0);
    size_t bytes = 0;
    for (const Document& novel : novels) bytes += novel.text.size();
    CHECK(bytes > 3900000 && bytes < 4100000);
}

TEST(validation_split_takes_final_documents_or_final_tokens) {
    // Six documents of 100 tokens: 10% of 600 is nearest one final document (100 tokens).
    CHECK(validation_start({0, 100, 200, 300, 400, 500}, 600, 0.1) == 500);
    // 30% of 600 is nearest two final documents.
    CHECK(validation_start({0, 100, 200, 300, 400, 500}, 600, 0.3) == 400);
    // One document: the final 10% of its tokens.
    CHECK(validation_start({0}, 1000, 0.1) == 900);
    // Two documents where the final one is 90%: too far from 10%, so split by tokens.
    CHECK(validation_start({0, 100}, 1000, 0.1) == 900);
    CHECK(validation_start({0, 100}, 1000, 0.0) == 1000);
}

// --- vocabulary files: errors name the file and the problem --------------------------------------

TEST(vocabulary_errors_are_clear) {
    std::string dir = tst::make_temp_dir();
    std::string json = read_file(std::string(DEFAULT_VOCAB_DIR) + "/encoder.json");
    std::string bpe = read_file(std::string(DEFAULT_VOCAB_DIR) + "/vocab.bpe");
    auto load = [&](const std::string& json_text, const std::string& bpe_text) {
        write_file(dir + "/encoder.json", json_text);
        write_file(dir + "/vocab.bpe", bpe_text);
        return error_of([&] { load_gpt2_vocab(dir + "/encoder.json", dir + "/vocab.bpe"); });
    };
    CHECK(load(json, bpe).empty());
    CHECK(load(json.substr(0, json.size() / 2), bpe).find("encoder.json: not valid JSON") != std::string::npos);
    CHECK(load("[1, 2]", bpe).find("JSON object") != std::string::npos);
    std::string bad_id = json;
    bad_id.replace(bad_id.find(": 0,"), 4, ": -7,");
    CHECK(load(bad_id, bpe).find("expected an integer") != std::string::npos);
    std::string bad_merge = bpe;
    bad_merge.replace(bad_merge.find("\nh e\n"), 5, "\nh e x\n");
    CHECK(load(json, bad_merge).find("vocab.bpe: line") != std::string::npos);
    CHECK(load(json, bpe.substr(0, bpe.size() / 2)).find("merges") != std::string::npos);
    CHECK(error_of([&] { load_gpt2_vocab(dir + "/none.json", dir + "/vocab.bpe"); }).find("none.json") != std::string::npos);

    write_file(dir + "/encoder.json", json);
    write_file(dir + "/vocab.bpe", bpe + "\n\n");  // same content for the parser, other checksum
    CHECK(error_of([&] { load_pinned_gpt2_vocab(dir); }).find("SHA-256") != std::string::npos);
}

TEST(sha256_matches_coreutils) {
    std::mt19937 rng(3);
    std::string dir = tst::make_temp_dir(), bytes;
    for (int i = 0; i < 100000; i++) bytes += (char)(rng() & 0xFF);
    write_file(dir + "/random", bytes);
    std::string output;
    CHECK(tst::run_command("sha256sum " + dir + "/random", &output) == 0);
    CHECK(output.substr(0, 64) == sha256_of_file(dir + "/random"));
}

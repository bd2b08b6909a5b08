// Unit tests of the Llama 3 tokenizer's parts: the vocabulary (sizes, special tokens, the pinned
// checksum, the loader's errors), round trips on arbitrary bytes, special-token names in text
// encoded as ordinary text, chunked parallel encoding, and Llama 3 token shards (version 7, uint32)
// read back by data/'s reader and by train/dataloader, which refuses ids outside the model's
// vocabulary. The exactness tests against llama3-tokenizer-js run with node in test_prepare.sh.
// Needs data/cache from scripts/install_deps.sh (fails without).
#include <cstring>

#include "base/errors.h"
#include "base/formats.h"
#include "data/llama3_tokenizer.h"
#include "data/parallel_encode.h"
#include "data/pinned_vocab.h"
#include "data/read_file.h"
#include "data/token_shard.h"
#include "test/data/tokenizer_test_util.h"
#include "test/test.h"
#include "train/dataloader.h"

static const Llama3Tokenizer& tokenizer() {
    static Llama3Tokenizer instance(load_pinned_llama3_vocab(DEFAULT_LLAMA3_VOCAB_DIR));
    return instance;
}

TEST(llama3_vocabulary_has_its_sizes_and_special_tokens) {
    const Llama3Tokenizer& tok = tokenizer();
    CHECK(tok.vocab_size() == LLAMA3_VOCAB_SIZE);
    CHECK(tok.token_bytes(LLAMA3_BOS_TOKEN) == "<|begin_of_text|>");
    CHECK(tok.token_bytes(LLAMA3_EOT_TOKEN) == "<|end_of_text|>");
    CHECK(tok.token_bytes(128009) == "<|eot_id|>");
    CHECK(tok.token_bytes(LLAMA3_VOCAB_SIZE - 1) == "<|reserved_special_token_247|>");
    CHECK(tok.token_bytes(0) == "!");
}

TEST(llama3_decode_of_encode_is_identity_on_arbitrary_bytes) {
    std::mt19937 rng(4321);
    const Llama3Tokenizer& tok = tokenizer();
    Llama3Tokenizer::Cache cache;
    for (int trial = 0; trial < 200; trial++) {
        std::string text = random_text(rng, 1 + rng() % 60);
        std::vector<uint32_t> tokens = tok.encode(text, trial % 2 ? &cache : nullptr);
        for (uint32_t t : tokens) CHECK(t < (uint32_t)LLAMA3_ORDINARY_TOKENS);
        CHECK_MSG(tok.decode(tokens.data(), tokens.size()) == text, "trial %d", trial);
    }
    const uint32_t outside = LLAMA3_VOCAB_SIZE;
    CHECK(error_of([&] { tok.decode(&outside, 1); }).find("outside the vocabulary") !=
          std::string::npos);
}

TEST(llama3_special_token_names_in_text_are_ordinary_text) {
    const Llama3Tokenizer& tok = tokenizer();
    for (const char* text : {"<|begin_of_text|>", "a <|end_of_text|> b", "<|eot_id|>\n"}) {
        std::vector<uint32_t> tokens = tok.encode(text);
        CHECK(tokens.size() > 3);
        for (uint32_t t : tokens) CHECK(t < (uint32_t)LLAMA3_ORDINARY_TOKENS);
        CHECK(tok.decode(tokens.data(), tokens.size()) == text);
    }
}

TEST(llama3_chunked_parallel_encoding_equals_whole_encoding) {
    std::mt19937 rng(99);
    const Llama3Tokenizer& tok = tokenizer();
    std::vector<std::string> texts;
    std::vector<std::string_view> views;
    for (int i = 0; i < 12; i++) texts.push_back(random_text(rng, 200));
    for (const std::string& text : texts) views.push_back(text);
    std::vector<std::vector<uint32_t>> chunked = encode_documents(tok, views, 2000);
    for (size_t i = 0; i < texts.size(); i++) CHECK_MSG(chunked[i] == tok.encode(texts[i]), "%zu", i);
}

TEST(llama3_shards_are_version_7_and_read_back_by_the_data_loader) {
    std::mt19937 rng(8);
    const int B = 2, T = 32, batches = 5;
    std::vector<uint32_t> tokens(batches * B * T + 1);
    for (uint32_t& t : tokens) t = rng() % LLAMA3_VOCAB_SIZE;
    tokens[3] = LLAMA3_VOCAB_SIZE - 1;  // needs all 32 bits' worth of room above uint16
    std::string dir = tst::make_temp_dir(), path = dir + "/llama_000000.bin";
    write_token_shard(path, tokens.data(), tokens.size());

    std::string bytes = read_file(path);
    CHECK(bytes.size() == FILE_HEADER_BYTES + 4 * tokens.size());
    std::vector<int32_t> header(FILE_HEADER_INTS);
    memcpy(header.data(), bytes.data(), FILE_HEADER_BYTES);
    CHECK(header[0] == 20240801 && header[1] == 7 && header[2] == (int)tokens.size());
    CHECK(read_any_token_shard(path, LLAMA3_VOCAB_SIZE).tokens == tokens);
    CHECK(read_any_token_shard(path, LLAMA3_VOCAB_SIZE).magic == LLAMA3_TOKEN_SHARD_MAGIC);
    CHECK(error_of([&] { read_token_shard(path, LLAMA3_VOCAB_SIZE); }).find("Llama 3") !=
          std::string::npos);

    DataLoader loader(dir + "/llama_*.bin", B, T, 0, 1, LLAMA3_VOCAB_SIZE, false, 0);
    std::vector<int> inputs(B * T), targets(B * T);
    for (int b = 0; b < batches; b++) {
        loader.next_batch(inputs.data(), targets.data());
        for (int i = 0; i < B * T; i++) {
            CHECK(inputs[i] == (int)tokens[b * B * T + i]);
            CHECK(targets[i] == (int)tokens[b * B * T + i + 1]);
        }
    }
}

TEST(data_loader_refuses_llama3_ids_outside_the_model_vocabulary) {
    std::vector<uint32_t> tokens(200, 7);
    tokens[150] = GPT2_VOCAB_SIZE;  // a Llama 3 id, one past GPT-2's last
    std::string dir = tst::make_temp_dir(), path = dir + "/wide.bin";
    write_token_shard(path, tokens.data(), tokens.size());
    std::string message = error_of([&] { DataLoader(path, 2, 8, 0, 1, GPT2_VOCAB_SIZE, false, 0); });
    CHECK_MSG(message.find(path) != std::string::npos, "%s", message.c_str());
    CHECK(message.find("token 50257 at index 150 is outside the vocabulary of 50257") !=
          std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
    // A shard whose size does not match 4 bytes per token is refused before any token is read.
    write_file(dir + "/short.bin", read_file(path).substr(0, FILE_HEADER_BYTES + 2 * 200));
    CHECK(error_of([&] { DataLoader(dir + "/short.bin", 2, 8, 0, 1, LLAMA3_VOCAB_SIZE, false, 0); })
              .find("does not match its header") != std::string::npos);
}

TEST(llama3_vocabulary_loader_errors) {
    std::string dir = tst::make_temp_dir();
    const std::string js = read_file(std::string(DEFAULT_LLAMA3_VOCAB_DIR) + "/data-converted.js");
    auto load = [&](const std::string& text) {
        write_file(dir + "/data-converted.js", text);
        return error_of([&] { load_llama3_vocab(dir + "/data-converted.js"); });
    };
    CHECK(load(js).empty());
    CHECK(load(js.substr(0, js.size() / 2)).find("not closed") != std::string::npos);
    CHECK(load("const x = 1;").find("no string constant llama_vocab_base64") != std::string::npos);
    std::string bad_base64 = js;
    bad_base64[bad_base64.find("IQoi")] = '*';
    CHECK(load(bad_base64).find("not base64") != std::string::npos);
    std::string short_merges = js;
    const size_t merges = short_merges.find("llama_merges_binary = \"") + 23;
    short_merges.erase(merges, 4000);
    CHECK(load(short_merges).find("merges, Llama 3 has 280147") != std::string::npos);
    CHECK(error_of([&] { load_pinned_llama3_vocab(dir + "/none"); }).find("missing") !=
          std::string::npos);
    write_file(dir + "/data-converted.js", js + "\n");  // same content for the parser, other checksum
    CHECK(error_of([&] { load_pinned_llama3_vocab(dir); }).find("SHA-256") != std::string::npos);
}

TEST(llama3_pinned_checksum_agrees_with_the_fetch_script) {
    CHECK(read_file("data/llama3_vocab.sha256").substr(0, 64) == LLAMA3_DATA_SHA256);
    CHECK(sha256_of_file(std::string(DEFAULT_LLAMA3_VOCAB_DIR) + "/data-converted.js") ==
          LLAMA3_DATA_SHA256);
}

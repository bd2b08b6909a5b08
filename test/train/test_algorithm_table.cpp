// Unit tests of the table of timed choices (train/algorithm_table.h): its file round trip and bytes,
// the merge of the ranks' tables (rank 0's choice, else the lowest rank's), and the file's bad input,
// each a one-line InputError naming the file. The trainer with it, across ranks and resumes, is
// test/trainer/test_matmul_algorithms.sh.
#include <cinttypes>

#include "test/train/host_test_util.h"
#include "train/algorithm_table.h"
#include "train/training_state.h"

static AlgorithmTable example_table() {
    AlgorithmTable t;
    t.environment = "GPU X (4 SMs), cuBLASLt 7, bf16 storage";
    t.choices = {{"matmul m:8 n:16", "00ab"}, {"matmul m:24 n:16", "0001"}};
    return t;
}

TEST(table_round_trips_through_its_file) {
    const std::string path = tst::make_temp_dir() + "/matmul_algorithms.txt";
    write_algorithm_table(path, example_table());
    const AlgorithmTable back = read_algorithm_table(path);
    CHECK(back.environment == example_table().environment);
    CHECK(back.choices == example_table().choices);
    // The bytes, against a checksum computed here over the documented layout.
    const std::string body = "matmul_algorithms 1\nenvironment GPU X (4 SMs), cuBLASLt 7, bf16 storage\n"
                             "matmul m:8 n:16 = 00ab\nmatmul m:24 n:16 = 0001\n";
    const std::string expected =
        body + strprintf("checksum %016" PRIx64 "\n", fnv1a64(body.data(), body.size(), FNV_OFFSET));
    const std::vector<unsigned char> bytes = read_all(path);
    CHECK(std::string(bytes.begin(), bytes.end()) == expected);
    CHECK(algorithm_table_path("out") == "out/matmul_algorithms.txt");
}

TEST(merge_keeps_rank_0s_choice_then_the_lowest_ranks) {
    AlgorithmTable r0, r1, r2;
    r0.environment = "E", r0.timed = 1;
    r0.choices = {{"a", "1"}};
    r1.choices = {{"a", "2"}, {"b", "2"}};
    r2.choices = {{"b", "3"}, {"c", "3"}};
    const AlgorithmTable merged = merge_algorithm_tables({r0, r1, r2});
    const std::vector<AlgorithmChoice> expected = {{"a", "1"}, {"b", "2"}, {"c", "3"}};
    CHECK(merged.choices == expected);
    CHECK(merged.environment == "E" && merged.timed == 1);
    CHECK(merge_algorithm_tables({}).choices.empty());
}

TEST(one_rank_shares_its_own_table) {
    RankGroup single;
    const AlgorithmTable shared = share_algorithm_table(example_table(), single);
    CHECK(shared.choices == example_table().choices && shared.environment == example_table().environment);
}

// The text with its checksum line recomputed, so that only the layout is wrong.
static std::string with_checksum(const std::string& body) {
    return body + strprintf("checksum %016" PRIx64 "\n", fnv1a64(body.data(), body.size(), FNV_OFFSET));
}

TEST(bad_tables_fail_with_one_line_naming_the_file) {
    const std::string good = algorithm_table_text(example_table());
    std::string damaged = good;
    damaged[damaged.find("00ab")] = '1';
    expect_input_error([&] { parse_algorithm_table(damaged, "t.txt"); }, {"t.txt", "damaged", "checksum"});
    expect_input_error([&] { parse_algorithm_table("", "t.txt"); }, {"t.txt", "not a table"});
    expect_input_error([&] { parse_algorithm_table("model_file\n", "t.txt"); }, {"t.txt", "not a table"});
    expect_input_error([&] { parse_algorithm_table("matmul_algorithms 2\n", "t.txt"); }, {"t.txt", "not a table"});
    expect_input_error([&] { parse_algorithm_table(good.substr(0, good.size() - 1), "t.txt"); }, {"truncated"});
    expect_input_error([&] { parse_algorithm_table(good.substr(0, good.rfind("checksum")), "t.txt"); },
                       {"truncated"});
    const std::string head = "matmul_algorithms 1\n";
    expect_input_error([&] { parse_algorithm_table(with_checksum(head), "t.txt"); }, {"no 'environment'"});
    expect_input_error([&] { parse_algorithm_table(with_checksum(head + "device X\n"), "t.txt"); },
                       {"line 2", "environment"});
    for (const char* line : {"k 1", "k = ", "= v", "k = v w", "k = v = w", "a=b = v"})
        expect_input_error([&] { parse_algorithm_table(with_checksum(head + "environment E\n" + line + "\n"), "t.txt"); },
                           {"t.txt", "line 3", "key = value"});
    expect_input_error(
        [&] { parse_algorithm_table(with_checksum(head + "environment E\nk = 1\nk = 2\n"), "t.txt"); },
        {"line 4", "repeats", "'k'"});
    // Every prefix of a good file is refused cleanly (never a crash, never a partial table).
    for (size_t n = 0; n < good.size(); n++)
        expect_input_error([&] { parse_algorithm_table(good.substr(0, n), "t.txt"); }, {"t.txt"});
}

TEST(missing_table_file_is_an_input_error) {
    expect_input_error([] { read_algorithm_table(tst::make_temp_dir() + "/none.txt"); }, {"none.txt"});
}

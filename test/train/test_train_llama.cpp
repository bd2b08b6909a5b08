// End-to-end tests of the CPU trainer (train_gpt_cpu) training a Llama 3 model through the shared
// training loop, on a tiny grouped-query shape and shards the test writes in Llama 3's format
// (magic 20240801, uint32 tokens):
//   - the trainer's losses and final weights equal a training loop written here over the CPU Llama
//     model (the same model file to start from, the batches in the loader's order, AdamW with the
//     constant rate, weight decay on the matrices, global-norm clipping at 1): what the loop adds
//     (data order, schedule, clipping, the model file in and out) is checked against that;
//   - 8 steps straight and 4 + resume + 4 end in byte-identical checkpoints (the state file holds
//     the Llama shape), with LAMB and LARS too;
//   - samples print through a decode table, starting from its document-start token;
//   - bad input: a shape that cannot be built, a checkpoint of another family, tokens outside the
//     vocabulary, the CUDA trainer asked for a Llama model: one error line, nothing written.
#include <cmath>
#include <cstdio>
#include <sstream>

#include "base/formats.h"
#include "base/llama_model_file.h"
#include "base/rng.h"
#include "cpu/llama_cpu.h"
#include "test/train/host_test_util.h"
#include "test/train/trainer_runs.h"
#include "train/checkpoint.h"

// 4 query heads sharing 2 key/value heads of size 8, an MLP of 48, 64 tokens.
static const char* SHAPE = "llama3:L2:C32:H4:KV2:T16:F48:V64";
static LlamaConfig shape() {
    LlamaConfig c;
    c.num_layers = 2, c.channels = 32, c.num_heads = 4, c.num_kv_heads = 2, c.ffn_channels = 48;
    c.vocab_size = 64, c.max_seq_len = 16;
    return c;
}

// A Llama 3 token shard (uint32 tokens).
static void write_llama_shard(const std::string& path, const std::vector<uint32_t>& tokens) {
    int32_t header[FILE_HEADER_INTS] = {0};
    header[0] = LLAMA3_TOKEN_SHARD_MAGIC, header[1] = LLAMA3_TOKEN_SHARD_VERSION, header[2] = (int32_t)tokens.size();
    FILE* f = fopen(path.c_str(), "wb");
    CHECK_MSG(f != nullptr, "cannot write %s", path.c_str());
    fwrite(header, sizeof header, 1, f);
    fwrite(tokens.data(), 4, tokens.size(), f);
    fclose(f);
}

// train.bin and val.bin: text-like tokens below `limit` (each token mostly follows from the one
// before, so a model learns), a decode table (token i is 'a' + i; the document start is 0), and a
// model file with random weights.
static std::string llama_data_dir(uint32_t limit = 64) {
    const std::string dir = tst::make_temp_dir();
    Rng rng(11);
    for (const char* name : {"train", "val"}) {
        std::vector<uint32_t> tokens(name[0] == 't' ? 2000 : 400);
        uint32_t t = 0;
        for (uint32_t& token : tokens) token = t = rng.uniform() < 0.8 ? (t * 7 + 3) % limit : rng.below(limit);
        write_llama_shard(dir + "/" + name + ".bin", tokens);
    }
    DecodeTable table;
    for (int i = 0; i < 64; i++) table.token_bytes.push_back(std::string(1, (char)('a' + i % 26)));
    table.eot_token = 0;
    write_decode_table(dir + "/tokenizer.bin", table);
    const LlamaConfig c = shape();
    std::vector<float> weights(llama_param_count(c));
    for (const LlamaTensor& t : llama_tensors(c))
        for (size_t i = t.offset; i < t.offset + t.size(); i++)
            weights[i] = t.is_matrix() ? (float)(0.05 * rng.normal()) : (float)(1.0 + 0.1 * rng.normal());
    write_llama_model_file(dir + "/start.bin", c, weights.data(), WeightType::FP32);
    return dir;
}

static std::vector<double> step_losses(const std::string& output) {
    std::vector<double> losses;
    std::istringstream lines(output);
    std::string line;
    while (std::getline(lines, line))
        if (line.rfind("step ", 0) == 0) losses.push_back(atof(line.c_str() + line.find("| loss ") + 7));
    return losses;
}

// The trainer against a loop written here over llama_cpu: 6 steps of B=2, T=16 from start.bin.
TEST(llama_training_matches_a_loop_over_the_cpu_model) {
    const std::string dir = llama_data_dir();
    const int B = 2, T = 16, steps = 6;
    const double lr = 3e-3, weight_decay = 0.1;
    std::string out;
    const int rc = run_trainer("-e " + dir + "/start.bin -i " + dir + "/train.bin -j " + dir + "/val.bin -b 2 -t 16 -x 6 "
                               "-k constant -u 0 -l 3e-3 -c 0.1 -v 0 -s 0 -o " + dir + "/run",
                               &out);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out.c_str());
    CHECK_MSG(out.find("Llama 3 L=2 C=32 H=4 KV=2 F=48 V=64 maxT=16") != std::string::npos, "%s", out.c_str());
    const std::vector<double> trained = step_losses(out);
    CHECK_MSG((int)trained.size() == steps, "%zu step lines", trained.size());

    // The reference: the same weights, batch k from token k·B·T of train.bin, AdamW's defaults.
    const LlamaConfig c = shape();
    LlamaCpu* model = llama_cpu_create(c, B, T);
    llama_cpu_params(model) = read_llama_model_file(dir + "/start.bin").params;
    std::vector<unsigned char> shard = read_all(dir + "/train.bin");
    const uint32_t* tokens = (const uint32_t*)(shard.data() + FILE_HEADER_BYTES);
    std::vector<int> in(B * T), tg(B * T);
    for (int step = 1; step <= steps; step++) {
        for (int i = 0; i < B * T; i++) {
            in[i] = (int)tokens[(step - 1) * B * T + i];
            tg[i] = (int)tokens[(step - 1) * B * T + i + 1];
        }
        llama_cpu_zero_grad(model);
        const float loss = llama_cpu_forward(model, in.data(), tg.data(), B, T);
        llama_cpu_backward(model, 1.0f);
        const double norm = llama_cpu_grad_norm(model);
        OptimizerSettings s;
        s.learning_rate = (float)lr, s.weight_decay = (float)weight_decay;
        s.grad_scale = norm > 1.0 ? (float)(1.0 / norm) : 1.0f;
        llama_cpu_update(model, s, step);
        // The step line prints 4 decimals.
        CHECK_MSG(std::fabs(trained[step - 1] - loss) <= 5e-5, "step %d: trainer %.4f, reference %.6f", step,
                  trained[step - 1], loss);
    }
    CHECK_MSG(trained.back() < trained.front() - 0.05, "no learning: %.4f -> %.4f", trained.front(), trained.back());
    // The final checkpoint is a Llama 3 model file holding the reference's weights exactly (the same
    // fp32 operations in the same order).
    const LlamaModelFile saved = read_llama_model_file(checkpoint_model_path(dir + "/run", steps));
    CHECK(saved.params == llama_cpu_params(model));
    llama_cpu_free(model);
}

static void check_resume_is_bitwise(const std::string& optimizer) {
    const std::string dir = llama_data_dir();
    const std::string args = std::string("-e ") + SHAPE + " -i " + dir + "/train.bin -j " + dir + "/val.bin -b 2 -t 16 "
                             "-x 8 -n 4 -v 4 -s 0 -l 3e-3 --optimizer " + optimizer + " -o ";
    std::string out;
    CHECK(run_trainer(args + dir + "/straight", &out) == 0);
    CHECK(run_trainer(args + dir + "/resumed --stop-at 4", &out) == 0);
    int rc = run_trainer(args + dir + "/resumed -y 1", &out);
    CHECK_MSG(rc == 0 && out.find("resumed from step 4") != std::string::npos, "%s", out.c_str());
    for (const std::string& file : {std::string("/model_00000008.bin"), std::string("/state_00000008_00000.bin")})
        CHECK_MSG(read_all(dir + "/straight" + file) == read_all(dir + "/resumed" + file), "%s differs", file.c_str());
}
TEST(llama_resume_is_bitwise_adamw) { check_resume_is_bitwise("adamw"); }
TEST(llama_resume_is_bitwise_lamb) { check_resume_is_bitwise("lamb"); }
TEST(llama_resume_is_bitwise_lars) { check_resume_is_bitwise("lars"); }
TEST(llama_resume_is_bitwise_muon) { check_resume_is_bitwise("muon"); }

TEST(llama_samples_print_from_the_decode_table) {
    const std::string dir = llama_data_dir();
    std::string out;
    const int rc = run_trainer(std::string("-e ") + SHAPE + " -i " + dir + "/train.bin -j " + dir + "/val.bin -b 2 -t 16 "
                               "-x 2 -v 0 -s 2 -g 8 --tokenizer " + dir + "/tokenizer.bin",
                               &out);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out.c_str());
    const size_t at = out.find("sample: ");
    CHECK_MSG(at != std::string::npos && out.find('\n', at) - at == 8 + 8, "%s", out.c_str());
}

// A Llama 3 run reads the built-in dataset's Llama 3 shards where -i and -j are left out, and the
// files it is given otherwise, even where they are the paths GPT-2's defaults name.
TEST(llama_reads_the_data_it_is_given_and_its_own_defaults_otherwise) {
    const std::string dir = llama_data_dir();
    CHECK(tst::run_command("mkdir -p " + dir + "/data/janeausten && cp " + dir + "/train.bin " + dir +
                           "/data/janeausten/janeausten_train.bin && cp " + dir + "/val.bin " + dir +
                           "/data/janeausten/janeausten_val.bin") == 0);
    std::string trainer_path;
    CHECK(tst::run_command("realpath " + trainer(), &trainer_path) == 0);
    trainer_path = trainer_path.substr(0, trainer_path.find('\n'));
    const std::string in_dir = "cd " + dir + " && " + trainer_path + " -e " + SHAPE + " -b 2 -t 16 -x 1 -v 0 -s 0";
    std::string out;
    int rc = tst::run_command(in_dir + " -i data/janeausten/janeausten_train.bin -j data/janeausten/janeausten_val.bin",
                              &out);
    CHECK_MSG(rc == 0 && out.find("step 1/1") != std::string::npos, "exit %d: %s", rc, out.c_str());
    rc = tst::run_command(in_dir, &out);
    CHECK_MSG(rc != 0 && out.find("janeausten_llama3_train.bin") != std::string::npos, "exit %d: %s", rc, out.c_str());
}

TEST(llama_bad_input_fails_cleanly) {
    const std::string dir = llama_data_dir();
    const std::string data = " -i " + dir + "/train.bin -j " + dir + "/val.bin -b 2 -t 16 -x 2 -v 0 -s 0 -o " + dir + "/run";
    fails_cleanly("-e llama3:L2:C30:H4:KV2:T16" + data, {"llama3:L2:C30:H4:KV2:T16"}, dir + "/run");
    // Tokens up to 99 for a vocabulary of 64.
    const std::string wide = llama_data_dir(100);
    fails_cleanly(std::string("-e ") + SHAPE + " -i " + wide + "/train.bin -j " + wide + "/val.bin -b 2 -t 16 -x 2 -v 0 "
                  "-s 0 -o " + dir + "/run",
                  {"-i (--train-data)", "vocabulary"}, dir + "/run");
    // A GPT-2 run's checkpoint resumed as a Llama 3 run.
    std::string out;
    CHECK(run_trainer("-e custom:L2:C32:H2:V64:T16" + data, &out) == 0);
    fails_cleanly(std::string("-e ") + SHAPE + data + " -y 1", {"saved model GPT-2", "this run's Llama 3"}, dir + "/run");
    // The CUDA trainer (through the emulator here) refuses an MLP width its SwiGLU kernel cannot take
    // (a multiple of 8), which the CPU trainer trains; it trains SHAPE (test/trainer/test_train_llama_emu.sh).
    const std::string emulated = std::string(getenv("BIN") ? getenv("BIN") : ".") + "/train_gpt_emu";
    if (path_exists(emulated)) {
        const int rc = tst::run_command(emulated + " -e llama3:L2:C32:H4:KV2:T16:F44:V64" +
                                            data.substr(0, data.find(" -o ")), &out);
        CHECK_MSG(rc != 0 && out.find("error: -e (--model)") != std::string::npos &&
                      out.find("MLP width F 44 must be a multiple of 8") != std::string::npos,
                  "exit %d: %s", rc, out.c_str());
    }
}

// Encode throughput of the GPT-2 tokenizer on the built-in corpus (Jane Austen, about 4 MB), on one
// thread and on all cores, side by side with js-tiktoken (node) on the same text in the same run.
// Each figure is the median of several runs; every run starts with empty piece caches.
// Usage (from the repository root, after scripts/install_deps.sh): dev/bin/bench_tokenizer [RUNS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <omp.h>
#include <string>
#include <unistd.h>
#include <vector>

#include "base/errors.h"
#include "data/gpt2_tokenizer.h"
#include "data/janeausten.h"
#include "data/parallel_encode.h"
#include "data/pinned_vocab.h"

// Median seconds of `runs` encodings of the corpus on `threads` threads; tokens counts the output.
static double median_encode_seconds(const Gpt2Tokenizer& tokenizer,
                                    const std::vector<std::string_view>& texts, int threads,
                                    int runs, size_t* tokens) {
    omp_set_num_threads(threads);
    std::vector<double> seconds;
    for (int run = 0; run < runs; run++) {
        auto start = std::chrono::steady_clock::now();
        std::vector<std::vector<uint16_t>> encoded = encode_documents(tokenizer, texts);
        seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        *tokens = 0;
        for (const auto& document : encoded) *tokens += document.size();
    }
    std::sort(seconds.begin(), seconds.end());
    return seconds[seconds.size() / 2];
}

int main(int argc, char** argv) {
    try {
        const int runs = argc > 1 ? std::max(1, atoi(argv[1])) : 5;
        Gpt2Tokenizer tokenizer(load_pinned_gpt2_vocab(DEFAULT_VOCAB_DIR));
        std::vector<Document> novels = read_janeausten_novels(JANEAUSTEN_RDATA);
        std::vector<std::string_view> texts;
        std::string corpus;
        for (const Document& novel : novels) texts.push_back(novel.text), corpus += novel.text;
        const double megabytes = corpus.size() / 1e6;
        const int cores = omp_get_num_procs();

        size_t tokens_1 = 0, tokens_all = 0;
        double one_thread = median_encode_seconds(tokenizer, texts, 1, runs, &tokens_1);
        double all_cores = median_encode_seconds(tokenizer, texts, cores, runs, &tokens_all);

        // js-tiktoken on the same bytes (the novels concatenated; no pre-tokeniser piece spans two).
        std::string path = strprintf("/tmp/bench_tokenizer_%d.txt", (int)getpid());
        std::ofstream(path, std::ios::binary) << corpus;
        std::string command = strprintf("node dev/bench_tokenizer_js.cjs %s %d", path.c_str(), runs);
        FILE* pipe = popen(command.c_str(), "r");
        long js_tokens = -1;
        double js_seconds = 0;
        bool js_ok = pipe && fscanf(pipe, "%ld %lf", &js_tokens, &js_seconds) == 2;
        if (pipe) js_ok = pclose(pipe) == 0 && js_ok;
        remove(path.c_str());

        printf("GPT-2 encode throughput on the built-in corpus: %.2f MB, %zu tokens, median of %d runs\n",
               megabytes, tokens_1, runs);
        printf("  %-28s %8.2f MB/s\n", "ours, 1 thread", megabytes / one_thread);
        printf("  %-28s %8.2f MB/s\n", strprintf("ours, all %d cores", cores).c_str(), megabytes / all_cores);
        if (!js_ok) {
            printf("  js-tiktoken: could not run `%s` (run scripts/install_deps.sh)\n", command.c_str());
            return 1;
        }
        printf("  %-28s %8.2f MB/s\n", "js-tiktoken (node), 1 thread", megabytes / js_seconds);
        printf("  ours / js-tiktoken: %.1fx on 1 thread, %.1fx on %d cores (target >= 5x)\n",
               js_seconds / one_thread, js_seconds / all_cores, cores);
        if ((size_t)js_tokens != tokens_1 || tokens_all != tokens_1)
            printf("  WARNING: token counts differ: ours %zu / %zu, js-tiktoken %ld\n", tokens_1,
                   tokens_all, js_tokens);
        return 0;
    } catch (const std::exception& e) {
        fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}

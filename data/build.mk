# data/: the GPT-2 and Llama 3 tokenizers and data/prepare (token shards, decode table, the
# built-in dataset).
# Links PCRE2 (pre-tokenisation regex, JIT), zlib (R data file), OpenSSL's libcrypto (SHA-256).
TOKENIZER_OBJS := $(addprefix $(BUILD)/data/, gpt2_vocab.o pretokenize.o gpt2_tokenizer.o \
                    llama3_vocab.o llama3_tokenizer.o \
                    read_file.o pinned_vocab.o parallel_encode.o progress.o dataset.o \
                    token_shard.o rdata_reader.o janeausten.o) \
                  $(BUILD)/base/errors.o $(BUILD)/base/file_io.o $(BUILD)/base/decode_table.o \
                  $(BUILD)/base/repository.o
TOKENIZER_LIBS := -lpcre2-8 -lz -lcrypto

PROGRAMS += $(BIN)/data/prepare
$(BIN)/data/prepare: $(BUILD)/data/prepare.o $(TOKENIZER_OBJS)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(TOKENIZER_LIBS)

# Tests: unit tests of the parts (C++), and data/prepare end to end against node references (script).
TESTS += $(BUILD)/test/data/test_tokenizer $(BUILD)/test/data/test_llama3_tokenizer \
         test/data/test_prepare.sh
TOKENIZER_TESTS := $(BUILD)/test/data/test_tokenizer $(BUILD)/test/data/test_llama3_tokenizer
$(TOKENIZER_TESTS): $(BUILD)/test/data/%: $(BUILD)/test/data/%.o $(TEST_MAIN) $(TOKENIZER_OBJS) \
                                          $(BUILD)/train/dataloader.o $(BUILD)/base/rng.o
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(TOKENIZER_LIBS)

# Benchmark: encode throughput, ours (1 thread, all cores) beside js-tiktoken. Run from the repo root.
BENCHES += $(BIN)/dev/bin/bench_tokenizer
$(BIN)/dev/bin/bench_tokenizer: $(BUILD)/dev/bench_tokenizer.o $(TOKENIZER_OBJS)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@ $(TOKENIZER_LIBS)

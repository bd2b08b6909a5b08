# Builds the libFuzzer targets (test/fuzz/fuzz_*.cpp) with clang under AddressSanitizer and
# UndefinedBehaviorSanitizer, into build-fuzz/. Called by scripts/fuzz.sh:
#   make -f test/fuzz/fuzz.mk -j2            every target
# The parsers are the real ones, from base/, train/ and data/, built here with the same instrumentation
# (objects under build-fuzz/obj, so the normal builds are untouched).
FUZZ_CXX  ?= clang++
FUZZ_DIR  := build-fuzz
FUZZ_OBJ  := $(FUZZ_DIR)/obj
FUZZ_SAN  := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_FLAGS := -std=c++17 -g1 -O1 -I. $(FUZZ_SAN) -MMD -MP

FUZZ_TARGETS := $(patsubst test/fuzz/fuzz_%.cpp,$(FUZZ_DIR)/fuzz_%,$(wildcard test/fuzz/fuzz_*.cpp))
# The parsers and what they call (a target that needs another file fails to link, naming it).
PARSER_SRCS  := $(addprefix base/,decode_table.cpp errors.cpp file_io.cpp gpu_telemetry.cpp host_arrays.cpp llama_descriptor.cpp llama_model_file.cpp \
                  model_config.cpp model_descriptor.cpp model_file.cpp model_files.cpp model_part.cpp outlier_detector.cpp repository.cpp \
                  rng.cpp step_phases.cpp step_timeline.cpp train_options.cpp xxhash64.cpp) \
                $(addprefix train/,checkpoint.cpp dataloader.cpp hellaswag.cpp hf_gpt2.cpp lr_schedule.cpp \
                  algorithm_table.cpp folder_lock.cpp hf_folder.cpp hf_llama.cpp metrics_log.cpp optimizer_choice.cpp run_folder.cpp \
                  safetensors.cpp train_flags.cpp \
                  training_state.cpp) \
                data/gpt2_vocab.cpp data/llama3_vocab.cpp data/read_file.cpp data/token_shard.cpp
PARSER_OBJS  := $(patsubst %.cpp,$(FUZZ_OBJ)/%.o,$(PARSER_SRCS))

.PHONY: all corpus-tool
.SECONDARY:
all: $(FUZZ_TARGETS)

# The parsers' objects: instrumented for coverage without libFuzzer's main().
$(FUZZ_OBJ)/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_DIR)/fuzz_%: $(FUZZ_OBJ)/test/fuzz/fuzz_%.o $(PARSER_OBJS)
	$(FUZZ_CXX) $(FUZZ_SAN) -fsanitize=fuzzer $^ -o $@

# The seed corpus writer (test/fuzz/make_corpus.cpp): plain build, the project's own file writers.
corpus-tool: $(FUZZ_DIR)/make_corpus
$(FUZZ_DIR)/make_corpus: test/fuzz/make_corpus.cpp $(PARSER_SRCS)
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) -std=c++17 -O1 -I. $^ -o $@

-include $(shell find $(FUZZ_OBJ) -name '*.d' 2>/dev/null)

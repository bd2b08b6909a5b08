# The basics every other folder builds on (errors, files and formats, random numbers, the model's
# configuration, the model interface): each base/*.cpp becomes one object in BASE_OBJS.
BASE_OBJS := $(patsubst %.cpp,$(BUILD)/%.o,$(wildcard base/*.cpp))

# The tests of base/ (test/base/): llm.c and Llama 3 model files and descriptors, GPT-2's
# initialisation, the GPU telemetry's figures, the FP8 formats (base/fp8.h). One C++ program each, on base/ alone (test_gpu_telemetry
# also checks the telemetry's place in a metrics line, and links the host objects: train/build.mk).
BASE_TESTS := $(patsubst %,$(BUILD)/test/base/%,test_model_files test_llama_files test_gpu_telemetry test_fp8)
TESTS += $(BASE_TESTS)
$(BASE_TESTS): $(BUILD)/test/base/%: $(BUILD)/test/base/%.o $(BASE_OBJS) $(TEST_MAIN)
	@mkdir -p $(dir $@)
	$(CXX) $(LDFLAGS) $^ -o $@
